"""The prior's labels as worker jobs (trainer/label_stage.py, kind "label"
of the job protocol): real ZeroMQ sockets on loopback, real worker
subprocesses (`python -m traverser --trainer EP --batcher EP`) beside a real
batcher, the real trainer. The rows must be those of the in-process
labelling of the same deals, whoever plays them, and every game is counted
once."""
import json
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zmq

from batcher_helpers import PY, ROOT, BatcherProcess, free_port, stop_processes, subprocess_env

import engine  # noqa: E402
from batcher import protocol as P  # noqa: E402
from trainer.jobs import Job, JobLedger, JobServer, counted_deals, label_ledger  # noqa: E402
from trainer.label_stage import LabelStage  # noqa: E402
from trainer.warmstart import blueprint_of, heuristic_rows  # noqa: E402
from traverser import jobproto as J  # noqa: E402
from service_helpers import kill_a_worker_when  # noqa: E402
from lc_helpers import rows_of_deals, same_rows  # noqa: E402

SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=200)


def _game():
    return engine.load_game("lost_cities", **SMALL)


@pytest.fixture(scope="module")
def batcher(tmp_path_factory):
    b = BatcherProcess(log_path=tmp_path_factory.mktemp("batcher") / "batcher.log").start()
    yield b.endpoint
    b.kill(signal.SIGTERM)


