"""The wire layout of machine groups (issue 13): rows and samples equal to the
plain layout, float16 answers, resuming from the caller's answers in place,
memory kept between drains, and machines fed more ids once they run dry
(split from tests/test_service_ceiling.py on 2026-12-02).

Real ZeroMQ sockets on loopback, real subprocesses, real PyTorch nets.
"""
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batcher_helpers as H  # noqa: E402
from batcher_helpers import (  # noqa: E402
    KUHN, LC, LC_CFG, LEDUC, forward, int_rows, nets_for, served,
)
from batcher import protocol as P  # noqa: E402
from batcher.client import BatcherError, infer_blocking  # noqa: E402
from traverser._traverse import MachineGroup, _py_half_to_float, _py_pack_u8, _py_set_wire_u8_max  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import sort_samples  # noqa: E402

torch.set_num_threads(1)


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
