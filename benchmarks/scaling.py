"""Scaling experiment: `python -m benchmarks.scaling --workers 1,2,4,8,16 --device auto`.

For each worker count N, a fresh batcher (default Lost Cities network) and N
worker processes running the traversal of configs/lost_cities.yaml; records
traversal nodes/s, the batcher's mean batch, busy fraction (forward time /
wall time) and p99 queue wait + mean forward time. Other axes:
--machines (per group), --threads (per worker), --max-batch.
Writes OUT.json, OUT.csv and OUT.png.
"""
import argparse
import csv
import json
import os
import time
from pathlib import Path

import yaml

from batcher.bench import start_batcher, start_workers, wait_workers
from batcher.client import BatcherClient

ROOT = Path(__file__).resolve().parent.parent


def traversal_flags():
    t = yaml.safe_load((ROOT / "configs" / "lost_cities.yaml").read_text())["traversal"]
    flags = []
    for key, value in t.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def run_point(device, hidden, n_workers, traversals, machines, groups, threads, max_batch, batcher_threads):
    proc, endpoint = start_batcher(device, hidden, max_batch, batcher_threads)
    try:
        t0 = time.perf_counter()
        nodes = wait_workers(start_workers(endpoint, n_workers, traversals, groups, machines, threads,
                                           traversal_flags()))
        wall = time.perf_counter() - t0
        client = BatcherClient(endpoint, timeout_s=30)
        stats = client.stats()
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {"workers": n_workers, "nodes_per_s": nodes / wall, "nodes": nodes, "wall_s": wall,
            "mean_batch": stats["mean_batch"], "busy_fraction": stats["forward_ms_mean"] * stats["forwards"] / 1000 / wall,
            "p99_wait_us": stats["queue_wait_us"]["p99"], "forward_ms_mean": stats["forward_ms_mean"],
            "p99_latency_ms": stats["queue_wait_us"]["p99"] / 1000 + stats["forward_ms_mean"]}


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = [r["workers"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, key, label in zip(axes.flat, ["nodes_per_s", "mean_batch", "busy_fraction", "p99_latency_ms"],
                              ["traversal nodes/s", "batcher mean batch", "batcher busy fraction",
                               "p99 queue wait + forward (ms)"]):
        ax.plot(x, [r[key] for r in rows], "o-")
        if key == "nodes_per_s":
            ax.plot(x, [rows[0][key] * n / rows[0]["workers"] for n in x], "--", color="gray", label="linear")
            ax.legend()
        ax.set_xscale("log", base=2)
        ax.set_xlabel("worker processes")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"scaling on {os.cpu_count()} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512])
    ap.add_argument("--traversals", type=int, default=200, help="traversals per worker")
    ap.add_argument("--machines", type=int, default=128)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=4096)
    ap.add_argument("--batcher-threads", type=int, default=0, help="batcher torch CPU threads (0 = default)")
    ap.add_argument("--out", default="scaling", help="output path prefix")
    args = ap.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.workers.split(",")]:
        r = run_point(args.device, args.hidden, n, args.traversals, args.machines, args.groups, args.threads,
                      args.max_batch, args.batcher_threads)
        rows.append(r)
        print(f"{n:3d} workers: {r['nodes_per_s']:>12,.0f} nodes/s | mean batch {r['mean_batch']:7.1f} | "
              f"busy {r['busy_fraction']:.2f} | p99 wait+forward {r['p99_latency_ms']:.1f} ms", flush=True)
    meta = {"device": args.device, "hidden": args.hidden, "cpu_count": os.cpu_count(), "machines": args.machines,
            "groups": args.groups, "threads": args.threads, "traversals_per_worker": args.traversals}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out + ".png")
    print(f"wrote {args.out}.json, {args.out}.csv, {args.out}.png")


if __name__ == "__main__":
    main()
