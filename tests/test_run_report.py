"""What a run reports: the end-of-run summary of `python -m trainer`, and
throughput rates that survive a batcher restart (kill -9 under a running
trainer)."""
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import checkpoint as ck
from trainer.config import load_config
from trainer.summary import SUMMARY_MAX_LINES, final_summary, opponent_results
from trainer.supervise import counter_growth

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------
# Rates from the counters of a service that may restart

def snap(rows, uptime_s, taken_at, **kw):
    return {"rows": rows, "uptime_s": uptime_s, "taken_at": taken_at, **kw}


def test_counter_growth_of_a_running_service():
    assert counter_growth(snap(1000, 50.0, 100.0), snap(4000, 60.0, 110.0), "rows") == (3000, False)
    assert counter_growth(snap(1000, 50.0, 100.0), snap(1000, 60.0, 110.0), "rows") == (0, False)


def test_counter_growth_after_a_restart_counts_from_the_restart():
    # the counter went down: 49 007 rows fewer than before would be a negative rate
    assert counter_growth(snap(60000, 50.0, 100.0), snap(10993, 4.0, 110.0), "rows") == (10993, True)
    # restarted and already past the old count: only the uptime shows it
    assert counter_growth(snap(100, 50.0, 100.0), snap(5000, 4.0, 110.0), "rows") == (5000, True)
    # a new pid, whatever the uptime says
    assert counter_growth(snap(100, 50.0, 100.0, pid=7), snap(5000, 60.0, 110.0, pid=8), "rows") == (5000, True)
    assert counter_growth(snap(100, 50.0, 100.0, pid=7), snap(5000, 60.0, 110.0, pid=7), "rows") == (4900, False)
    # restarted before the first snapshot of a fresh service: uptime longer than the gap
    assert counter_growth(snap(0, 0.2, 100.0), snap(700, 10.2, 110.0), "rows") == (700, False)


def test_counter_growth_is_never_negative():
    for before in (0, 10, 10 ** 9):
        for after in (0, 5, 10 ** 6):
            for uptime in (0.5, 100.0):
                growth, _ = counter_growth(snap(before, 50.0, 0.0), snap(after, uptime, 10.0), "rows")
                assert growth >= 0


# --------------------------------------------------------------------------
# The end-of-run summary

# agents.evaluate's keys (duplicate deals)
NEW_KEYS = {"iteration": 40, "wall_s": 192.4,
            "vs_random_win_rate": 0.915, "vs_random_win_rate_lo": 0.87, "vs_random_win_rate_hi": 0.945,
            "vs_random_margin": 45.2, "vs_random_margin_lo": 41.0, "vs_random_margin_hi": 49.4,
            "vs_random_games": 200, "vs_random_capped": 0,
            "vs_heuristic_win_rate": 0.31, "vs_heuristic_win_rate_lo": 0.25, "vs_heuristic_win_rate_hi": 0.376,
            "vs_heuristic_margin": -12.3, "vs_heuristic_margin_lo": -15.0, "vs_heuristic_margin_hi": -9.6,
            "vs_heuristic_games": 200, "vs_heuristic_capped": 3, "queries_per_s": 1234.0, "adv_loss_0": 0.1,
            "current_vs_random_win_rate": 0.5}
# the shorter CI names, and the single-deal keys of earlier runs
SHORT_CI_KEYS = {"iteration": 40, "wall_s": 192.4,
                 "vs_random_win_rate": 0.915, "vs_random_win_lo": 0.87, "vs_random_win_hi": 0.945,
                 "vs_random_margin": 45.2, "vs_random_margin_lo": 41.0, "vs_random_margin_hi": 49.4}
OLD_KEYS = {"iteration": 40, "wall_s": 192.4,
            "vs_random_win_rate": 0.915, "vs_random_win_rate_lo": 0.87, "vs_random_win_rate_hi": 0.945,
            "vs_random_score_diff": 45.2, "vs_random_score_diff_lo": 41.0, "vs_random_score_diff_hi": 49.4}


