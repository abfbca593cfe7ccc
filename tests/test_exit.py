"""Expert iteration after the warm start (issue 28, part 3;
train.exit_rounds): the agent plays a round's games, a search over it labels
every decision, the labels join the prior, fresh nets train on the pool, and
a resumed run reads the rounds back. Real parts: the engine's games, the
real SearchPlayer, a real training run of configs/smoke.yaml as a
subprocess."""
import json

import numpy as np
import pytest
import torch

from lc_helpers import ROOT, SMALL, run_trainer, tiny_net

import engine  # noqa: E402
from agents.policy import AveragePolicy  # noqa: E402
from agents.searcher import SearchPlayer  # noqa: E402
from trainer.warmstart import blueprint_of, heuristic_rows  # noqa: E402

torch.set_num_threads(1)


def test_a_round_plays_the_agents_own_moves_and_labels_each_with_the_search_over_the_agent():
    game = engine.load_game("lost_cities", **SMALL)
    net = tiny_net(game)
    worlds, topk, seed = 6, 2, 41
    adv, strat = heuristic_rows(game, 2, seed=seed, advantage=0.2, worlds=worlds, blueprint=blueprint_of(net),
                                topk=topk, round=1)
    agent = AveragePolicy(net, greedy=True)
    search = SearchPlayer(game, blueprint=agent, worlds=worlds, topk=topk)
    want = {0: [], 1: []}            # per player, in order: (info, the search's label)
    differ = 0
    for deal in (seed, seed + 1):
        state = game.new_initial_state(seed=deal)
        while not state.is_terminal():
            p = state.current_player()
            label, move = search.step(state), agent.step(state)
            want[p].append((state.information_state_tensor(p).astype(np.uint8), label))
            differ += label != move
            state.apply_action(move)            # the agent's move is played, not the label
    for p in (0, 1):
        rows = adv[p]
        assert len(rows["info"]) == len(want[p])
        np.testing.assert_array_equal(rows["info"], np.stack([i for i, _ in want[p]]))
        labels = np.array([a for _, a in want[p]])
        onehot = np.eye(game.num_distinct_actions(), dtype=np.float32)[labels]
        # +0.2 on the search's move, -0.2 on the other legal moves, 0 on the illegal ones
        np.testing.assert_array_equal(rows["target"], np.where(rows["mask"] > 0, np.where(onehot > 0, 0.2, -0.2),
                                                                0.0).astype(np.float32))
    assert len(strat["target"]) == len(want[0]) + len(want[1])
    # an untrained agent and a search over it disagree: the rows are the search's labels on the agent's games
    assert differ > 0


def test_a_round_refuses_bad_settings():
    game = engine.load_game("lost_cities", **SMALL)
    bp = blueprint_of(tiny_net(game))
    for kwargs in (dict(worlds=0, topk=2, round=1), dict(worlds=4, topk=-1, round=1), dict(worlds=4, topk=2, round=0)):
        with pytest.raises(ValueError, match="an expert-iteration round needs"):
            heuristic_rows(game, 1, seed=1, advantage=0.2, blueprint=bp, **kwargs)


def test_the_config_refuses_expert_iteration_without_a_lasting_prior_and_bad_values():
    from trainer.config import ConfigError, load_config
    smoke = ROOT / "configs" / "smoke.yaml"
    with pytest.raises(ConfigError, match=r"train.exit_rounds: .*warm_start_share > 0 \(got 10 and 0\)"):
        load_config(smoke, ["train.warm_start_games=10", "train.exit_rounds=1"])
    with pytest.raises(ConfigError, match=r"train.exit_rounds: .*warm_start_share > 0 \(got 0 and 0.5\)"):
        load_config(smoke, ["train.warm_start_share=0.5", "train.exit_rounds=1"])
    for key, bad in (("exit_worlds", 0), ("exit_topk", -1), ("exit_games", 0), ("exit_budget_s", -1),
                     ("exit_rounds", -1)):
        with pytest.raises(ConfigError, match=f"train.{key}"):
            load_config(smoke, ["train.warm_start_games=10", "train.warm_start_share=0.5", f"train.{key}={bad}"])
    ok = load_config(smoke, ["train.warm_start_games=10", "train.warm_start_share=0.5", "train.exit_rounds=2"])
    assert (ok.train.exit_rounds, ok.train.exit_worlds, ok.train.exit_topk) == (2, 640, 4)


def test_a_run_pools_two_rounds_trains_fresh_nets_and_a_resume_reads_the_rounds_back(tmp_path):
    from agents.checkpoint import load_checkpoint, prior_checkpoint
    run_dir = tmp_path / "run"
    small = ["train.traversals=40", "train.adv_steps=5", "train.strategy_steps=5", "network.hidden=[16]",
             "eval.lc_games=2", "run.progress=false", "train.warm_start_steps=20", "train.iterations=1",
             "train.warm_start_games=4", "train.warm_start_share=0.5", "train.exit_rounds=2", "train.exit_games=2",
             "train.exit_worlds=4", "train.exit_topk=2"]
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir), *sum([["--set", s] for s in small], [])])
    m = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert m["exit_games_labelled_1"] == m["exit_games_labelled_2"] == 2
    assert m["exit_label_s_1"] > 0 and m["warm_start_pretrain_steps_strategy_exit2"] == 20
    pool = m["warm_start_decisions"]
    for k in (1, 2):
        pool += m[f"exit_decisions_{k}"]
        assert (run_dir / f"exit_rows_{k}.npz").exists()
        assert (f"expert iteration {k}: 2 games of the agent labelled by a 4-world search over the agent's top 2 "
                f"moves") in r.stdout
        assert f"1 held out, {m[f'exit_decisions_{k}']} decisions join the pool" in r.stdout
        # the held-out game scores the agent that played it and the fresh nets
        for key in ("agree", "mse", "uniform_mse"):
            assert 0 <= m[f"exit_heldout_{key}_{k}"] and 0 <= m[f"exit_heldout_agent_{key}_{k}"]
        assert m[f"exit_heldout_uniform_mse_{k}"] > 0
        assert f"which holds {pool}" in r.stdout
    assert r.stdout.count("fresh nets, 20 steps per net") == 2
    # the prior stays the imitation of the warm start's teacher: the nets after the rounds are other nets
    prior = torch.load(prior_checkpoint(run_dir), weights_only=True)
    latest = load_checkpoint(run_dir)
    assert not all(torch.equal(prior["nets"]["strategy"][k], v) for k, v in latest["nets"]["strategy"].items())
    r = run_trainer(["--resume", str(run_dir), "--set", "train.iterations=2", "--set", "run.progress=false"])
    for k in (1, 2):
        assert f"exit_rows_{k}.npz" in r.stdout and "read back from" in r.stdout
    assert f"which holds {pool}" in r.stdout and "fresh nets" not in r.stdout
    assert load_checkpoint(run_dir)["iteration"] == 2


