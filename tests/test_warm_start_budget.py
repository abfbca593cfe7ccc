"""The warm start's wall-clock budgets (train.warm_start_budget_s and
train.warm_start_pretrain_budget_s) and the trainer's progress off a
terminal: labelling in this process, a real trainer subprocess (whose
workers label)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import engine
from trainer.config import ConfigError, load_config
from trainer.warmstart import heuristic_rows
from lc_helpers import rows_of_deals, same_rows

ROOT = Path(__file__).resolve().parent.parent


def _small_game():
    return engine.load_game("lost_cities", colours=3, ranks=5, hand_size=4, max_turns=200)


def test_a_budget_keeps_the_games_finished_in_time():
    """In this process (the workers' label jobs under a budget:
    tests/test_label_jobs.py)."""
    game = _small_game()
    teacher = dict(worlds=4, explore=0.2)
    budget = 0.6
    stats = {}
    t0 = time.monotonic()
    rows = heuristic_rows(game, 100_000, seed=7, advantage=0.1, budget_s=budget, stats=stats, **teacher)
    took = time.monotonic() - t0
    assert 0 < stats["games"] < 100_000 and stats["budget_hit"] and not stats["cached"]
    assert len(stats["deals"]) == stats["games"] == len(set(stats["deals"]))
    assert took < budget + 30          # it stopped: the cap alone would take minutes
    assert stats["deals"] == list(range(7, 7 + stats["games"]))     # one process: a prefix of the deals
    # every game kept is whole, with the rows it has without a budget
    same_rows(rows, rows_of_deals(game, stats["deals"], **teacher))


def test_a_budget_larger_than_needed_changes_nothing(tmp_path):
    game = _small_game()
    stats = {}
    rows = heuristic_rows(game, 5, seed=3, advantage=0.1, worlds=4, budget_s=600, stats=stats)
    assert stats["games"] == 5 and not stats["budget_hit"]
    same_rows(rows, heuristic_rows(game, 5, seed=3, advantage=0.1, worlds=4))
    # a budgeted run's cache holds its own games and reads back the same rows and count
    cache = tmp_path / "rows.npz"
    first, again = {}, {}
    a = heuristic_rows(game, 100_000, seed=3, advantage=0.1, worlds=4, budget_s=0.5, cache=cache, stats=first)
    stamp = cache.stat().st_mtime_ns
    b = heuristic_rows(game, 100_000, seed=3, advantage=0.1, worlds=4, budget_s=0.5, cache=cache, stats=again)
    assert cache.stat().st_mtime_ns == stamp and again["cached"] and not again["budget_hit"]
    assert again["games"] == first["games"] and again["deals"] == first["deals"]
    same_rows(a, b)
    # another budget is another teacher's rows: played again
    heuristic_rows(game, 100_000, seed=3, advantage=0.1, worlds=4, budget_s=0.3, cache=cache)
    assert cache.stat().st_mtime_ns != stamp


def test_bad_budgets_get_a_clear_error():
    game = _small_game()
    with pytest.raises(RuntimeError, match="budget of 1e-09 s ran out before one game was labelled"):
        heuristic_rows(game, 10, seed=0, advantage=0.1, worlds=4, budget_s=1e-9)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="budget must be a number of seconds >= 0"):
            heuristic_rows(game, 1, 0, 0.1, budget_s=bad)
    for key, value in (("train.warm_start_budget_s", "-5"), ("train.warm_start_budget_s", ".nan"),
                       ("train.warm_start_pretrain_budget_s", "-1"), ("train.warm_start_pretrain_budget_s", ".inf"),
                       ("train.time_limit_s", "-3")):
        with pytest.raises(ConfigError, match=f"config {key}: bad value"):
            load_config(ROOT / "configs" / "smoke.yaml", ["train.warm_start_games=10", f"{key}={value}"])
    with pytest.raises(ConfigError, match="config train.warm_start_budget_s: expected float, got str 'soon'"):
        load_config(ROOT / "configs" / "smoke.yaml", ["train.warm_start_budget_s=soon"])
    for key in ("train.warm_start_budget_s", "train.warm_start_pretrain_budget_s"):
        with pytest.raises(ConfigError, match=f"config {key}: a warm-start budget needs train.warm_start_games > 0"):
            load_config(ROOT / "configs" / "smoke.yaml", [f"{key}=60"])
    cfg = load_config(ROOT / "configs" / "lost_cities_cpu.yaml")
    assert cfg.train.warm_start_budget_s > 0


def test_budgeted_run_records_its_games_and_prints_plain_progress(tmp_path):
    """The whole trainer with both budgets, its output to pipes (not a
    terminal): the labelling and the pretraining stop on time, metrics.jsonl
    and the log say how many games were labelled, and progress comes as
    plain periodic lines with no carriage return."""
    run_dir = tmp_path / "run"
    sets = ["train.iterations=1", "train.traversals=40", "train.adv_steps=5", "train.strategy_steps=5",
            "network.hidden=[16]", "eval.lc_games=4", "run.tensorboard=false", "run.progress=true",
            "train.warm_start_games=1000000", "train.warm_start_budget_s=2", "train.warm_start_worlds=2",
            "train.warm_start_steps=1000000", "train.warm_start_pretrain_budget_s=1.5",
            "train.warm_start_share=0.5", "train.batch_size=64",
            "run.summary_note='the full hour: python -m trainer --config configs/lost_cities_cpu.yaml'"]
    env = {**os.environ, "DEEPCFR_PROGRESS_S": "0.2"}
    r = subprocess.run([sys.executable, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                        *sum([["--set", s] for s in sets], [])],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    games = m["warm_start_games_labelled"]
    assert 0 < games < 1_000_000 and m["warm_start_decisions"] > games
    assert m["warm_start_label_s"] < 2 + 20
    steps = [m[f"warm_start_pretrain_steps_{name}"] for name in ("adv0", "adv1", "strategy")]
    assert all(0 < n < 1_000_000 for n in steps) and m["warm_start_pretrain_s"] < 1.5 + 20
    assert f"decisions of {games} games labelled by a 2-world lookahead, in " in r.stdout
    assert "(the budget of 2 s stopped it)" in r.stdout
    # the rows kept on disk are the games counted
    with np.load(run_dir / "warm_start_rows.npz") as z:
        assert len(z["deals"]) == games
    # the summary says what was trained and what to run next
    out = r.stdout.rstrip("\n").split("\n")
    tail = out[len(out) - out[::-1].index(""):]
    assert tail[0].startswith("done: iteration 1 of 1, wall time ")
    assert tail[1].startswith(f"warm start: {games} games labelled by a 2-world lookahead in ")
    assert f", then {'/'.join(map(str, steps))} steps (adv0/adv1/strategy) in " in tail[1] or \
        f", then {steps[0]} steps per net in " in tail[1]
    assert "the full hour: python -m trainer --config configs/lost_cities_cpu.yaml" in tail
    # progress off a terminal: plain lines, several per phase at this period, one at each phase's end
    for stream in (r.stdout, r.stderr):
        assert "\r" not in stream
    err = r.stderr.splitlines()
    label = [line for line in err if line.startswith("[warm start: label (a 2-world lookahead, budget 2 s)] ")]
    assert len(label) >= 3 and label[-1].startswith(f"[warm start: label (a 2-world lookahead, budget 2 s)] done: {games} games in ")
    for name in ("adv0", "adv1", "strategy"):
        lines = [line for line in err if line.startswith(f"[warm start: pretrain {name}] ")]
        assert len(lines) >= 2 and " done: " in lines[-1] and "steps" in lines[-1]
    assert any(line.startswith("[iter 1 traverse p0] done: 40/40 travs (100%) in ") for line in err)
    assert any(line.startswith("[iter 1 train strategy] done: 5/5 steps (100%)") for line in err)


def test_make_train_runs_the_quick_config_with_every_phase_budgeted():
    """`make train` is configs/quick.yaml: a lookahead prior budgeted by wall
    clock, a time limit, and a final 400-game evaluation against the
    heuristic; its summary names the full hour's command. (How strong it
    ends is a benchmark, not a test: see the README's figures.)"""
    make = (ROOT / "Makefile").read_text()
    target = make[make.index("\ntrain:"):].split("\n")[2]
    assert target.strip() == "$(PYTHON) -m trainer --config configs/quick.yaml"
    cfg = load_config(ROOT / "configs" / "quick.yaml")
    tr = cfg.train
    assert tr.warm_start_worlds > 0 and tr.warm_start_budget_s > 0 and tr.warm_start_pretrain_budget_s > 0
    assert 0 < tr.warm_start_budget_s + tr.warm_start_pretrain_budget_s < tr.time_limit_s < 600
    assert cfg.eval.lc_games == 400 and "heuristic" in cfg.eval.opponents
    assert "python -m trainer --config configs/lost_cities_cpu.yaml" in cfg.run.summary_note
