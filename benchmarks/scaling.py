"""Steady-state scaling: `python -m benchmarks.scaling --workers 1,2,4,8,16 --device auto`.

`--stage selfplay` measures the self-play stage instead (games/s, what
limits each point, the remote-worker share), `--stage labels` the prior's
label jobs (benchmarks/stage_scaling.py); the default, `--stage cfr`, the
traversals as follows.

For each worker count N: a fresh batcher (the default Lost Cities network, or
--hidden, or --null-forward) and N worker processes running the traversal of
configs/lost_cities.yaml with an endless supply of traversals (`python -m
traverser --seconds`), so no worker runs dry. After --warmup-s the batcher's
counters and every worker's counters are read at the start and at the end of
a --window-s window; only nodes finished inside the window count. Per point:
nodes/s, the batcher's rows/s, mean batch, busy fraction (forward time /
window), CPU use (process CPU time / window) and CPU time per row, split
between its main thread and ZeroMQ's I/O thread (Linux), each worker's CPU
use, and what limits the point. Other axes: --machines (per
group), --groups, --threads (per worker), --max-batch. The batcher listens on
an ipc:// endpoint (a Unix socket, as the trainer's local workers use) or,
with --transport tcp, on 127.0.0.1. Writes OUT.json, OUT.csv and OUT.png.

`--ceiling` measures the service's own ceiling instead (one worker, null
forward, batcher and worker pinned to one core each where there are two):
the batcher's CPU time per row (goal <= 0.5 us) and the worker's nodes/s as
a fraction of the in-process uniform-policy traversal on the same core in the
same run (goal >= 0.6); the two take turns on that core (--slices), so that
the machine's drift over a minute falls on both alike.
"""
import argparse
import csv
import json
import os
import signal
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from batcher.bench import spawn_batcher
from batcher.client import BatcherClient
from benchmarks.accounting import machine_busy, machine_cpu, summed_rate, thread_cpu, thread_shares, window_delta
from trainer.launcher import local_endpoint, local_shm_dir, local_transport, remove_local_endpoint

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "lost_cities.yaml"
GOAL_CPU_US_PER_ROW = 0.5
GOAL_REMOTE_SHARE = 0.6


TRAVERSAL_OVERRIDES = {}     # --set KEY=VALUE


def load_config():
    """(game, traversal) of configs/lost_cities.yaml, with the --set overrides."""
    cfg = yaml.safe_load(CONFIG.read_text())
    return cfg["game"], {**cfg["traversal"], **TRAVERSAL_OVERRIDES}


def parse_overrides(items):
    """--set KEY=VALUE items as {key: value} (values read as YAML), checked against TraverserConfig."""
    from dataclasses import fields
    from traverser.config import TraverserConfig
    known = {f.name for f in fields(TraverserConfig)}
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"error: --set {item!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        out[key] = yaml.safe_load(value)
    return out


def worker_flags():
    """The traversal and game flags of configs/lost_cities.yaml for `python -m traverser`."""
    game, traversal = load_config()
    flags = ["--game", game["name"]]
    for key, value in (game.get("params") or {}).items():
        flags += ["--game-param", f"{key}={value}"]
    for key, value in traversal.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):             # store_true flags
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


# ---------------------------------------------------------------------------
# processes

def _pinned(cpu):
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_batcher(device, hidden, max_batch, torch_threads, null_forward=False, max_wait_us=None, cpu=None,
                  transport="tcp", forwards_in_flight=None, shm_dir=""):
    endpoint = local_endpoint(transport)
    cmd = [sys.executable, "-m", "batcher", "--bind", endpoint, "--device", device, "--init-game", "lost_cities",
           "--hidden", *map(str, hidden), "--max-batch", str(max_batch), "--log-interval", "0",
           "--torch-threads", str(torch_threads)]
    game, _ = load_config()
    for key, value in (game.get("params") or {}).items():
        cmd += ["--game-param", f"{key}={value}"]
    if null_forward:
        cmd.append("--null-forward")
    if max_wait_us is not None:
        cmd += ["--max-wait-us", str(max_wait_us)]
    if forwards_in_flight is not None:
        cmd += ["--forwards-in-flight", str(forwards_in_flight)]
    if shm_dir:
        cmd += ["--shm-dir", shm_dir]
    return spawn_batcher(cmd, endpoint, preexec_fn=_pinned(cpu)), endpoint


