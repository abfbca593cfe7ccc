"""A self-play critic that sees both players' views (network.critic_views 2):
the workers' rows carry the opponent's info state after the mover's, the
policy reads only the first, the critic all of it; the served module, its
weights on the wire, the PPO update, the kept critic, the search's leaf
values and the learned best response each take the wider rows. Real parts:
the engine, the nogil PlayGroups, real torch nets and Adam steps, and a
real trainer run on its batcher and worker."""
import json

import numpy as np
import pytest
import torch

from lc_helpers import ROOT, SMALL, local_wave, run_trainer, tiny_net

import engine  # noqa: E402
from agents.policy import AveragePolicy  # noqa: E402
from agents.ppo import SelfPlay, SelfPlaySettings  # noqa: E402
from batcher.networks import MLP, AdvantageValue, build_mlp  # noqa: E402
from traverser._selfplay import PlayGroup  # noqa: E402
from traverser.selfplay import play_local, wave_seeds  # noqa: E402

torch.set_num_threads(1)


def _play(game, views, games=4):
    """One wave of `games` deals on a fixed net that reads the mover's view only."""
    T = game.information_state_tensor_size()
    net = tiny_net(game)
    decisions, ends = [], []

    def forward(rows):
        with torch.no_grad():
            logits = net(torch.from_numpy(np.ascontiguousarray(rows[:, :T]))).numpy()
        return np.concatenate([logits, np.zeros((len(rows), 1), np.float32)], axis=1)

    seeds = wave_seeds(0, 0, games)
    play_local(game, forward, np.arange(games), seeds, lambda d, e: (decisions.append(d), ends.append(e)),
               slots=2, views=views)
    d = {k: np.concatenate([c[k] for c in decisions]) for k in decisions[0]}
    order = np.lexsort((d["ply"], d["game"]))
    return {k: v[order] for k, v in d.items()}, seeds


def test_a_row_of_both_views_is_the_movers_info_state_then_the_opponents_and_plays_the_same_games():
    game = engine.load_game("lost_cities", **SMALL)
    T = game.information_state_tensor_size()
    one, seeds = _play(game, 1)
    two, _ = _play(game, 2)
    assert one["info"].shape[1] == T and two["info"].shape[1] == 2 * T
    for k in ("action", "logp", "player", "game", "ply"):
        np.testing.assert_array_equal(one[k], two[k])        # the policy saw the same rows
    np.testing.assert_array_equal(one["info"], two["info"][:, :T])
    for g, deal in enumerate(seeds[:2]):                      # the second half, replayed by hand
        state = game.new_initial_state(seed=int(deal))
        for i in np.flatnonzero(two["game"] == g):
            p = state.current_player()
            np.testing.assert_array_equal(two["info"][i, T:], np.asarray(state.information_state_tensor(1 - p)))
            state.apply_action(int(two["action"][i]))
        assert state.is_terminal()
    with pytest.raises(ValueError, match="1 view .* or 2 .* not 3"):
        PlayGroup(game, 2, 8, views=3)


def test_the_served_module_reads_the_policy_on_the_first_half_and_travels_with_its_widths():
    from batcher.weights import net_from_bytes, net_to_bytes, spec_params
    game = engine.load_game("lost_cities", **SMALL)
    T, A = game.information_state_tensor_size(), game.num_distinct_actions()
    torch.manual_seed(0)
    adv, value = MLP(T, A, (8,)), MLP(2 * T, 1, (6,))
    both = AdvantageValue(adv, value).eval()
    x = torch.rand(5, 2 * T)
    with torch.no_grad():
        np.testing.assert_array_equal(both(x).numpy(), torch.cat([adv(x[:, :T]), value(x)], 1).numpy())
    spec, blob = net_to_bytes(both)
    assert spec["input_size"] == 2 * T and spec["adv_input_size"] == T
    assert spec_params(spec) == sum(p.numel() for p in both.parameters())
    again = net_from_bytes(spec, blob)
    with torch.no_grad():
        np.testing.assert_array_equal(again(x).numpy(), both(x).numpy())
    assert "adv_input_size" not in AdvantageValue(adv, MLP(T, 1, (6,))).spec()
    assert isinstance(build_mlp(spec), AdvantageValue)
    with pytest.raises(ValueError, match="twice as many"):
        AdvantageValue(adv, MLP(T + 1, 1, (6,)))


