"""The job protocol module (traverser/jobproto.py): array packing, bad input,
a worker's import graph, and one job over real loopback sockets."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from batcher import protocol as P
from traverser import jobproto as J

ROOT = Path(__file__).resolve().parents[1]


def test_worker_imports_no_trainer_module():
    # what a worker process loads: its entry point, the job loop, and the
    # batcher argument parsing it borrows
    code = ("import sys, traverser.__main__, traverser.jobworker, batcher.__main__; "
            "bad = sorted(m for m in sys.modules if m == 'trainer' or m.startswith('trainer.')); "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_trainer_and_worker_share_the_protocol():
    from trainer import jobs
    from traverser import jobworker
    for name in ("HELLO", "READY", "JOB", "SAMPLES", "HEARTBEAT", "DONE", "STOP", "FAILED",
                 "pack_arrays", "unpack_arrays"):
        assert getattr(jobs, name) is getattr(J, name) is getattr(jobworker, name)


def test_arrays_round_trip_every_dtype_and_shape():
    rng = np.random.default_rng(0)
    arrays = {dt: (rng.random((3, 5)) * 100).astype(dt) for dt in sorted(J.ARRAY_DTYPES)}
    arrays["empty"] = np.zeros((0, 7), np.float32)
    arrays["scalar"] = np.array(5, np.int64)
    arrays["strided"] = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]     # not contiguous
    meta, frames = J.pack_arrays(arrays)
    # through msgpack and bytes, as on the wire
    header = P.unpack_header(P.pack({"type": J.SAMPLES, "arrays": meta})[0])
    out = J.unpack_arrays(header["arrays"], [bytes(memoryview(f)) for f in frames])
    assert list(out) == list(arrays)
    for k, v in arrays.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape
        np.testing.assert_array_equal(out[k], v)


def test_pack_refuses_a_dtype_that_cannot_travel():
    with pytest.raises(ValueError, match="'x': dtype float64 cannot travel"):
        J.pack_arrays({"x": np.zeros(3)})


@pytest.mark.parametrize("meta, frames, code, words", [
    ([{"name": "a", "dtype": "int32", "shape": [2]}], [], "bad_frames", "0 frames for 1 arrays"),
    ("nope", [b""], "bad_frames", "no list of"),
    ([["a", "int32"]], [b"\0" * 4], "bad_frames", "entry 0 is not a map"),
    ([{"name": "a", "dtype": "float64", "shape": [1]}], [b"\0" * 8], "bad_dtype", "'a' dtype 'float64'"),
    ([{"name": "a", "dtype": "object", "shape": [1]}], [b"\0" * 8], "bad_dtype", "not allowed"),
    ([{"name": "a", "dtype": "int32", "shape": [3]}], [b"\0" * 8], "bad_shape", "'a': 8 bytes do not fit [3]"),
    ([{"name": "a", "dtype": "int32", "shape": [-1, -2]}], [b"\0" * 8], "bad_shape", "[-1, -2]"),
    ([{"name": "a", "dtype": "int32", "shape": "2"}], [b"\0" * 8], "bad_shape", "'2'"),
])
def test_unpack_names_the_problem(meta, frames, code, words):
    with pytest.raises(P.ProtocolError) as e:
        J.unpack_arrays(meta, frames)
    assert e.value.code == code and words in str(e.value)


def test_one_job_over_loopback_with_a_bad_chunk_dropped():
    """A hand-written worker speaks the protocol to the real JobServer: the
    chunk with an unknown kind is dropped with a log line, the good one is
    committed, and `done` with matching counts completes the job."""
    from trainer.jobs import Job, JobServer
    ctx = zmq.Context()
    server = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=30, context=ctx)
    worker = ctx.socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    worker.connect(server.endpoint)
    got, errors = {}, []

    def run_worker():
        try:
            send = lambda header, *frames: worker.send_multipart(P.pack(header, *frames), copy=False)
            send({"type": J.HELLO, "pid": 1})
            send({"type": J.READY, "pid": 1})
            assert worker.poll(10000), "no job came"
            frames = worker.recv_multipart()
            header = P.unpack_header(frames[0])
            got["job"] = header
            got["ids"] = J.unpack_arrays(header["arrays"], frames[1:])["ids"].copy()
            rows = {"weight": np.ones(3, np.float32), "traversal": got["ids"][:3], "seq": np.zeros(3, np.int32)}
            meta, fr = J.pack_arrays(rows)
            send({"type": J.SAMPLES, "job": header["job"], "kind": "bogus", "arrays": meta}, *fr)
            send({"type": J.SAMPLES, "job": header["job"], "kind": "adv", "arrays": meta}, *fr)
            send({"type": J.DONE, "job": header["job"], "counts": [3, 0]})
        except BaseException as e:      # reported by the main thread
            errors.append(e)

    committed, logs = [], []
    t = threading.Thread(target=run_worker, daemon=True)
    t.start()
    try:
        job = Job(job_id=0, iteration=4, traverser=1, ids=np.arange(10, 15, dtype=np.int64), weight=4.0)
        server.run_phase([job], {"game": {"name": "kuhn_poker", "params": {}}, "seed": 7},
                         lambda j, adv, strat: committed.append((j.job_id, adv, strat)), log=logs.append)
        t.join(10)
    finally:
        worker.close(0)
        server.close()
        ctx.term()
    assert not errors, errors
    assert got["job"]["type"] == J.JOB and got["job"]["iteration"] == 4 and got["job"]["traverser"] == 1
    assert got["job"]["game"]["name"] == "kuhn_poker" and got["job"]["seed"] == 7
    assert got["ids"].tolist() == [10, 11, 12, 13, 14]
    assert len(committed) == 1 and len(committed[0][1]) == 1 and committed[0][2] == []
    np.testing.assert_array_equal(committed[0][1][0]["traversal"], [10, 11, 12])
    assert any("sample kind 'bogus' is not one of this job's: adv, strat" in line for line in logs), logs


def test_one_job_per_worker_the_trainer_has_heard_from():
    """With workers started elsewhere (service.workers 0), a phase is cut into
    one job per worker that has said hello, read between phases; a worker
    silent past the heartbeat timeout no longer counts. Local workers count
    as configured, and service.job_size overrides both."""
    from types import SimpleNamespace
    from trainer.config import Config
    from trainer.jobs import JobServer
    from trainer.loop import Trainer
    ctx = zmq.Context()
    server = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=30, context=ctx)
    socks = []
    try:
        cfg = Config()
        cfg.train.traversals, cfg.service.workers = 2000, 0
        me = SimpleNamespace(cfg=cfg)
        assert server.live_workers() == 0 and Trainer._job_size(me, server) == 2000
        for pid in (11, 12, 13):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(server.endpoint)
            s.send_multipart(P.pack({"type": J.HELLO, "pid": pid}))
            s.send_multipart(P.pack({"type": J.READY, "pid": pid}))
            socks.append(s)
        deadline = time.monotonic() + 10
        while server.live_workers() < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.live_workers() == 3 and sorted(w["pid"] for w in server.workers.values()) == [11, 12, 13]
        assert Trainer._job_size(me, server) == 667
        next(iter(server.workers.values()))["last"] -= 31           # silent past the timeout
        assert server.live_workers() == 2 and Trainer._job_size(me, server) == 1000
        cfg.service.workers = 4
        assert Trainer._job_size(me, server) == 500
        cfg.service.job_size = 64
        assert Trainer._job_size(me, server) == 64
    finally:
        for s in socks:
            s.close(0)
        server.close()
        ctx.term()


def test_no_job_goes_to_a_worker_seen_dead_whose_ready_is_read_later():
    """A local worker killed just after its hello and ready: the supervisor
    reports its pid before the job server reads them. No job may go to it
    (it would wait out the heartbeat timeout); a live worker gets the job."""
    import threading
    from trainer.jobs import Job, JobServer
    ctx = zmq.Context()
    server = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=30, context=ctx)
    dead, live = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    for s in (dead, live):
        s.setsockopt(zmq.LINGER, 0)
        s.connect(server.endpoint)
    dead.send_multipart(P.pack({"type": J.HELLO, "pid": 101}))
    dead.send_multipart(P.pack({"type": J.READY, "pid": 101}))
    server.worker_died(101)                      # seen dead before its messages are read
    time.sleep(0.2)
    got = {}

    def run_live():
        live.send_multipart(P.pack({"type": J.HELLO, "pid": 102}))
        live.send_multipart(P.pack({"type": J.READY, "pid": 102}))
        if live.poll(10000):
            frames = live.recv_multipart()
            header = P.unpack_header(frames[0])
            got["job"] = header["job"]
            live.send_multipart(P.pack({"type": J.DONE, "job": header["job"], "counts": [0, 0]}))

    t = threading.Thread(target=run_live, daemon=True)
    try:
        server.start_phase([Job(job_id=0, iteration=1, traverser=0, ids=np.arange(3, dtype=np.int64))],
                           {"game": {"name": "kuhn_poker", "params": {}}, "seed": 0}, lambda *a: None)
        t.start()
        deadline = time.monotonic() + 20
        while not server.pump(100) and time.monotonic() < deadline:
            pass
        assert got.get("job") == 0, "the live worker got no job"
        assert not dead.poll(200), "a job went to the worker seen dead"
        assert server.live_workers() == 1                # the dead one is not counted either
    finally:
        t.join(5)
        dead.close(0)
        live.close(0)
        server.close()
        ctx.term()
