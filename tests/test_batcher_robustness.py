"""The batcher service under bad input and failures, over real ZeroMQ sockets on
loopback: malformed messages, clients that vanish mid-request, a batcher
killed and restarted under a running worker, and fuzzing with a flat memory
profile (split from tests/test_batcher.py on 2026-12-02).

In-process tests run Batcher.serve() in a background thread with a zmq.Context
per test; the multi-process paths start `python -m batcher` / `python -m
traverser` subprocesses, always killed in teardown. Every wait is bounded.
"""
import collections
import signal
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batcher_helpers as H  # noqa: E402
from batcher_helpers import (  # noqa: E402
    ATOL, COLS, HIDDEN, KUHN, LEDUC, assert_serves, forward, leduc_nets, rows_of,
)
from batcher import protocol as P  # noqa: E402
from batcher.client import BatcherClient, BatcherError, infer_blocking  # noqa: E402
from batcher.networks import MLP, net_for_game  # noqa: E402
from batcher.server import Batcher, BatcherOptions  # noqa: E402
from batcher.weights import net_to_bytes  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser.worker import run_remote  # noqa: E402

torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# 3. robustness: every bad message gets an error reply and the service goes on

def _raw_cases():
    ok = rows_of("float32", 2, seed=1)
    spec16, blob16 = net_to_bytes(net_for_game(LEDUC, HIDDEN, seed=0))
    wrong_spec = dict(spec16, hidden=[32])
    big = np.zeros((600, COLS), np.float32)                    # 72 KB > 64 KiB limit, < transport limit
    return [
        ("header not msgpack", [b"\xc1\xc1\xc1"], "bad_header"),
        ("header truncated", [msgpack.packb({"v": 1, "type": "ping"})[:-2]], "bad_header"),
        ("header with trailing bytes", [msgpack.packb({"v": 1, "type": "ping"}) + b"\x00"], "bad_header"),
        ("header not a map", [msgpack.packb([1, "infer"])], "bad_header"),
        ("header a scalar", [msgpack.packb(5)], "bad_header"),
        ("header with int keys", [msgpack.packb({1: 2, "v": 1, "type": "ping"})], "bad_header"),
        ("no type", [H.header(id=1)], "bad_header"),
        ("type not a string", [H.header(type=5, id=1)], "bad_header"),
        ("wrong protocol version", [msgpack.packb({"v": 2, "type": "ping", "id": 1})], "bad_version"),
        ("no protocol version", [msgpack.packb({"type": "ping", "id": 1})], "bad_version"),
        ("unknown type", [H.header(type="frobnicate", id=1)], "bad_type"),
        ("reply type sent to the batcher", [H.header(type=P.RESULT, id=1)], "bad_type"),
        ("infer without frames", H.infer_frames(0, ok)[:1], "bad_frames"),
        ("infer with two frames", H.infer_frames(0, ok) + [ok.tobytes()], "bad_frames"),
        ("infer without model", [H.header(type=P.INFER, id=1, rows_dtype="float32", rows_shape=[2, COLS]),
                                 ok.tobytes()], "bad_header"),
        ("infer with bool model", [H.header(type=P.INFER, id=1, model=True, rows_dtype="float32",
                                            rows_shape=[2, COLS]), ok.tobytes()], "bad_header"),
        ("dtype int64", [H.header(type=P.INFER, id=1, model=0, rows_dtype="int64", rows_shape=[2, COLS]),
                         ok.astype(np.int64).tobytes()], "bad_dtype"),
        ("dtype float64", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float64", rows_shape=[1, COLS]),
                           ok.astype(np.float64)[:1].tobytes()], "bad_dtype"),
        ("no dtype", [H.header(type=P.INFER, id=1, model=0, rows_shape=[2, COLS]), ok.tobytes()], "bad_dtype"),
        ("shape not matching frame", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32",
                                               rows_shape=[3, COLS]), ok.tobytes()], "bad_shape"),
        ("shape 3-d", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32", rows_shape=[1, 2, COLS]),
                       ok.tobytes()], "bad_shape"),
        ("shape negative", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32",
                                     rows_shape=[-2, -COLS]), ok.tobytes()], "bad_shape"),
        ("shape huge", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32", rows_shape=[2 ** 62, COLS]),
                        ok.tobytes()], "too_large"),
        ("wrong column count", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32",
                                         rows_shape=[COLS, 2]), ok.tobytes()], "bad_shape"),
        ("zero rows", [H.header(type=P.INFER, id=1, model=0, rows_dtype="float32", rows_shape=[0, COLS]), b""],
         "bad_shape"),
        ("unknown model", H.infer_frames(42, ok), "unknown_model"),
        ("oversized message", H.infer_frames(0, big), "too_large"),
        ("weights garbage", [H.header(type=P.WEIGHTS, id=1, model=0, version=10, spec=spec16),
                             b"not safetensors at all"], "bad_weights"),
        ("weights spec mismatch", [H.header(type=P.WEIGHTS, id=1, model=0, version=10, spec=wrong_spec), blob16],
         "bad_weights"),
        ("weights spec nonsense", [H.header(type=P.WEIGHTS, id=1, model=0, version=10,
                                            spec={"input_size": -3, "num_actions": 2, "hidden": [4]}), blob16],
         "bad_weights"),
        ("weights spec missing keys", [H.header(type=P.WEIGHTS, id=1, model=0, version=10, spec={"x": 1}),
                                       blob16], "bad_weights"),
        ("weights without frame", [H.header(type=P.WEIGHTS, id=1, model=0, version=10, spec=spec16)],
         "bad_header"),
        ("weights without spec", [H.header(type=P.WEIGHTS, id=1, model=0, version=10), blob16], "bad_header"),
        ("weights string version", [H.header(type=P.WEIGHTS, id=1, model=0, version="10", spec=spec16), blob16],
         "bad_header"),
    ]


