"""Self-play policy-gradient fine-tuning (agents/ppo.py, the stage on
the service in trainer/selfplay_stage.py): the waves are real games of the
engine played by the workers' PlayGroups on the served nets, the advantages
follow GAE by hand, a PPO step moves probability toward what scored, and its
ratio divides by the recorded behaviour probability under a version lag.
Real parts: the engine, the nogil PlayGroups, real torch nets and Adam
steps, and for the stage a real batcher, workers and job server."""
import numpy as np
import pytest
import torch

from lc_helpers import ROOT, SMALL, local_wave, run_trainer, tiny_net

import engine  # noqa: E402
from agents.ppo import (SelfPlay, SelfPlaySettings, bf16_is_native, entropy, masked_log_softmax,  # noqa: E402
                        onednn_isa_cap, resolve_autocast, scheduled_lr)

torch.set_num_threads(1)


def test_a_wave_is_whole_games_of_legal_moves_with_the_served_nets_log_probabilities_and_values():
    """The workers' PlayGroups, replayed by hand: every decision's row, mask,
    move, log-probability, value and version, each game's return, and the
    wave in step order."""
    game = engine.load_game("lost_cities", **SMALL)
    net = tiny_net(game)
    tuner = SelfPlay(game, net, SelfPlaySettings(games=5, autocast="none"), seed=7)
    served = tuner.served()
    wave, returns, seeds = local_wave(tuner, 5, version=4)
    assert returns.shape == (5, 2)
    assert np.all(np.diff(wave["step"]) >= 0)                 # step order: by ply, then game
    assert np.all(wave["version"] == 4)
    for row, deal in enumerate(seeds):
        state = game.new_initial_state(seed=int(deal))
        mine = np.flatnonzero(wave["row"] == row)
        np.testing.assert_array_equal(wave["step"][mine], np.arange(len(mine)))
        for i in mine:
            p = state.current_player()
            assert wave["player"][i] == p
            np.testing.assert_array_equal(wave["info"][i], np.asarray(state.information_state_tensor(p), np.float32))
            np.testing.assert_array_equal(wave["mask"][i], np.asarray(state.legal_actions_mask(), bool))
            a = int(wave["action"][i])
            assert a in state.legal_actions()
            x = torch.from_numpy(wave["info"][i:i + 1]).float()
            with torch.no_grad():
                lp = masked_log_softmax(net(x), torch.from_numpy(wave["mask"][i:i + 1]))[0, a]
                value = served(x)[0, -1]
            assert wave["logp"][i] == pytest.approx(float(lp), abs=1e-5)
            assert wave["value"][i] == pytest.approx(float(value), abs=1e-5)
            state.apply_action(a)
        assert state.is_terminal()                 # the row's decisions are its whole game
        np.testing.assert_array_equal(returns[row], state.returns())
    assert tuner.games_played == 5 and tuner.decisions == len(wave["action"])


def test_a_wave_missing_or_repeating_a_game_is_refused():
    """A game's records must be whole: ended once, its plies 0..d-1."""
    from traverser.selfplay import play_local, wave_seeds
    game = engine.load_game("lost_cities", **SMALL)
    tuner = SelfPlay(game, tiny_net(game), SelfPlaySettings(games=3, autocast="none"))
    served = tuner.served()
    chunks = []
    play_local(game, lambda x: served(torch.from_numpy(x)).detach().numpy(), np.arange(3), wave_seeds(0, 0, 3),
               lambda d, e: chunks.append((d, e)))
    dec, ends = [c[0] for c in chunks], [c[1] for c in chunks]
    tuner.wave_from_chunks(dec, ends)
    with pytest.raises(ValueError, match="not games 0..5 once each"):
        tuner.wave_from_chunks(dec, ends + ends)                    # a job committed twice
    short = [{k: v[1:] for k, v in d.items()} for d in dec]
    with pytest.raises(ValueError, match="decisions"):
        tuner.wave_from_chunks(short, ends)                         # a lost chunk row


