"""Shared-memory infer (batcher/shm.py, docs/protocol.md "Shared-memory
infer"): rows and answers in slot files, headers over real ZeroMQ sockets.

Real batchers (in-process threads and subprocesses), real PyTorch nets, real
files under a per-test directory.
"""
import os
import signal
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
from batcher.client import BatcherClient  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from batcher.shm import HEADER_BYTES, ClientSlots, layout  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser.worker import run_remote  # noqa: E402

torch.set_num_threads(1)

HIDDEN = (16, 16)
LEDUC = engine.load_game("leduc_poker")
LC = engine.load_game("lost_cities", max_turns=200, features=1)


def forward(net, rows):
    with torch.inference_mode():
        return net(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))).float().numpy()


def nets_for(game):
    return {0: net_for_game(game, HIDDEN, seed=0), 1: net_for_game(game, HIDDEN, seed=1)}


def served(nets):
    return {m: (net, 1) for m, net in nets.items()}


def u8_rows(n, cols, seed):
    return np.random.default_rng(seed).integers(0, 6, (n, cols)).astype(np.uint8)


def wait_answers(client, want, timeout_s=10.0):
    """{request id: (header, answers copied)} for the ids in `want`."""
    got, deadline = {}, time.monotonic() + timeout_s
    while len(got) < len(want):
        assert time.monotonic() < deadline, f"no answer to {set(want) - set(got)}"
        for rid, header, arrays in client.poll(100):
            got[rid] = (header, [a.copy() for a in arrays])
    return got


def slot_files(d):
    return sorted(p.name for p in Path(d).iterdir())


@pytest.mark.parametrize("adv_dtype", [None, "float16"])
def test_answers_through_slots_are_the_nets_answers(tmp_path, adv_dtype):
    """A Lost Cities round (two models, uint8 rows) through a slot: the same
    answers as the nets' own forward (float16: the same, rounded); the files
    live in the directory while the client does and are gone after close."""
    nets = nets_for(LC)
    T, A = LC.information_state_tensor_size(), LC.num_distinct_actions()
    with H.InProcessBatcher(served(nets), shm_dir=str(tmp_path)) as srv:
        c = BatcherClient(srv.endpoint, timeout_s=10, context=srv.ctx, shm_dir=str(tmp_path))
        try:
            rounds = [(u8_rows(37, T, s), u8_rows(5 + s, T, 100 + s)) for s in range(3)]
            ids = [c.send_infer_segments([(0, r0), (1, r1)], adv_dtype=adv_dtype, answer_cols=[A, A])
                   for r0, r1 in rounds]
            got = wait_answers(c, ids)
            assert slot_files(tmp_path) and all(n.startswith("dcfr-") for n in slot_files(tmp_path))
            stats = c.stats()
        finally:
            c.close()
        assert slot_files(tmp_path) == []
    assert stats["shm_requests"] == 3 and not stats["errors"]
    for rid, (r0, r1) in zip(ids, rounds):
        header, (a0, a1) = got[rid]
        assert header["shm"] is True and header["versions"] == [1, 1]
        for rows, net, ans in ((r0, nets[0], a0), (r1, nets[1], a1)):
            want = forward(net, rows)
            if adv_dtype == "float16":
                assert ans.dtype == np.float16       # float16 rounding: 11 significant bits
                np.testing.assert_allclose(ans.astype(np.float32), want, rtol=1e-3, atol=1e-4)
            else:
                assert ans.dtype == np.float32
                np.testing.assert_allclose(ans, want, atol=1e-5, rtol=0)
    assert c.shm_fallback is None