def test_bad_messages_get_error_replies_and_service_goes_on():
    nets = leduc_nets()
    expected = collections.Counter()
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 0)}, max_message_bytes=64 << 10) as srv:
        s = srv.dealer()
        for name, frames, code in _raw_cases():
            got = H.exchange(s, frames, 5000)
            assert got is not None, f"{name}: no reply"
            head, payload = got
            assert head["type"] == P.ERROR, (name, head)
            assert head["code"] == code, (name, head)
            assert isinstance(head["error"], str) and head["error"], name
            assert payload == [], name
            expected[code] += 1
            # the service goes on: a valid request on the same socket succeeds
            got = H.exchange(s, H.infer_frames(1, rows_of("uint8", 2), req_id=777), 5000)
            assert got is not None and got[0]["type"] == P.RESULT and got[0]["id"] == 777, name
        # the request id is echoed in error replies when the header could be read
        got = H.exchange(s, H.infer_frames(42, rows_of("uint8", 2), req_id="my-id"), 5000)
        assert got[0]["code"] == "unknown_model" and got[0]["id"] == "my-id"
        expected["unknown_model"] += 1

        # a single empty frame (the closest a DEALER gets to "identity, no header")
        got = H.exchange(s, [b""], 2000)
        if got is not None:
            assert got[0]["type"] == P.ERROR and got[0]["code"] == "bad_header"
            expected["bad_header"] += 1

        # a frame over the transport limit (4 x max_message_bytes) drops the connection
        # without a reply; the service and the (reconnecting) socket go on
        big = srv.dealer()
        big.send_multipart([H.header(type=P.PING, id=1), b"\0" * (2 << 20)])
        assert H.recv_reply(big, 1000) is None
        assert_serves(srv, nets)

        st = H.exchange(s, P.pack({"type": P.STATS, "id": "st"}), 5000)[0]["stats"]
        assert st["errors"] == dict(expected)            # every rejection counted under its code

        # the same errors through the client (a fresh client per case: a raised error ends a client)
        def client_error(fn, timeout_s=10.0):
            c = srv.client(timeout_s=timeout_s, resend_s=0.3)
            t0 = time.monotonic()
            try:
                with pytest.raises(BatcherError) as ei:
                    fn(c)
                return ei.value.code, time.monotonic() - t0, c.resends
            finally:
                c.close()

        spec16, blob16 = net_to_bytes(nets[0])
        cases = [
            (lambda c: infer_blocking(c, 0, rows_of("float32", 2, cols=COLS + 1)), "bad_shape"),
            (lambda c: infer_blocking(c, 0, np.zeros((0, COLS), np.float32)), "bad_shape"),
            (lambda c: c.call({"type": P.WEIGHTS, "model": 0, "version": 3, "spec": spec16}, b"\x00" * 64),
             "bad_weights"),
            (lambda c: c.call({"type": P.WEIGHTS, "model": 0, "version": 3,
                               "spec": {**spec16, "num_actions": 2}}, blob16), "bad_weights"),
            (lambda c: c.push_weights(0, nets[0], 0), "stale_version"),
            (lambda c: c.call({"type": "nonsense"}), "bad_type"),
        ]
        for fn, code in cases:
            got, elapsed, _ = client_error(fn)
            assert got == code
            assert elapsed < 5                              # answered at once, not after resends
        # unknown_model: the client keeps resending (a restarted batcher may get the
        # weights later) and raises the batcher's error at timeout_s
        got, elapsed, resends = client_error(lambda c: infer_blocking(c, 9, rows_of("uint8", 2)), timeout_s=1.0)
        assert got == "unknown_model" and resends >= 1 and 0.9 <= elapsed < 8

        # a valid push still works after all that; model 1 is intact
        c = srv.client()
        assert c.push_weights(0, MLP(COLS, 5, (16, 16)), 3)["version"] == 3
        head, adv = infer_blocking(c, 0, rows_of("uint8", 2))
        assert head["version"] == 3 and adv.shape == (2, 5)
        assert_serves(srv, nets, model=1)
        st = c.stats()
        for code in ("bad_shape", "bad_weights", "stale_version", "bad_type", "unknown_model"):
            assert st["errors"][code] > expected[code], code
        assert "internal" not in st["errors"]
    assert not srv.errors