def stop_batcher(proc, endpoint, shm_dir):
    """Stop a start_batcher() batcher and remove its endpoint and slot directory."""
    proc.terminate()
    proc.wait(timeout=10)
    remove_local_endpoint(endpoint)
    if shm_dir:
        shutil.rmtree(shm_dir, ignore_errors=True)


class Worker:
    """`python -m traverser --seconds` whose progress lines are collected as they come."""

    def __init__(self, endpoint, groups, machines, threads, cpu=None, interval=0.2, adv_dtype="float32", shm_dir=""):
        cmd = [sys.executable, "-m", "traverser", "--batcher", endpoint, "--json", "--seconds", "3600",
               "--progress-interval", str(interval), "--groups", str(groups), "--machines", str(machines),
               "--threads", str(threads), "--adv-dtype", adv_dtype, "--shm-dir", shm_dir, *worker_flags()]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=_pinned(cpu))
        self.samples, self.final = [], None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "progress" in msg:
                self.samples.append(msg["progress"])
            else:
                self.final = msg

    def started(self):
        return any(s["nodes"] > 0 for s in self.samples)

    def stop(self):
        """SIGTERM (the worker finishes its requests in flight and exits); returns its stats line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(10)
        if self.proc.returncode != 0:
            raise RuntimeError(f"worker failed ({self.proc.returncode}): {self.proc.stderr.read()[-2000:]}")
        return self.final


def wait_started(workers, timeout_s=120):
    """Until every Worker has reported work; RuntimeError if one exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not all(w.started() for w in workers):
        dead = [w for w in workers if w.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError("workers did not start: " + (
                " | ".join(w.proc.stderr.read()[-500:] for w in dead) if dead else "timed out"))
        time.sleep(0.05)


def batcher_stats(endpoint):
    client = BatcherClient(endpoint, timeout_s=30)
    try:
        return client.stats()
    finally:
        client.close()


def batcher_window(s0, s1, seconds):
    rows = s1["rows"] - s0["rows"]
    forwards = s1["forwards"] - s0["forwards"]
    busy = (s1["forward_ms_mean"] * s1["forwards"] - s0["forward_ms_mean"] * s0["forwards"]) / 1000
    cpu = s1["cpu_s"] - s0["cpu_s"]
    return {"batcher_rows_per_s": rows / seconds, "mean_batch": rows / max(forwards, 1),
            "batcher_busy": busy / seconds, "batcher_cpu": cpu / seconds,
            "batcher_cpu_us_per_row": 1e6 * cpu / max(rows, 1)}


def limit_of(point, cores):
    """What holds a point back, from the window's counters: other processes
    on the machine, the batcher's forward or CPU, our own processes filling
    the cores, a worker's CPU, or else the round trip."""
    ours = point["batcher_cpu"] + point["worker_cpu_mean"] * point["workers"]
    if point["machine_busy"] > 0.9 and ours < 0.85 * cores:
        return "other processes hold the cores"
    if point["batcher_busy"] > 0.8:
        return "batcher forward"
    if point["batcher_cpu"] > 0.85:
        return "batcher CPU"
    if ours > 0.85 * cores:
        return "all cores busy"
    if point["worker_cpu_mean"] > 0.85:
        return "worker CPU"
    return "waiting on replies"


def run_point(args, n_workers, cpus=(None, None)):
    shm_dir = local_shm_dir() if args.shm else ""
    proc, endpoint = start_batcher(args.device, args.hidden, args.max_batch, args.batcher_threads,
                                   args.null_forward, args.max_wait_us, cpu=cpus[0], transport=args.transport,
                                   forwards_in_flight=args.forwards_in_flight, shm_dir=shm_dir)
    workers = []
    try:
        workers = [Worker(endpoint, args.groups, args.machines, args.threads, cpu=cpus[1], adv_dtype=args.adv_dtype,
                          shm_dir=shm_dir)
                   for _ in range(n_workers)]
        wait_started(workers)
        time.sleep(args.warmup_s)
        t0, s0, m0, c0 = time.monotonic(), batcher_stats(endpoint), machine_cpu(), thread_cpu(proc.pid)
        time.sleep(args.window_s)
        t1, s1, m1, c1 = time.monotonic(), batcher_stats(endpoint), machine_cpu(), thread_cpu(proc.pid)
        for w in workers:
            w.stop()
        deltas = [window_delta(w.samples, t0, t1) for w in workers]
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
        stop_batcher(proc, endpoint, shm_dir)
    nodes = sum(d["nodes"] for d in deltas)
    point = {"workers": n_workers, "nodes_per_s": summed_rate(deltas), "window_nodes": nodes,
             "window_s": t1 - t0, "queries_per_node": sum(d["queries"] for d in deltas) / max(nodes, 1),
             "worker_cpu_mean": float(np.mean([d["cpu_s"] / d["seconds"] for d in deltas])),
             **batcher_window(s0, s1, t1 - t0), "machine_busy": machine_busy(m0, m1),
             **thread_shares(c0, c1, t1 - t0),
             "p99_latency_ms": s1["queue_wait_us"]["p99"] / 1000 + s1["forward_ms_mean"]}
    point["limit"] = limit_of(point, os.cpu_count())
    return point


# ---------------------------------------------------------------------------
# the service's own ceiling

class UniformRun:
    """In-process uniform-policy traversal (no network, no service) of the
    configured traversal: the engine-side limit. run() steps it on core
    `cpu` for a while and counts only what follows its settle time."""

    def __init__(self, machines, cpu=None):
        import engine
        from traverser._traverse import MachineGroup
        from traverser.config import TraverserConfig
        game_cfg, traversal = load_config()
        game = engine.load_game(game_cfg["name"], **(game_cfg.get("params") or {}))
        self.group = MachineGroup(game, TraverserConfig(**traversal, uniform_policy=True), n_machines=machines)
        self.group.start(np.zeros(0, np.int64), np.zeros(0, np.int8), 1, 0, 1.0)
        self.machines, self.cpu, self.next_id = machines, cpu, 0

    def run(self, settle_s, seconds):
        """{"nodes", "cpu_s", "seconds"} stepped in the `seconds` after `settle_s`."""
        g = self.group
        before = os.sched_getaffinity(0)
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})
        try:
            t_start = time.monotonic()
            samples = []
            while True:
                now = time.monotonic()
                samples.append({"t": now, "cpu_s": time.process_time(), "queries": 0, **g.stats()})
                if now - t_start > settle_s + seconds:
                    break
                if g.queued() < self.machines:
                    ids = np.arange(self.next_id, self.next_id + 4 * self.machines)
                    self.next_id += len(ids)
                    g.extend(ids, ids % 2)
                g.step()
                g.drain_advantage()
                g.drain_strategy()
        finally:
            os.sched_setaffinity(0, before)
        return window_delta(samples, t_start + settle_s, t_start + settle_s + seconds)