@pytest.mark.parametrize("batcher_dir", ["none", "other"])
def test_a_batcher_that_refuses_slots_gets_the_rows_through_the_socket(tmp_path, batcher_dir):
    """A batcher with no --shm-dir (shm_disabled) or another one (bad_shm: the
    file is not there) refuses the first request; the client asks again with
    the rows in the message, gets the right answers, and sends plainly from
    then on."""
    nets = nets_for(LEDUC)
    T, A = LEDUC.information_state_tensor_size(), LEDUC.num_distinct_actions()
    other = tmp_path / "batcher"
    other.mkdir()
    mine = tmp_path / "client"
    mine.mkdir()
    opts = {} if batcher_dir == "none" else {"shm_dir": str(other)}
    with H.InProcessBatcher(served(nets), **opts) as srv:
        c = BatcherClient(srv.endpoint, timeout_s=10, context=srv.ctx, shm_dir=str(mine))
        try:
            rows = [u8_rows(4, T, s) for s in range(4)]
            first = c.send_infer_segments([(0, rows[0]), (1, rows[1])], answer_cols=[A, A])
            got = wait_answers(c, [first])
            later = c.send_infer_segments([(0, rows[2]), (1, rows[3])], answer_cols=[A, A])
            got.update(wait_answers(c, [later]))
            stats = c.stats()
        finally:
            c.close()
    code = "shm_disabled" if batcher_dir == "none" else "bad_shm"
    assert c.shm_fallback is not None and code in c.shm_fallback
    assert stats["errors"] == {code: 1} and stats["shm_requests"] == 0
    for rid, (r0, r1) in ((first, rows[:2]), (later, rows[2:])):
        header, (a0, a1) = got[rid]
        assert "shm" not in header
        np.testing.assert_allclose(a0, forward(nets[0], r0), atol=1e-5, rtol=0)
        np.testing.assert_allclose(a1, forward(nets[1], r1), atol=1e-5, rtol=0)


def _shm_request(slot, rows, model_ids, num_actions, req_id, **change):
    """A raw shared-memory infer for `rows` (one array per model) written into `slot`."""
    rows_at, adv_at, _ = layout([r.nbytes for r in rows], [r.shape[0] * num_actions * 4 for r in rows])
    for r, at in zip(rows, rows_at):
        slot.view(at, r.dtype, r.shape)[...] = r
    head = {"v": P.PROTOCOL_VERSION, "type": P.INFER, "id": req_id, "models": model_ids,
            **P.arrays_header("rows", rows), "shm": {"name": slot.name, "seq": slot.seq, "rows": rows_at,
                                                     "adv": adv_at}}
    for key, value in change.items():
        if key.startswith("shm_"):
            head["shm"][key[4:]] = value
        else:
            head[key] = value
    return head, adv_at


