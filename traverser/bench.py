"""Traversal benchmark: `python -m traverser.bench [--json]`.

For Lost Cities (outcome sampling, default 512x3 MLP) and Leduc (external
sampling, same MLP), in one run on one core (torch uses 1 thread):
  (a) the recursive reference, one forward per node at batch 1 (the "before");
  (b) the state machines with the local evaluator (batched forwards);
  (c) the state machines with the uniform policy (no network: engine-side limit);
and (b) again with 2 stepping threads (how threads scale), and with the
forward under bf16 autocast.
nodes/s counts every node entered; mean batch = request rows / forwards.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import engine
from batcher.networks import net_for_game
from traverser.config import TraverserConfig
from traverser.local import LocalEvaluator, run_local
from traverser.reference import ReferenceTraverser

SETUPS = {
    "lost_cities": dict(params={}, config=dict(algorithm="outcome", epsilon=0.6, value_scale=0.01,
                                               value_clip=10.0), ref_traversals=4, traversals=2048),
    "leduc_poker": dict(params={}, config=dict(algorithm="external"), ref_traversals=60, traversals=4096),
}


def _discard(adv, strat):
    pass


def bench_game(name, hidden, machines, seconds_scale=1.0, threads=(1, 2)):
    setup = SETUPS[name]
    game = engine.load_game(name, **setup["params"])
    cfg = TraverserConfig(**setup["config"])
    nets = {0: net_for_game(game, hidden, seed=0), 1: net_for_game(game, hidden, seed=1)}
    out = {"hidden": list(hidden), "algorithm": cfg.algorithm, "machines": machines}

    n_ref = max(1, int(setup["ref_traversals"] * seconds_scale))
    ref = ReferenceTraverser(game, cfg, nets)
    ids = np.arange(n_ref)
    t0 = time.perf_counter()
    ref.run(ids, ids % 2, iteration=1, run_seed=1)
    dt = time.perf_counter() - t0
    out["a_reference_batch1"] = {"nodes_per_s": ref.counter["nodes"] / dt, "mean_batch": 1.0,
                                 "nodes": ref.counter["nodes"], "seconds": dt}

    n = max(machines, int(setup["traversals"] * seconds_scale))
    ids = np.arange(n)
    for k in threads:
        ev = LocalEvaluator(nets)
        t0 = time.perf_counter()
        _, _, st = run_local(game, cfg, ids, ids % 2, iteration=1, run_seed=1, evaluator=ev,
                             groups=2 * k, machines=machines // (2 * k) if k > 1 else machines // 2,
                             threads=k, sink=_discard)
        dt = time.perf_counter() - t0
        out[f"b_state_machines_{k}thread"] = {"nodes_per_s": st["nodes"] / dt,
                                             "mean_batch": ev.rows / max(ev.forwards, 1),
                                             "nodes": st["nodes"], "seconds": dt}
    out["b_state_machines"] = out["b_state_machines_1thread"]
    ev = LocalEvaluator(nets, autocast="bf16")
    t0 = time.perf_counter()
    _, _, st = run_local(game, cfg, ids, ids % 2, iteration=1, run_seed=1, evaluator=ev, groups=2,
                         machines=machines // 2, threads=1, sink=_discard)
    dt = time.perf_counter() - t0
    out["b_state_machines_bf16"] = {"nodes_per_s": st["nodes"] / dt, "mean_batch": ev.rows / max(ev.forwards, 1),
                                    "nodes": st["nodes"], "seconds": dt}
    ucfg = TraverserConfig(**{**setup["config"], "uniform_policy": True})
    n_u = 20 * n
    ids = np.arange(n_u)
    t0 = time.perf_counter()
    _, _, st = run_local(game, ucfg, ids, ids % 2, iteration=1, run_seed=1, groups=1, machines=machines, sink=_discard)
    dt = time.perf_counter() - t0
    out["c_uniform_policy"] = {"nodes_per_s": st["nodes"] / dt, "mean_batch": 0.0,
                               "nodes": st["nodes"], "seconds": dt}
    out["ratio_b_over_a"] = out["b_state_machines"]["nodes_per_s"] / out["a_reference_batch1"]["nodes_per_s"]
    out["ratio_b_bf16_over_a"] = out["b_state_machines_bf16"]["nodes_per_s"] / out["a_reference_batch1"]["nodes_per_s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m traverser.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--games", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512])
    ap.add_argument("--machines", type=int, default=512, help="machines in flight per process")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the amount of work")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for name in args.games:
        results[name] = r = bench_game(name, tuple(args.hidden), args.machines, args.scale)
        if not args.json:
            print(f"{name}: (a) reference {r['a_reference_batch1']['nodes_per_s']:,.0f} nodes/s | "
                  f"(b) machines {r['b_state_machines']['nodes_per_s']:,.0f} nodes/s "
                  f"(mean batch {r['b_state_machines']['mean_batch']:.0f}; 2 threads "
                  f"{r['b_state_machines_2thread']['nodes_per_s']:,.0f}) | "
                  f"(b, bf16 autocast) {r['b_state_machines_bf16']['nodes_per_s']:,.0f} nodes/s | "
                  f"(c) uniform {r['c_uniform_policy']['nodes_per_s']:,.0f} nodes/s | "
                  f"b/a = {r['ratio_b_over_a']:.1f}x, bf16 b/a = {r['ratio_b_bf16_over_a']:.1f}x", flush=True)
    if args.json:
        json.dump({"traverser": results, "torch_threads": 1}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