def add_up(slices):
    """Nodes/s and nodes per CPU second over a list of window_delta() slices."""
    nodes, seconds, cpu = (sum(d[k] for d in slices) for k in ("nodes", "seconds", "cpu_s"))
    return {"nodes_per_s": nodes / seconds, "nodes_per_cpu_s": nodes / max(cpu, 1e-9), "nodes": nodes,
            "seconds": seconds, "cpu_s": cpu}


def saturated_batcher(args, cpus):
    """The batcher (null forward) under a load generator that keeps many
    worker-shaped messages in flight (2 segments of --load-rows uint8 rows
    each): rows/s and the batcher's CPU time per row at saturation."""
    import multiprocessing as mp
    import engine
    from batcher.bench import load_generator, sample_rows
    game_cfg, _ = load_config()
    game = engine.load_game(game_cfg["name"], **(game_cfg.get("params") or {}))
    rows = sample_rows(game, args.load_rows)
    shm_dir = local_shm_dir() if args.shm else ""
    proc, endpoint = start_batcher(args.device, args.hidden, args.max_batch, args.batcher_threads, True,
                                   args.max_wait_us, cpu=cpus[0], transport=args.transport,
                                   forwards_in_flight=args.forwards_in_flight, shm_dir=shm_dir)
    try:
        ctx = mp.get_context("spawn")
        result = ctx.Queue()
        gen = ctx.Process(target=load_generator, args=(endpoint, rows, 2, args.load_in_flight,
                                                       args.warmup_s + args.window_s + 1, cpus[1], result,
                                                       args.adv_dtype, shm_dir, game.num_distinct_actions()))
        gen.start()
        time.sleep(args.warmup_s)
        t0, s0, c0 = time.monotonic(), batcher_stats(endpoint), thread_cpu(proc.pid)
        time.sleep(args.window_s)
        t1, s1, c1 = time.monotonic(), batcher_stats(endpoint), thread_cpu(proc.pid)
        gen.join(60)
    finally:
        stop_batcher(proc, endpoint, shm_dir)
    return {"rows_per_message": 2 * args.load_rows, "in_flight": args.load_in_flight, "adv_dtype": args.adv_dtype,
            **batcher_window(s0, s1, t1 - t0), **thread_shares(c0, c1, t1 - t0)}


