"""Batcher benchmark: `python -m batcher.bench [--json] [--device cpu|cuda|auto]`.

(a) rows/s through the service at saturation (a batcher subprocess, clients
    keeping requests in flight), next to the same model's raw in-process
    batched forward at the same batch size, and their ratio;
(b) p50 and p99 request latency at saturation and with one request in flight.

The end-to-end traversal rate (worker processes against one batcher) is
`python -m benchmarks.end_to_end`.
"""
import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import torch

import engine
from batcher.client import BatcherClient, wait_for_batcher
from batcher.networks import net_for_game


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_batcher(device, hidden, max_batch, torch_threads, extra=()):
    """A benchmark batcher on a free loopback port: (process, endpoint)."""
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "batcher", "--bind", endpoint, "--device", device, "--init-game", "lost_cities",
           "--hidden", *map(str, hidden), "--max-batch", str(max_batch), "--log-interval", "0",
           "--torch-threads", str(torch_threads), *extra]
    return spawn_batcher(cmd, endpoint), endpoint


def add_batcher_arguments(ap, autocast_help="the batcher's forward precision"):
    """--json and the flags of the batcher under benchmark, with the same
    defaults here and in `python -m benchmarks.end_to_end`."""
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512])
    ap.add_argument("--torch-threads", type=int, default=1, help="batcher torch threads on CPU")
    ap.add_argument("--max-batch", type=int, default=2048)
    ap.add_argument("--autocast", default="none", choices=["none", "bf16", "fp16"], help=autocast_help)


def start_batcher_from_args(args):
    """Set this process's torch threads and start the benchmark batcher as the
    flags of add_batcher_arguments say: (process, endpoint, the settings for
    the report)."""
    torch.set_num_threads(args.torch_threads)
    settings = {"device": args.device, "hidden": args.hidden, "cpu_count": os.cpu_count(), "autocast": args.autocast}
    proc, endpoint = start_batcher(args.device, args.hidden, args.max_batch, args.torch_threads,
                                   extra=("--autocast", args.autocast))
    return proc, endpoint, settings


