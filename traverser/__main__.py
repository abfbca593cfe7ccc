"""`python -m traverser`: a traversal worker process.

It steps hundreds of resumable traversals per thread without the GIL and gets
its advantages from the batcher at --batcher. Standalone, it runs
--traversals traversals and writes the samples to --out (.npz; the info
rows are uint8 where every value is an exact uint8, as they travel).
"""
import argparse
import gc
import signal
import sys
import threading
import time

import numpy as np
import zmq

import engine
from batcher.client import BatcherError, BatcherTimeout
from traverser.config import TraverserConfig
from traverser.worker import run_remote


def add_traverser_args(ap):
    d = TraverserConfig()
    g = ap.add_argument_group("traversal")
    g.add_argument("--algorithm", choices=["external", "outcome"], default=d.algorithm)
    g.add_argument("--epsilon", type=float, default=d.epsilon, help="outcome sampling exploration")
    g.add_argument("--value-clip", type=float, default=d.value_clip, help="outcome sampling target clip (0 = none)")
    g.add_argument("--value-scale", type=float, default=d.value_scale, help="multiplies every utility")
    g.add_argument("--max-depth", type=int, default=d.max_depth, help="decisions before a cutoff (0 = game length)")
    g.add_argument("--max-nodes", type=int, default=d.max_nodes, help="nodes per traversal before cutoffs (0 = none)")
    g.add_argument("--rollouts", type=int, default=d.rollouts, help="cutoff value: 0 = score as it stands, k = rollouts")
    g.add_argument("--rollout-policy", choices=["random", "game"], default=d.rollout_policy,
                   help="cutoff rollouts: uniform random, or the game's own playout policy")
    g.add_argument("--rollout-resample", action="store_true",
                   help="each rollout first redeals what the traverser cannot see")
    g.add_argument("--prefix-max", type=int, default=d.prefix_max,
                   help="sampled roots: 0..N on-policy decisions before the traversal proper")
    g.add_argument("--fallback", choices=["argmax", "uniform"], default=d.fallback)
    g.add_argument("--strategy-interval", type=int, default=d.strategy_interval)
    g.add_argument("--value-cutoff", type=float, default=d.value_cutoff,
                   help="cutoff value from the served value net: 0 = playouts only, 1 = the value alone, "
                        "w = w * value + (1 - w) * playout mean (the nets must answer num_actions + 1 columns)")
    return ap