@pytest.mark.parametrize("metrics", [NEW_KEYS, SHORT_CI_KEYS, OLD_KEYS])
def test_summary_shows_each_opponent_with_its_intervals(metrics):
    cfg = load_config(ROOT / "configs" / "smoke.yaml", [])
    text = final_summary(metrics, "runs/a b", cfg, 1)
    lines = text.splitlines()
    assert len(lines) <= SUMMARY_MAX_LINES
    assert lines[0] == "done: iterations 1-40 of 40, wall time 3m 12s, lost_cities"
    assert "vs random" in text and "91.5% [87.0%, 94.5%]" in text and "+45.2 [+41.0, +49.4]" in text
    if metrics is NEW_KEYS:
        assert "(95% intervals, 200 games per opponent)" in lines[1]
        heuristic = [line for line in lines if "vs heuristic" in line]
        assert len(heuristic) == 1 and "31.0% [25.0%, 37.6%]" in heuristic[0]
        assert "-12.3 [-15.0, -9.6]" in heuristic[0] and heuristic[0].endswith("(3 capped)")
        assert "current" not in text           # a second read-out's keys stay in metrics.jsonl
    assert "queries" not in text and "loss" not in text       # the full dump stays in metrics.jsonl
    assert lines[-3:] == ["evaluate  python -m agents.evaluate 'runs/a b' --opponent heuristic,cautious,random "
                          "--games 2000 --seed 777 --jobs 2",
                          "plot      python -m trainer.plot 'runs/a b'",
                          "resume    python -m trainer --resume 'runs/a b' --set train.iterations=80"]


def test_summary_names_the_games_when_opponents_differ():
    m = {**NEW_KEYS, "vs_exploiter_win_rate": 0.2, "vs_exploiter_margin": -30.0, "vs_exploiter_games": 50}
    cfg = load_config(ROOT / "configs" / "smoke.yaml", [])
    lines = final_summary(m, "r", cfg, 1).splitlines()
    assert lines[1] == "evaluation after iteration 40 (95% intervals):"
    assert lines[4].startswith("  vs exploiter  win rate 20.0%") and lines[4].endswith("margin -30.0   (50 games)")
    assert lines[3].endswith("(200 games, 3 capped)")


def test_summary_of_poker_and_of_many_opponents_and_of_nothing_to_do():
    leduc = load_config(ROOT / "configs" / "leduc.yaml", ["train.iterations=10", "train.time_limit_s=60"])
    text = final_summary({"iteration": 7, "wall_s": 3725, "exploitability": 0.01234,
                          "openspiel_exploitability": 0.01234, "strategy_net_exploitability": 0.05}, "r", leduc, 3)
    assert text.splitlines()[0] == ("done: iterations 3-7 of 10 (stopped by train.time_limit_s=60), "
                                    "wall time 1h 02m 05s, leduc_poker")
    assert "  exploitability 0.01234 (OpenSpiel 0.01234; strategy net 0.05)" in text.splitlines()
    assert text.splitlines()[-1] == "resume    python -m trainer --resume r"       # the planned iterations remain
    assert text.splitlines()[-3] == "evaluate  python -m agents.evaluate r"         # exploitability, as in-run
    many = {"iteration": 3, "wall_s": 5.0, **{f"vs_bot{i}_win_rate": 0.5 for i in range(20)}}
    smoke = load_config(ROOT / "configs" / "smoke.yaml", [])
    text = final_summary(many, "r", smoke, 1)
    assert len(text.splitlines()) == SUMMARY_MAX_LINES and "more opponents in metrics.jsonl" in text
    text = final_summary({}, "r", smoke, 41)
    assert text.splitlines()[0] == "nothing to do: the run is at iteration 40 of 40"
    assert "--set train.iterations=80" in text


def test_summary_says_what_the_self_play_did_and_where_cfrs_agent_is():
    m = {**NEW_KEYS, "selfplay_waves": 479, "selfplay_games": 245248, "selfplay_s": 1304.2}
    cfg = load_config(ROOT / "configs" / "smoke.yaml", [])
    lines = final_summary(m, "runs/a b", cfg, 1).splitlines()
    assert len(lines) <= SUMMARY_MAX_LINES
    assert lines[1] == ("self-play: 245,248 games of PPO (479 waves) in 21m 44s; "
                        "CFR's agent kept: --opponent run:'runs/a b/checkpoints/before_selfplay.pt'")
    assert "vs heuristic" in "\n".join(lines)          # the evaluation still fits
    # with the critic's figures: how far below the mean return's error it came on its last waves
    m.update(selfplay_critic_last10_mse=0.06, selfplay_mean_last10_mse=0.1)
    assert final_summary(m, "r", cfg, 1).splitlines()[1] == (
        "self-play: 245,248 games of PPO (479 waves) in 21m 44s; its critic 40% below the mean return's error "
        "on its last waves, kept in the checkpoint; CFR's agent kept: --opponent run:r/checkpoints/before_selfplay.pt")
    # a run whose self-play found no time left, or that had none, says nothing of it
    for none in ({**NEW_KEYS, "selfplay_waves": 0}, NEW_KEYS):
        assert "self-play" not in final_summary(none, "r", cfg, 1)


