"""Faults at any moment: the batcher or a worker SIGKILLed in every phase of a
real local run (warm start, traverse, train, the weight push, evaluate,
checkpoint), the trainer SIGKILLed and resumed (benchmarks/chaos.py's short
form); SIGTERM stopping the trainer as Ctrl-C does; stale socket and
shared-memory directories removed by owner pid;
checkpoint writes that fail leave the previous checkpoint in force."""
import errno
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from trainer import checkpoint as ck
from trainer import launcher

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# the short chaos run: every phase, both processes, the trainer itself

def test_a_small_run_survives_kills_in_every_phase_and_a_killed_trainer(tmp_path):
    """Lost Cities, 3 iterations, 1 worker: the batcher is SIGKILLed as each
    phase starts (in the push, while the push waits for its reply), the
    worker as the traversal, the training and the self-play stage start,
    the trainer is SIGKILLed after checkpoint 1 and resumed with
    --auto-resume (its self-play stage then takes the kills aimed at it). The run completes with every traversal
    committed once, the memories hold exactly the committed rows, nothing is
    left behind and every checkpoint loads (benchmarks.chaos.check)."""
    from benchmarks.chaos import PHASES, SMALL, run_chaos
    aim = ",".join([f"batcher:{phase}" for phase in PHASES] + ["worker:traverse", "worker:train", "worker:self-play"])
    summary, failures, details = run_chaos(tmp_path, 3, 0.0, 0, ROOT / "configs" / "smoke.yaml",
                                           SMALL + ["service.workers=1", "train.traversals=16", "service.job_size=8",
                                                    "train.warm_start_games=4"],
                                           aim=aim, reference=False, kill_trainer=True, timeout_s=600,
                                           log=lambda *_: None)
    log = (tmp_path / "chaos.log").read_text()
    assert not failures, "\n".join(failures) + "\n" + summary + "\n" + log[-4000:]
    # phase by phase: the batcher killed in each one, and its restart logged naming it
    first_trainer = details["kills"][0]["trainer"]
    for phase in PHASES:
        # the self-play stage comes after the last iteration, in the resumed trainer
        kills = [k for k in details["kills"] if k["kill"] == "batcher" and k["phase"] == phase
                 and (k["trainer"] == first_trainer) == (phase != "self-play")]
        assert kills, f"no batcher kill landed in phase {phase}: {details['kills']}"
        assert details["restarted"].get(kills[0]["pid"]) == phase, \
            f"the batcher killed in {phase} was not restarted as of it:\n{log[-4000:]}"
        assert re.search(rf"^restart: batcher \(pid {kills[0]['pid']}\) exited with code -9 in phase {phase}",
                         log, re.M)
    assert any(k.get("waiting") for k in details["kills"]), "no kill landed while the push waited for its reply"
    # the killed trainer's socket and shm directories were removed: by the resumed trainer, which logs
    # them, unless a run of another test process on the box starting first swept them (any trainer removes
    # every dead run's directories)
    assert "chaos: trainer pid" in log
    killed_sockets = Path(re.search(r"^run dir .*?; batcher ipc://(\S+)/batcher\.sock", log, re.M).group(1))
    assert not killed_sockets.exists()
    swept = re.search(r"^removed \d+ directories left by killed runs: (.*)$", log, re.M)
    assert swept is None or str(killed_sockets) in swept.group(1)
    assert "resumed from" in log and log.count("no checkpoint yet; starting the run") == 1
    # metrics.jsonl counts the restarts
    import json
    lines = [json.loads(x) for x in (tmp_path / "chaos" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["iteration"] == 1 and lines[0]["restarts_batcher"] >= 4 and lines[0]["restarts_worker"] >= 1
    assert lines[0]["restarts"] == lines[0]["restarts_batcher"] + lines[0]["restarts_worker"]


def test_sigterm_stops_the_trainer_and_removes_its_directories(tmp_path):
    """docker stop, a pod's end and kill send SIGTERM: the trainer stops its
    batcher and workers as on Ctrl-C, removes its socket and shared-memory
    directories (a trainer that SIGTERM kills outright leaves both), names
    the checkpoint to go on from and exits with 143."""
    from batcher.shm import default_parent
    from benchmarks.chaos import SMALL
    run_dir, log = tmp_path / "run", tmp_path / "trainer.log"
    sets = SMALL + ["service.workers=1", "train.iterations=1000", "train.selfplay_budget_s=0"]
    cmd = [sys.executable, "-m", "trainer", "--config", str(ROOT / "configs" / "smoke.yaml"),
           "--run-dir", str(run_dir)] + [a for s in sets for a in ("--set", s)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while ck.latest_checkpoint(run_dir) is None:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        sockets = Path(re.search(r"^run dir .*?; batcher ipc://(\S+)/batcher\.sock", log.read_text(), re.M).group(1))
        shm = [Path(default_parent()) / d for d in os.listdir(default_parent()) if d.startswith(launcher.SHM_PREFIX)]
        shm = [d for d in shm if (d / launcher.OWNER_FILE).read_text().split()[0] == str(proc.pid)]
        assert sockets.is_dir() and len(shm) == 1
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert rc == 143, text[-3000:]
    line = re.search(r"^stopped by SIGTERM; services stopped; the run goes on from (\S+) with --resume (\S+)$",
                     text, re.M)
    assert line and Path(line.group(2)) == run_dir, text[-3000:]
    assert ck.load_checkpoint(Path(line.group(1)))["iteration"] >= 1
    assert not sockets.exists() and not shm[0].exists()


# ---------------------------------------------------------------------------
# stale directories

def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_directories_are_removed_by_owner_pid_and_live_ones_kept():
    from batcher.shm import default_parent
    made = {}
    try:
        for name, parent, prefix in (("dead_socket", tempfile.gettempdir(), launcher.SOCKET_PREFIX),
                                     ("dead_shm", default_parent(), launcher.SHM_PREFIX),
                                     ("live", tempfile.gettempdir(), launcher.SOCKET_PREFIX),
                                     ("reused", default_parent(), launcher.SHM_PREFIX),
                                     ("no_owner", tempfile.gettempdir(), launcher.SOCKET_PREFIX)):
            made[name] = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            (made[name] / "batcher.sock").write_text("x")
        launcher.write_owner(made["dead_socket"], _dead_pid())
        launcher.write_owner(made["dead_shm"], _dead_pid())
        launcher.write_owner(made["live"])                          # this process: running
        started = launcher.process_start_time(os.getpid())
        (made["reused"] / launcher.OWNER_FILE).write_text(f"{os.getpid()} {started + 1}\n")   # a reused pid
        removed = launcher.remove_stale_dirs()
        gone = {name for name, d in made.items() if not d.exists()}
        assert gone == {"dead_socket", "dead_shm", "reused"}
        assert set(removed) >= {str(made[n]) for n in gone}
    finally:
        for d in made.values():
            shutil.rmtree(d, ignore_errors=True)


def test_local_directories_record_their_owner_and_are_removed_at_stop():
    endpoint = launcher.local_endpoint("ipc")
    directory = Path(endpoint[len("ipc://"):]).parent
    shm = Path(launcher.local_shm_dir())
    try:
        for d in (directory, shm):
            assert (d / launcher.OWNER_FILE).read_text().split()[0] == str(os.getpid())
            assert launcher.owner_alive(d)
        launcher.remove_local_endpoint(endpoint)
        assert not directory.exists()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


# ---------------------------------------------------------------------------
# durable checkpoints

def test_a_failing_write_leaves_the_previous_file_and_names_path_and_error(tmp_path):
    path = tmp_path / "latest"
    ck.write_durably(path, lambda f: f.write(b"iter_000001.pt"))

    def fill_the_disk(f):
        f.write(b"iter_0000")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(ck.CheckpointWriteError) as e:
        ck.write_durably(path, fill_the_disk)
    assert str(e.value) == f"cannot write {path}: {os.strerror(errno.ENOSPC)}"
    assert path.read_bytes() == b"iter_000001.pt" and sorted(p.name for p in tmp_path.iterdir()) == ["latest"]


LEDUC_TINY = ["network.hidden=[16, 16]", "train.traversals=100", "train.adv_steps=5", "train.strategy_steps=5",
              "train.batch_size=32", "service.machines=16", "service.groups=1", "run.progress=false",
              "run.tensorboard=false", "eval.every=0", "eval.openspiel=false", "train.time_limit_s=0",
              "run.save_memories=true", "run.checkpoint_every=1", "service.workers=1", "train.iterations=2"]


def test_a_full_disk_at_a_checkpoint_stops_the_run_with_one_line(tmp_path, capsys):
    """The file-size limit (RLIMIT_FSIZE) drops to 4 KiB as the second
    checkpoint starts: the kernel refuses the write (EFBIG). The run stops
    with one line naming the file and the error, and the first checkpoint
    stays the latest, loadable, with no temporary file left."""
    from trainer.__main__ import main
    from trainer.supervise import Supervisor
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # EFBIG instead of the signal
    seen = []

    def disk_full_at_second_checkpoint(sup, phase):
        seen.append(phase)
        if phase == "checkpoint" and seen.count("checkpoint") == 2:
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))

    Supervisor.listeners.append(disk_full_at_second_checkpoint)
    run_dir = tmp_path / "run"
    try:
        rc = main(["--config", str(ROOT / "configs" / "leduc.yaml"), "--run-dir", str(run_dir)]
                  + [a for s in LEDUC_TINY for a in ("--set", s)])
    finally:
        Supervisor.listeners.remove(disk_full_at_second_checkpoint)
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err == [f"error: cannot write {run_dir / 'checkpoints' / 'iter_000002.memories.npz'}: "
                   f"{os.strerror(errno.EFBIG)}"]
    assert ck.latest_checkpoint(run_dir).name == "iter_000001.pt"
    assert ck.load_checkpoint(run_dir)["iteration"] == 1
    assert not list((run_dir / "checkpoints").glob("*.tmp")) and not (run_dir / "checkpoints" / "iter_000002.pt").exists()


def test_the_restart_budget_counts_every_child_and_phase(tmp_path, capsys):
    """service.max_restarts=1 over the whole run: the first of two children
    killed takes it, so the second stops the run with one line naming that
    child, its exit code, the phase and the budget. The worker dies 0.2 s
    into the traversal, which a quick or loaded box may have ended by then:
    so either child may die first (the batcher dies as the training starts),
    and the worker in a later phase."""
    from benchmarks.chaos import ChaosMonkey
    from trainer.__main__ import main
    from trainer.supervise import Supervisor
    run_dir = tmp_path / "run"
    monkey = ChaosMonkey(run_dir, 0.0, 0, {("worker", "traverse"), ("batcher", "train")})
    Supervisor.listeners.append(monkey)
    try:
        rc = main(["--config", str(ROOT / "configs" / "leduc.yaml"), "--run-dir", str(run_dir)]
                  + [a for s in LEDUC_TINY + ["service.max_restarts=1"] for a in ("--set", s)])
    finally:
        Supervisor.listeners.remove(monkey)
    out = capsys.readouterr()
    assert rc == 1
    restarts = re.findall(r"^restart: (worker0|batcher) \(pid \d+\) exited with code -9 in phase ([\w-]+) "
                          r"of iteration \d+; restarted as pid \d+ \(1/1 restarts used\)$", out.out, re.M)
    assert len(restarts) == 1, out.out
    second = "batcher" if restarts[0][0] == "worker0" else "worker0"
    [line] = out.err.strip().splitlines()
    assert re.match(rf"error: {second} \(pid \d+\) exited with code -9 in phase [\w-]+ of iteration \d+; the "
                    rf"run's 1 restarts \(service.max_restarts\) are used up; see .*{second}.log", line), line
    assert ck.latest_checkpoint(run_dir) is None