def remote_against_uniform(args, cpus):
    """One remote worker (null forward) and the in-process uniform-policy
    traversal, taking turns on the same core: --slices slices of each, their
    counted seconds adding up to --window-s per side. The worker is stopped
    (SIGSTOP) while the uniform run steps and continued after it, so the two
    see the same machine in the same seconds: this machine's speed drifts by
    up to 20% over a minute, which one run before and one after did not
    cancel. Each slice counts only after a settle time (caches refill)."""
    slice_s = args.window_s / args.slices
    settle_s = min(0.3, slice_s / 2)
    shm_dir = local_shm_dir() if args.shm else ""
    proc, endpoint = start_batcher(args.device, args.hidden, args.max_batch, args.batcher_threads, True,
                                   args.max_wait_us, cpu=cpus[0], transport=args.transport,
                                   forwards_in_flight=args.forwards_in_flight, shm_dir=shm_dir)
    worker = None
    remote, uniform, batcher, pairs = [], [], [], []
    try:
        worker = Worker(endpoint, args.groups, args.machines, args.threads, cpu=cpus[1], interval=0.05,
                        adv_dtype=args.adv_dtype, shm_dir=shm_dir)
        wait_started([worker])
        time.sleep(args.warmup_s)
        worker.proc.send_signal(signal.SIGSTOP)
        uni = UniformRun(args.machines, cpu=cpus[1])
        uni.run(0.0, min(args.warmup_s, 1.0))                 # its own warm-up
        for _ in range(args.slices):
            worker.proc.send_signal(signal.SIGCONT)
            time.sleep(settle_s)
            t0, s0 = time.monotonic(), batcher_stats(endpoint)
            time.sleep(slice_s)
            t1, s1 = time.monotonic(), batcher_stats(endpoint)
            worker.proc.send_signal(signal.SIGSTOP)
            remote.append(window_delta(worker.samples, t0, t1))
            batcher.append((s0, s1, t1 - t0))
            uniform.append(uni.run(settle_s, slice_s))
            pairs.append((remote[-1]["nodes"] / remote[-1]["seconds"]) / (uniform[-1]["nodes"] / uniform[-1]["seconds"]))
        worker.proc.send_signal(signal.SIGCONT)
        worker.stop()
    finally:
        if worker is not None and worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
            worker.proc.kill()
        stop_batcher(proc, endpoint, shm_dir)
    rows = sum(s1["rows"] - s0["rows"] for s0, s1, _ in batcher)
    cpu = sum(s1["cpu_s"] - s0["cpu_s"] for s0, s1, _ in batcher)
    seconds = sum(dt for _, _, dt in batcher)
    forwards = sum(s1["forwards"] - s0["forwards"] for s0, s1, _ in batcher)
    r = add_up(remote)
    r.update(worker_cpu_mean=r["cpu_s"] / r["seconds"], batcher_rows_per_s=rows / seconds,
             batcher_cpu_us_per_row=1e6 * cpu / max(rows, 1), mean_batch=rows / max(forwards, 1))
    return r, {**add_up(uniform), "slices": uniform}, pairs


def ceiling(args):
    pin = not args.no_pin and os.cpu_count() >= 2
    cpus = (0, 1) if pin else (None, None)
    saturated = saturated_batcher(args, cpus)
    remote, uniform, pairs = remote_against_uniform(args, cpus)
    return {"pinned": pin, "transport": local_transport(args.transport), "shm": args.shm, "machines": args.machines,
            "groups": args.groups, "traversal": load_config()[1], "slices": args.slices,
            "batcher_cpu_us_per_row": saturated["batcher_cpu_us_per_row"], "goal_cpu_us_per_row": GOAL_CPU_US_PER_ROW,
            "remote_share": remote["nodes_per_s"] / uniform["nodes_per_s"],
            "remote_share_per_cpu_s": remote["nodes_per_cpu_s"] / uniform["nodes_per_cpu_s"],
            "remote_share_slices": pairs,
            "goal_remote_share": GOAL_REMOTE_SHARE, "saturated": saturated, "uniform": uniform, "remote": remote,
            "loadavg_after": os.getloadavg()}