def _toy_wave():
    # game 0: player 0 at steps 0 and 2, player 1 at step 1; game 1: player 1 at step 0, player 0 at step 1
    wave = {"row": np.array([0, 1, 0, 1, 0]), "player": np.array([0, 1, 1, 0, 0], np.int8),
            "step": np.array([0, 0, 1, 1, 2])}
    values = np.array([0.1, -0.2, 0.3, 0.05, 0.4], np.float32)
    returns = np.array([[30.0, -30.0], [-10.0, 10.0]])          # points; value_scale 0.01
    return wave, values, returns


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_advantages_are_gae_along_each_players_own_decisions(lam):
    game = engine.load_game("lost_cities", **SMALL)
    tuner = SelfPlay(game, tiny_net(game), SelfPlaySettings(games=2, lam=lam))
    wave, v, ret = _toy_wave()
    adv, target = tuner.advantages(wave, ret, v)
    v = v.astype(np.float64)
    # game 0, player 0: decisions 0 then 4, return 0.3
    d4 = 0.3 - v[4]
    d0 = v[4] - v[0]
    want = np.zeros(5)
    want[4] = d4
    want[0] = d0 + lam * d4
    want[2] = -0.3 - v[2]                 # game 0, player 1: one decision
    want[1] = 0.1 - v[1]                  # game 1, player 1: one decision, return +0.1
    want[3] = -0.1 - v[3]                 # game 1, player 0
    np.testing.assert_allclose(adv, want, atol=1e-6)
    np.testing.assert_allclose(target, want + v, atol=1e-6)
    if lam == 1.0:                         # Monte Carlo: the target is the return itself
        np.testing.assert_allclose(target, [0.3, 0.1, -0.3, -0.1, 0.3], atol=1e-6)
    # the critic's error on the wave, its mean return's and 0's, against each decision's own return
    r = np.array([0.3, 0.1, -0.3, -0.1, 0.3])
    err = tuner.return_error(wave, ret, v)
    assert err["critic_heldout_mse"] == pytest.approx(np.mean((v - r) ** 2))
    assert err["mean_mse"] == pytest.approx(np.mean((r - r.mean()) ** 2)) and err["zero_mse"] == pytest.approx(0.058)


@pytest.mark.parametrize("autocast", ["none", "bf16"])
def test_a_ppo_step_moves_probability_toward_the_move_that_scored(autocast):
    game = engine.load_game("lost_cities", **SMALL)
    net = tiny_net(game)
    tuner = SelfPlay(game, net, SelfPlaySettings(games=4, lr=1e-2, epochs=1, target_kl=0, minibatch=10_000,
                                                 autocast=autocast), seed=1)
    wave, _, _ = local_wave(tuner, 4)
    n = len(wave["action"])
    i = int(np.flatnonzero(wave["mask"].sum(1) >= 2)[0])         # a decision with a choice
    adv = np.full(n, -0.01)
    adv[i] = 1.0                                                  # only that move paid
    rows = slice(i, i + 1)

    def logp():
        with torch.no_grad():
            x = torch.from_numpy(wave["info"][rows]).float()
            lp = masked_log_softmax(tuner.forward(net, x), torch.from_numpy(wave["mask"][rows]))
        return float(lp[0, wave["action"][i]])

    before = logp()
    assert before == pytest.approx(float(wave["logp"][i]), abs=1e-5 if autocast == "none" else 5e-2)
    tuner.update(wave, adv, np.zeros(n))
    assert logp() > before
    # the critic-only update leaves the policy as it is
    frozen = [p.detach().clone() for p in net.parameters()]
    tuner.update(wave, adv, np.zeros(n), policy=False)
    assert all(torch.equal(a, b) for a, b in zip(frozen, net.parameters()))