def test_summary_judges_a_warm_started_run_against_its_prior_too(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "prior.pt").write_bytes(b"")
    cfg = load_config(ROOT / "configs" / "quick.yaml", [])
    evaluate = final_summary(NEW_KEYS, tmp_path, cfg, 1).splitlines()[-3]
    assert evaluate == (f"evaluate  python -m agents.evaluate {tmp_path} --opponent heuristic,cautious,random,prior "
                        "--games 2000 --seed 777 --jobs 2")


def test_iteration_line_shows_the_advantage_nets_held_out_error_next_to_zeros():
    from trainer.summary import iteration_line
    m = {"iteration": 7, "time_traverse_s": 2.0, "time_train_s": 4.0, "queries_per_s": 27000.0,
         "adv_loss_0": 0.13, "adv_loss_1": 0.14}
    assert "held-out" not in iteration_line(m)
    m.update(adv_heldout_mse_0=0.1425, adv_heldout_mse_1=0.1427, adv_heldout_zero_mse_0=0.1692,
             adv_heldout_zero_mse_1=0.1697)
    assert "adv held-out 0.1425/0.1427 (zero 0.1692/0.1697)" in iteration_line(m)


def test_opponent_results_reads_any_opponent_name():
    r = opponent_results({"vs_my_bot_win_rate": 0.25, "vs_my_bot_margin": 3.0, "vs_other_win_rate": None})
    assert r == [{"opponent": "my_bot", "win_rate": 0.25, "win_lo": None, "win_hi": None, "margin": 3.0,
                  "margin_lo": None, "margin_hi": None, "games": None, "capped": None}]


SMOKE_TINY = ["train.iterations=1", "network.hidden=[16, 16]", "train.traversals=60", "train.adv_steps=10",
              "train.strategy_steps=20", "train.batch_size=64", "service.machines=16", "run.progress=false",
              "run.tensorboard=false", "eval.lc_games=10"]


