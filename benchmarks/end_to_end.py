"""End-to-end Lost Cities traversal rate: `python -m benchmarks.end_to_end [--json]`.

Traversal nodes/s (outcome sampling, the default net) for 1..N `python -m
traverser` worker processes against one batcher, next to the recursive
batch-1 reference (traverser.reference) measured in the same run. This was
part (c) of `python -m batcher.bench` until 2026-12-02; its defaults are the
same. The batcher's own throughput and latency are `python -m batcher.bench`.
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np

import engine
from batcher.bench import add_batcher_arguments, start_batcher_from_args
from batcher.networks import net_for_game
from traverser.config import TraverserConfig
from traverser.reference import ReferenceTraverser

LC_CONFIG = dict(algorithm="outcome", epsilon=0.6, value_scale=0.01, value_clip=10.0)


OS_FLAGS = ("--algorithm", "outcome", "--value-scale", "0.01", "--value-clip", "10")


def start_workers(endpoint, n, traversals, groups, machines, threads=1, flags=OS_FLAGS):
    """n `python -m traverser` worker processes against the batcher at endpoint."""
    cmd = [sys.executable, "-m", "traverser", "--batcher", endpoint, "--game", "lost_cities", "--json",
           "--traversals", str(traversals), "--groups", str(groups), "--machines", str(machines),
           "--threads", str(threads), *flags]
    return [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]


def wait_workers(procs):
    """Total traversal nodes of finished workers (each prints one JSON stats line)."""
    nodes = 0
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {err[-2000:]}")
        nodes += json.loads(out.strip().splitlines()[-1])["nodes"]
    return nodes


def end_to_end(endpoint, n_workers, traversals, groups, machines):
    t0 = time.perf_counter()
    nodes = wait_workers(start_workers(endpoint, n_workers, traversals, groups, machines))
    return nodes / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.end_to_end", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batcher_arguments(ap)
    ap.add_argument("--workers", default="1,2", help="worker process counts")
    ap.add_argument("--traversals", type=int, default=1024, help="traversals per worker")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--machines", type=int, default=128)
    ap.add_argument("--reference-traversals", type=int, default=24, help="recursive batch-1 traversals")
    args = ap.parse_args(argv)
    game = engine.load_game("lost_cities")
    proc, endpoint, out = start_batcher_from_args(args)
    try:
        nets = {0: net_for_game(game, tuple(args.hidden), seed=0), 1: net_for_game(game, tuple(args.hidden), seed=1)}
        ref = ReferenceTraverser(game, TraverserConfig(**LC_CONFIG), nets)
        ids = np.arange(args.reference_traversals)
        t0 = time.perf_counter()
        ref.run(ids, ids % 2)
        ref_rate = ref.counter["nodes"] / (time.perf_counter() - t0)
        out["reference_batch1_nodes_per_s"] = ref_rate
        out["end_to_end"] = {}
        for n in [int(x) for x in args.workers.split(",")]:
            rate = end_to_end(endpoint, n, args.traversals, args.groups, args.machines)
            out["end_to_end"][str(n)] = {"nodes_per_s": rate, "ratio_vs_reference": rate / ref_rate}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if args.json:
        json.dump({"end_to_end": out}, sys.stdout, indent=1)
        print()
    else:
        print(f"reference batch 1: {ref_rate:,.0f} nodes/s")
        for n, r in out["end_to_end"].items():
            print(f"    {n} worker(s): {r['nodes_per_s']:,.0f} nodes/s = {r['ratio_vs_reference']:.1f}x reference")


if __name__ == "__main__":
    main()