def test_bad_slot_requests_get_error_replies_and_the_service_goes_on(tmp_path):
    nets = nets_for(LEDUC)
    T, A = LEDUC.information_state_tensor_size(), LEDUC.num_distinct_actions()
    slots = ClientSlots(str(tmp_path))
    slot = slots.acquire(4096)
    slot.bump()
    rows = [u8_rows(3, T, 0), u8_rows(2, T, 1)]
    (tmp_path / "dcfr-small").write_bytes(b"\0" * 10)
    (tmp_path / "dcfr-dir").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"\0" * 8192)
    os.symlink(outside, tmp_path / "dcfr-link")
    cases = [
        ({"shm_name": "../" + outside.name}, "bad_shm"),
        ({"shm_name": "/etc/passwd"}, "bad_shm"),
        ({"shm_name": "not-a-slot"}, "bad_shm"),
        ({"shm_name": 7}, "bad_shm"),
        ({"shm_name": [1, 2]}, "bad_shm"),
        ({"shm_name": b"dcfr-x"}, "bad_shm"),
        ({"shm_name": None}, "bad_shm"),
        ({"shm_name": "dcfr-missing"}, "bad_shm"),
        ({"shm_name": "dcfr-small"}, "bad_shm"),
        ({"shm_name": "dcfr-dir"}, "bad_shm"),
        ({"shm_name": "dcfr-link"}, "bad_shm"),
        ({"shm_seq": "1"}, "bad_shm"),
        ({"shm_rows": [HEADER_BYTES]}, "bad_shm"),
        ({"shm_rows": [0, 1024]}, "bad_shm"),                      # inside the slot's header
        ({"shm_rows": [HEADER_BYTES, slot.size - 10]}, "bad_shm"),  # past the end
        ({"shm_rows": [HEADER_BYTES, -5]}, "bad_shm"),
        ({"shm_adv": [HEADER_BYTES, slot.size]}, "bad_shm"),
        ({"shm_adv": [HEADER_BYTES, 1.5]}, "bad_shm"),
        ({"shm_seq": slot.seq + 1}, "stale_shm"),
        ({"rows_shapes": [[3, T], [2, T + 1]]}, "bad_shape"),
        ({"rows_shapes": [[3, T]]}, "bad_shape"),
        ({"rows_dtype": "int64"}, "bad_dtype"),
        ({"models": [0, 9]}, "unknown_model"),
        ({"shm": "dcfr-x"}, "bad_shm"),
    ]
    try:
        with H.InProcessBatcher(served(nets), shm_dir=str(tmp_path)) as srv:
            s = srv.dealer()
            for i, (change, code) in enumerate(cases):
                head, _ = _shm_request(slot, rows, [0, 1], A, i, **change)
                got = H.exchange(s, [msgpack.packb(head, use_bin_type=True)])
                assert got is not None, change
                assert got[0]["type"] == P.ERROR and got[0]["code"] == code and got[0]["id"] == i, (change, got[0])
            # frames with a slot request, and a slot with the one-model form
            head, _ = _shm_request(slot, rows, [0, 1], A, 100)
            got = H.exchange(s, [msgpack.packb(head, use_bin_type=True), rows[0].tobytes(), rows[1].tobytes()])
            assert got[0]["code"] == "bad_frames"
            one = {"v": 1, "type": P.INFER, "id": 101, "model": 0, **P.array_header("rows", rows[0]),
                   "shm": head["shm"]}
            got = H.exchange(s, [msgpack.packb(one, use_bin_type=True), rows[0].tobytes()])
            assert got[0]["code"] == "bad_shm"
            # and a good request on the same socket is answered, into the slot
            head, adv_at = _shm_request(slot, rows, [0, 1], A, 102)
            got = H.exchange(s, [msgpack.packb(head, use_bin_type=True)])
            assert got[0]["type"] == P.RESULT and got[0]["shm"] is True and got[1] == []
            for r, net, at in zip(rows, (nets[0], nets[1]), adv_at):
                np.testing.assert_allclose(slot.view(at, np.float32, (len(r), A)), forward(net, r), atol=1e-5, rtol=0)
            assert srv.serving()
        assert outside.read_bytes() == b"\0" * 8192       # nothing outside the directory was touched
    finally:
        slots.close()
        outside.unlink()


def test_a_late_duplicate_never_writes_into_a_slot_that_moved_on(tmp_path):
    """A request whose slot the client has given up (its sequence number moved
    on) is answered into no slot: refused when it arrives, and dropped when
    the slot moves on while it waits for its forward."""
    nets = nets_for(LEDUC)
    T, A = LEDUC.information_state_tensor_size(), LEDUC.num_distinct_actions()
    slots = ClientSlots(str(tmp_path))
    slot = slots.acquire(4096)
    rows = [u8_rows(3, T, 0), u8_rows(2, T, 1)]
    try:
        # a long wait before each forward, so the slot can move on meanwhile
        with H.InProcessBatcher(served(nets), shm_dir=str(tmp_path), max_wait_us=400_000) as srv:
            s = srv.dealer()
            slot.bump()
            old, adv_at = _shm_request(slot, rows, [0, 1], A, 1)
            s.send(msgpack.packb(old, use_bin_type=True))
            time.sleep(0.1)
            slot.bump()                                     # the client gave the slot to a new request
            sentinel = np.full((3, A), -7.0, np.float32)
            slot.view(adv_at[0], np.float32, (3, A))[...] = sentinel
            assert H.recv_reply(s, 1500) is None            # the old request's answer is dropped
            np.testing.assert_array_equal(slot.view(adv_at[0], np.float32, (3, A)), sentinel)
            got = H.exchange(s, [msgpack.packb(old, use_bin_type=True)])    # a duplicate arriving late
            assert got[0]["code"] == "stale_shm"
            new, adv_at = _shm_request(slot, rows, [0, 1], A, 2)
            got = H.exchange(s, [msgpack.packb(new, use_bin_type=True)], 3000)
            assert got[0]["type"] == P.RESULT and got[0]["id"] == 2
            np.testing.assert_allclose(slot.view(adv_at[0], np.float32, (3, A)), forward(nets[0], rows[0]),
                                       atol=1e-5, rtol=0)
            stats = srv.client().stats()
            assert stats["errors"] == {"stale_shm": 2}
    finally:
        slots.close()