def traverser_config_from_args(args):
    return TraverserConfig(algorithm=args.algorithm, epsilon=args.epsilon, value_clip=args.value_clip,
                           value_scale=args.value_scale, max_depth=args.max_depth, max_nodes=args.max_nodes,
                           rollouts=args.rollouts, fallback=args.fallback, rollout_policy=args.rollout_policy,
                           prefix_max=args.prefix_max, rollout_resample=args.rollout_resample,
                           strategy_interval=args.strategy_interval, value_cutoff=args.value_cutoff)


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m traverser", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--batcher", required=True, help="batcher endpoint, e.g. tcp://127.0.0.1:5555")
    ap.add_argument("--trainer", default=None,
                    help="job mode: take jobs from the trainer at this endpoint (game and traversal settings "
                         "come with each job; --game/--traversals/--out and the traversal flags are ignored)")
    ap.add_argument("--game", default="lost_cities", choices=engine.game_names())
    ap.add_argument("--game-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--traversals", type=int, default=1000)
    ap.add_argument("--iteration", type=int, default=1, help="iteration number (seeding and LCFR weight)")
    ap.add_argument("--seed", type=int, default=0, help="run seed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--groups", type=int, default=4, help="machine groups per thread (in flight at once)")
    ap.add_argument("--machines", type=int, default=256, help="machines per group")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds without a batcher reply before giving up")
    ap.add_argument("--out", default=None, help="write samples to this .npz")
    ap.add_argument("--json", action="store_true", help="print the run's stats as one JSON line")
    ap.add_argument("--seconds", type=float, default=None,
                    help="benchmark mode: run for this long (or until SIGTERM/SIGINT) with an endless supply of "
                         "traversals, so no machine runs dry; --traversals is ignored")
    ap.add_argument("--progress-interval", type=float, default=0.0, metavar="S",
                    help="print the counters as a JSON line {\"progress\": {t, cpu_s, nodes, queries, "
                         "traversals}} every S seconds (0 = never; t is time.monotonic())")
    ap.add_argument("--adv-dtype", choices=["float32", "float16"], default="float32",
                    help="dtype the batcher answers in: float32 (exact: the same samples as an in-process run) "
                         "or float16 (half the answer bytes; advantages rounded to 11 significant bits, so "
                         "sampled actions can differ from an in-process run's)")
    ap.add_argument("--curve-keys", default="", metavar="DIR",
                    help="CURVE keys (python -m batcher.keys DIR) for the batcher and the trainer")
    ap.add_argument("--shm-dir", default="", metavar="DIR",
                    help="on the batcher's machine: the batcher's --shm-dir; each round's rows and answers go "
                         "through shared-memory files there instead of the socket (a batcher that refuses "
                         "them gets them through the socket)")
    add_traverser_args(ap)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.shm_dir:
        from batcher.shm import ShmError, check_dir
        try:
            check_dir(args.shm_dir)
        except ShmError as e:
            print(f"error: --shm-dir: {e}", file=sys.stderr)
            return 2
    if args.trainer:
        from traverser.jobworker import serve_jobs
        gc.freeze()
        try:
            return serve_jobs(args.trainer, args.batcher, threads=args.threads, groups=args.groups,
                              machines=args.machines, timeout_s=args.timeout, curve_keys=args.curve_keys,
                              adv_dtype=args.adv_dtype, shm_dir=args.shm_dir)
        except KeyboardInterrupt:
            return 130
        except (BatcherError, BatcherTimeout) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except zmq.Again:
            print(f"error: the trainer at {args.trainer} took no message for {args.timeout:g} s; is it running?",
                  file=sys.stderr)
            return 1
    from batcher.__main__ import parse_params      # (imports torch: standalone runs only, not a job worker's start)
    try:
        game = engine.load_game(args.game, **parse_params(args.game_param))
        cfg = traverser_config_from_args(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    adv_parts, strat_parts = [], []

    def sink(adv, strat):
        if args.out:
            adv_parts.append(adv)
            strat_parts.append(strat)

    if args.seconds is not None and args.seconds <= 0:
        print("error: --seconds must be > 0", file=sys.stderr)
        return 2
    ids = np.arange(args.traversals if args.seconds is None else 0)
    stop = threading.Event()
    if args.seconds is not None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.set())
    progress = None
    if args.progress_interval > 0:
        import json

        def progress(sample):
            print(json.dumps({"progress": sample}), flush=True)
    gc.freeze()      # long-lived objects out of the cyclic GC's way (collections come every few rounds)
    t0 = time.perf_counter()
    try:
        stats = run_remote(game, cfg, args.batcher, ids, ids % 2, args.iteration, args.seed, float(args.iteration),
                           sink, groups_per_thread=args.groups, machines=args.machines, threads=args.threads,
                           timeout_s=args.timeout, curve_keys=args.curve_keys, seconds=args.seconds, stop=stop,
                           progress=progress, progress_interval=args.progress_interval or 0.5,
                           adv_dtype=args.adv_dtype, shm_dir=args.shm_dir)
    except (BatcherError, BatcherTimeout, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    if args.json:
        import json
        print(json.dumps({**{k: v for k, v in stats.items() if k != "depth_hist"}, "seconds": dt}), flush=True)
    else:
        print(f"{stats['traversals']} traversals, {stats['nodes']} nodes in {dt:.2f} s = "
              f"{stats['nodes'] / dt:,.0f} nodes/s; {stats['adv_samples']} advantage and "
              f"{stats['strat_samples']} strategy samples; {stats['queries']} queries, "
              f"{stats['resends']} resends", flush=True)
    if args.out:
        cat = lambda parts, k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0)
        np.savez(args.out, **{f"adv_{k}": cat(adv_parts, k) for k in adv_parts[0]},
                 **{f"strat_{k}": cat(strat_parts, k) for k in strat_parts[0]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