@pytest.mark.parametrize("autocast", ["none", "bf16"])
def test_the_policy_learns_the_same_whatever_its_critic_sees(autocast):
    """The advantages come from the values recorded in play, so a wave
    whose rows carry the opponent's view too moves the strategy net to the
    bit as the mover's view alone does; only the critic, of twice the
    inputs, sees the difference."""
    game = engine.load_game("lost_cities", **SMALL)
    T = game.information_state_tensor_size()
    base = dict(games=4, lr=1e-2, epochs=2, target_kl=0, minibatch=64, critic_waves=0, autocast=autocast)
    two = SelfPlay(game, tiny_net(game), SelfPlaySettings(**base, critic_views=2), seed=5)
    one = SelfPlay(game, tiny_net(game), SelfPlaySettings(**base), seed=5)
    assert two.critic.input_size == 2 * T and one.critic.input_size == T
    wave, returns, _ = local_wave(two, 4)
    assert wave["info"].shape[1] == 2 * T
    rows, stack, critic = two._inputs(torch.from_numpy(wave["info"]))
    assert stack is two.net.net and critic is two.critic.net and rows.shape[1] == 2 * T    # scaled once a wave
    before = [p.detach().clone() for p in two.critic.parameters()]
    two.learn(wave, returns, lr=1e-2)
    one.learn(dict(wave, info=np.ascontiguousarray(wave["info"][:, :T])), returns, lr=1e-2)
    assert not torch.equal(two.net.net[0].weight, tiny_net(game).net[0].weight)            # it moved
    assert all(torch.equal(a, b) for a, b in zip(two.net.parameters(), one.net.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, two.critic.parameters()))
    with pytest.raises(ValueError, match="critic_views=3"):
        SelfPlaySettings(critic_views=3).check()


def test_a_search_values_its_worlds_by_a_critic_of_both_views_on_each_whole_world():
    from agents.searcher import SearchPlayer
    game = engine.load_game("lost_cities", **SMALL)
    T = game.information_state_tensor_size()
    torch.manual_seed(0)
    critic = MLP(2 * T, 1, (16,), input_scale=np.tile(game.input_scale(), 2))
    bp = AveragePolicy(tiny_net(game), greedy=True, critic=critic)
    assert bp.critic_views == 2
    with pytest.raises(ValueError, match=f"rows of {2 * T} \\(the player's info state, then the opponent's\\)"):
        bp.values(np.zeros((1, T), np.float32))
    player = SearchPlayer(game, blueprint=bp, worlds=4, chunk=4, topk=2, playout="critic", depth=0)
    states = []
    for seed in range(6):
        s = game.new_initial_state(seed=seed)
        for _ in range(seed + 2):
            s.apply_action(game.heuristic_action(s))
        states.append(s)
        player.batch.set(seed, s)
    got = player._critic_values(0, len(states))
    for s, v in zip(states, got):
        p = s.current_player()
        x = np.concatenate([s.information_state_tensor(p), s.information_state_tensor(1 - p)])[None]
        want = bp.values(x.astype(np.float32))[0]
        assert v == pytest.approx(want if p == 0 else -want, abs=1e-4)
    assert player.step(states[0]) in states[0].legal_actions()


def test_a_best_response_starts_from_a_critic_of_both_views():
    from agents.best_response import FrozenNet, train_responder
    game = engine.load_game("lost_cities", **SMALL)
    T = game.information_state_tensor_size()
    critic = MLP(2 * T, 1, (8,), input_scale=np.tile(game.input_scale(), 2))
    learner, history = train_responder(game, FrozenNet(tiny_net(game, seed=4)), tiny_net(game), budget_s=60,
                                       seed=2, games=8, waves=2, critic=critic,
                                       settings=SelfPlaySettings(games=8, critic_waves=1, autocast="none"))
    assert learner.settings.critic_views == 2 and learner.critic.input_size == 2 * T
    assert len(history) == 2 and "kl" in history[1]


def test_a_run_with_a_critic_of_both_views_keeps_it_and_plays_on_the_service(tmp_path):
    from agents.checkpoint import load_checkpoint
    from agents.policy import load_policy
    run_dir = tmp_path / "run"
    small = ["train.traversals=20", "train.adv_steps=2", "train.strategy_steps=2", "network.hidden=[16]",
             "eval.lc_games=2", "run.progress=false", "train.iterations=1", "train.selfplay_budget_s=2",
             "train.selfplay_games=3", "network.critic_hidden=[8]", "network.critic_views=2"]
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                     *sum([["--set", s] for s in small], [])])
    assert "; the critic's hidden layers 8; the critic sees both players' views" in r.stdout
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["selfplay_waves"] >= 1 and last["selfplay_games"] == 3 * last["selfplay_waves"]
    ckpt = load_checkpoint(run_dir)
    policy = load_policy(str(run_dir))
    T = policy.game.information_state_tensor_size()
    assert ckpt["critic_spec"]["input_size"] == 2 * T and policy.critic_views == 2


@pytest.mark.parametrize("value", ["3", "0", "true"])
def test_a_bad_critic_views_is_refused_by_name(value):
    from trainer.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="network.critic_views"):
        load_config(ROOT / "configs" / "smoke.yaml", [f"network.critic_views={value}"])