def print_ceiling(c):
    r, u, s = c["remote"], c["uniform"], c["saturated"]
    where = "batcher on core 0, worker/load on core 1" if c["pinned"] else "not pinned"
    where += f", {c.get('transport', 'tcp')}" + (", shared memory" if c.get("shm") else "")
    t = c["traversal"]
    print(f"service ceiling, null forward ({where}; load average after: "
          f"{', '.join(f'{x:.1f}' for x in c['loadavg_after'])}); traversal: {t['algorithm']}, depth "
          f"{t.get('max_depth')}, {t.get('rollouts')} rollout(s), resample {t.get('rollout_resample', False)}")
    print(f"  batcher at saturation ({s['rows_per_message']}-row messages, {s['in_flight']} in flight, "
          f"{s.get('adv_dtype', 'float32')} answers): "
          f"{s['batcher_cpu_us_per_row']:.2f} us CPU per row (goal <= {c['goal_cpu_us_per_row']} us), "
          f"{s['batcher_rows_per_s']:,.0f} rows/s, batcher CPU {s['batcher_cpu']:.2f} of a core "
          f"(main thread {s['batcher_main_cpu']:.2f}, ZeroMQ I/O {s['batcher_zmq_io_cpu']:.2f}), "
          f"mean batch {s['mean_batch']:.0f}")
    print(f"  1 worker ({c['groups']} groups x {c['machines']} machines): {r['nodes_per_s']:,.0f} nodes/s, "
          f"worker CPU {r['worker_cpu_mean']:.2f} of a core; batcher {r['batcher_rows_per_s']:,.0f} rows/s at "
          f"{r['batcher_cpu_us_per_row']:.2f} us CPU per row (mostly idle), mean batch {r['mean_batch']:.0f}")
    print(f"  in-process uniform policy, same core, taking turns with the worker in {c['slices']} slices each: "
          f"{u['nodes_per_s']:,.0f} nodes/s")
    pairs = c["remote_share_slices"]
    print(f"  remote share of the uniform limit: {c['remote_share']:.2f} (goal >= {c['goal_remote_share']}); "
          f"per CPU second: {c['remote_share_per_cpu_s']:.2f}; slice by slice {min(pairs):.2f}-{max(pairs):.2f}")


# ---------------------------------------------------------------------------