def test_message_without_header_frame_is_dropped():
    """An identity-only message (not producible by a DEALER) is counted and dropped."""
    ctx = zmq.Context()
    try:
        b = Batcher(BatcherOptions(bind="tcp://127.0.0.1:*", device="cpu", log_interval_s=0), context=ctx)
        try:
            b._handle([zmq.Frame(b"\x00identity")])
            b._handle([])
            assert b.stats.errors["no_header"] >= 1
            assert b.stats.snapshot(b.models)["errors"].get("no_header", 0) >= 1
        finally:
            b.close()
    finally:
        ctx.term()


# ---------------------------------------------------------------------------
# 4. clients that vanish mid-request

def test_client_disconnecting_mid_request_is_harmless():
    nets = leduc_nets()
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 0)}, max_wait_us=100_000) as srv:
        good = srv.client()
        rows = rows_of("float16", 4, seed=5)
        lingering = 10
        for i in range(lingering):
            s = srv.ctx.socket(zmq.DEALER)
            s.connect(srv.endpoint)
            s.send_multipart(H.infer_frames(i % 2, rows, req_id=i))
            s.close(linger=2000)            # the request goes out, then the peer is gone
        for i in range(10):
            s = srv.ctx.socket(zmq.DEALER)
            s.connect(srv.endpoint)
            s.send_multipart(H.infer_frames(i % 2, rows, req_id=i))
            s.close(linger=0)               # may or may not get out
        # a good client in between, while replies to vanished peers are being sent
        for i in range(6):
            head, adv = infer_blocking(good, i % 2, rows)
            np.testing.assert_allclose(adv, forward(nets[i % 2], rows), atol=ATOL, rtol=0)
        time.sleep(0.3)
        st = good.stats()
        per = st["per_model"]
        served = per["0"]["requests"] + per["1"]["requests"]
        assert served >= lingering + 6      # the vanished clients' requests really were run
        assert st["errors"] == {}
        assert_serves(srv, nets)
    assert not srv.errors


# ---------------------------------------------------------------------------
# 5. the batcher is killed and restarted under a running worker