def test_remote_traversals_through_slots_make_the_in_process_samples(tmp_path):
    """Leduc traversals through a batcher with real nets, rows and answers in
    slots: exactly the samples of the in-process run with the same nets."""
    nets = nets_for(LEDUC)
    cfg = TraverserConfig(algorithm="outcome", epsilon=0.6)
    ids = np.arange(150) * 3 + 1
    parts = []
    with H.InProcessBatcher(served(nets), shm_dir=str(tmp_path)) as srv:
        stats = run_remote(LEDUC, cfg, srv.endpoint, ids, ids % 2, 4, 9, 4.0, lambda a, s: parts.append((a, s)),
                           groups_per_thread=3, machines=5, context=srv.ctx, timeout_s=20, shm_dir=str(tmp_path))
        served_shm = srv.client().stats()["shm_requests"]
    assert stats["shm_fallback"] is None and served_shm > 0
    assert slot_files(tmp_path) == []
    ref_adv, ref_strat, ref = run_local(LEDUC, cfg, ids, ids % 2, iteration=4, run_seed=9, weight=4.0,
                                        evaluator=LocalEvaluator(nets), machines=7)
    for k in ("nodes", "queries", "adv_samples", "strat_samples", "traversals"):
        assert stats[k] == ref[k], k
    for i, ref_s in ((0, ref_adv), (1, ref_strat)):
        got = sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]})
        ref_s = sort_samples(ref_s)
        assert len(got["weight"]) == len(ref_s["weight"]) > 0
        for col in got:
            if col == "target":
                np.testing.assert_allclose(got[col], ref_s[col], atol=1e-5, rtol=1e-5)
            else:
                np.testing.assert_array_equal(got[col], ref_s[col], err_msg=col)


def test_a_worker_with_slots_survives_a_batcher_killed_and_restarted(tmp_path):
    """kill -9 of a subprocess batcher mid-run: the worker's requests (their
    rows still in its slots) are resent to the restarted batcher, which maps
    the slots afresh; every traversal runs once, with the in-process samples."""
    shm = tmp_path / "shm"
    shm.mkdir()
    cfg = TraverserConfig(algorithm="outcome", epsilon=0.6)
    ids = np.arange(300) * 2 + 5
    bp = H.BatcherProcess(args=["--init-game", "leduc_poker", "--hidden", "16", "16", "--max-wait-us", "20000",
                                "--shm-dir", str(shm)], log_path=tmp_path / "batcher.log")
    parts, result, errors = [], {}, []

    def work():
        try:
            result["stats"] = run_remote(LEDUC, cfg, bp.endpoint, ids, ids % 2, 2, 17, 2.0,
                                         lambda a, s: parts.append((a, s)), groups_per_thread=2, machines=4,
                                         timeout_s=30.0, resend_s=0.3, shm_dir=str(shm))
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=work, daemon=True)
    try:
        bp.start()
        t.start()
        deadline = time.monotonic() + 30
        mon = BatcherClient(bp.endpoint, timeout_s=10)
        try:
            while mon.stats()["shm_requests"] < 30:
                assert time.monotonic() < deadline and t.is_alive(), errors
                time.sleep(0.02)
        finally:
            mon.close()
        bp.kill(signal.SIGKILL)
        time.sleep(0.8)
        assert t.is_alive(), "the run finished before the kill: make it longer"
        bp.proc = None
        bp.start()
        t.join(60)
        assert not t.is_alive() and not errors, errors
        mon = BatcherClient(bp.endpoint, timeout_s=10)
        try:
            assert mon.stats()["shm_requests"] > 0      # the restarted batcher served slots too
        finally:
            mon.close()
    finally:
        bp.kill()
        t.join(40)
    stats = result["stats"]
    assert stats["resends"] > 0 and stats["traversals"] == len(ids) and stats["shm_fallback"] is None
    ev = LocalEvaluator({0: net_for_game(LEDUC, HIDDEN, seed=0), 1: net_for_game(LEDUC, HIDDEN, seed=1)})
    ref_adv, ref_strat, _ = run_local(LEDUC, cfg, ids, ids % 2, iteration=2, run_seed=17, weight=2.0, evaluator=ev,
                                      machines=4)
    for i, ref_s in ((0, ref_adv), (1, ref_strat)):
        got = sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]})
        ref_s = sort_samples(ref_s)
        assert len(got["weight"]) == len(ref_s["weight"]) > 0     # each traversal once: no row twice, none lost
        for col in got:
            if col == "target":
                np.testing.assert_allclose(got[col], ref_s[col], atol=1e-5, rtol=1e-5)
            else:
                np.testing.assert_array_equal(got[col], ref_s[col], err_msg=col)