def test_the_study_trains_a_fresh_net_per_label_mix_on_the_runs_own_split_and_plays_each(tmp_path, capsys):
    from studies import lc_exit
    from trainer.config import config_from_dict
    from trainer.warmstart import exit_split_seed, hold_out_games, read_rows
    run_dir = tmp_path / "run"
    small = ["train.traversals=20", "train.adv_steps=2", "train.strategy_steps=2", "network.hidden=[16]",
             "eval.lc_games=2", "run.progress=false", "train.warm_start_steps=5", "train.iterations=1",
             "train.warm_start_games=3", "train.warm_start_share=0.5", "train.exit_rounds=1", "train.exit_games=3",
             "train.exit_worlds=4", "train.exit_topk=2"]
    run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir), *sum([["--set", s] for s in small], [])])
    m = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    teacher, rounds, test, cfg = lc_exit.load_labels(run_dir)
    assert len(teacher["target"]) == m["warm_start_decisions"] and len(rounds["target"]) == m["exit_decisions_1"]
    adv, strat, _ = read_rows(run_dir / "exit_rows_1.npz", 0.2)
    _, _, want, held = hold_out_games(adv, strat, 0.1, exit_split_seed(config_from_dict(
        json.loads((run_dir / "config.json").read_text())), 1))
    assert len(held) == 1 and np.array_equal(test["info"], want["info"])      # the trainer's own held-out game
    # mixes: a share of 1 draws only the teacher's rows, 0 only the rounds'
    mix = lc_exit._Mix(teacher, rounds, 1.0)
    batch = mix.sample(64, np.random.default_rng(0))
    rows = {r.tobytes() for r in teacher["info"]}
    assert all(r.tobytes() in rows for r in batch["info"])
    batch = lc_exit._Mix(teacher, rounds, 0.0).sample(64, np.random.default_rng(0))
    rows = {r.tobytes() for r in rounds["info"]}
    assert all(r.tobytes() in rows for r in batch["info"])
    out = tmp_path / "out"
    assert lc_exit.main([str(run_dir), "--teacher-share", "pool", "0", "--steps", "3", "--reference", str(run_dir),
                         "--opponents", "random", "--games", "2", "--jobs", "1", "--out", str(out), "--lr-decay"]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    assert [r["teacher_share"] for r in res] == ["pool", "0"]
    for r in res:
        assert r["vs_random_games"] == 2 and f"vs_run:{run_dir}_margin" in r and 0 <= r["heldout_agree"] <= 1
    assert (out / "share-0.pt").exists() and "teacher share 0: held-out agreement" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        lc_exit.main([str(run_dir), "--teacher-share", "1.5"])


@pytest.mark.parametrize("decay", [False, True])
def test_pretraining_anneals_the_learning_rate_to_zero_only_with_warm_start_lr_decay(tmp_path, decay):
    from trainer.config import load_config
    from trainer.loop import Trainer
    from trainer.value import Rows
    cfg = load_config(ROOT / "configs" / "smoke.yaml", [
        "network.hidden=[16]", "train.warm_start_games=2", "train.warm_start_steps=20", "train.batch_size=16",
        f"train.warm_start_lr_decay={str(decay).lower()}", "run.progress=false"])
    trainer = Trainer(cfg, tmp_path / "run", log=lambda *a: None)
    adv, strat = heuristic_rows(trainer.game, 2, seed=5, advantage=0.2)
    seen = {name: [] for name in trainer.optimizers}
    for name, opt in trainer.optimizers.items():
        step = opt.step

        def recorded(*a, _opt=opt, _step=step, _seen=seen[name], **k):
            _seen.append(_opt.param_groups[0]["lr"])
            return _step(*a, **k)
        opt.step = recorded
    trainer.warm_start_info = {}
    trainer._pretrain({"adv0": Rows(adv[0]), "adv1": Rows(adv[1]), "strategy": Rows(strat)}, "")
    for name, lrs in seen.items():
        assert len(lrs) == 20 and lrs[0] == pytest.approx(cfg.train.lr)
        if decay:
            assert all(b < a for a, b in zip(lrs, lrs[1:])) and lrs[-1] < 0.01 * cfg.train.lr
        else:
            assert lrs == [cfg.train.lr] * 20
        assert trainer.optimizers[name].param_groups[0]["lr"] == pytest.approx(cfg.train.lr)    # restored after
    assert trainer.warm_start_info["warm_start_pretrain_steps_strategy"] == 20