def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = [r["workers"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = [("nodes_per_s", "traversal nodes/s (window)"), ("mean_batch", "batcher mean batch"),
              ("batcher_busy", "batcher busy (forward) and CPU fraction"), ("worker_cpu_mean", "worker CPU use")]
    for ax, (key, label) in zip(axes.flat, panels):
        ax.plot(x, [r[key] for r in rows], "o-", label=key)
        if key == "nodes_per_s":
            ax.plot(x, [rows[0][key] * n / rows[0]["workers"] for n in x], "--", color="gray", label="linear")
        if key == "batcher_busy":
            ax.plot(x, [r["batcher_cpu"] for r in rows], "s-", label="batcher_cpu")
        ax.legend()
        ax.set_xscale("log", base=2)
        ax.set_xlabel("worker processes")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=("cfr", "selfplay", "labels"), default="cfr",
                    help="the stage measured: CFR's traversals (nodes/s), self-play's or the prior's label jobs' "
                         "games (benchmarks/stage_scaling.py)")
    ap.add_argument("--worlds", type=int, default=64, help="--stage labels: the lookahead's worlds")
    ap.add_argument("--workers", default="1,2,4,8,16", help="worker process counts")
    ap.add_argument("--agent", default="", help="--stage selfplay: a run or checkpoint whose strategy net plays")
    ap.add_argument("--games", type=int, default=512,
                    help="--stage selfplay: deals a wave; --stage labels: games labelled a point")
    ap.add_argument("--update-waves", type=int, default=3, help="--stage selfplay: timed PPO updates")
    ap.add_argument("--update-threads", type=int, default=2, help="--stage selfplay: the update's torch threads")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512], help="network hidden sizes")
    ap.add_argument("--null-forward", action="store_true",
                    help="the batcher answers without a net (python -m batcher --null-forward)")
    ap.add_argument("--warmup-s", type=float, default=3.0, help="seconds of work before the window opens")
    ap.add_argument("--window-s", type=float, default=5.0, help="seconds counted")
    ap.add_argument("--machines", type=int, default=256, help="machines per group")
    ap.add_argument("--groups", type=int, default=4, help="groups per worker thread")
    ap.add_argument("--threads", type=int, default=1, help="stepping threads per worker")
    ap.add_argument("--max-batch", type=int, default=4096)
    ap.add_argument("--max-wait-us", type=int, default=None,
                    help="the batcher's --max-wait-us (default its own); --stage selfplay: the self-play net's own wait "
                         "(default service.selfplay_max_wait_us)")
    ap.add_argument("--forwards-in-flight", type=int, default=None,
                    help="the batcher's --forwards-in-flight (GPU; default its own)")
    ap.add_argument("--batcher-threads", type=int, default=1, help="batcher torch CPU threads (0 = default)")
    ap.add_argument("--ceiling", action="store_true",
                    help="measure the service's own ceiling (null forward, 1 worker) against its goals")
    ap.add_argument("--no-pin", action="store_true", help="--ceiling: do not pin batcher and worker to cores")
    ap.add_argument("--slices", type=int, default=5,
                    help="--ceiling: the remote worker and the uniform run take turns in this many slices each")
    ap.add_argument("--load-rows", type=int, default=256,
                    help="--ceiling: rows per model segment of the load generator's messages (2 segments each)")
    ap.add_argument("--load-in-flight", type=int, default=16, help="--ceiling: load generator messages in flight")
    ap.add_argument("--adv-dtype", choices=["float32", "float16"], default="float32",
                    help="the dtype workers (and --ceiling's load generator) ask their answers in "
                         "(python -m traverser --adv-dtype)")
    ap.add_argument("--transport", choices=["ipc", "tcp"], default="ipc",
                    help="batcher endpoint: ipc (a Unix socket, what the trainer's local workers use) or tcp "
                         "(127.0.0.1)")
    ap.add_argument("--no-shm", dest="shm", action="store_false",
                    help="rows and answers through the socket; by default they go through shared-memory files "
                         "(--shm-dir), as the trainer's local workers send them")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a traversal setting of configs/lost_cities.yaml (repeatable), "
                         "e.g. --set rollouts=1 --set rollout_resample=false")
    ap.add_argument("--out", default="scaling", help="output path prefix (JSON, CSV, PNG; JSON only for --ceiling)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.stage != "cfr":
        from benchmarks.stage_scaling import labels_scaling, selfplay_scaling
        (selfplay_scaling if args.stage == "selfplay" else labels_scaling)(args)
        return
    TRAVERSAL_OVERRIDES.clear()
    TRAVERSAL_OVERRIDES.update(parse_overrides(args.set))
    if args.ceiling:
        c = ceiling(args)
        print_ceiling(c)
        Path(args.out + ".json").write_text(json.dumps({"ceiling": c}, indent=1))
        print(f"wrote {args.out}.json")
        return
    rows = []
    for n in [int(x) for x in args.workers.split(",")]:
        r = run_point(args, n)
        rows.append(r)
        print(f"{n:3d} workers: {r['nodes_per_s']:>10,.0f} nodes/s | batcher {r['batcher_rows_per_s']:>10,.0f} rows/s, "
              f"mean batch {r['mean_batch']:6.1f}, busy {r['batcher_busy']:.2f}, CPU {r['batcher_cpu']:.2f} "
              f"({r['batcher_cpu_us_per_row']:.2f} us/row; main thread {r['batcher_main_cpu']:.2f}, ZeroMQ I/O "
              f"{r['batcher_zmq_io_cpu']:.2f}) | worker CPU {r['worker_cpu_mean']:.2f} | "
              f"machine busy {r['machine_busy']:.2f} | "
              f"p99 wait+forward {r['p99_latency_ms']:.1f} ms | {r['limit']}", flush=True)
    net = "null forward" if args.null_forward else "x".join(map(str, args.hidden)) + " net"
    meta = {"device": args.device, "transport": local_transport(args.transport), "shm": args.shm, "hidden": args.hidden, "null_forward": args.null_forward,
            "cpu_count": os.cpu_count(), "machines": args.machines, "groups": args.groups, "threads": args.threads,
            "max_batch": args.max_batch, "forwards_in_flight": args.forwards_in_flight, "warmup_s": args.warmup_s, "window_s": args.window_s,
            "config": str(CONFIG.relative_to(ROOT)), "traversal": load_config()[1],
            "loadavg_after": os.getloadavg()}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out + ".png", f"steady state, {net}, {args.device}, {os.cpu_count()} cores")
    print(f"wrote {args.out}.json, {args.out}.csv, {args.out}.png")


if __name__ == "__main__":
    main()