class Service:
    """A job server, its ledger and worker subprocesses started by hand."""

    def __init__(self, batcher, tmp_path):
        self.batcher = batcher
        self.ctx = zmq.Context()
        self.server = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=30, context=self.ctx)
        self.ledger_path = tmp_path / "jobs.jsonl"
        self.ledger = JobLedger(self.ledger_path, 1)
        self.procs = []
        self.logs = []
        self.tmp_path = tmp_path

    def start_worker(self):
        log = open(self.tmp_path / f"worker{len(self.procs)}.log", "w")
        self.procs.append(subprocess.Popen([PY, "-m", "traverser", "--trainer", self.server.endpoint,
                                            "--batcher", self.batcher, "--timeout", "30"],
                                           cwd=ROOT, env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT))
        log.close()
        return self.procs[-1]

    def wait_live(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while self.server.live_workers() < n:
            assert time.monotonic() < deadline, f"{n} workers did not say hello"
            time.sleep(0.05)

    def supervise(self):
        """What the trainer's Supervisor does for the job server: a dead worker's job goes out again."""
        for p in self.procs:
            if p.poll() is not None and not getattr(p, "reported", False):
                p.reported = True
                self.server.worker_died(p.pid)

    def stage(self, game, workers):
        return LabelStage(self.server, {"game": {"name": game.name, "params": dict(game.params)}, "seed": 0},
                          supervise=self.supervise, ledger=self.ledger, workers=workers, log=self.logs.append)

    def close(self):
        self.server.stop_workers(wait_s=1.0)
        stop_processes(self.procs)
        self.ledger.close()
        self.server.close()
        self.ctx.term()


@pytest.fixture
def service(batcher, tmp_path):
    s = Service(batcher, tmp_path)
    yield s
    s.close()


def test_label_jobs_give_the_in_process_rows_on_one_worker_and_on_two(service):
    """The same deals labelled in this process, by one worker and by two:
    every column of every row identical, each deal counted once in the
    ledger, both workers used."""
    game = _game()
    teacher = dict(worlds=4, explore=0.3)
    here = heuristic_rows(game, 12, seed=9, advantage=0.1, **teacher)
    first = service.start_worker()
    service.wait_live(1)
    stats = {}
    one = heuristic_rows(game, 12, seed=9, advantage=0.1, stage=service.stage(game, 1), stats=stats, **teacher)
    same_rows(one, here)
    assert stats["games"] == 12 and stats["deals"] == list(range(9, 21)) and not stats["budget_hit"]
    second = service.start_worker()
    service.wait_live(2)
    two = heuristic_rows(game, 12, seed=9, advantage=0.1, stage=service.stage(game, 2), stats=stats, **teacher)
    same_rows(two, here)
    same_rows(two, one)
    rounds = label_ledger(service.ledger_path)
    assert list(rounds) == [0]
    lines = rounds[0]
    # one job of 12 deals on the first worker, then two of 6, one on each worker
    assert [(x["first"], x["n"], x["games"], x["attempt"]) for x in lines] == [(9, 12, 12, 1), (9, 6, 6, 1),
                                                                              (15, 6, 6, 1)]
    assert lines[0]["pid"] == first.pid and {x["pid"] for x in lines[1:]} == {first.pid, second.pid}
    assert counted_deals(lines[:1]) == counted_deals(lines[1:]) == list(range(9, 21))
    with pytest.raises(ValueError, match="deal 9 is counted twice in the label ledger"):
        counted_deals(lines)            # the two stages' lines together count each deal twice
    assert sum(x["rows"] for x in lines[1:]) == len(here[0][0]["weight"]) + len(here[0][1]["weight"])
    assert any("labels: 12 deals in 2 jobs of up to 6 for the workers at tcp://127.0.0.1:" in m
               for m in service.logs), service.logs


def test_an_expert_iteration_round_sends_the_agent_to_the_workers(service):
    """A round's label jobs carry the agent's spec and weights as raw
    arrays: the workers' rows are those of the in-process round."""
    from lc_helpers import tiny_net
    game = _game()
    bp = blueprint_of(tiny_net(game))
    kw = dict(worlds=6, topk=2, round=1, blueprint=bp)
    here = heuristic_rows(game, 4, seed=41, advantage=0.2, **kw)
    service.start_worker()
    service.start_worker()
    service.wait_live(2)
    there = heuristic_rows(game, 4, seed=41, advantage=0.2, stage=service.stage(game, 2), **kw)
    same_rows(there, here)
    lines = label_ledger(service.ledger_path)[1]
    assert counted_deals(lines) == [41, 42, 43, 44]


def test_a_budget_stops_the_workers_with_whole_games_only(service):
    """Under a budget the jobs are small, none is handed out after the
    deadline, and a worker drops the game it is playing then: the rows are
    those of whole games, each a prefix of its job's deals, identical to
    the unbudgeted rows of the same deals."""
    game = _game()
    teacher = dict(worlds=4, explore=0.2)
    service.start_worker()
    service.start_worker()
    service.wait_live(2)
    stats = {}
    t0 = time.monotonic()
    rows = heuristic_rows(game, 100_000, seed=7, advantage=0.1, budget_s=3.0, stats=stats,
                          stage=service.stage(game, 2), **teacher)
    took = time.monotonic() - t0
    assert 0 < stats["games"] < 100_000 and stats["budget_hit"] and took < 3.0 + 20
    deals = stats["deals"]
    assert deals == sorted(set(deals)) and all(7 <= d < 7 + 100_000 for d in deals)
    lines = label_ledger(service.ledger_path)[0]
    assert counted_deals(lines) == deals
    assert all(x["n"] <= 4 and x["games"] <= x["n"] for x in lines)           # small jobs, prefixes kept
    assert max(x["first"] + x["n"] for x in lines) - 7 < 100_000 // 4      # most jobs never went out
    want = rows_of_deals(game, deals, **teacher)
    same_rows(rows, want)


def test_a_bad_chunk_is_named_dropped_and_its_job_redone(service):
    """A worker (written by hand) sends a label chunk with a wrong column
    dtype, then `done`: the chunk is dropped with one log line naming the
    job, the counts disagree, and the job goes to a real worker, whose
    rows are the in-process ones: nothing is lost or counted twice."""
    game = _game()
    here = heuristic_rows(game, 6, seed=30, advantage=0.1, worlds=2)
    fake = service.ctx.socket(zmq.DEALER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.connect(service.server.endpoint)
    send = lambda header, *frames: fake.send_multipart(P.pack(header, *frames), copy=False)   # noqa: E731
    send({"type": J.HELLO, "pid": 1})
    send({"type": J.READY, "pid": 1})
    service.wait_live(1)
    errors = []

    def bad_worker():
        try:
            assert fake.poll(20000), "no job came"
            header = P.unpack_header(fake.recv_multipart()[0])
            assert header["kind"] == "label" and header["worlds"] == 2
            T, A = game.information_state_tensor_size(), game.num_distinct_actions()
            chunk = {"info": np.zeros((2, T), np.float32), "mask": np.ones((2, A), np.uint8),
                     "act": np.zeros(2, np.int64), "outcome": np.zeros(2, np.float32),
                     "game": np.full(2, 30, np.int64), "player": np.zeros(2, np.int8),
                     "seq": np.arange(2, dtype=np.int32)}
            meta, frames = J.pack_arrays(chunk)
            send({"type": J.SAMPLES, "job": header["job"], "kind": "rows", "arrays": meta}, *frames)
            send({"type": J.DONE, "job": header["job"], "counts": [2, 0], "units": 1})
            service.start_worker()
        except BaseException as e:      # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=bad_worker, daemon=True)
    t.start()
    try:
        there = heuristic_rows(game, 6, seed=30, advantage=0.1, worlds=2, stage=service.stage(game, 1))
    finally:
        t.join(10)
        fake.close(0)
    assert not errors, errors
    same_rows(there, here)
    bad = [m for m in service.logs if m.startswith("bad sample chunk")]
    assert bad == ["bad sample chunk from worker pid 1 (label job 0, kind 'rows'): column 'info' is float32, "
                   "expected uint8"], service.logs
    assert any("job 0 handed out again (sample counts [0, 0] disagree with the worker's [2, 0]" in m
               for m in service.logs)
    lines = label_ledger(service.ledger_path)[0]
    assert counted_deals(lines) == list(range(30, 36)) and [x["attempt"] for x in lines] == [2]


@pytest.mark.parametrize("fields, weights, words", [
    ({"worlds": -1, "explore": 0.0, "topk": 0, "deadline": None}, {}, "worlds must be >= 0, explore in [0, 1) and "
                                                                       "topk >= 0, got -1, 0.0 and 0"),
    ({"explore": 0.0}, {}, "missing field 'worlds'"),
    # an agent whose weights do not fit its spec: torch's error of several lines, in one
    ({"worlds": 2, "explore": 0.0, "topk": 1, "deadline": None, "net_spec": {"input_size": 3, "num_actions": 2,
                                                                             "hidden": [4]}},
     {"blueprint/net.0.weight": np.zeros((4, 3), np.float32)},
     "Error(s) in loading state_dict for MLP: Missing key(s)"),
])
def test_a_label_job_the_worker_cannot_read_stops_the_run_with_one_line(service, fields, weights, words):
    """A label job with a bad or missing setting: the worker says what is
    wrong in one line naming the job, the trainer stops with it, nothing is
    committed, and the worker stays up."""
    game = _game()
    proc = service.start_worker()
    service.wait_live(1)
    config = {"game": {"name": game.name, "params": dict(game.params)}, "seed": 0}
    seeds = np.arange(3, dtype=np.int64)
    bad = Job(0, ids=seeds, kind="label", fields=fields, arrays={"seeds": seeds, **weights},
              kinds=("rows", "values"))
    committed = []
    with pytest.raises(RuntimeError) as e:
        service.server.run_phase([bad], config, lambda *a: committed.append(a))
    msg = str(e.value)
    assert msg.startswith(f"a worker failed: pid {proc.pid}: label job 0: {words}") and "\n" not in msg
    assert committed == []
    time.sleep(0.5)
    assert proc.poll() is None


def test_close_phase_hands_nothing_more_out_and_commits_what_is_under_way(service):
    """JobServer.close_phase, with a worker written by hand: the job it
    holds still commits, the jobs not handed out leave the phase."""
    fake = service.ctx.socket(zmq.DEALER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.connect(service.server.endpoint)
    send = lambda header, *frames: fake.send_multipart(P.pack(header, *frames), copy=False)   # noqa: E731
    send({"type": J.HELLO, "pid": 5})
    send({"type": J.READY, "pid": 5})
    service.wait_live(1)
    jobs = [Job(k, ids=np.arange(k * 2, k * 2 + 2), kind="label", fields={}, arrays={}, kinds=("rows",))
            for k in range(3)]
    committed = []
    service.server.start_phase(jobs, {}, lambda job, rows: committed.append((job.job_id, job.finished)))
    assert fake.poll(10000)
    header = P.unpack_header(fake.recv_multipart()[0])
    assert header["job"] == 0 and abs(header["sent_at"] - time.time()) < 5
    assert service.server.close_phase() == 2
    assert not service.server.pump(0)
    send({"type": J.DONE, "job": 0, "counts": [0], "units": 1})
    send({"type": J.READY, "pid": 5})
    deadline = time.monotonic() + 10
    while not service.server.pump(100):
        assert time.monotonic() < deadline
    assert committed == [(0, 1)]
    assert not fake.poll(300)            # nothing more was handed out
    fake.close(0)


# ---------------------------------------------------------------- the trainer

def _trainer(sets, run_dir, log):
    from trainer.config import load_config
    from trainer.loop import Trainer
    cfg = load_config(ROOT / "configs" / "smoke.yaml", sets)
    return Trainer(cfg, run_dir, log=log)


TINY = ["network.hidden=[16]", "train.iterations=1", "train.traversals=20", "train.adv_steps=2",
        "train.strategy_steps=2", "train.batch_size=32", "train.warm_start_steps=2", "eval.lc_games=2",
        "run.progress=false", "run.tensorboard=false", "train.warm_start_share=0.5", "service.machines=16",
        "service.groups=1"]


def test_a_worker_killed_mid_label_job_is_redone_and_every_game_counted_once(tmp_path):
    """The trainer's warm start on two local workers (service.workers 1,
    label_workers 2); one is SIGKILLed once a label job has a chunk staged:
    the job goes out again, its partial rows are dropped, every deal is
    counted once in the ledger, and the prior's rows are a clean run's."""
    sets = TINY + ["service.workers=1", "service.label_workers=2", "train.warm_start_games=40",
                   "train.warm_start_worlds=16", "train.warm_start_explore=0.1"]
    clean = _trainer(sets, tmp_path / "clean", log=lambda *a: None)
    clean.run()
    logs = []
    victim = _trainer(sets, tmp_path / "kill", log=logs.append)
    # a chunk of a label job is staged: kill its worker now
    with kill_a_worker_when(lambda job: job.kind == "label" and job.staged["rows"]) as killed:
        victim.run()
    assert killed, "no worker was killed"
    assert any(m.startswith(f"job {killed['job']} handed out again (worker pid {killed['pid']} exited; ")
               for m in logs), logs
    for name in ("adv0", "adv1", "strategy"):
        for k in clean.prior[name]:
            assert np.array_equal(victim.prior[name][k], clean.prior[name][k]), (name, k)
    with np.load(tmp_path / "clean" / "warm_start_rows.npz") as a, \
            np.load(tmp_path / "kill" / "warm_start_rows.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    assert sorted(p.name for p in (tmp_path / "kill" / "logs").glob("worker*.log")) == ["worker0.log",
                                                                                    "worker1.log"]
    lines = label_ledger(tmp_path / "kill" / "jobs.jsonl")[0]
    assert counted_deals(lines) == list(range(1000003, 1000003 + 40))
    assert [x["n"] for x in lines] == [20, 20]          # a job per label worker
    redone = [x for x in lines if x["job"] == killed["job"]]
    assert len(redone) == 1 and redone[0]["attempt"] == 2 and redone[0]["pid"] != killed["pid"]
    # the other stages' readers skip the label lines
    from trainer.jobs import effective_ledger, selfplay_ledger
    assert set(effective_ledger(tmp_path / "kill" / "jobs.jsonl")) == {(1, 0), (1, 1)}
    assert selfplay_ledger(tmp_path / "kill" / "jobs.jsonl") == {}


def test_a_worker_started_by_hand_joins_a_running_label_stage(tmp_path, batcher):
    """service.workers 0: the trainer (a subprocess) starts its label stage
    with no worker; a worker started by hand (`python -m traverser --trainer
    EP --batcher EP`) joins, labels every game, and runs the CFR iteration
    after; the ledger counts its games once."""
    port = free_port()
    run_dir = tmp_path / "run"
    sets = [s for s in TINY if not s.startswith("service.")] + [
        "service.workers=0", f"service.batcher={batcher}", f"service.jobs_bind=tcp://127.0.0.1:{port}",
        "train.warm_start_games=10", "train.warm_start_worlds=2", "service.machines=16", "service.groups=1"]
    trainer = subprocess.Popen([PY, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                                *sum([["--set", s] for s in sets], [])], cwd=ROOT,
                               env={**subprocess_env(), "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    worker = None
    out = []
    try:
        for line in trainer.stdout:
            out.append(line)
            if line.startswith("labels: 10 deals in 1 jobs of up to 10 for the workers at "):
                time.sleep(1.0)             # the stage runs, with no worker to take its job
                worker = subprocess.Popen([PY, "-m", "traverser", "--trainer", f"tcp://127.0.0.1:{port}",
                                           "--batcher", batcher], cwd=ROOT, env=subprocess_env(),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert trainer.wait(240) == 0, "".join(out)[-3000:]
    finally:
        stop_processes([p for p in (trainer, worker) if p is not None])
    assert worker is not None, "".join(out)[-3000:]
    text = "".join(out)
    assert "decisions of 10 games labelled by a 2-world lookahead" in text
    lines = label_ledger(run_dir / "jobs.jsonl")[0]
    assert counted_deals(lines) == list(range(1000003, 1000013)) and {x["pid"] for x in lines} == {worker.pid}
    m = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert m["warm_start_games_labelled"] == 10


def test_the_worker_package_imports_agents_only_for_label_jobs():
    """traverser.jobworker reaches agents.labels inside the label job only:
    a worker that never gets one loads no agents module."""
    code = ("import sys, traverser.__main__, traverser.jobworker; "
            "bad = sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')); "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_label_lines_that_stand_are_each_rounds_last_labelling(tmp_path):
    """A start that died mid-round is superseded by the next start that
    labels the round; a resumed start that reads its rows back keeps the
    lines it did not rewrite."""
    path = tmp_path / "jobs.jsonl"
    ledger = JobLedger(path, 1)
    job = Job(0, ids=np.arange(10, 14), kind="label", kinds=("rows", "values"))
    job.attempt, job.pid, job.finished = 1, 7, 4
    ledger.commit_label(job, 0, 50, 90)                 # the first start dies after one job of two
    ledger.close()
    ledger = JobLedger(path, 1)
    for first in (10, 14):
        job = Job(first // 4, ids=np.arange(first, first + 4), kind="label", kinds=("rows", "values"))
        job.attempt, job.pid, job.finished = 1, 8, 4 if first == 10 else 3
        ledger.commit_label(job, 0, 50, 90)
    ledger.close()
    JobLedger(path, 3).close()                          # resumed from a checkpoint: the rows read back
    lines = label_ledger(path)[0]
    assert [(x["first"], x["games"], x["pid"]) for x in lines] == [(10, 4, 8), (14, 3, 8)]
    assert counted_deals(lines) == list(range(10, 17))