def test_main_command_ends_with_the_short_summary(tmp_path):
    run_dir = tmp_path / "smoke"
    sets = sum([["--set", s] for s in SMOKE_TINY], [])
    r = subprocess.run([sys.executable, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                        *sets], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.rstrip("\n").split("\n")
    tail = out[len(out) - out[::-1].index(""):]          # the block after the last blank line
    assert 5 <= len(tail) <= SUMMARY_MAX_LINES, r.stdout[-3000:]
    assert tail[0].startswith("done: iteration 1 of 1, wall time ")
    assert any(line.startswith("  vs heuristic  win rate ") and "margin" in line for line in tail)
    commands = {line.split()[0]: line.split(None, 1)[1] for line in tail[-4:]}
    assert commands["run"] == f"dir   {run_dir}  (every metric: {run_dir / 'metrics.jsonl'})"
    assert commands["evaluate"] == (f"python -m agents.evaluate {run_dir} --opponent heuristic,cautious,random "
                                    "--games 2000 --seed 777 --jobs 2")          # the figures' matches
    assert commands["plot"] == f"python -m trainer.plot {run_dir}"
    assert commands["resume"] == f"python -m trainer --resume {run_dir} --set train.iterations=2"
    # the commands work as printed (evaluate with fewer games, to stay quick)
    from trainer.__main__ import build_parser
    args = build_parser().parse_args(shlex.split(commands["resume"])[3:])
    assert Path(args.resume) == run_dir and ck.latest_checkpoint(args.resume) is not None
    evaluate, plot = shlex.split(commands["evaluate"])[3:], shlex.split(commands["plot"])[3:]
    code = ("import sys; from agents.evaluate import main as e; from trainer.plot import main as p; "
            f"sys.exit(e({evaluate + ['--games', '2', '--jobs', '1']!r}) or p({plot!r}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


# --------------------------------------------------------------------------
# kill -9 of the batcher under a running trainer

LEDUC = ["network.hidden=[16, 16]", "train.traversals=300", "train.adv_steps=5", "train.strategy_steps=5",
         "train.batch_size=32", "service.machines=32", "service.groups=2", "run.progress=false",
         "run.tensorboard=false", "eval.every=0", "eval.openspiel=false", "train.time_limit_s=0",
         "run.checkpoint_every=0", "service.job_size=100", "service.workers=1", "train.iterations=2"]


def test_batcher_killed_mid_run_leaves_no_negative_rate(tmp_path, monkeypatch):
    """The batcher dies (SIGKILL) in iteration 2, phase 1, after it has served
    iteration 1 and more: the trainer restarts it, and the iteration's rate
    counts the new batcher's rows only, never a negative number."""
    from trainer import jobs, launcher, loop, supervise
    services = {}

    class Remembered(launcher.LocalServices):
        def start(self):
            services["it"] = self
            return super().start()

    killed = {}
    original = jobs.JobServer._handle

    def handle_and_kill(self, frames, by_id, done, job_config, progress):
        original(self, frames, by_id, done, job_config, progress)
        for w in self.workers.values():
            job = w["job"]
            if (not killed and job is not None and job.iteration == 2 and job.traverser == 1
                    and job.staged["adv"]):
                killed["pid"] = services["it"].batcher.proc.pid
                os.kill(killed["pid"], signal.SIGKILL)

    monkeypatch.setattr(supervise, "LocalServices", Remembered)
    monkeypatch.setattr(jobs.JobServer, "_handle", handle_and_kill)
    cfg = load_config(ROOT / "configs" / "leduc.yaml", LEDUC)
    trainer = loop.Trainer(cfg, tmp_path / "run", log=lambda *_: None)
    last = trainer.run()
    assert killed, "the batcher was not killed"
    assert services["it"].restarts()["batcher"] == 1 and last["restarts"] >= 1
    lines = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2]
    for m in lines:
        assert m["batcher_rows"] > 0 and m["queries_per_s"] > 0, m
        assert m["batcher_shm_requests"] > 0, m       # the local workers' rounds came through shared memory


def test_float16_answers_reach_the_local_workers(tmp_path, monkeypatch):
    """service.adv_dtype: float16 starts every local worker asking float16
    answers, and a run trains on them; a bad value is refused by name."""
    from trainer import launcher, loop, supervise
    from trainer.config import ConfigError
    services = {}

    class Remembered(launcher.LocalServices):
        def start(self):
            services["it"] = self
            return super().start()

    monkeypatch.setattr(supervise, "LocalServices", Remembered)
    with pytest.raises(ConfigError, match="service.adv_dtype"):
        load_config(ROOT / "configs" / "leduc.yaml", LEDUC + ["service.adv_dtype=bfloat16"])
    cfg = load_config(ROOT / "configs" / "leduc.yaml", LEDUC + ["service.adv_dtype=float16"])
    last = loop.Trainer(cfg, tmp_path / "run", log=lambda *_: None).run()
    cmd = services["it"].workers[0].cmd
    assert cmd[cmd.index("--adv-dtype") + 1] == "float16"
    assert last["iteration"] == 2 and last["batcher_rows"] > 0 and last["dropped_rows"] == 0, last
    assert last["samples_adv_0"] > 0 and last["samples_adv_1"] > 0, last


def test_batcher_shm_false_sends_the_local_workers_rounds_through_the_socket(tmp_path):
    """service.batcher_shm: false: a run whose rounds all went through the
    socket (the default's run above counts them in batcher_shm_requests)."""
    from trainer import loop
    cfg = load_config(ROOT / "configs" / "leduc.yaml", LEDUC + ["service.batcher_shm=false"])
    last = loop.Trainer(cfg, tmp_path / "run", log=lambda *_: None).run()
    assert last["iteration"] == 2 and last["batcher_rows"] > 0 and last["batcher_shm_requests"] == 0, last
