"""The self-play stage on the service (trainer/selfplay_stage.py) with real
parts: a real batcher, real worker processes (`python -m traverser`), the
job server on loopback. A worker killed mid-wave has its job played again
and every game is counted once; a worker started by hand joins a stage
that is already running and its games are counted."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import torch

from lc_helpers import ROOT

from trainer.config import load_config  # noqa: E402
from service_helpers import kill_a_worker_when  # noqa: E402

SMALL_LC = ["game.params={colours: 3, ranks: 5, hand_size: 4, max_turns: 200}", "network.hidden=[16]",
            "service.machines=8", "service.groups=2", "run.progress=false", "run.tensorboard=false",
            "train.device=cpu", "service.heartbeat_timeout_s=30"]


def _trainer(run_dir, sets):
    from trainer.loop import Trainer
    torch.set_num_threads(1)
    return Trainer(load_config(ROOT / "configs" / "smoke.yaml", SMALL_LC + sets), run_dir, log=lambda *_: None)


def _ledger_games(run_dir):
    from trainer.jobs import selfplay_ledger
    return {w: sorted(g for line in lines for g in range(line["first"], line["first"] + line["n"]))
            for w, lines in selfplay_ledger(run_dir / "jobs.jsonl").items()}


def test_a_worker_killed_mid_wave_has_its_job_played_again_and_every_game_counted_once(tmp_path):
    from trainer import jobs
    from agents.ppo import SelfPlaySettings
    from trainer.selfplay_stage import tune_on_service
    trainer = _trainer(tmp_path / "run", ["service.workers=2"])
    # wave 1's first records are staged: kill their worker now
    with kill_a_worker_when(lambda job: job.kind == "selfplay" and job.staged["decisions"]
                            and job.fields["wave"] == 1) as killed:
        stats = tune_on_service(trainer, SelfPlaySettings(games=12, critic_waves=1, autocast="none"), waves=3)
    assert killed, "no worker was killed"
    assert stats["selfplay_requeued_jobs"] >= 1 and stats["selfplay_dropped_rows"] > 0
    assert stats["selfplay_waves"] == 3 and stats["selfplay_games"] == 36
    # the ledger: each wave's games 0..11 committed once, the killed job's by a later attempt
    assert _ledger_games(tmp_path / "run") == {w: list(range(12)) for w in range(3)}
    lines = [line for lines in jobs.selfplay_ledger(tmp_path / "run" / "jobs.jsonl").values() for line in lines]
    assert any(line["attempt"] > 1 for line in lines if line["wave"] == 1)
    assert sum(line["ends"] for line in lines) == 36
    assert sum(line["decisions"] for line in lines) == stats["selfplay_decisions"]


def test_a_worker_started_by_hand_joins_a_running_self_play_stage(tmp_path):
    """service.workers 0 and a batcher of the user's: the stage waits for a
    worker; one started by hand (`python -m traverser --trainer ...
    --batcher ...`) takes its jobs, and its games are counted."""
    from trainer.launcher import free_port
    from agents.ppo import SelfPlaySettings
    from trainer.selfplay_stage import tune_on_service
    from batcher.client import wait_for_batcher
    jobs_ep, batcher_ep = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    batcher = subprocess.Popen([sys.executable, "-m", "batcher", "--bind", batcher_ep, "--device", "cpu"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        wait_for_batcher(batcher_ep, timeout_s=60)
        trainer = _trainer(tmp_path / "run", ["service.workers=0", f"service.jobs_bind={jobs_ep}",
                                              f"service.batcher={batcher_ep}"])
        out = {}

        def stage():
            try:
                out["stats"] = tune_on_service(trainer, SelfPlaySettings(games=6, critic_waves=1, autocast="none"),
                                               waves=2)
            except BaseException as e:       # reported below
                out["error"] = e

        t = threading.Thread(target=stage)
        t.start()
        time.sleep(2.0)
        assert t.is_alive() and not out, "the stage ended without a worker"
        worker = subprocess.Popen([sys.executable, "-m", "traverser", "--trainer", jobs_ep, "--batcher", batcher_ep,
                                   "--machines", "4", "--groups", "2"], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t.join(240)
        assert not t.is_alive(), "the stage did not finish with the worker"
        assert "error" not in out, out.get("error")
        assert out["stats"]["selfplay_games"] == 12 and out["stats"]["selfplay_waves"] == 2
        # wave 1 was handed out with wave 0 and joined its last games
        assert out["stats"]["selfplay_early_jobs"] == 1
        assert _ledger_games(tmp_path / "run") == {0: list(range(6)), 1: list(range(6))}
        worker.wait(30)                      # the stage's end tells the workers it knows to stop
        assert worker.returncode == 0, worker.stdout.read()[-2000:]
    finally:
        for proc in (worker, batcher):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_trainer_killed_in_the_self_play_stage_resumes_the_stage_from_its_checkpoint(tmp_path):
    """SIGKILL the trainer once the stage has checkpointed; --auto-resume
    goes on with the stage at the checkpoint's wave (no CFR iteration again),
    with the critic and both optimisers, and the stage's budget counts the
    seconds spent before the kill. Each wave's games stand once in the ledger."""
    from trainer import checkpoint as ck
    from trainer.jobs import selfplay_ledger
    run_dir = tmp_path / "run"
    sets = SMALL_LC + ["service.workers=1", "train.traversals=20", "train.adv_steps=2", "train.strategy_steps=2",
                       "eval.lc_games=2", "train.iterations=2", "train.selfplay_budget_s=16",
                       "train.selfplay_games=8", "train.selfplay_checkpoint_s=1", "run.checkpoint_every=1"]
    cmd = [sys.executable, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
           "--auto-resume", *sum([["--set", s] for s in sets], [])]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    with open(tmp_path / "first.log", "w") as out:
        first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    state = None
    deadline = time.monotonic() + 240
    try:
        while first.poll() is None and time.monotonic() < deadline:
            latest = ck.latest_checkpoint(run_dir)
            if latest is not None:
                try:
                    mid = ck.load_checkpoint(latest)
                    state = mid.get("selfplay")
                except Exception:           # noqa: BLE001 - written while read: try again
                    state = None
                if state is not None and state.get("waves", 0) >= 3:
                    break
            time.sleep(0.2)
        assert first.poll() is None, "the first trainer ended before its stage checkpointed:\n" + \
            (tmp_path / "first.log").read_text()[-3000:]
        assert state is not None and not state.get("done"), "no self-play checkpoint in time"
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    final = ck.load_checkpoint(run_dir)
    assert final["iteration"] == 2 and final["selfplay"] == {"done": True}
    # every checkpoint from the stage on keeps the critic: the stage's own mid-stage, and the final one,
    # trained on from it (agents.checkpoint.build_critic reads it)
    from agents.checkpoint import build_critic
    assert all(torch.equal(mid["critic"][k], state["critic"][k]) for k in state["critic"])
    assert build_critic(final) is not None and final["critic_value_scale"] == 0.01
    assert any(not torch.equal(final["critic"][k], state["critic"][k]) for k in state["critic"])
    resumed_at = int(re.search(r"self-play: resumed at wave (\d+), (\d+) s of", r.stdout).group(1))
    assert resumed_at >= state["waves"] >= 3
    # straight back into the stage: no CFR iteration, CFR's agent kept as it was
    assert not re.search(r"^iter \d+ \| traverse", r.stdout, re.M) and "CFR's agent kept as" not in r.stdout
    import json
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["iteration"] == 2 and lines[-1]["selfplay_waves"] > resumed_at
    # the budget counts the seconds before the kill: the stage's time in all is about its budget
    assert lines[-1]["selfplay_s"] >= 16 and lines[-1]["selfplay_s"] < 16 + 30
    waves = selfplay_ledger(run_dir / "jobs.jsonl")
    assert sorted(waves) == list(range(lines[-1]["selfplay_waves"]))
    for w, entries in waves.items():
        assert sorted(g for x in entries for g in range(x["first"], x["first"] + x["n"])) == list(range(8)), w
