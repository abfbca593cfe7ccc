"""Trainer: config parsing, the real entry point in a subprocess, resume, and
exactly-once job accounting when a worker is killed. The memories are
tests/test_memory.py."""
import json
import subprocess
import time
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer import checkpoint as ck
from trainer.config import ConfigError, load_config
from trainer.memory import MergingMemory, ReservoirMemory
from service_helpers import kill_a_worker_when  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# config

def test_config_files_load_and_validate():
    for name in ("lost_cities", "lost_cities_cpu", "leduc", "kuhn", "smoke"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        assert cfg.train.iterations >= 1
    cfg = load_config(ROOT / "configs" / "kuhn.yaml", ["train.iterations=7", "game.params={}",
                                                       "network.hidden=[8, 8]", "traversal.epsilon=0.3"])
    assert (cfg.train.iterations, cfg.network.hidden, cfg.traversal.epsilon) == (7, [8, 8], 0.3)
    # YAML 1.1 reads 3e-4 as a string; a float field still takes it, and nothing else
    assert load_config(None, ["train.lr=3e-4"]).train.lr == 3e-4
    with pytest.raises(ConfigError, match="config train.lr: expected float, got str 'fast'"):
        load_config(None, ["train.lr=fast"])


@pytest.mark.parametrize("override,message", [
    ("train.iterationz=5", "config train.iterationz: unknown key"),
    ("train.iterations=many", "config train.iterations: expected int"),
    ("train.reinit_advantage=3", "config train.reinit_advantage: expected bool"),
    ("train.lr=-1", "config train.lr: bad value"),
    ("bogus.x=1", "unknown section 'bogus'"),
    ("game.params.colours=9", "'colours' = 9 is out of range"),
    ("game.name=chess", "unknown game 'chess'"),
    ("eval.opponents=[random, grandmaster]", "config eval.opponents: bad value"),
    ("eval.policies=[average, best]", "config eval.policies: bad value"),
    ("eval.exploiter_worlds=0", "config eval.exploiter_worlds: bad value"),
    ("traversal.algorithm=exhaustive", "config traversal.algorithm: bad value"),
    ("train.iterations", "expected section.key=value"),
])
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_config(None, [override])


def test_the_symmetric_read_out_is_refused_for_a_game_without_colours():
    with pytest.raises(ConfigError, match="eval.policies: the symmetric read-out renames Lost Cities' colours; "
                                          "kuhn_poker has none"):
        load_config(None, ["game.name=kuhn_poker", "eval.policies=[average, symmetric-greedy]"])


def test_bad_yaml_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {iterations: 2, speed: 9}\n")
    with pytest.raises(ConfigError, match="config train.speed: unknown key"):
        load_config(p)
    p.write_text("train: [1, 2]\n")
    with pytest.raises(ConfigError, match="config train: expected a mapping"):
        load_config(p)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


# rows of weights `values` for a reservoir (as tests/test_memory.py builds them)
def _chunk(values, cols=3):
    n = len(values)
    return {"info": np.repeat(np.asarray(values, np.float32)[:, None] % 200, cols, 1),
            "target": np.asarray(values, np.float32)[:, None].repeat(2, 1),
            "mask": np.ones((n, 2), np.uint8), "weight": np.asarray(values, np.float32)}


# ---------------------------------------------------------------------------
# the real entry point

def same_memory(a, b):
    """Same rows in the same slots. Targets may differ in the last float bits:
    the batcher's forwards mix rows from different requests depending on
    timing, and a row's result can depend on the batch it rode in."""
    n = a.size
    return (a.size == b.size and a.seen == b.seen
            and np.array_equal(a.info[:n], b.info[:n]) and np.array_equal(a.mask[:n], b.mask[:n])
            and np.array_equal(a.weight[:n], b.weight[:n])
            and np.allclose(a.target[:n], b.target[:n], rtol=1e-4, atol=1e-4))


TINY = ["network.hidden=[16, 16]", "train.traversals=60", "train.adv_steps=10", "train.strategy_steps=20",
        "train.batch_size=64", "service.machines=16", "service.groups=2", "run.progress=false",
        "run.tensorboard=false", "eval.openspiel=true"]


def run_trainer(args, timeout=240):
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_smoke_run_kuhn_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    r = run_trainer(["--config", "configs/kuhn.yaml", "--run-dir", str(run_dir), "--set", "train.iterations=2",
                     "--set", "eval.every=1", "--set", "run.checkpoint_every=1", *sum([["--set", s] for s in TINY], [])])
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2]
    for m in lines:
        assert m["samples_adv_0"] > 0 and m["samples_adv_1"] > 0
        assert abs(m["exploitability"] - m["openspiel_exploitability"]) < 1e-6
    assert "\nevaluation after iteration 2:\n  exploitability " in r.stdout     # the end-of-run summary
    ckpt = ck.load_checkpoint(run_dir)
    assert ckpt["iteration"] == 2 and set(ckpt["nets"]) == {"adv0", "adv1", "strategy"}
    assert (run_dir / "logs" / "batcher.log").exists() and (run_dir / "logs" / "worker0.log").exists()