def test_worker_survives_batcher_restart(tmp_path):
    game_name, n = "leduc_poker", 300
    game = LEDUC
    cfg = TraverserConfig(algorithm="outcome", epsilon=0.6)
    ids = np.arange(n, dtype=np.int64) * 2 + 5
    trav = ids % 2
    iteration, seed = 2, 17
    # a long max_wait keeps the run going for a few seconds, so the kill lands mid-run
    args = ["--init-game", game_name, "--hidden", "16", "16", "--max-wait-us", "20000"]
    bp = H.BatcherProcess(args=args, log_path=tmp_path / "batcher.log")
    adv_parts, strat_parts, lock = [], [], threading.Lock()
    result, errors = {}, []

    def sink(adv, strat):
        with lock:
            adv_parts.append(adv)
            strat_parts.append(strat)

    def work():
        try:
            result["stats"] = run_remote(game, cfg, bp.endpoint, ids, trav, iteration, seed, float(iteration), sink,
                                         groups_per_thread=2, machines=4, threads=1, timeout_s=30.0, resend_s=0.3)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=work, daemon=True)
    monitor_ctx = zmq.Context()
    try:
        bp.start()
        t.start()
        mon = BatcherClient(bp.endpoint, timeout_s=10, resend_s=1, context=monitor_ctx)
        try:
            deadline = time.monotonic() + 30
            while mon.stats()["requests"] < 30:
                assert time.monotonic() < deadline, "the worker never got going"
                assert t.is_alive(), errors
                time.sleep(0.02)
        finally:
            mon.close()
        assert t.is_alive(), "the run finished before the kill: make it longer"
        bp.kill(signal.SIGKILL)
        assert not bp.alive()
        time.sleep(0.8)                       # unanswered requests pile up (and are resent)
        assert t.is_alive()
        restart_deadline = time.monotonic() + 20
        while True:                           # the port may take a moment to be bindable again
            try:
                bp.proc = None
                bp.start()
                break
            except RuntimeError:
                bp.kill()
                assert time.monotonic() < restart_deadline
                time.sleep(0.2)
        t.join(60)
        assert not t.is_alive(), "the worker did not finish after the restart"
        assert not errors, errors
        after = H.ping(bp.endpoint, 5)
        assert after is not None
        mon = BatcherClient(bp.endpoint, timeout_s=10, context=monitor_ctx)
        try:
            assert mon.stats()["requests"] > 0    # the restarted batcher did part of the work
        finally:
            mon.close()
    finally:
        bp.kill()
        t.join(40)
        monitor_ctx.destroy(linger=0)
    stats = result["stats"]
    assert stats["resends"] > 0
    assert stats["traversals"] == n
    adv = sort_samples({k: np.concatenate([p[k] for p in adv_parts]) for k in adv_parts[0]})
    strat = sort_samples({k: np.concatenate([p[k] for p in strat_parts]) for k in strat_parts[0]})
    assert stats["adv_samples"] == len(adv["weight"]) and stats["strat_samples"] == len(strat["weight"])
    # every traversal ran exactly once: its rows are there and none is duplicated
    seen = np.unique(np.concatenate([adv["traversal"], strat["traversal"]]))
    np.testing.assert_array_equal(seen, np.sort(ids))
    for s in (adv, strat):
        keys = list(zip(s["traversal"].tolist(), s["seq"].tolist()))
        assert len(keys) == len(set(keys))

    ev = LocalEvaluator({0: net_for_game(game, HIDDEN, seed=0), 1: net_for_game(game, HIDDEN, seed=1)})
    ref_adv, ref_strat, ref_stats = run_local(game, cfg, ids, trav, iteration=iteration, run_seed=seed,
                                              weight=float(iteration), evaluator=ev, groups=2, machines=4)
    ref_adv, ref_strat = sort_samples(ref_adv), sort_samples(ref_strat)
    for k in ("nodes", "terminals", "queries", "adv_samples", "strat_samples", "traversals"):
        assert stats[k] == ref_stats[k], k
    for got, ref in ((adv, ref_adv), (strat, ref_strat)):
        assert set(got) == set(ref)
        assert len(got["weight"]) == len(ref["weight"]) > 0
        for col in got:
            if col == "target":
                np.testing.assert_allclose(got[col], ref[col], atol=ATOL, rtol=1e-5)
            else:
                np.testing.assert_array_equal(got[col], ref[col], err_msg=col)
                # a remote worker's rows travel as uint8 and its samples keep them so (exact)
                assert got[col].dtype == (np.uint8 if col == "info" else ref[col].dtype), col