def spawn_batcher(cmd, endpoint, **popen_kwargs):
    """Start a batcher command line and wait until it answers at `endpoint`;
    if it never does, kill it and raise with the tail of its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen_kwargs)
    try:
        wait_for_batcher(endpoint, timeout_s=60)
    except Exception:
        proc.kill()
        raise RuntimeError(f"batcher did not start: {proc.stderr.read().decode()[-2000:]}")
    return proc


def sample_rows(game, n, seed=0):
    rng = np.random.default_rng(seed)
    rows, s = [], game.new_initial_state(seed=seed)
    while len(rows) < n:
        if s.is_terminal():
            s = game.new_initial_state(seed=int(rng.integers(1 << 30)))
        rows.append(s.information_state_tensor())
        legal = s.legal_actions()
        s.apply_action(legal[int(rng.integers(len(legal)))])
    return np.stack(rows)


def saturate(endpoint, rows, in_flight, seconds):
    client = BatcherClient(endpoint, timeout_s=60)
    sent_at, lat, done_rows = {}, [], 0
    t_end = time.perf_counter() + seconds
    model = 0
    try:
        for _ in range(in_flight):
            sent_at[client.send_infer(model, rows)] = time.perf_counter()
            model ^= 1
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            for rid, _, adv in client.poll(100):
                now = time.perf_counter()
                lat.append(now - sent_at.pop(rid))
                done_rows += adv.shape[0]
                sent_at[client.send_infer(model, rows)] = now
                model ^= 1
        dt = time.perf_counter() - t0
        while sent_at:
            for rid, _, _ in client.poll(100):
                sent_at.pop(rid, None)
        stats = client.stats()
    finally:
        client.close()
    lat_us = np.asarray(lat) * 1e6
    return done_rows / dt, float(np.percentile(lat_us, 50)), float(np.percentile(lat_us, 99)), stats


def load_generator(endpoint, rows, segments, in_flight, seconds, cpu=None, result=None, adv_dtype="float32",
                   shm_dir="", num_actions=0):
    """Keeps `in_flight` infer messages of `segments` x len(rows) uint8 rows
    (models 0 and 1 in turn, a worker's round in one message, answers asked
    in adv_dtype as the worker would) in flight against the batcher for
    `seconds`, from prebuilt frames so that the client costs little; puts
    (messages, rows answered, seconds) into `result` (a multiprocessing
    queue) or returns it. With shm_dir, each message in flight has its own
    shared-memory slot there (rows written once; answers of num_actions
    columns), as a worker with --shm-dir sends. Runs in its own process."""
    import msgpack
    import zmq
    from batcher import protocol as P
    from batcher.shm import ClientSlots, layout
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    wire = np.ascontiguousarray(rows, dtype=np.uint8)
    models = [i % 2 for i in range(segments)]
    head = {"v": P.PROTOCOL_VERSION, "type": P.INFER, "models": models, **P.arrays_header("rows", [wire] * segments),
            "adv_dtype": adv_dtype}
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 100000)
    sock.setsockopt(zmq.SNDHWM, 100000)
    sock.connect(endpoint)
    ids = itertools.count()
    slots, owner = ClientSlots(shm_dir) if shm_dir else None, {}
    if slots is not None:
        rows_at, adv_at, nbytes = layout([wire.nbytes] * segments,
                                         [len(wire) * num_actions * (2 if adv_dtype == "float16" else 4)] * segments)
        free = []
        for _ in range(in_flight):
            slot = slots.acquire(nbytes)
            for at in rows_at:
                slot.view(at, np.uint8, wire.shape)[...] = wire
            free.append(slot)

    def send(slot=None):
        i = next(ids)
        if slots is None:
            sock.send_multipart([msgpack.packb({**head, "id": i}), *[wire] * segments], copy=False)
            return
        slot = slot or free.pop()
        owner[i] = slot
        shm = {"name": slot.name, "seq": slot.bump(), "rows": rows_at, "adv": adv_at}
        sock.send(msgpack.packb({**head, "id": i, "shm": shm}), copy=False)
    for _ in range(in_flight):
        send()
    done, t0 = 0, time.perf_counter()
    t_end = t0 + seconds
    while time.perf_counter() < t_end:
        if sock.poll(100):
            frames = sock.recv_multipart(copy=False)
            done += 1
            send(owner.pop(msgpack.unpackb(frames[0].buffer)["id"]) if slots is not None else None)
    out = (done, done * segments * len(wire), time.perf_counter() - t0)
    sock.close(0)
    ctx.term()
    if slots is not None:
        slots.close()
    if result is not None:
        result.put(out)
    return out


def raw_forward_rows_per_s(net, rows, batch, seconds, device, autocast="none"):
    import contextlib
    x = torch.from_numpy(np.resize(rows, (batch, rows.shape[1])).astype(np.float32)).to(device)
    net = net.to(device).eval()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
    ctx = torch.autocast(torch.device(device).type, dtype=dtype) if dtype else contextlib.nullcontext()
    with torch.inference_mode(), ctx:
        for _ in range(3):
            net(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            net(x).cpu()
            n += 1
        return n * batch / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m batcher.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batcher_arguments(ap, "the batcher's forward precision (the raw forward in (a) uses the same)")
    ap.add_argument("--request-rows", type=int, default=256, help="rows per request in (a)")
    ap.add_argument("--in-flight", type=int, default=8, help="requests in flight in (a)")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    game = engine.load_game("lost_cities")
    rows = sample_rows(game, args.request_rows)
    proc, endpoint, out = start_batcher_from_args(args)
    try:
        rps, p50, p99, stats = saturate(endpoint, rows, args.in_flight, args.seconds)
        batch = int(round(stats["mean_batch"]))
        device = "cuda" if args.device in ("cuda", "auto") and torch.cuda.is_available() else "cpu"
        raw = raw_forward_rows_per_s(net_for_game(game, tuple(args.hidden), seed=0), rows, batch,
                                     args.seconds / 2, device, args.autocast)
        out["a_service_rows_per_s"] = rps
        out["a_raw_forward_rows_per_s"] = raw
        out["a_mean_batch"] = stats["mean_batch"]
        out["a_ratio"] = rps / raw
        out["b_saturated_latency_us"] = {"p50": p50, "p99": p99}
        _, p50_1, p99_1, _ = saturate(endpoint, rows[:1], 1, args.seconds / 2)
        out["b_single_row_latency_us"] = {"p50": p50_1, "p99": p99_1}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if args.json:
        json.dump({"batcher": out}, sys.stdout, indent=1)
        print()
    else:
        print(f"(a) service {out['a_service_rows_per_s']:,.0f} rows/s vs raw forward "
              f"{out['a_raw_forward_rows_per_s']:,.0f} rows/s at batch {out['a_mean_batch']:.0f}: "
              f"ratio {out['a_ratio']:.2f}")
        print(f"(b) latency at saturation p50 {p50:,.0f} us p99 {p99:,.0f} us; one row p50 {p50_1:,.0f} us "
              f"p99 {p99_1:,.0f} us")


if __name__ == "__main__":
    main()
