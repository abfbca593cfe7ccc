"""Traversal benchmark: `python -m traverser.bench [--json]`.

For Lost Cities (outcome sampling, default 512x3 MLP) and Leduc (external
sampling, same MLP), in one run on one core (torch uses 1 thread):
  (a) the recursive reference, one forward per node at batch 1 (the "before");
  (b) the state machines with the local evaluator (batched forwards);
  (c) the state machines with the uniform policy (no network: engine-side limit);
and (b) again with 2 stepping threads (how threads scale), and with the
forward under bf16 autocast.
nodes/s counts every node entered; mean batch = request rows / forwards.

`python -m traverser.bench --cutoffs [--rounds R] [--device cuda] [--json]` compares
cutoff values (issue 28, part 2) for Lost Cities with the traversal of
configs/lost_cities_cpu.yaml (external sampling, max_depth 4, prefix_max 90,
4 heuristic playouts over redealt hidden cards) in one process, one core:
playout cutoffs (value_cutoff 0, a 256x256 advantage MLP) against value
cutoffs (value_cutoff 1, the same MLP with a 256x256 value MLP beside it,
answered in one forward by the local evaluator), alternated R times; it
prints each mode's median nodes/s and cutoffs/s, the share of the wall
time spent in the forwards, and the rest (stepping, playouts) per node.
With --device cuda the forwards run on the GPU and the stepping and
playouts stay on this core: a worker's view of a GPU batcher, without the
sockets.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import engine
from batcher.networks import MLP, AdvantageValue, net_for_game
from batcher.options import DeviceError, resolve_device
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


# configs/lost_cities_cpu.yaml: the game and its traversal section
LC_CPU_GAME = {"max_turns": 200, "features": 1}
LC_CPU_TRAVERSAL = dict(algorithm="external", max_depth=4, prefix_max=90, rollouts=4, rollout_resample=True,
                        rollout_policy="game", value_scale=0.01, strategy_interval=1, fallback="argmax")


class _TimedEvaluator(LocalEvaluator):
    """The local evaluator, with the wall time of its calls summed."""

    def __init__(self, models, device="cpu"):
        super().__init__(models, device=device)
        self.seconds = 0.0

    def __call__(self, group, n):
        t0 = time.perf_counter()
        super().__call__(group, n)
        self.seconds += time.perf_counter() - t0


def bench_cutoffs(rounds=3, traversals=4096, machines=512, hidden=(256, 256), device="cpu"):
    """Playout cutoffs against value cutoffs, alternated `rounds` times in this
    process, the forwards on `device`; returns each mode's runs and medians."""
    game = engine.load_game("lost_cities", **LC_CPU_GAME)
    T = game.information_state_tensor_size()
    advs = {p: net_for_game(game, hidden, seed=p) for p in (0, 1)}
    torch.manual_seed(7)
    value = MLP(T, 1, hidden, input_scale=game.input_scale())
    modes = {
        "playout": (TraverserConfig(**LC_CPU_TRAVERSAL), advs),
        "value": (TraverserConfig(**LC_CPU_TRAVERSAL, value_cutoff=1.0),
                  {p: AdvantageValue(advs[p], value) for p in (0, 1)}),
    }
    runs = {m: [] for m in modes}
    ids = np.arange(traversals)
    for r in range(rounds):
        for mode, (cfg, nets) in modes.items():
            ev = _TimedEvaluator(nets, device)
            # fresh ids each round: different roots, the same for both modes
            t0 = time.perf_counter()
            _, _, st = run_local(game, cfg, ids, ids % 2, iteration=1, run_seed=r + 1, evaluator=ev, groups=2,
                                 machines=machines // 2, threads=1, sink=_discard)
            dt = time.perf_counter() - t0
            runs[mode].append({"nodes_per_s": st["nodes"] / dt, "cutoffs_per_s": st["cutoffs"] / dt,
                               "forward_share": ev.seconds / dt, "seconds": dt, "nodes": st["nodes"],
                               "other_us_per_node": (dt - ev.seconds) / max(st["nodes"], 1) * 1e6,
                               "cutoffs": st["cutoffs"], "value_cutoffs": st["value_cutoffs"],
                               "rollout_moves": st["rollout_moves"], "request_rows": ev.rows,
                               "mean_batch": ev.rows / max(ev.forwards, 1)})
    out = {"game": {"name": "lost_cities", "params": LC_CPU_GAME}, "traversal": LC_CPU_TRAVERSAL,
           "hidden": list(hidden), "value_hidden": list(hidden), "traversals_per_run": traversals, "device": device,
           "machines": machines, "rounds": rounds, "runs": runs}
    for mode, rs in runs.items():
        out[mode] = {k: float(np.median([x[k] for x in rs]))
                     for k in ("nodes_per_s", "cutoffs_per_s", "forward_share", "other_us_per_node", "mean_batch")}
    out["value_over_playout_nodes_per_s"] = out["value"]["nodes_per_s"] / out["playout"]["nodes_per_s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m traverser.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--games", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512])
    ap.add_argument("--machines", type=int, default=512, help="machines in flight per process")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the amount of work")
    ap.add_argument("--cutoffs", action="store_true",
                    help="compare playout cutoffs with value cutoffs (Lost Cities, lost_cities_cpu.yaml's traversal)")
    ap.add_argument("--rounds", type=int, default=3, help="--cutoffs: alternations of the two modes")
    ap.add_argument("--device", default="cpu",
                    help="--cutoffs: where the forwards run, cpu, cuda[:N] or auto (the stepping stays on this process's core)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.device != "cpu" and not args.cutoffs:
        ap.error("--device goes with --cutoffs (the other rows measure the CPU)")
    try:
        device = str(resolve_device(args.device))
    except DeviceError as e:
        ap.error(str(e))
    if args.cutoffs:
        if args.rounds < 1 or args.scale <= 0:
            ap.error("--rounds must be >= 1 and --scale > 0")
        r = bench_cutoffs(args.rounds, max(args.machines, int(4096 * args.scale)), args.machines, device=device)
        if args.json:
            json.dump({"cutoffs": r, "torch_threads": 1, "device": device}, sys.stdout, indent=1)
            print()
        else:
            for mode in ("playout", "value"):
                m = r[mode]
                print(f"{mode} cutoffs: {m['nodes_per_s']:,.0f} nodes/s, {m['cutoffs_per_s']:,.0f} cutoffs/s, "
                      f"forwards {100 * m['forward_share']:.0f}% of the time (mean batch {m['mean_batch']:.0f}), "
                      f"the rest {m['other_us_per_node']:.1f} us a node (median of {args.rounds})")
            print(f"value / playout nodes/s: {r['value_over_playout_nodes_per_s']:.2f}x (forwards on {device})")
        return
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