def test_lost_cities_run_evaluates_each_read_out_and_the_exploiter(tmp_path):
    """In-run evaluation on duplicate deals: the average and the current
    policy, the exploiter at the first and the last evaluation only, and the
    advantage nets' error on new samples before they train on them."""
    run_dir = tmp_path / "run"
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir), "--set", "train.iterations=3",
                     "--set", "train.traversals=40", "--set", "train.adv_steps=5", "--set", "train.strategy_steps=5",
                     "--set", "network.hidden=[16]", "--set", "eval.every=2", "--set", "eval.lc_games=6",
                     "--set", "eval.policies=[average, current-greedy, symmetric-greedy]",
                     "--set", "eval.exploiter_games=2",
                     "--set", "eval.exploiter_worlds=2", "--set", "run.progress=false"])
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [m["iteration"] for m in lines if "vs_heuristic_margin" in m]
    assert evaluated == [1, 2, 3]
    assert [m["iteration"] for m in lines if "exploiter_margin" in m] == [1, 3]
    for m in lines:
        if "vs_heuristic_margin" in m:
            assert m["vs_heuristic_games"] == 6 and "current_greedy_vs_heuristic_margin" in m
            assert "symmetric_greedy_vs_heuristic_margin" in m
            assert m["vs_random_margin_lo"] <= m["vs_random_margin"] <= m["vs_random_margin_hi"]
        assert m["adv_heldout_mse_0"] >= 0 and m["adv_heldout_zero_mse_1"] >= 0


def test_warm_start_rows_are_the_heuristics_decisions():
    import engine
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", colours=3, ranks=5, hand_size=4, max_turns=200)
    adv, strat = heuristic_rows(game, 3, seed=11, advantage=0.05)
    decisions = []
    for g in range(3):
        state = game.new_initial_state(seed=11 + g)
        while not state.is_terminal():
            a = game.heuristic_action(state)
            decisions.append((state.current_player(), state.information_state_tensor(), state.legal_actions_mask(), a))
            state.apply_action(a)
    for p in (0, 1):
        mine = [d for d in decisions if d[0] == p]
        rows = adv[p]
        assert len(rows["weight"]) == len(mine) and (rows["weight"] == 1).all()
        for i, (_, info, mask, a) in enumerate(mine):
            assert np.array_equal(rows["info"][i], info) and np.array_equal(rows["mask"][i], mask)
            want = np.where(mask > 0, -0.05, 0.0)
            want[a] = 0.05
            assert np.allclose(rows["target"][i], want)
    assert len(strat["weight"]) == len(decisions)
    assert np.allclose(strat["target"].sum(axis=1), 1.0) and set(np.unique(strat["target"])) == {0.0, 1.0}
    with pytest.raises(ValueError, match="no rule-based policy"):
        heuristic_rows(engine.load_game("kuhn_poker"), 1, 0, 0.05)