@pytest.mark.parametrize("autocast", ["none", "bf16"])
@pytest.mark.parametrize("bonus", [0.0, 0.05])
def test_the_rows_scaled_once_a_wave_move_the_nets_exactly_as_the_nets_own_forwards(autocast, bonus):
    """The update scales a wave's rows once into the products' dtype and
    runs the two layer stacks on them; the nets' own forwards scale every
    minibatch. Same seed, same wave: the same weights to the bit."""
    game = engine.load_game("lost_cities", **SMALL)
    tuned = []
    for fast in (True, False):
        net = tiny_net(game)
        settings = SelfPlaySettings(games=4, lr=1e-2, epochs=2, target_kl=0, minibatch=64, critic_waves=0,
                                    entropy=bonus, autocast=autocast)
        tuner = SelfPlay(game, net, settings, seed=5)
        wave, returns, _ = local_wave(tuner, 4)
        rows, stack, _ = tuner._inputs(torch.from_numpy(wave["info"]))
        assert (stack is net.net) and rows.dtype == (torch.bfloat16 if autocast == "bf16" else torch.float32)
        if not fast:
            tuner._inputs = lambda info: (info, tuner.net, tuner.critic)
        tuner.learn(wave, returns, lr=1e-2)
        tuned.append([p.detach().clone() for p in [*net.parameters(), *tuner.critic.parameters()]])
    assert not torch.equal(tuned[0][0], tiny_net(game).net[0].weight)          # they moved
    assert all(torch.equal(a, b) for a, b in zip(*tuned))


def test_the_critic_trains_on_its_passes_only_and_on_every_pass_while_the_policy_waits():
    """critic_epochs 1 of 2: the critic ends where one pass would leave it
    (the same minibatches, as the first pass's order comes first from the
    stream) while the policy takes both passes; a wave that trains only the
    critic gives it every pass."""
    game = engine.load_game("lost_cities", **SMALL)

    def tune(epochs, critic_epochs, critic_waves=0):
        net = tiny_net(game)
        settings = SelfPlaySettings(games=4, lr=1e-2, epochs=epochs, critic_epochs=critic_epochs, target_kl=0,
                                    minibatch=64, critic_waves=critic_waves, autocast="none")
        tuner = SelfPlay(game, net, settings, seed=5)
        wave, returns, _ = local_wave(tuner, 4)
        out = tuner.learn(wave, returns, lr=1e-2)
        return ([p.detach().clone() for p in net.parameters()],
                [p.detach().clone() for p in tuner.critic.parameters()], out)

    both, one_pass, critic_once = tune(2, 0), tune(1, 0), tune(2, 1)
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))  # noqa: E731
    assert same(critic_once[1], one_pass[1]) and not same(critic_once[1], both[1])
    assert same(critic_once[0], both[0]) and not same(critic_once[0], one_pass[0])
    assert critic_once[2]["critic_mse"] == pytest.approx(one_pass[2]["critic_mse"])
    warm_all, warm_once = tune(2, 0, critic_waves=1), tune(2, 1, critic_waves=1)
    assert same(warm_once[1], warm_all[1]) and same(warm_once[0], tiny_net(game).parameters())


@pytest.mark.parametrize("minibatch", [32, 1000])
def test_a_pass_takes_one_adam_step_a_minibatch_of_the_wave(minibatch):
    """epochs x ceil(decisions / minibatch) steps of each net's Adam (no KL
    stop): train.selfplay_minibatch sets how many steps a wave buys."""
    game = engine.load_game("lost_cities", **SMALL)
    tuner = SelfPlay(game, tiny_net(game), SelfPlaySettings(games=4, epochs=2, minibatch=minibatch, target_kl=0,
                                                            critic_waves=0, autocast="none"), seed=3)
    wave, returns, _ = local_wave(tuner, 4)
    tuner.learn(wave, returns, lr=1e-3)
    n = len(wave["action"])
    assert n > 32
    steps = lambda opt: int(next(iter(opt.state.values()))["step"])  # noqa: E731
    assert steps(tuner.opt) == steps(tuner.critic_opt) == 2 * -(-n // minibatch)


def test_the_entropy_counts_legal_actions_only_and_keeps_its_gradient_finite():
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, True, False, False]])
    ent = entropy(masked_log_softmax(logits, mask))
    p = torch.softmax(torch.tensor([1.0, 2.0, -1.0]), 0)
    assert float(ent.detach()) == pytest.approx(float(-(p * p.log()).sum()) / 2)      # the second row has one move: 0
    ent.backward()
    assert torch.isfinite(logits.grad).all() and not logits.grad[:, 2].any()   # nothing reaches illegal moves
    assert not logits.grad[1].any()


