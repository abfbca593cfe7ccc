"""The service's own ceiling (issue 13): segmented infer messages, the null
forward, timed workers with an endless traversal supply, and the
steady-state benchmark's window accounting. The wire layout of machine
groups is tests/test_wire_layout.py.

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

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batcher_helpers as H  # noqa: E402
from batcher_helpers import (  # noqa: E402
    KUHN, LC, LC_CFG, LEDUC, forward, int_rows, nets_for, segmented_frames, served,
)
from batcher import protocol as P  # noqa: E402
from batcher.client import BatcherClient, infer_blocking  # noqa: E402
from benchmarks.accounting import summed_rate, window_delta  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import run_local, sort_samples  # noqa: E402
from traverser.worker import run_remote  # noqa: E402

torch.set_num_threads(1)


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


@pytest.mark.parametrize("null", [False, True])
def test_self_play_stage_scaling_smoke(tmp_path, null):
    """--stage selfplay end to end, small: games played through a real
    batcher and worker, the update's rate, the share, and a named limit;
    with --null-forward, no net on either side of the share."""
    out = tmp_path / "sp"
    r = H.run_cli(["-m", "benchmarks.scaling", "--stage", "selfplay", "--workers", "1", "--hidden", "16",
                   "--games", "8", "--warmup-s", "0.5", "--window-s", "1.5", "--machines", "4", "--groups", "2",
                   "--device", "cpu", "--update-waves", "1", "--update-threads", "1", "--out", str(out),
                   *(["--null-forward"] if null else [])], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["meta"]["null_forward"] is null
    row = data["rows"][0]
    assert data["meta"]["stage"] == "selfplay" and row["workers"] == 1 and row["waves"] >= 1
    assert row["games_per_s"] > 0 and row["decisions_per_s"] > row["games_per_s"] and row["update_games_per_s"] > 0
    assert row["limit"] in ("the trainer's update", "the batcher", "the workers") and row["scaling"] == 1.0
    assert row["play_limit"] in ("the batcher", "the workers") and 0 < row["batcher_cpu"] < 1.5
    assert row["limit"] == ("the trainer's update" if row["update_games_per_s"] < row["games_per_s"]
                            else row["play_limit"])
    assert data["meta"]["remote_share"] > 0 and "remote-worker share" in r.stdout


def test_label_stage_scaling_smoke(tmp_path):
    """--stage labels end to end, small: label jobs on real workers, games/s and the scaling."""
    out = tmp_path / "lb"
    r = H.run_cli(["-m", "benchmarks.scaling", "--stage", "labels", "--workers", "1", "--games", "3",
                   "--worlds", "2", "--out", str(out)], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    row = data["rows"][0]
    assert data["meta"]["stage"] == "labels" and row["workers"] == 1 and row["games_per_s"] > 0
    assert row["decisions"] > 3 and row["scaling"] == 1.0 and row["limit"] == "the workers"


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
    """benchmarks.accounting.thread_cpu: the main thread's CPU grows with work done
    on it, ZeroMQ's I/O thread is named as such, and the shares come out per
    role (NaN where nothing could be read)."""
    import zmq
    from benchmarks.accounting import THREAD_ROLES, thread_cpu, thread_shares
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
