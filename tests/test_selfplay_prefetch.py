"""Self-play jobs back to back: a worker playing a job's last games takes the
next one early (`ready` with `held: 1`), the job server gives it at most
two, each is committed once and in job order, and a worker that dies
holding two has both handed out again. The worker's side plays the two
together (traverser.selfplay.RemotePlay), each game exactly as it plays
alone. Real parts: loopback sockets to the real JobServer, a real batcher
serving a real net, the engine's PlayGroups."""
import time

import numpy as np
import pytest
import torch
import zmq

from batcher import protocol as P
from batcher_helpers import InProcessBatcher
from lc_helpers import SMALL, tiny_net
from traverser import jobproto as J

import engine  # noqa: E402

torch.set_num_threads(1)
CONFIG = {"game": {"name": "kuhn_poker", "params": {}}, "seed": 0}


def _selfplay_job(job_id, n=3):
    from trainer.jobs import Job
    ids = np.arange(n, dtype=np.int64)
    return Job(job_id, ids=ids, kind="selfplay", fields={"wave": job_id, "model": 3},
               arrays={"games": ids, "seeds": ids}, kinds=("decisions", "ends"))


class _Worker:
    """A hand-written worker on a DEALER socket."""

    def __init__(self, ctx, endpoint, pid):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.pid = pid
        self.send({"type": J.HELLO, "pid": pid})

    def send(self, header, *frames):
        self.sock.send_multipart(P.pack(header, *frames), copy=False)

    def job(self, server, timeout_s=5.0):
        """Pump the server until a job reaches this worker: its header (None if none came)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            server.pump(20)
            if self.sock.poll(0):
                return P.unpack_header(self.sock.recv_multipart()[0])
        return None

    def samples(self, job_id, rows):
        for kind in ("decisions", "ends"):
            meta, frames = J.pack_arrays({"x": np.full(rows, job_id, np.int32)})
            self.send({"type": J.SAMPLES, "job": job_id, "kind": kind, "arrays": meta}, *frames)


@pytest.fixture
def server():
    from trainer.jobs import JobServer
    ctx = zmq.Context()
    srv = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=30, context=ctx)
    srv.ctx_for_test = ctx
    yield srv
    srv.close()
    ctx.term()


def test_a_worker_ending_a_self_play_job_gets_the_next_and_both_commit_once_in_job_order(server):
    committed = []
    server.start_phase([_selfplay_job(0), _selfplay_job(1), _selfplay_job(2)], CONFIG,
                       lambda job, d, e: committed.append((job.job_id, [int(c["x"][0]) for c in d])))
    w = _Worker(server.ctx_for_test, server.endpoint, 7)
    try:
        w.send({"type": J.READY, "pid": 7})
        assert w.job(server)["job"] == 0
        w.samples(0, 2)
        w.send({"type": J.READY, "held": 1})              # job 0's last games: the next one now
        assert w.job(server)["job"] == 1
        assert server.early == 1
        w.send({"type": J.READY, "held": 1})              # two held: no third
        assert w.job(server, timeout_s=0.5) is None
        w.samples(1, 3)
        w.send({"type": J.DONE, "job": 1, "counts": [3, 3]})    # the early job ends first
        assert w.job(server, timeout_s=0.3) is None and committed == []   # committed in job order
        w.send({"type": J.DONE, "job": 0, "counts": [2, 2]})
        assert w.job(server)["job"] == 2                   # holding none, it is ready again
        assert committed == [(0, [0]), (1, [1])]
    finally:
        w.sock.close(0)


def test_only_a_self_play_job_joins_another_s_last_games(server):
    """A `held: 1` while holding a CFR job, or with a CFR job next in line, gets nothing."""
    from trainer.jobs import Job
    cfr = [Job(job_id=k, iteration=1, traverser=0, ids=np.arange(3, dtype=np.int64)) for k in (0, 1)]
    server.start_phase(cfr, CONFIG, lambda *a: None)
    w = _Worker(server.ctx_for_test, server.endpoint, 8)
    try:
        w.send({"type": J.READY, "pid": 8})
        assert w.job(server)["job"] == 0
        w.send({"type": J.READY, "held": 1})
        assert w.job(server, timeout_s=0.5) is None and server.early == 0
    finally:
        w.sock.close(0)


def test_a_worker_dying_with_two_jobs_has_both_handed_out_again_and_each_counted_once(server):
    committed = []
    server.start_phase([_selfplay_job(0), _selfplay_job(1)], CONFIG,
                       lambda job, d, e: committed.append((job.job_id, [int(x) for c in d for x in c["x"]])))
    dead = _Worker(server.ctx_for_test, server.endpoint, 21)
    live = None
    try:
        dead.send({"type": J.READY, "pid": 21})
        assert dead.job(server)["job"] == 0
        dead.send({"type": J.READY, "held": 1})
        assert dead.job(server)["job"] == 1
        dead.samples(0, 4)
        dead.samples(1, 5)
        for _ in range(20):
            server.pump(10)
        server.worker_died(21)                             # neither done: both go out again, in job order
        assert server.requeued == 2 and server.dropped_rows == 2 * (4 + 5)
        live = _Worker(server.ctx_for_test, server.endpoint, 22)
        live.send({"type": J.READY, "pid": 22})
        for want in (0, 1):
            header = live.job(server)
            assert header["job"] == want
            live.samples(want, 1)
            live.send({"type": J.DONE, "job": want, "counts": [1, 1]})
        deadline = time.monotonic() + 5
        while not server.pump(20) and time.monotonic() < deadline:
            pass
        assert committed == [(0, [0]), (1, [1])]
    finally:
        dead.sock.close(0)
        if live is not None:
            live.sock.close(0)


def test_two_jobs_played_together_give_each_game_as_it_plays_alone():
    """Job B added once job A's games begin to end (the worker's early job):
    every decision and every end is what the job played alone records (the
    moves exactly; the log-probabilities and values to the last bit of the
    forward, whose batches differ)."""
    from agents.ppo import SelfPlay, SelfPlaySettings
    from traverser.selfplay import RemotePlay
    game = engine.load_game("lost_cities", **SMALL)
    net = SelfPlay(game, tiny_net(game), SelfPlaySettings(games=6, autocast="none"), seed=7).served()
    srv = InProcessBatcher({3: (net, 5)}).start()

    def play(jobs, together):
        out = {k: {"decisions": [], "ends": []} for k in jobs}

        def sink(key):
            return lambda d, e: (out[key]["decisions"].append(d), out[key]["ends"].append(e))

        client = srv.client()
        play = RemotePlay(game, client, 3, groups=2, machines=4)
        inbox = [(k, np.arange(6, dtype=np.int64) + 10 * k, seeds, sink(k)) for k, seeds in jobs.items()]
        play.add(*inbox.pop(0))
        seen = {}

        def take():
            # the next job joins as the first one's games begin to end
            if together and inbox and play.tail(next(iter(play.jobs))):
                seen["joined_at_jobs"] = len(play.jobs)
                return [inbox.pop(0)]
            return []

        play.run(take=take)
        while not together and inbox:
            play.add(*inbox.pop(0))
            play.run()
        return {k: {kind: {c: np.concatenate([x[c] for x in v[kind]]) for c in v[kind][0]}
                       for kind in v} for k, v in out.items()}, seen

    try:
        jobs = {0: np.arange(6, dtype=np.int64) + 100, 1: np.arange(6, dtype=np.int64) + 200}
        alone, _ = play(jobs, together=False)
        both, seen = play(jobs, together=True)
    finally:
        srv.close()
    assert seen == {"joined_at_jobs": 1}
    for k in jobs:
        assert sorted(both[k]["ends"]["game"]) == sorted(alone[k]["ends"]["game"]) == list(10 * k + np.arange(6))
        for kind in ("decisions", "ends"):
            a, b = alone[k][kind], both[k][kind]
            order_a = np.lexsort((a.get("ply", a["game"]), a["game"]))
            order_b = np.lexsort((b.get("ply", b["game"]), b["game"]))
            for col in a:
                # the net's outputs may differ in the last bit with the batch they were computed in
                tol = 1e-6 if col in ("logp", "value") else 0
                np.testing.assert_allclose(a[col][order_a], b[col][order_b], rtol=0, atol=tol,
                                           err_msg=f"job {k} {kind} {col}")
        assert np.all(both[k]["decisions"]["version"] == 5)