def test_learn_trains_the_critic_first_then_the_policy_at_the_rate_given():
    game = engine.load_game("lost_cities", **SMALL)
    net = tiny_net(game)
    start = [p.detach().clone() for p in net.parameters()]
    tuner = SelfPlay(game, net, SelfPlaySettings(games=3, critic_waves=1), seed=2)
    wave, returns, _ = local_wave(tuner, 3)
    first = tuner.learn(wave, returns, lr=1e-3, version=1)
    assert all(torch.equal(a, b) for a, b in zip(start, net.parameters()))     # wave 1: the critic only
    assert "kl" not in first and first["wave"] == 1 and first["version_lag"] == 1.0
    wave, returns, _ = local_wave(tuner, 3, wave=1, version=1)
    stats = tuner.learn(wave, returns, lr=5e-4, version=2)
    assert not all(torch.equal(a, b) for a, b in zip(start, net.parameters()))
    assert tuner.opt.param_groups[0]["lr"] == stats["lr"] == 5e-4
    assert stats["wave"] == 2 and tuner.games_played == 6 and stats["version_lag"] == 1.0
    assert stats["wave_decisions"] == len(wave["action"]) and np.isfinite(stats["kl"])
    assert np.isfinite(stats["entropy"]) and stats["zero_mse"] > 0


def test_the_learning_rate_holds_then_falls_in_a_straight_line_to_zero_at_the_budgets_end():
    # hold 100 s of a 300 s stage: 2e-4 up to 100 s, then 200 s of straight line down to 0
    assert scheduled_lr(2e-4, 100, 300, 0) == 2e-4
    assert scheduled_lr(2e-4, 100, 300, 100) == 2e-4
    assert scheduled_lr(2e-4, 100, 300, 150) == pytest.approx(1.5e-4)
    assert scheduled_lr(2e-4, 100, 300, 250) == pytest.approx(0.5e-4)
    assert scheduled_lr(2e-4, 100, 300, 300) == 0.0
    assert scheduled_lr(2e-4, 100, 300, 330) == 0.0             # a wave started late never gets a negative rate
    assert scheduled_lr(2e-4, 0, 300, 150) == pytest.approx(1e-4)
    # no schedule, no budget, or a budget inside the hold: the rate throughout
    assert scheduled_lr(2e-4, -1, 300, 250) == 2e-4
    assert scheduled_lr(2e-4, 100, None, 250) == 2e-4
    assert scheduled_lr(2e-4, 1320, 1320, 1319) == scheduled_lr(2e-4, 1320, 1320, 1400) == 2e-4


