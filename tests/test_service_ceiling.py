"""The service's own ceiling (issue 13): segmented infer messages, the null
forward, the wire layout of machine groups, timed workers with an endless
traversal supply, and the steady-state benchmark's window accounting.

Real ZeroMQ sockets on loopback, real subprocesses, real PyTorch nets.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batcher_helpers as H  # noqa: E402
import engine  # noqa: E402
from batcher import protocol as P  # noqa: E402
from batcher.client import BatcherClient, BatcherError, infer_blocking  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from benchmarks.scaling import summed_rate, window_delta  # noqa: E402
from traverser._traverse import MachineGroup, _py_half_to_float, _py_pack_u8, _py_set_wire_u8_max  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import run_local, sort_samples  # noqa: E402
from traverser.worker import run_remote  # noqa: E402

torch.set_num_threads(1)

HIDDEN = (16, 16)
LEDUC = engine.load_game("leduc_poker")
KUHN = engine.load_game("kuhn_poker")
LC = engine.load_game("lost_cities", max_turns=200)
# the default Lost Cities traversal, shortened: sampled roots, a short depth, heuristic rollouts
LC_CFG = dict(algorithm="external", max_depth=2, prefix_max=30, rollouts=1, rollout_policy="game",
              value_scale=0.01)


def forward(net, rows):
    with torch.inference_mode():
        return net(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))).float().numpy()


def nets_for(game):
    return {0: net_for_game(game, HIDDEN, seed=0), 1: net_for_game(game, HIDDEN, seed=1)}


def served(nets, version=0):
    """{model: (net, version)} for InProcessBatcher."""
    return {m: (net, version) for m, net in nets.items()}


def int_rows(n, cols, seed=0, hi=4):
    return np.random.default_rng(seed).integers(0, hi, (n, cols)).astype(np.float32)


def segmented_frames(models, arrays, req_id=1, **extra):
    head = {"type": P.INFER, "id": req_id, "models": models, **P.arrays_header("rows", arrays), **extra}
    return P.pack(head, *[np.ascontiguousarray(a) for a in arrays])


# ---------------------------------------------------------------------------
# segmented infer: one message, one frame per model

def test_segmented_infer_matches_per_model_forwards():
    nets = nets_for(LEDUC)
    cols = LEDUC.information_state_tensor_size()
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 3)}, max_wait_us=1000) as srv:
        c = srv.client()
        for dtype in (np.uint8, np.float16, np.float32):
            segs = [(0, int_rows(5, cols, 1).astype(dtype)), (1, int_rows(3, cols, 2).astype(dtype)),
                    (0, int_rows(1, cols, 3).astype(dtype))]
            rid = c.send_infer_segments(segs)
            got = {}
            deadline = time.monotonic() + 10
            while rid not in got:
                assert time.monotonic() < deadline
                got.update({r: (h, a) for r, h, a in c.poll(50)})
            head, advs = got[rid]
            assert head["type"] == P.RESULT and head["models"] == [0, 1, 0] and head["versions"] == [0, 3, 0]
            a = LEDUC.num_distinct_actions()
            assert head["adv_dtype"] == "float32" and head["adv_shapes"] == [[5, a], [3, a], [1, a]]
            assert len(advs) == 3
            for (m, rows), adv in zip(segs, advs):
                np.testing.assert_allclose(adv, forward(nets[m], rows), atol=1e-5, rtol=0)
        st = c.stats()
        assert st["per_model"]["0"]["requests"] == 6 and st["per_model"]["1"]["requests"] == 3
        assert st["rows"] == 3 * (5 + 3 + 1)
        # the single-model form still answers with one frame
        head, adv = infer_blocking(c, 1, int_rows(2, cols))
        assert head["model"] == 1 and head["version"] == 3 and adv.shape == (2, LEDUC.num_distinct_actions())
    assert not srv.errors


@pytest.mark.parametrize("frames, code", [
    (lambda r: segmented_frames(7, [r]), "bad_header"),
    (lambda r: segmented_frames([], [r])[:1], "bad_header"),
    (lambda r: segmented_frames(list(range(P.MAX_SEGMENTS + 1)), [r] * (P.MAX_SEGMENTS + 1)), "bad_header"),
    (lambda r: segmented_frames([0, True], [r, r]), "bad_header"),
    (lambda r: segmented_frames([0, 5], [r, r]), "unknown_model"),
    (lambda r: segmented_frames([0, 1], [r, r])[:-1], "bad_frames"),
    (lambda r: segmented_frames([0, 1], [r, r]) + [b"extra"], "bad_frames"),
    (lambda r: segmented_frames([0, 1], [r, r], rows_shapes=[[2, 9]]), "bad_shape"),
    (lambda r: segmented_frames([0, 1], [r, r[:0]]), "bad_shape"),
    (lambda r: segmented_frames([0, 1], [r, r[:, :5]]), "bad_shape"),
    (lambda r: segmented_frames([0, 1], [r, r], rows_dtype="int64"), "bad_dtype"),
])
def test_segmented_infer_errors_and_the_service_goes_on(frames, code):
    nets = nets_for(LEDUC)
    rows = int_rows(2, LEDUC.information_state_tensor_size()).astype(np.uint8)
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 0)}) as srv:
        s = srv.dealer()
        got = H.exchange(s, frames(rows), 5000)
        assert got is not None, "no reply"
        assert got[0]["type"] == P.ERROR and got[0]["code"] == code, got[0]
        got = H.exchange(s, segmented_frames([1, 0], [rows, rows], req_id=9), 5000)
        assert got[0]["type"] == P.RESULT and got[0]["id"] == 9 and len(got[1]) == 2
        assert srv.serving()
    assert not srv.errors


def test_a_failed_forward_fails_the_whole_segmented_request_once():
    nets = nets_for(LEDUC)
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 0)}, max_wait_us=200_000) as srv:
        def boom(x):
            raise RuntimeError("out of memory (test)")
        srv.batcher.models[1].net.forward = boom
        s = srv.dealer()
        rows = int_rows(2, LEDUC.information_state_tensor_size()).astype(np.uint8)
        s.send_multipart(segmented_frames([0, 1, 1], [rows, rows, rows], req_id=5))
        head, _ = H.recv_reply(s)
        assert head["type"] == P.ERROR and head["code"] == "forward_failed" and head["id"] == 5
        assert H.recv_reply(s, 500) is None                      # one reply, not one per segment
        del srv.batcher.models[1].net.forward
        got = H.exchange(s, segmented_frames([0, 1], [rows, rows], req_id=6), 5000)
        assert got[0]["type"] == P.RESULT
    assert not srv.errors


# ---------------------------------------------------------------------------
# the null forward

def test_null_forward_answers_ones_of_the_right_shape_in_process():
    nets = nets_for(LC)
    cols, actions = LC.information_state_tensor_size(), LC.num_distinct_actions()
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 2)}, null_forward=True) as srv:
        c = srv.client()
        assert c.ping()["null_forward"] is True
        st0 = c.stats()
        for n, dtype in ((1, np.float32), (7, np.uint8), (300, np.float16)):
            head, adv = infer_blocking(c, 1, int_rows(n, cols, n).astype(dtype))
            assert head["version"] == 2 and adv.dtype == np.float32 and adv.shape == (n, actions)
            assert (adv == 1.0).all()
        rid = c.send_infer_segments([(0, int_rows(4, cols).astype(np.uint8)), (1, int_rows(6, cols).astype(np.uint8))])
        got = {}
        while rid not in got:
            got.update({r: (h, a) for r, h, a in c.poll(50)})
        head, advs = got[rid]
        assert [a.shape for a in advs] == [(4, actions), (6, actions)] and all((a == 1.0).all() for a in advs)
        st = c.stats()
        assert st["null_forward"] is True and st["rows"] == 1 + 7 + 300 + 10
        assert st["cpu_s"] >= st0["cpu_s"] > 0
        # shape checks still apply
        s = srv.dealer()
        head, _ = H.exchange(s, H.infer_frames(0, int_rows(2, cols - 1)), 5000)
        assert head["code"] == "bad_shape"
    assert not srv.errors


def test_null_forward_cli_answers_through_real_sockets(tmp_path):
    args = ["--init-game", "kuhn_poker", "--hidden", "8", "--null-forward"]
    with H.BatcherProcess(args=args, log_path=tmp_path / "batcher.log") as bp:
        bp.start()
        c = BatcherClient(bp.endpoint, timeout_s=10)
        try:
            assert c.ping()["null_forward"] is True
            rows = int_rows(5, KUHN.information_state_tensor_size(), hi=2)
            head, adv = infer_blocking(c, 2, rows)
            assert head["model"] == 2 and adv.shape == (5, KUHN.num_distinct_actions()) and (adv == 1.0).all()
            assert c.stats()["null_forward"] is True
        finally:
            c.close()
    assert "null forward" in (tmp_path / "batcher.log").read_text()


def test_the_default_batcher_is_no_null_forward(tmp_path):
    nets = nets_for(KUHN)
    with H.InProcessBatcher({0: (nets[0], 0)}) as srv:
        c = srv.client()
        assert c.ping()["null_forward"] is False and c.stats()["null_forward"] is False
        rows = int_rows(3, KUHN.information_state_tensor_size(), hi=2)
        np.testing.assert_allclose(infer_blocking(c, 0, rows)[1], forward(nets[0], rows), atol=1e-5, rtol=0)


@pytest.mark.parametrize("adv_dtype", ["float32", "float16"])
@pytest.mark.parametrize("game, cfg", [
    (LEDUC, dict(algorithm="external")),
    (LC, LC_CFG),
])
def test_remote_worker_on_a_null_forward_is_the_uniform_policy(game, cfg, adv_dtype):
    """Ones from the batcher regret-match to the uniform policy, so a remote run
    against a null forward makes exactly the in-process uniform-policy run
    (ones are exact in float16 too)."""
    ids = np.arange(60 if game is LC else 200)
    with H.InProcessBatcher(served(nets_for(game)), null_forward=True) as srv:
        parts = []
        stats = run_remote(game, TraverserConfig(**cfg), srv.endpoint, ids, ids % 2, 3, 11, 3.0,
                           lambda a, s: parts.append((a, s)), groups_per_thread=3, machines=7,
                           context=srv.ctx, timeout_s=20, adv_dtype=adv_dtype)
    ref_adv, ref_strat, ref = run_local(game, TraverserConfig(**cfg, uniform_policy=True), ids, ids % 2,
                                        iteration=3, run_seed=11, weight=3.0, machines=9)
    for k in ("nodes", "terminals", "cutoffs", "adv_samples", "strat_samples", "traversals", "rollout_moves"):
        assert stats[k] == ref[k], k
    assert stats["queries"] > 0 and ref["queries"] == 0 and stats["fallbacks"] == 0
    for i, ref_s in ((0, ref_adv), (1, ref_strat)):
        got = sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]})
        ref_s = sort_samples(ref_s)
        assert len(got["weight"]) == len(ref_s["weight"]) > 0
        for col in got:
            np.testing.assert_array_equal(got[col], ref_s[col], err_msg=col)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_local_endpoints_serve_remote_traversals(transport):
    """The launcher's local endpoints (ipc: a Unix socket in a fresh temporary
    directory, the default; tcp: a free loopback port) carry a remote run
    against a null forward that makes exactly the in-process uniform-policy
    run's samples; the ipc socket file and its directory are gone after
    remove_local_endpoint."""
    from trainer.launcher import local_endpoint, remove_local_endpoint
    endpoint = local_endpoint(transport)
    assert endpoint.startswith(f"{transport}://") and len(endpoint) < 100    # Unix socket paths are short
    nets = nets_for(LEDUC)
    ids = np.arange(40)
    try:
        with H.InProcessBatcher(served(nets), bind=endpoint, null_forward=True) as srv:
            assert srv.endpoint == endpoint
            parts = []
            stats = run_remote(LEDUC, TraverserConfig(), endpoint, ids, ids % 2, 1, 5, 1.0,
                               lambda a, s: parts.append((a, s)), groups_per_thread=2, machines=6,
                               context=srv.ctx, timeout_s=20)
        assert not srv.errors
    finally:
        remove_local_endpoint(endpoint)
    if transport == "ipc":
        assert not Path(endpoint[len("ipc://"):]).parent.exists()
    ref_adv, ref_strat, ref = run_local(LEDUC, TraverserConfig(uniform_policy=True), ids, ids % 2, iteration=1,
                                        run_seed=5, weight=1.0, machines=5)
    assert stats["traversals"] == ref["traversals"] == len(ids)
    for i, ref_s in ((0, ref_adv), (1, ref_strat)):
        got = sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]})
        ref_s = sort_samples(ref_s)
        for col in got:
            np.testing.assert_array_equal(got[col], ref_s[col], err_msg=col)


def test_launcher_transport_is_validated():
    from trainer.config import Config, validate
    from trainer.launcher import local_endpoint
    cfg = Config()
    assert cfg.service.batcher_transport == "ipc"
    cfg.service.batcher_transport = "udp"
    with pytest.raises(ValueError, match="batcher_transport"):
        validate(cfg)
    cfg.service.batcher_transport = "tcp"
    validate(cfg)
    with pytest.raises(ValueError, match="transport"):
        local_endpoint("udp")


# ---------------------------------------------------------------------------
# the wire layout of a machine group

def test_pack_u8_refuses_anything_but_exact_small_integers():
    ok, out = _py_pack_u8([0, 1, 17, 255, -0.0])
    assert ok and out.tolist() == [0, 1, 17, 255, 0]
    for bad in ([256], [-1], [0.5], [np.nan], [np.inf], [-np.inf], [3, 2.0000002]):
        assert not _py_pack_u8(bad)[0], bad
    assert _py_pack_u8([2, 3], 3.0)[0] and not _py_pack_u8([2, 4], 3.0)[0]
    assert _py_pack_u8(np.arange(1000) % 256)[0]            # longer than one vector loop


def _lockstep(game, cfg, n_machines, n_traversals, lower_at=None, hi=None, adv_dtype="float32", apart=False):
    """A wire group and a plain group stepped side by side on the same answers
    (with adv_dtype float16: the wire group gets them as float16, the plain
    one the same values widened back): every wire row equals its machine's
    plain row, and the samples are equal. apart: the wire group's answers
    come in arrays of their own (resume(n, answers)), and its own answer
    buffers hold NaN. Returns (rounds, rounds sent as uint8, whether a switch
    to float32 widened rows written earlier in its round)."""
    nets = nets_for(game)
    plain = MachineGroup(game, cfg, n_machines=n_machines)
    wire = MachineGroup(game, cfg, n_machines=n_machines, wire=True, adv_dtype=adv_dtype)
    assert wire.wire_adv_dtype == adv_dtype
    def rowwise(net, rows):
        # a row's answer must not depend on the rows batched with it: the two groups batch the
        # same rows differently, and on some CPUs torch's matmul differs in the last bit by batch size
        return np.concatenate([forward(net, rows[i:i + 1]) for i in range(len(rows))]) if len(rows) else \
            forward(net, rows)

    answer = rowwise if adv_dtype == "float32" else (
        lambda net, rows: (rowwise(net, rows) * 1000).astype(np.float16))   # spread over float16's range
    ids = np.arange(n_traversals)
    for g in (plain, wire):
        g.start(ids, ids % 2, 1, 5, 1.0)
    rounds = u8_rounds = 0
    widened = None
    drained = {id(plain): [], id(wire): []}
    while not plain.finished():
        if lower_at is not None and rounds == lower_at:
            _py_set_wire_u8_max(wire, hi)
        n = plain.step()
        assert wire.step() == n
        for g in (plain, wire):
            if g.blocked() or g.finished():
                drained[id(g)].append((g.drain_advantage(), g.drain_strategy()))
        if n == 0:
            continue
        rounds += 1
        plain_row = {int(m): r for r, m in enumerate(plain.request_machine[:n])}
        front, back = wire.wire_counts()
        assert front + back == n
        segments = wire.wire_segments()
        slots = [range(front), range(n_machines - back, n_machines)]
        slots = [s for s in slots if len(s)]
        assert len(segments) == len(slots)
        packed = []                                   # (machine, row fits hi)
        answers = []
        for (model, rows, adv), slot in zip(segments, slots):
            assert rows.dtype == np.dtype(wire.wire_dtype) and len(rows) == len(slot)
            for k, w in enumerate(slot):
                machine = int(wire.request_machine[w])
                r = plain_row.pop(machine)
                assert plain.request_model[r] == model == wire.request_model[w]
                np.testing.assert_array_equal(rows[k].astype(np.float32), plain.requests[r])
                packed.append((machine, hi is None or rows[k].max() <= hi))
            assert adv.dtype == np.dtype(adv_dtype)
            if apart:
                answers.append(np.ascontiguousarray(answer(nets[model], rows), dtype=adv.dtype))
                adv.fill(np.nan)                      # never read: regret matching on NaN would change samples
            else:
                adv[...] = answer(nets[model], rows)
        assert not plain_row                          # every plain row has its wire twin
        if wire.wire_dtype == "uint8":
            u8_rounds += 1
        elif widened is None:                         # the round that switched
            trigger = min(m for m, fits in packed if not fits)
            widened = any(fits and m < trigger for m, fits in packed)
        models = plain.request_model[:n]
        for m in np.unique(models):
            idx = np.flatnonzero(models == m)
            plain.advantages[idx] = answer(nets[int(m)], plain.requests[idx])
        plain.resume(n)
        wire.resume(n, answers if apart else None)
    for g in (plain, wire):
        drained[id(g)].append((g.drain_advantage(), g.drain_strategy()))
    for i in (0, 1):
        a, b = [sort_samples({k: np.concatenate([p[i][k] for p in drained[id(g)]]) for k in drained[id(g)][0][i]})
                for g in (plain, wire)]
        assert len(a["weight"]) > 0
        for col in a:
            np.testing.assert_array_equal(a[col], b[col], err_msg=col)
    for k in ("nodes", "queries", "adv_samples", "strat_samples", "traversals"):
        assert plain.stats()[k] == wire.stats()[k], k
    # the wire group's samples keep uint8 info rows while its requests do, then float32
    dtypes = [str(p[i]["info"].dtype) for p in drained[id(wire)] for i in (0, 1) if len(p[i])]
    assert dtypes and set(dtypes) <= {"uint8", "float32"}
    assert all(d == "float32" for d in dtypes[dtypes.index("float32"):]) if "float32" in dtypes else True
    if u8_rounds == rounds:
        assert set(dtypes) == {"uint8"}
    else:
        assert dtypes[-1] == "float32"
    assert all(str(p[i]["info"].dtype) == "float32" for p in drained[id(plain)] for i in (0, 1))
    return rounds, u8_rounds, widened


@pytest.mark.parametrize("game, cfg, machines", [
    (KUHN, dict(), 5),
    (LEDUC, dict(algorithm="outcome", epsilon=0.6), 11),
    (LC, LC_CFG, 13),
    # deeper than the 16 depths whose query rows a machine keeps for its samples: those encode again
    (LC, dict(LC_CFG, algorithm="outcome", epsilon=0.6, max_depth=24, prefix_max=0, rollouts=0), 7),
])
def test_wire_layout_rows_and_samples_equal_the_plain_layout(game, cfg, machines):
    rounds, u8_rounds, _ = _lockstep(game, TraverserConfig(**cfg), machines, 40)
    assert rounds > 3 and u8_rounds == rounds                 # these games' rows are all small integers


@pytest.mark.parametrize("game, cfg, machines", [
    (LEDUC, dict(algorithm="outcome", epsilon=0.6), 11),
    (LC, LC_CFG, 13),
])
def test_wire_layout_with_float16_answers_equals_the_plain_layout_on_the_same_values(game, cfg, machines):
    rounds, _, _ = _lockstep(game, TraverserConfig(**cfg), machines, 40, adv_dtype="float16")
    assert rounds > 3


@pytest.mark.parametrize("game, cfg, adv_dtype", [
    (LC, LC_CFG, "float32"),
    (LEDUC, dict(algorithm="outcome", epsilon=0.6), "float16"),
])
def test_wire_resume_reads_the_callers_answers_in_place(game, cfg, adv_dtype):
    """resume(n, answers): the answers are read where they lie (a remote
    worker's shared-memory slot or received frame) and give the same samples."""
    rounds, _, _ = _lockstep(game, TraverserConfig(**cfg), 13, 40, adv_dtype=adv_dtype, apart=True)
    assert rounds > 3


def test_wire_resume_refuses_answers_of_the_wrong_count_shape_or_dtype():
    g = MachineGroup(LC, TraverserConfig(**LC_CFG), n_machines=8, wire=True)
    g.start(np.arange(8), np.arange(8) % 2, 1, 0, 1.0)
    n = g.step()
    while len(g.wire_segments()) < 2:                    # on until both players have rows waiting
        g.advantages[:] = 1.0
        g.resume(n)
        n = g.step()
    segments = g.wire_segments()
    assert n > 0
    good = [np.ones((len(rows), LC.num_distinct_actions()), np.float32) for _, rows, _ in segments]
    bad = {"1 answer arrays for 2 segments": good[:1],
           "must be float32 of shape": [good[0], good[1][:-1]],
           "got float64": [good[0], good[1].astype(np.float64)],
           "got list": [good[0], good[1].tolist()]}
    for msg, answers in bad.items():
        with pytest.raises(ValueError, match=msg):
            g.resume(n, answers)
        assert g.n_requests == n                         # nothing resumed: the round still waits
    g.resume(n, [a[:, ::-1] for a in good])              # strided views are fine (read from a contiguous copy)
    assert g.n_requests == 0 and g.step() > 0
    plain = MachineGroup(LC, TraverserConfig(**LC_CFG), n_machines=2)
    plain.start(np.arange(2), np.arange(2) % 2, 1, 0, 1.0)
    with pytest.raises(RuntimeError, match="wire=True"):
        plain.resume(plain.step(), [])


FAULTS_PER_DRAIN_CYCLE = """
import resource, sys
import numpy as np
from traverser.worker import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    sys.exit("no mallopt")
def drain():                     # a drain's chunks: info rows, targets, masks of ~1000 samples
    chunks = [np.ones(700_000, np.uint8), np.ones(650_000, np.uint8), np.ones(160_000, np.uint8)]
    del chunks
for _ in range(5):
    drain()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    drain()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (mallopt)")
def test_a_worker_keeps_freed_memory_so_drains_do_not_fault_pages_in_again():
    faults = {}
    for mode in ("plain", "keep"):
        r = H.run_cli(["-c", FAULTS_PER_DRAIN_CYCLE, mode])
        assert r.returncode == 0, r.stderr[-2000:]
        faults[mode] = int(r.stdout.split()[-1])
    # glibc's defaults hand the freed chunks back and fault them in again on every drain
    assert faults["plain"] > 5000 and faults["keep"] < 100, faults


def test_half_to_float_is_exact_for_every_float16():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got, ref = _py_half_to_float(h), h.astype(np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))   # -0.0 included


def test_float16_answers_need_the_wire_layout_and_a_known_dtype():
    with pytest.raises(ValueError, match="wire"):
        MachineGroup(KUHN, TraverserConfig(), n_machines=2, adv_dtype="float16")
    with pytest.raises(ValueError, match="adv_dtype"):
        MachineGroup(KUHN, TraverserConfig(), n_machines=2, wire=True, adv_dtype="bfloat16")
    assert MachineGroup(KUHN, TraverserConfig(), n_machines=2, wire=True).wire_adv_dtype == "float32"


def test_batcher_answers_float16_when_asked():
    """adv_dtype float16: the float32 answer rounded (and clipped to float16's
    range), per request, plain and segmented, mixed with float32 requests in
    one batch; an unknown adv_dtype is an error reply and the service goes on."""
    nets = nets_for(LEDUC)
    cols = LEDUC.information_state_tensor_size()
    nets[1].net[-1].bias.data += 1e5                   # model 1's answers overflow float16
    with H.InProcessBatcher(served(nets), max_wait_us=20000) as srv:
        c = srv.client()
        rows = [int_rows(5, cols, seed=1), int_rows(3, cols, seed=2)]
        ids = {c.send_infer(0, rows[0], adv_dtype="float16"): ("f16", 0),
               c.send_infer(0, rows[0]): ("f32", 0),
               c.send_infer_segments([(0, rows[0].astype(np.uint8)), (1, rows[1].astype(np.uint8))],
                                     adv_dtype="float16"): ("seg", None)}
        got = {}
        deadline = time.monotonic() + 20
        while len(got) < len(ids) and time.monotonic() < deadline:
            for rid, head, adv in c.poll(100):
                got[ids[rid][0]] = (head, adv)
        ref = [forward(nets[0], rows[0]), forward(nets[1], rows[1])]
        head, adv = got["f16"]
        assert head["adv_dtype"] == "float16" and adv.dtype == np.float16
        half = dict(rtol=2 ** -10, atol=1e-6)            # float16 rounding (the batched forward may differ in ulps)
        np.testing.assert_allclose(adv.astype(np.float32), ref[0], **half)
        head, adv = got["f32"]
        assert adv.dtype == np.float32
        np.testing.assert_allclose(adv, ref[0], atol=1e-5, rtol=0)
        head, advs = got["seg"]
        assert [a.dtype for a in advs] == [np.float16, np.float16]
        np.testing.assert_allclose(advs[0].astype(np.float32), ref[0], **half)
        assert np.abs(ref[1]).max() > 65504 and np.isfinite(advs[1]).all()
        np.testing.assert_allclose(advs[1].astype(np.float32), np.clip(ref[1], -65504, 65504), **half)
        for bad in ("bfloat16", 16, None):
            with pytest.raises(BatcherError) as e:
                infer_blocking_dtype(c, rows[0], bad)
            assert e.value.code == "bad_dtype"
        head, adv = infer_blocking(c, 0, rows[0])                  # still serving
        assert adv.dtype == np.float32
    assert not srv.errors


def infer_blocking_dtype(client, rows, adv_dtype):
    """One infer whose header carries adv_dtype as given (even a bad one)."""
    req_id = next(client._ids)
    frames = P.pack({"type": P.INFER, "id": req_id, "model": 0, "adv_dtype": adv_dtype,
                     **P.array_header("rows", rows)}, rows)
    client._start(req_id, frames)       # in flight (resent, timed out) like any request, and sent
    while True:
        for rid, head, adv in client.poll(100):
            if rid == req_id:
                return head, adv


def test_wire_layout_switches_to_float32_mid_round():
    # after 30 rounds only values <= 30 count as uint8: a row in the opening (deck count 44 - turn) or
    # late in the game (turn > 30) no longer fits, one from turns 14..30 still does
    cfg = TraverserConfig(**{**LC_CFG, "prefix_max": 80})
    rounds, u8_rounds, widened = _lockstep(LC, cfg, 13, 40, lower_at=30, hi=30.0)
    assert u8_rounds == 30 < rounds
    assert widened, "the switch never found uint8 rows to widen in its round"


def test_wire_segments_needs_the_wire_layout():
    g = MachineGroup(KUHN, TraverserConfig(), n_machines=2)
    assert not g.wire
    with pytest.raises(RuntimeError, match="wire=True"):
        g.wire_segments()


def test_extend_feeds_machines_that_ran_dry():
    g = MachineGroup(LEDUC, TraverserConfig(), n_machines=4)
    g.start(np.arange(3), np.arange(3) % 2, 1, 0, 1.0)
    assert g.queued() == 3
    while not g.finished():
        n = g.step()
        g.advantages[:n] = 1.0
        g.resume(n)
    assert g.stats()["traversals"] == 3 and g.queued() == 0
    g.extend(np.arange(3, 10), np.arange(3, 10) % 2)
    assert g.queued() == 7 and not g.finished()
    while not g.finished():
        n = g.step()
        g.advantages[:n] = 1.0
        g.resume(n)
        g.drain_advantage()
        g.drain_strategy()
    assert g.stats()["traversals"] == 10
    with pytest.raises(ValueError, match="traversers"):
        g.extend([1, 2], [0, 2])
    with pytest.raises(ValueError, match="one-dimensional"):
        g.extend([[1]], [0])


# ---------------------------------------------------------------------------
# timed workers and the window accounting

def test_run_remote_timed_keeps_working_until_the_deadline_or_stop():
    with H.InProcessBatcher(served(nets_for(LEDUC)), null_forward=True) as srv:
        samples = []
        t0 = time.monotonic()
        stats = run_remote(LEDUC, TraverserConfig(), srv.endpoint, np.arange(0), np.arange(0), 1, 0, 1.0,
                           lambda a, s: None, groups_per_thread=2, machines=8, context=srv.ctx, seconds=1.0,
                           progress=samples.append, progress_interval=0.1)
        elapsed = time.monotonic() - t0
        assert 1.0 <= elapsed < 10
        assert stats["traversals"] > 2 * 8                       # far more than one load of the machines
        assert len(samples) >= 5
        assert all(a["t"] < b["t"] and a["nodes"] <= b["nodes"] and a["cpu_s"] <= b["cpu_s"]
                   for a, b in zip(samples, samples[1:]))
        assert samples[-1]["nodes"] == stats["nodes"]
        # a stop event ends a run long before its deadline
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        t0 = time.monotonic()
        stats = run_remote(LEDUC, TraverserConfig(), srv.endpoint, np.arange(5), np.arange(5) % 2, 1, 0, 1.0,
                           lambda a, s: None, groups_per_thread=2, machines=8, context=srv.ctx, seconds=60,
                           stop=stop)
        assert time.monotonic() - t0 < 10 and stats["traversals"] > 0
    assert not srv.errors


def test_worker_cli_seconds_prints_progress_and_stops_on_sigterm(tmp_path):
    with H.BatcherProcess(args=["--init-game", "kuhn_poker", "--hidden", "8", "--null-forward"],
                          log_path=tmp_path / "batcher.log") as bp:
        bp.start()
        proc = subprocess.Popen([H.PY, "-m", "traverser", "--batcher", bp.endpoint, "--game", "kuhn_poker",
                                 "--seconds", "120", "--progress-interval", "0.1", "--json", "--machines", "8"],
                                cwd=H.ROOT, env=H.subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            lines = []
            deadline = time.monotonic() + 60
            while sum('"progress"' in x for x in lines) < 4:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                lines.append(proc.stdout.readline())
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    msgs = [json.loads(x) for x in lines + out.splitlines() if x.strip()]
    progress = [m["progress"] for m in msgs if "progress" in m]
    final = [m for m in msgs if "progress" not in m]
    assert len(final) == 1 and final[0]["nodes"] >= progress[-1]["nodes"] > progress[0]["nodes"] >= 0
    assert {"t", "cpu_s", "nodes", "queries", "traversals"} <= set(progress[0])


def test_worker_cli_refuses_nonpositive_seconds():
    r = H.run_cli(["-m", "traverser", "--batcher", "tcp://127.0.0.1:1", "--seconds", "0"])
    assert r.returncode == 2 and "--seconds" in r.stderr


def test_window_delta_counts_only_work_inside_the_window():
    samples = [{"t": t, "nodes": n, "queries": q, "cpu_s": c}
               for t, n, q, c in [(0.0, 0, 0, 0.0), (1.0, 500, 300, 0.9), (2.0, 1500, 900, 1.9),
                                  (3.0, 2500, 1500, 2.9), (4.0, 3000, 1800, 3.8), (5.0, 9000, 5000, 4.8)]]
    d = window_delta(samples, 0.5, 4.2)
    # from the sample at t=1 to the one at t=4: the 500 nodes before and the 6000 after are left out
    assert d == {"nodes": 2500, "queries": 1500, "cpu_s": pytest.approx(2.9), "seconds": 3.0}
    assert window_delta(samples, 1.0, 4.0)["nodes"] == 2500    # samples on the edges count
    with pytest.raises(ValueError, match="counter samples"):
        window_delta(samples, 1.5, 2.5)
    other = [{"t": t, "nodes": 100 * t, "queries": 0, "cpu_s": 0.0} for t in (1.0, 3.0)]
    assert summed_rate([d, window_delta(other, 0.0, 5.0)]) == pytest.approx(2500 / 3 + 100)


def test_scaling_workers_run_the_configured_traversal():
    from benchmarks.scaling import load_config, worker_flags
    from traverser.__main__ import build_parser, traverser_config_from_args
    game, traversal = load_config()
    args = build_parser().parse_args(["--batcher", "tcp://127.0.0.1:1", *worker_flags()])
    assert traverser_config_from_args(args) == TraverserConfig(**traversal)
    assert args.game == game["name"]
    # booleans become bare flags, both ways
    for value in (True, False):
        parsed = build_parser().parse_args(["--batcher", "x", *(["--rollout-resample"] if value else [])])
        assert parsed.rollout_resample is value


def test_scaling_set_overrides_the_traversal():
    from benchmarks import scaling as S
    assert S.parse_overrides(["rollouts=1", "rollout_resample=false", "epsilon=0.5"]) == {
        "rollouts": 1, "rollout_resample": False, "epsilon": 0.5}
    with pytest.raises(SystemExit, match="no_such_key"):
        S.parse_overrides(["no_such_key=1"])
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        S.parse_overrides(["rollouts"])
    try:
        S.TRAVERSAL_OVERRIDES.update(rollouts=1, rollout_resample=False)
        flags = S.worker_flags()
        assert flags[flags.index("--rollouts") + 1] == "1" and "--rollout-resample" not in flags
    finally:
        S.TRAVERSAL_OVERRIDES.clear()


def test_scaling_benchmark_smoke(tmp_path):
    out = tmp_path / "sc"
    r = H.run_cli(["-m", "benchmarks.scaling", "--workers", "1", "--null-forward", "--warmup-s", "0.5",
                   "--window-s", "1", "--machines", "16", "--groups", "2", "--device", "cpu", "--out", str(out),
                   "--set", "rollouts=1"],
                  timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    row = data["rows"][0]
    assert data["meta"]["null_forward"] is True and row["workers"] == 1 and data["meta"]["traversal"]["rollouts"] == 1
    assert row["nodes_per_s"] > 0 and row["window_nodes"] > 0 and 0.5 < row["window_s"] < 5
    assert row["batcher_rows_per_s"] > 0 and row["batcher_cpu_us_per_row"] > 0 and row["limit"]
    assert out.with_suffix(".csv").exists() and out.with_suffix(".png").stat().st_size > 0


def test_ceiling_benchmark_smoke(tmp_path):
    """--ceiling end to end, small: the saturated batcher, then the remote
    worker and the uniform run taking turns in two slices each."""
    out = tmp_path / "ceil"
    r = H.run_cli(["-m", "benchmarks.scaling", "--ceiling", "--warmup-s", "0.5", "--window-s", "1.2", "--slices", "2",
                   "--machines", "16", "--groups", "2", "--load-rows", "16", "--device", "cpu", "--out", str(out),
                   "--set", "rollouts=1"], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    c = json.loads(out.with_suffix(".json").read_text())["ceiling"]
    assert c["slices"] == 2 and len(c["remote_share_slices"]) == 2 and len(c["uniform"]["slices"]) == 2
    assert c["remote"]["nodes"] > 0 and c["uniform"]["nodes"] > 0 and c["batcher_cpu_us_per_row"] > 0
    # each side counted its slices only: about 1.2 s in all, not the settle times or the other side's turns
    for side in (c["remote"], c["uniform"]):
        assert 0.6 < side["seconds"] < 1.3, side
    share = c["remote"]["nodes_per_s"] / c["uniform"]["nodes_per_s"]
    assert c["remote_share"] == pytest.approx(share)
    assert "remote share of the uniform limit" in r.stdout and "slice by slice" in r.stdout


def test_thread_cpu_splits_a_process_by_thread_role():
    """benchmarks.scaling.thread_cpu: the main thread's CPU grows with work done
    on it, ZeroMQ's I/O thread is named as such, and the shares come out per
    role (NaN where nothing could be read)."""
    import zmq
    from benchmarks.scaling import THREAD_ROLES, thread_cpu, thread_shares
    ctx = zmq.Context()                       # starts an I/O thread in this process
    sock = ctx.socket(zmq.PAIR)
    try:
        sock.bind("inproc://thread-roles")
        c0, t0 = thread_cpu(os.getpid()), time.monotonic()
        end = time.process_time() + 0.3
        while time.process_time() < end:      # 0.3 s of CPU on the main thread
            pass
        c1, t1 = thread_cpu(os.getpid()), time.monotonic()
    finally:
        sock.close(0)
        ctx.term()
    assert "zmq_io" in c1 and set(c1) <= set(THREAD_ROLES)
    assert c1["main"] - c0["main"] >= 0.2
    shares = thread_shares(c0, c1, t1 - t0)
    assert set(shares) == {f"batcher_{r}_cpu" for r in THREAD_ROLES}
    assert shares["batcher_main_cpu"] * (t1 - t0) == pytest.approx(c1["main"] - c0["main"])
    assert thread_cpu(-1) == {} and all(np.isnan(v) for v in thread_shares({}, c1, 1.0).values())