def test_warm_start_rows_from_a_lookahead_teacher_and_random_moves(tmp_path):
    import engine
    from agents.searcher import SearchPlayer
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", colours=3, ranks=5, hand_size=4, max_turns=200)
    # worlds K: each decision is labelled with, and played as, the K-world lookahead's move
    adv, strat = heuristic_rows(game, 2, seed=5, advantage=0.1, worlds=8)
    teacher = SearchPlayer(game, worlds=8)
    want, differs = [], 0
    for g in range(2):
        state = game.new_initial_state(seed=5 + g)
        while not state.is_terminal():
            a = teacher.step(state)
            want.append((state.current_player(), state.information_state_tensor(), a))
            differs += a != game.heuristic_action(state)
            state.apply_action(a)
    assert len(strat["weight"]) == len(want) and differs > 0      # it is not the heuristic
    want = [w for p in (0, 1) for w in want if w[0] == p]          # rows come player 0's first
    for i, (_, info, a) in enumerate(want):
        assert np.array_equal(strat["info"][i], info) and strat["target"][i].argmax() == a
    # explore: some moves are random, so the games leave the heuristic's path; labels stay legal
    plain = heuristic_rows(game, 6, seed=9, advantage=0.1)[1]
    adv, strat = heuristic_rows(game, 6, seed=9, advantage=0.1, explore=0.3)
    again = heuristic_rows(game, 6, seed=9, advantage=0.1, explore=0.3)[1]
    assert all(np.array_equal(strat[k], again[k]) for k in strat)                 # deterministic
    seen = {row.tobytes() for row in plain["info"]}
    assert sum(row.tobytes() not in seen for row in strat["info"]) > len(strat["info"]) // 4
    labels = strat["target"].argmax(axis=1)
    assert (strat["mask"][np.arange(len(labels)), labels] == 1).all()
    # a cache file: written once, read back the same, made again when the teacher differs
    cache = tmp_path / "rows.npz"
    first = heuristic_rows(game, 3, seed=9, advantage=0.1, explore=0.3, cache=cache)
    stamp = cache.stat().st_mtime_ns
    again = heuristic_rows(game, 3, seed=9, advantage=0.1, explore=0.3, cache=cache)
    assert cache.stat().st_mtime_ns == stamp
    whole = cache.read_bytes()
    for a, b in ((first[1], again[1]), (first[0][0], again[0][0]), (first[0][1], again[0][1])):
        assert all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    other = heuristic_rows(game, 3, seed=9, advantage=0.1, explore=0.2, cache=cache)
    assert cache.stat().st_mtime_ns != stamp
    assert not np.array_equal(other[1]["info"], first[1]["info"]) or \
        not np.array_equal(other[1]["target"], first[1]["target"])
    for damaged in (b"not a zip", whole[:len(whole) // 2]):      # a damaged file is played again, not trusted
        cache.write_bytes(damaged)
        rows = heuristic_rows(game, 3, seed=9, advantage=0.1, explore=0.3, cache=cache)[1]
        assert np.array_equal(rows["info"], first[1]["info"]) and cache.read_bytes() != damaged
    for bad in ({"worlds": -1}, {"explore": 1.0}, {"explore": -0.1}):
        with pytest.raises(ValueError, match="worlds must be >= 0 and explore in"):
            heuristic_rows(game, 1, 0, 0.1, **bad)
    for key, value in (("train.warm_start_worlds", "-2"), ("train.warm_start_explore", "1.5"),
                       ("service.label_workers", "-1")):
        with pytest.raises(ConfigError, match=f"{key}: bad value"):
            load_config(ROOT / "configs" / "smoke.yaml", [f"{key}={value}"])
    # the labelling processes of old are the workers now: the old key names its replacement
    with pytest.raises(ConfigError, match=r"^config train.warm_start_procs: removed; the workers label the "
                                          r"prior's games \(trainer/label_stage.py\); service.label_workers"):
        load_config(ROOT / "configs" / "smoke.yaml", ["train.warm_start_procs=2"])
    # a config a run saved before the key went (a checkpoint's) still loads: the key is dropped
    from trainer.config import config_from_dict, config_to_dict
    saved = config_to_dict(load_config(ROOT / "configs" / "smoke.yaml"))
    saved["train"]["warm_start_procs"] = 0
    assert config_from_dict(saved).train.warm_start_games == load_config(ROOT / "configs" / "smoke.yaml").train.warm_start_games
    with pytest.raises(ConfigError, match="train.no_such_key: unknown key"):
        config_from_dict({**saved, "train": {**saved["train"], "no_such_key": 1}})


def test_warm_started_run_starts_from_the_heuristic(tmp_path):
    run_dir = tmp_path / "run"
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run_dir), "--set", "train.iterations=1",
                     "--set", "train.traversals=40", "--set", "train.adv_steps=5", "--set", "train.strategy_steps=5",
                     "--set", "network.hidden=[16]", "--set", "eval.lc_games=2", "--set", "run.progress=false",
                     "--set", "train.warm_start_games=4", "--set", "train.warm_start_steps=3"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warm start: " in r.stdout and " decisions from 4 games, 3 steps per net" in r.stdout
    assert "labelled by the heuristic" in r.stdout
    # the smoke config's game sees the derived segments: rows, wire and nets are all that wide
    import engine
    wide = engine.load_game("lost_cities", max_turns=200, features=1).information_state_tensor_size()
    assert ck.load_checkpoint(run_dir)["net_spec"]["input_size"] == wide
    m = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    # the memories hold the warm-start rows besides iteration 1's samples
    assert m["adv_memory_0"] > m["samples_adv_0"] and m["strategy_memory"] > m["samples_strat_0"] + m["samples_strat_1"]
    # kept apart as a lasting prior: not in the memories, half of every batch
    run2 = tmp_path / "run2"
    r = run_trainer(["--config", "configs/smoke.yaml", "--run-dir", str(run2), "--set", "train.iterations=1",
                     "--set", "train.traversals=40", "--set", "train.adv_steps=5", "--set", "train.strategy_steps=5",
                     "--set", "network.hidden=[16]", "--set", "eval.lc_games=2", "--set", "run.progress=false",
                     "--set", "train.warm_start_games=4", "--set", "train.warm_start_steps=3",
                     "--set", "train.warm_start_share=0.5", "--set", "train.augment_colours=true"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "kept as 0.5 of every batch" in r.stdout
    m = json.loads((run2 / "metrics.jsonl").read_text().splitlines()[0])
    assert m["adv_memory_0"] == m["samples_adv_0"]
    r = run_trainer(["--resume", str(run2), "--set", "train.iterations=2", "--set", "run.progress=false"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "warm-start prior: 4 games labelled by the heuristic, share 0.5" in r.stdout
    assert f"read back from {run2 / 'warm_start_rows.npz'}" in r.stdout
    with pytest.raises(ConfigError, match="warm_start_share: bad value 1.0"):
        load_config(ROOT / "configs" / "smoke.yaml", ["train.warm_start_share=1.0"])
    with pytest.raises(ConfigError, match="warm_start_games: kuhn_poker has no rule-based policy"):
        load_config(ROOT / "configs" / "kuhn.yaml", ["train.warm_start_games=3"])
    with pytest.raises(ConfigError, match="augment_colours: colour renaming is a lost_cities symmetry"):
        load_config(ROOT / "configs" / "leduc.yaml", ["train.augment_colours=true"])


def test_train_net_learns_from_augmented_batches():
    """train_net hands every minibatch to `augment` before the step: a net
    trained on colour-renamed copies of one row gives the renamed move the
    probability it gives the original move."""
    import engine
    from batcher.networks import net_for_game
    from trainer.learn import strategy_loss, train_net
    from agents.symmetry import ColourAugment, action_map, colour_maps
    game = engine.load_game("lost_cities", colours=3, ranks=5, hand_size=4, features=1)
    state = game.new_initial_state(seed=5)
    info = np.asarray(state.information_state_tensor(0), np.uint8)[None]
    mask = np.asarray(state.legal_actions_mask(), np.uint8)[None]
    move = state.legal_actions()[1]
    target = np.zeros_like(mask, dtype=np.float32)
    target[0, move] = 1.0
    mem = ReservoirMemory(10, info.shape[1], mask.shape[1])
    mem.add({"info": info, "target": target, "mask": mask, "weight": np.ones(1, np.float32),
             "iteration": np.ones(1, np.int32)})
    augment = ColourAugment(game)
    calls = []

    def counted(batch, rng):
        calls.append(len(batch["info"]))
        return augment(batch, rng)

    net = net_for_game(game, hidden=(32,), seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    train_net(net, mem, 300, 16, opt, "cpu", np.random.default_rng(0), strategy_loss, augment=counted)
    assert calls == [16] * 300
    perm = [2, 0, 1]
    info_src, action_src = colour_maps(game, perm)
    with torch.no_grad():
        p_orig = torch.softmax(net(torch.from_numpy(info.astype(np.float32))).masked_fill(
            ~torch.from_numpy(mask).bool(), float("-inf")), 1)[0, move]
        renamed = torch.from_numpy(info[:, info_src].astype(np.float32))
        p_renamed = torch.softmax(net(renamed).masked_fill(~torch.from_numpy(mask[:, action_src]).bool(),
                                                           float("-inf")), 1)[0, action_map(action_src)[move]]
    assert p_orig > 0.9 and p_renamed > 0.9


def test_prior_mix_keeps_the_priors_share_of_every_batch():
    from trainer.warmstart import PriorMix
    mem = ReservoirMemory(100, 3, 2)
    mem.add(_chunk(list(range(1, 41))))                 # weights 1..40
    prior = {"info": np.full((7, 3), 250, np.uint8), "target": np.full((7, 2), 9.0, np.float32),
             "mask": np.ones((7, 2), np.uint8), "weight": np.ones(7, np.float32)}
    mix = PriorMix(mem, prior, 0.25)
    assert mix.size == 47
    b = mix.sample(64, np.random.default_rng(0))
    from_prior = b["info"][:, 0] == 250
    assert from_prior.sum() == 16 and from_prior[:16].all()
    own = b["weight"][~from_prior]
    assert np.allclose(b["weight"][from_prior], own.mean())          # the share holds in the loss too
    assert (b["target"][from_prior] == 9.0).all() and (b["target"][~from_prior] <= 40).all()
    empty = PriorMix(ReservoirMemory(10, 3, 2), prior, 0.25).sample(8, np.random.default_rng(1))
    assert (empty["info"][:, 0] == 250).all() and (empty["weight"] == 1).all()
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"share must be in \[0, 1\)"):
            PriorMix(mem, prior, bad)
    # share 0: the prior only while the memory is empty (the pretraining), then the memory's rows alone
    alone = PriorMix(mem, prior, 0.0).sample(64, np.random.default_rng(2))
    assert not (alone["info"][:, 0] == 250).any() and np.isin(alone["weight"], np.arange(1, 41)).all()
    empty = PriorMix(ReservoirMemory(10, 3, 2), prior, 0.0).sample(8, np.random.default_rng(3))
    assert (empty["info"][:, 0] == 250).all() and (empty["weight"] == 1).all()


def test_adv_prior_share_sets_the_advantage_batches_alone(tmp_path):
    """train.adv_prior_share: the advantage nets' batches carry the prior at
    that share, the strategy net's at warm_start_share; -1 follows
    warm_start_share. Without a lasting prior the key is refused."""
    from trainer.loop import Trainer
    sets = ["network.hidden=[16]", "train.warm_start_games=2", "train.warm_start_steps=2",
            "train.batch_size=40", "run.progress=false", "train.warm_start_share=0.5"]
    for share, adv_share in (("0", 0.0), ("0.25", 0.25), ("-1", 0.5)):
        cfg = load_config(ROOT / "configs" / "smoke.yaml", [*sets, f"train.adv_prior_share={share}"])
        tr = Trainer(cfg, tmp_path / share, log=lambda *a: None)
        tr._warm_start(pretrain=False)
        width, actions = tr.adv_mem[0].info.shape[1], tr.adv_mem[0].target.shape[1]
        for memory in (tr.adv_mem[0], tr.strat_mem):
            memory.add({"info": np.zeros((30, width), np.uint8), "target": np.full((30, actions), 7.0, np.float32),
                        "mask": np.ones((30, actions), np.uint8), "weight": np.ones(30, np.float32)})
        for name, want in (("adv0", adv_share), ("strategy", 0.5)):
            mix = tr._memory(name)
            assert mix.share == want
            batch = mix.sample(40, np.random.default_rng(0))
            own = np.isclose(batch["target"], 7.0).all(axis=1)          # _chunk's rows; the prior's are +-advantage
            assert (~own).sum() == round(40 * want)
        # the adv1 net pretrains on the prior alone, whatever the share: its memory is still empty
        assert (~np.isclose(tr._memory("adv1").sample(16, np.random.default_rng(1))["target"], 7.0).all(axis=1)).all()
    with pytest.raises(ConfigError, match=r"adv_prior_share: bad value 1\.0"):
        load_config(ROOT / "configs" / "smoke.yaml", [*sets, "train.adv_prior_share=1.0"])
    with pytest.raises(ConfigError, match="adv_prior_share: 0 sets the share of a lasting prior.*warm_start_share > 0"):
        load_config(ROOT / "configs" / "smoke.yaml", ["train.warm_start_games=2", "train.adv_prior_share=0"])


def test_held_out_error_against_predicting_zero():
    from trainer.learn import held_out_error
    net = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    rows = {"info": np.array([[1, 2, 0], [3, 0, 5]], np.uint8),
            "target": np.array([[1.0, 1.0], [0.0, 2.0]], np.float32),
            "mask": np.array([[1, 1], [1, 0]], np.uint8), "weight": np.array([1.0, 3.0], np.float32)}
    # row 0: pred (1, 2), errors 0 + 1; row 1: pred (3, 0), only action 0 legal: 9
    e = held_out_error(net, rows)
    assert e["heldout_mse"] == pytest.approx(0.25 * 1 + 0.75 * 9)
    assert e["heldout_zero_mse"] == pytest.approx(0.25 * 2 + 0.75 * 0)


def test_bad_config_exits_2_with_named_key(tmp_path):
    r = run_trainer(["--config", "configs/kuhn.yaml", "--set", "train.iterashuns=3"])
    assert r.returncode == 2 and "train.iterashuns: unknown key" in r.stderr
    r = run_trainer(["--resume", str(tmp_path / "nothing")])
    assert r.returncode == 2 and "no checkpoint" in r.stderr


def test_train_device_that_is_not_there_is_one_clear_line(tmp_path):
    import torch
    missing = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    r = run_trainer(["--config", "configs/kuhn.yaml", "--run-dir", str(tmp_path / "run"),
                     "--set", f"train.device={missing}"])
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if "train.device" in line]
    assert len(lines) == 1 and missing in lines[0], r.stderr[-2000:]
    assert ("no such GPU" if torch.cuda.is_available() else "CUDA is not available") in lines[0]


def _trainer_in_process(cfg_overrides, run_dir, resume=None):
    from trainer.loop import Trainer
    cfg = load_config(ROOT / "configs" / "leduc.yaml", cfg_overrides)
    return Trainer(cfg, run_dir, resume=resume, log=lambda *_: None)


LEDUC_TINY = ["network.hidden=[16, 16]", "train.traversals=300", "train.adv_steps=5", "train.strategy_steps=5",
              "train.batch_size=32", "service.machines=32", "service.groups=2", "run.progress=false",
              "run.tensorboard=false", "eval.every=0", "eval.openspiel=false", "train.time_limit_s=0",
              "run.save_memories=true", "run.checkpoint_every=1", "service.job_size=100"]


@pytest.mark.parametrize("merge", [True, False])
def test_resume_continues_at_the_right_iteration_with_equal_memories(tmp_path, merge):
    import copy
    import shutil
    from trainer.loop import Trainer
    tiny = LEDUC_TINY + [f"train.merge_duplicates={str(merge).lower()}"]
    straight = _trainer_in_process(tiny + ["train.iterations=3"], tmp_path / "straight")
    at_save = {}
    original_save = Trainer.save

    def save_and_remember(self, t, selfplay=None):
        at_save[t] = (copy.deepcopy(self.adv_mem), copy.deepcopy(self.strat_mem), copy.deepcopy(self.sdcfr))
        return original_save(self, t, selfplay)

    Trainer.save = save_and_remember
    try:
        straight.run()
    finally:
        Trainer.save = original_save
    # interrupt after iteration 2: a run dir holding only the iteration-2 checkpoint
    resumed_dir = tmp_path / "resumed"
    (resumed_dir / "checkpoints").mkdir(parents=True)
    for name in ("iter_000002.pt", "iter_000002.memories.npz"):
        shutil.copy(tmp_path / "straight" / "checkpoints" / name, resumed_dir / "checkpoints" / name)
    (resumed_dir / "checkpoints" / "latest").write_text("iter_000002.pt")
    ckpt = ck.load_checkpoint(resumed_dir)
    assert ckpt["iteration"] == 2
    resumed = _trainer_in_process(tiny + ["train.iterations=3"], resumed_dir, resume=ckpt)
    assert resumed.start_iteration == 3
    assert type(resumed.adv_mem[0]) is (MergingMemory if merge else ReservoirMemory)
    adv_at_2, strat_at_2, sdcfr_at_2 = at_save[2]
    # leduc.yaml's average is SD-CFR: its sums come back exactly
    assert resumed.sdcfr is not None and sdcfr_at_2.iterations_added.tolist() == [2, 2]
    np.testing.assert_array_equal(resumed.sdcfr.num, sdcfr_at_2.num)
    np.testing.assert_array_equal(resumed.sdcfr.den, sdcfr_at_2.den)
    np.testing.assert_array_equal(resumed.sdcfr.iterations_added, [2, 2])
    for p in (0, 1):
        assert resumed.adv_mem[p].equals(adv_at_2[p]) and len(adv_at_2[p]) > 0
    assert resumed.strat_mem.equals(strat_at_2)
    assert not resumed.adv_mem[0].equals(straight.adv_mem[0])     # iteration 3 added rows
    resumed.run()
    lines = [json.loads(l) for l in (resumed_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [3]
    # everything is seeded and samples enter the memories in (traversal, position)
    # order: the resumed run ends exactly where the uninterrupted one did
    for p in (0, 1):
        assert same_memory(resumed.adv_mem[p], straight.adv_mem[p])
    assert same_memory(resumed.strat_mem, straight.strat_mem)


@pytest.mark.parametrize("merge", [True, False])
def test_killed_worker_job_is_redone_exactly_once(tmp_path, merge):
    sets = LEDUC_TINY + ["train.iterations=1", "service.workers=2", "train.traversals=1200",
                         "service.job_size=300", f"train.merge_duplicates={str(merge).lower()}"]
    clean = _trainer_in_process(sets, tmp_path / "clean")
    clean.run()
    victim = _trainer_in_process(sets, tmp_path / "kill")
    with kill_a_worker_when(lambda job: job.staged["adv"]) as killed:     # partial samples are staged: kill now
        metrics = victim.run()
    assert killed, "no worker was killed"
    assert metrics["requeued_jobs"] >= 1 and metrics["dropped_rows"] > 0 and metrics["restarts"] >= 1
    for p in (0, 1):
        assert same_memory(victim.adv_mem[p], clean.adv_mem[p])
    assert same_memory(victim.strat_mem, clean.strat_mem)


def test_job_worker_exits_when_the_trainer_is_unreachable():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "traverser", "--trainer", f"tcp://127.0.0.1:{port}",
                        "--batcher", "tcp://127.0.0.1:1", "--timeout", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "took no message" in r.stderr and f":{port}" in r.stderr
    assert time.monotonic() - t0 < 30


def test_advantage_learning_rate_schedule(tmp_path):
    tr = _trainer_in_process(LEDUC_TINY + ["train.adv_lr_after=2", "train.lr=0.002"], tmp_path / "run")
    for t, expected in ((1, 0.002), (2, 0.002), (8, 0.001), (32, 0.0005)):
        tr._train_advantage(0, t)
        assert tr.optimizers["adv0"].param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12)
    assert tr.optimizers["adv1"].param_groups[0]["lr"] == pytest.approx(0.002)