def test_ppo_ratio_divides_by_the_recorded_behaviour_probability_under_a_version_lag():
    """The workers played on version 1's weights; the net has since moved
    (version 3). The update's ratios start at pi_now / pi_behaviour, not at
    1: its first KL estimate is the mean of (recorded logp - logp now) over
    the wave, by hand, and the lag is reported."""
    game = engine.load_game("lost_cities", **SMALL)
    net = tiny_net(game)
    tuner = SelfPlay(game, net, SelfPlaySettings(games=6, autocast="none", epochs=1, minibatch=100_000,
                                                 critic_waves=0, target_kl=0), seed=3)
    wave, returns, _ = local_wave(tuner, 6, version=1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))                   # two updates later
        x, mask = torch.from_numpy(wave["info"]).float(), torch.from_numpy(wave["mask"])
        now = masked_log_softmax(net(x), mask).gather(1, torch.from_numpy(wave["action"])[:, None])[:, 0].numpy()
    by_hand = float(np.mean(wave["logp"] - now))
    assert abs(by_hand) > 1e-3                                   # the lag is visible
    ratio = np.exp(now - wave["logp"])
    clipped = float(np.mean(np.abs(ratio - 1) > tuner.settings.clip))
    stats = tuner.learn(wave, returns, lr=1e-3, version=3)
    assert stats["kl"] == pytest.approx(by_hand, rel=1e-4, abs=1e-6)
    assert stats["clipped"] == pytest.approx(clipped) and stats["version_lag"] == 2.0


def test_auto_is_bf16_exactly_where_the_cpu_multiplies_bfloat16_itself():
    from pathlib import Path
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = set(cpuinfo.read_text().split())
        assert bf16_is_native("cpu", environ={}) == bool(flags & {"avx512_bf16", "amx_bf16"})
    assert resolve_autocast("auto", "cpu") == ("bf16" if bf16_is_native("cpu") else "none")
    assert resolve_autocast("none", "cpu") == "none" and resolve_autocast("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="autocast must be one of auto, none, bf16, got 'fp8'"):
        resolve_autocast("fp8", "cpu")


@pytest.mark.parametrize("environ,cap", [
    ({}, None),
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "AVX2"),
    ({"DNNL_MAX_CPU_ISA": "avx512_core"}, "avx512_core"),
    ({"ONEDNN_MAX_CPU_ISA": "ALL", "DNNL_MAX_CPU_ISA": "AVX2"}, "ALL"),   # oneDNN reads ONEDNN_ first
    ({"ONEDNN_MAX_CPU_ISA": " ", "DNNL_MAX_CPU_ISA": "AVX2"}, "AVX2"),
])
def test_the_onednn_cap_is_read_as_onednn_reads_it(environ, cap):
    assert onednn_isa_cap(environ) == cap


def test_auto_keeps_float32_where_onednn_is_capped_below_bfloat16():
    """An emulated box without AVX-512 (or without BF16) caps oneDNN while the
    CPU flags still say bfloat16; bf16 waves there took 13 times float32's."""
    flagged = bf16_is_native("cpu", environ={})
    for cap in ("AVX2", "avx2", "AVX512_CORE", "AVX512_CORE_VNNI", "SSE41"):
        for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
            assert not bf16_is_native("cpu", environ={name: cap}), (name, cap)
    for cap in ("AVX512_CORE_BF16", "AVX512_CORE_AMX", "ALL"):
        assert bf16_is_native("cpu", environ={"ONEDNN_MAX_CPU_ISA": cap}) == flagged


def test_a_capped_onednn_makes_auto_float32_in_a_real_process(tmp_path):
    """The cap as a user sets it, in the environment of a fresh process."""
    import os
    import subprocess
    import sys
    code = "from agents.ppo import resolve_autocast; print(resolve_autocast('auto', 'cpu'))"
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "none"