@pytest.mark.parametrize("prog", ["batcher", "traverser"])
def test_cli_shm_dir_that_is_not_there_is_one_clear_line(tmp_path, prog):
    missing = tmp_path / "nope"
    args = ["-m", prog, "--shm-dir", str(missing)]
    args += ["--bind", "tcp://127.0.0.1:*"] if prog == "batcher" else ["--batcher", "tcp://127.0.0.1:1",
                                                                       "--traversals", "1"]
    r = H.run_cli(args, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--shm-dir" in lines[0] and str(missing) in lines[0] and "does not exist" in lines[0]


def test_local_services_use_a_fresh_slot_directory_and_remove_it(tmp_path):
    """The trainer's embedded batcher and local workers share a fresh slot
    directory (service.batcher_shm, the default), gone after stop();
    batcher_shm: false starts neither with one."""
    from trainer.config import Config
    from trainer.launcher import LocalServices
    cfg = Config()
    cfg.service.workers = 1
    svc = LocalServices(cfg, tmp_path / "run", "tcp://127.0.0.1:1")
    try:
        d = svc.shm_dir
        assert d and Path(d).is_dir() and oct(Path(d).stat().st_mode & 0o777) == "0o700"
        svc.start()
        pong = H.ping(svc.batcher_endpoint, 30)
        assert pong is not None and pong["shm_dir"] == d
        assert "--shm-dir" in svc.workers[0].cmd and d in svc.workers[0].cmd
    finally:
        svc.stop()
    assert not Path(d).exists()
    cfg.service.batcher_shm = False
    svc = LocalServices(cfg, tmp_path / "run2", "tcp://127.0.0.1:1")
    try:
        assert svc.shm_dir == ""
        svc.start()
        assert H.ping(svc.batcher_endpoint, 30)["shm_dir"] == ""
    finally:
        svc.stop()


def test_a_slot_that_cannot_be_reserved_sends_the_rows_through_the_socket(tmp_path):
    """A full file system (here: a file-size limit under the slot's size) fails
    when the slot is created, with a clear reason, never later inside the map
    (SIGBUS); the client sends that request and the later ones through the
    socket and the answers are right."""
    shm = tmp_path / "shm"
    shm.mkdir()
    child = f"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {str(H.ROOT)!r})
from batcher.client import BatcherClient
resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
c = BatcherClient(sys.argv[1], timeout_s=20, shm_dir={str(shm)!r})
rows = np.random.default_rng(0).integers(0, 2, (300, {LEDUC.information_state_tensor_size()})).astype(np.uint8)
out = []
for _ in range(2):
    rid = c.send_infer_segments([(0, rows), (1, rows[:7])], answer_cols=[{LEDUC.num_distinct_actions()}] * 2)
    got = None
    while got is None:
        for i, h, a in c.poll(100):
            got = [x.tolist() for x in a]
    out.append(got)
print(json.dumps({{"fallback": c.shm_fallback, "answers": out}}))
c.close()
"""
    with H.BatcherProcess(args=["--init-game", "leduc_poker", "--hidden", "16", "16", "--shm-dir", str(shm)],
                          log_path=tmp_path / "batcher.log") as bp:
        bp.start()
        r = H.run_cli(["-c", child, bp.endpoint], timeout=60)
        assert r.returncode == 0, r.stderr
        stats_client = BatcherClient(bp.endpoint, timeout_s=10)
        try:
            stats = stats_client.stats()
        finally:
            stats_client.close()
    import json
    got = json.loads(r.stdout)
    assert "cannot reserve" in got["fallback"] and "File too large" in got["fallback"]
    assert stats["shm_requests"] == 0 and not stats["errors"]
    rows = np.random.default_rng(0).integers(0, 2, (300, LEDUC.information_state_tensor_size())).astype(np.uint8)
    nets = nets_for(LEDUC)
    for answers in got["answers"]:
        np.testing.assert_allclose(np.array(answers[0], np.float32), forward(nets[0], rows), atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.array(answers[1], np.float32), forward(nets[1], rows[:7]), atol=1e-5, rtol=0)
    assert list(shm.iterdir()) == []


def test_random_slot_requests_each_get_one_reply_and_the_service_goes_on(tmp_path):
    """Fuzz: shared-memory infers with random names, sequence numbers,
    offsets, shapes and dtypes (some valid) each get exactly one reply, an
    error code or a result (never `internal`); the batcher keeps serving and
    never writes into a slot's header."""
    import random
    nets = nets_for(LEDUC)
    T, A = LEDUC.information_state_tensor_size(), LEDUC.num_distinct_actions()
    slots = ClientSlots(str(tmp_path))
    slot = slots.acquire(8192)
    slot.bump()
    rng = random.Random(3)
    ints = [0, 1, 63, HEADER_BYTES, 128, 4096, slot.size - 1, slot.size, slot.size + 64, -1, 2 ** 40, -(2 ** 40)]
    replies = {}
    with H.InProcessBatcher(served(nets), shm_dir=str(tmp_path)) as srv:
        s = srv.dealer()
        mutations = {
            "models": lambda h: rng.choice([[0, 5], [0], [0, 1, 1], "x"]),
            "rows_dtype": lambda h: rng.choice(["float32", "int64", 7, None]),
            "rows_shapes": lambda h: rng.choice([[[3, T + 1], [2, T]], [[3, T]], [[-1, T], [2, T]],
                                                  [[10 ** 6, T], [2, T]], "x"]),
            "shm_name": lambda h: rng.choice(["dcfr-none", "../x", "", 5, None]),
            "shm_seq": lambda h: rng.choice([slot.seq + 1, slot.seq - 1, "1", None]),
            "shm_rows": lambda h: [rng.choice(ints) for _ in range(rng.choice([1, 2, 3]))],
            "shm_adv": lambda h: [rng.choice(ints) for _ in range(rng.choice([1, 2, 3]))],
        }
        for i in range(300):
            head, _ = _shm_request(slot, [u8_rows(3, T, i), u8_rows(2, T, i + 1)], [0, 1], A, i)
            if rng.random() < 0.7:                  # a valid request with one field broken
                key = rng.choice(sorted(mutations))
                value = mutations[key](head)
                if key.startswith("shm_"):
                    head["shm"][key[4:]] = value
                else:
                    head[key] = value
            s.send(msgpack.packb(head, use_bin_type=True))
        deadline = time.monotonic() + 30
        while len(replies) < 300:
            assert time.monotonic() < deadline, f"{300 - len(replies)} fuzz messages got no reply"
            got = H.recv_reply(s, 1000)
            if got is None:
                continue
            assert got[0]["id"] not in replies, "two replies to one message"
            replies[got[0]["id"]] = got[0]["type"] if got[0]["type"] != P.ERROR else got[0]["code"]
        assert srv.serving()
        # nothing was written into the slot's header: the sequence number stands, the rest is zero
        assert int(slot.buf[:8].view(np.uint64)[0]) == slot.seq and not slot.buf[8:HEADER_BYTES].any()
        assert "internal" not in replies.values(), [i for i, c in replies.items() if c == "internal"]
        assert P.RESULT in replies.values() and len(set(replies.values())) >= 5, set(replies.values())
        s2 = srv.dealer()
        head, adv_at = _shm_request(slot, [u8_rows(3, T, 0)], [0], A, 999)
        got = H.exchange(s2, [msgpack.packb(head, use_bin_type=True)])
        assert got[0]["type"] == P.RESULT
    slots.close()