# ---------------------------------------------------------------------------
# 6. fuzz, with a flat memory profile

def _fuzz_round(sockets, fuzzer, n, drain_timeout_s=20.0):
    """Send n fuzz messages round-robin over `sockets`; every one must get exactly one reply."""
    sent = replies = 0
    kinds = collections.Counter()
    per_round = 200
    while sent < n:
        batch = min(per_round, n - sent)
        for i in range(batch):
            sockets[i % len(sockets)].send_multipart(fuzzer.message())
        sent += batch
        deadline = time.monotonic() + drain_timeout_s
        while replies < sent:
            assert time.monotonic() < deadline, f"{sent - replies} of {sent} fuzz messages got no reply"
            for s in sockets:
                while s.poll(0):
                    head = msgpack.unpackb(s.recv_multipart()[0], raw=False)
                    kinds[head["type"] if head["type"] != P.ERROR else head["code"]] += 1
                    kinds["segmented_result"] += head["type"] == P.RESULT and "models" in head
                    replies += 1
            if replies < sent:
                zmq.select(sockets, [], [], 0.05)
    return kinds


def test_fuzz_random_messages(tmp_path):
    log = tmp_path / "batcher.log"
    nets = {m: net_for_game(KUHN, HIDDEN, seed=m) for m in (0, 1, 2)}
    args = ["--init-game", "kuhn_poker", "--hidden", "16", "16", "--max-message-mb", "0.0625",
            "--max-wait-us", "200", "--log-level", "ERROR"]
    ctx = zmq.Context()
    try:
        with H.BatcherProcess(args=args, log_path=log) as bp:
            bp.start()
            sockets = []
            for _ in range(4):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.RCVHWM, 100000)
                s.connect(bp.endpoint)
                sockets.append(s)
            fuzzer = H.Fuzzer(seed=1234, cols=KUHN.information_state_tensor_size(), model_ids=(0, 1, 2))
            t0 = time.monotonic()
            kinds = _fuzz_round(sockets, fuzzer, 10_000)
            rss_1 = bp.rss_kb()
            kinds += _fuzz_round(sockets, fuzzer, 10_000)
            rss_2 = bp.rss_kb()
            elapsed = time.monotonic() - t0
            assert bp.alive()
            # the fuzz reached the interesting paths, not just the header parser
            for k in ("bad_header", "bad_version", "bad_type", "bad_dtype", "bad_shape", "bad_frames",
                      "unknown_model", "bad_weights", "too_large", P.RESULT, P.PONG, P.STATS, "segmented_result"):
                assert kinds[k] > 0, (k, kinds)
            assert "internal" not in kinds, kinds
            assert rss_2 - rss_1 < 30 * 1024, f"RSS grew from {rss_1} kB to {rss_2} kB over 10k messages"
            assert elapsed < 120

            # still serving, with the right weights
            c = BatcherClient(bp.endpoint, timeout_s=10, context=ctx)
            try:
                assert c.ping()["type"] == P.PONG
                rows = rows_of("uint8", 4, cols=KUHN.information_state_tensor_size())
                for m in (0, 1, 2):
                    head, adv = infer_blocking(c, m, rows)
                    assert head["version"] == 0
                    np.testing.assert_allclose(adv, forward(nets[m], rows), atol=ATOL, rtol=0)
                st = c.stats()
                assert "internal" not in st["errors"]
                assert sum(st["errors"].values()) == sum(v for k, v in kinds.items()
                                                         if k not in (P.RESULT, P.PONG, P.STATS, P.ACK,
                                                                      "segmented_result"))
            finally:
                c.close()
    finally:
        ctx.destroy(linger=0)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