def test_auto_is_float32_on_a_gpu_even_one_with_bfloat16(monkeypatch):
    """On an H200 bf16 waves were slower than float32's, so auto keeps float32
    on CUDA whatever the GPU supports; bf16 asked for by name stays bf16."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert bf16_is_native("cuda")
    assert resolve_autocast("auto", "cuda") == "none" and resolve_autocast("auto", "cuda:0") == "none"
    assert resolve_autocast("bf16", "cuda") == "bf16"


@pytest.mark.parametrize("field,value", [("games", 0), ("lam", 1.5), ("clip", 0.0), ("lr", -1.0),
                                         ("autocast", "fp16"), ("lr_hold_s", -2.0), ("lr_hold_s", float("inf")),
                                         ("critic_epochs", 3), ("critic_epochs", -1)])
def test_bad_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"{field}="):
        SelfPlaySettings(**{field: value}).check()


def test_a_run_ends_with_self_play_and_the_benchmark_tunes_a_saved_agent(tmp_path, capsys, monkeypatch, request):
    import json
    from agents.checkpoint import before_selfplay_checkpoint, game_of, load_checkpoint
    from agents.head_to_head import load_side
    from agents.policy import load_policy
    from benchmarks import lc_selfplay
    run_dir = tmp_path / "run"
    small = ["train.traversals=20", "train.adv_steps=2", "train.strategy_steps=2", "network.hidden=[16]",
             "eval.lc_games=2", "run.progress=false", "train.iterations=2", "train.selfplay_budget_s=2",
             "train.selfplay_games=3", "train.selfplay_entropy=0.01", "train.selfplay_critic_epochs=1",
             "network.critic_hidden=[8,4]", "train.selfplay_lam=1"]
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                     *sum([["--set", s] for s in small], [])])
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "selfplay_waves" not in lines[0]                    # only after the last iteration
    last = lines[-1]
    assert last["iteration"] == 2 and last["selfplay_waves"] >= 1
    assert last["selfplay_games"] == 3 * last["selfplay_waves"]
    assert f"self-play: {last['selfplay_games']} games ({last['selfplay_waves']} waves)" in r.stdout
    assert "; entropy bonus 0.01; GAE lambda 1; the critic on 1 of 2 passes; the critic's hidden layers 8x4" in r.stdout
    # CFR's agent, kept as it was when the self-play began: the same nets but the strategy net
    before, final = load_checkpoint(before_selfplay_checkpoint(run_dir)), load_checkpoint(run_dir)
    assert before["before_selfplay"] and before["iteration"] == final["iteration"] == 2
    assert f"CFR's agent kept as {before['path']}" in r.stdout
    for name in ("adv0", "adv1"):
        assert all(torch.equal(final["nets"][name][k], v) for k, v in before["nets"][name].items())
    if last["selfplay_waves"] > SelfPlaySettings().critic_waves:      # the first waves train the critic only
        assert not all(torch.equal(final["nets"]["strategy"][k], v) for k, v in before["nets"]["strategy"].items())
    side = load_side(f"run:{before['path']}:average-greedy", game_of(final))
    assert side.checkpoint == before["path"]
    from agents.checkpoint import build_critic
    assert build_critic(final) is not None and build_critic(before) is None     # the stage's critic is kept
    # the benchmark: a saved checkpoint whose strategy net is tuned further, every other net as it was
    import shutil
    import tempfile
    from pathlib import Path
    # where its services' logs go, and are removed: a short path, as the services' ipc:// sockets are made there
    scratch = Path(tempfile.mkdtemp(prefix="lcsp_"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert not list(scratch.glob("lc_selfplay_*"))
    out = tmp_path / "tuned.pt"
    lc_selfplay.main([str(run_dir), "--out", str(out), "--waves", "2", "--games", "3", "--critic-waves", "1",
                      "--lr", "0.01", "--critic-hidden", "6,5", "--eval-games", "2", "--jobs", "1"])
    src, tuned = load_checkpoint(run_dir), load_checkpoint(out)
    assert tuned["selfplay"]["selfplay_waves"] == 2 and tuned["selfplay"]["from"] == src["path"]
    assert tuned["selfplay"]["selfplay_games"] == 6
    # the strategy net is the tuned one, every other net as it was
    assert not all(torch.equal(src["nets"]["strategy"][k], v) for k, v in tuned["nets"]["strategy"].items())
    assert all(torch.equal(src["nets"]["adv0"][k], v) for k, v in tuned["nets"]["adv0"].items())
    assert load_policy(str(out), kind="average-greedy").game.name == "lost_cities"
    assert build_critic(tuned) is not None and load_policy(str(out)).critic is not None
    assert tuned["critic_spec"]["hidden"] == [6, 5]
    assert not list(scratch.glob("lc_selfplay_*"))
    printed = capsys.readouterr().out
    assert '"selfplay_waves": 2' in printed and "agents.evaluate" in printed
    # the speed comparison: float32 and bf16 waves from the same agent, side by side, nothing saved
    figures = lc_selfplay.main([str(run_dir), "--speed-waves", "1", "--games", "3", "--critic-waves", "1"])
    printed = capsys.readouterr().out
    assert printed.count("none: ") == 2 and printed.count("bf16: ") == 2
    assert json.loads(printed.strip().splitlines()[-1])["bf16_s_per_wave"] == pytest.approx(
        figures["bf16_s_per_wave"], abs=1e-3)
    assert figures["float32_s_per_wave"] > 0 and figures["bf16_s_per_wave"] > 0
    assert not list(scratch.glob("lc_selfplay_*"))                   # nothing left behind
    with pytest.raises(SystemExit):
        lc_selfplay.main([str(run_dir), "--waves", "1"])           # no --out and no --speed-waves
    assert "--out is needed" in capsys.readouterr().err
    # the update's CPU on a made-up wave: these settings against the defaults, nothing saved or started
    cpu = lc_selfplay.main([str(run_dir), "--update-cpu", "300", "--critic-hidden", "4", "--critic-epochs", "1"])
    printed = capsys.readouterr().out
    assert "critic 4 on 1 of 2 passes" in printed and "critic 256x256 on 2 of 2 passes" in printed
    assert json.loads(printed.strip().splitlines()[-1])["update_cpu_s"] == pytest.approx(cpu["these settings"], abs=1e-3)
    assert cpu["defaults"] > 0 and cpu["these settings"] > 0
    assert not list(scratch.glob("lc_selfplay_*"))
    with pytest.raises(SystemExit):
        lc_selfplay.main([str(run_dir), "--speed-waves", "1", "--critic-hidden", "128,0"])
    assert "expected widths like 128,128, got '128,0'" in capsys.readouterr().err


@pytest.mark.parametrize("sets,match", [
    (["train.selfplay_budget_s=-1"], "train.selfplay_budget_s"),
    (["train.selfplay_budget_s=60", "train.time_limit_s=60"], "leaves nothing of train.time_limit_s"),
    (["train.selfplay_budget_s=5", "game.name=kuhn_poker", "game.params={}"], "plays lost_cities deals"),
    (["train.selfplay_games=0"], "train.selfplay_games"),
    (["train.selfplay_lr=0"], "train.selfplay_lr"),
    (["train.selfplay_autocast=fp16"], "train.selfplay_autocast"),
    (["train.selfplay_lr_hold_s=-5"], "train.selfplay_lr_hold_s"),
    (["train.selfplay_entropy=-0.01"], "train.selfplay_entropy"),
    (["train.selfplay_critic_epochs=3"], "train.selfplay_critic_epochs"),
    (["train.selfplay_lam=1.5"], "train.selfplay_lam"),
    (["train.selfplay_lam=nan"], "train.selfplay_lam"),
    (["network.critic_hidden=[]"], "network.critic_hidden"),
    (["network.critic_hidden=[64,0]"], "network.critic_hidden"),
])
def test_bad_self_play_keys_are_refused_by_name(sets, match):
    from trainer.config import ConfigError, load_config
    with pytest.raises(ConfigError, match=match):
        load_config(ROOT / "configs" / "smoke.yaml", sets)


@pytest.mark.parametrize("device,match", [("cuda", "CUDA is not available"), ("tpu", "unknown device")])
def test_the_benchmark_refuses_a_device_it_cannot_use_by_name(device, match, capsys):
    from benchmarks import lc_selfplay
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    with pytest.raises(SystemExit):
        lc_selfplay.main(["no-such-run", "--out", "never.pt", "--device", device])
    err = capsys.readouterr().err
    assert f"--device {device}: {match}" in err
