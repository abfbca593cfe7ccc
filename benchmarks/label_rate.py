"""How fast the workers label the prior's games: label jobs
(trainer/label_stage.py) on N local worker processes, against the same
deals labelled in this process.
`python -m benchmarks.label_rate [--games 40] [--worlds 64] [--explore 0.1] [--workers 2] [--in-process] [--json]`

The game is the recipes' (configs/lost_cities_cpu.yaml), the deals the
warm start's of run seed 0. The workers are `python -m traverser --trainer
EP --batcher EP` subprocesses, as the trainer starts them; label jobs need
no batcher, so the batcher endpoint is a placeholder. The time runs from the
labelling's start with the workers up (startup_s: from their spawn to their
hello); children_cpu_s is the workers' CPU time, their start included.
--in-process also labels the deals in this process and checks that the rows
are the same.
"""
import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GAME = {"max_turns": 200, "features": 1}      # configs/lost_cities_cpu.yaml's game


def measure(games=40, worlds=64, explore=0.1, workers=2, in_process=False):
    import numpy as np

    import engine
    from trainer.jobs import JobServer
    from trainer.label_stage import LabelStage
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", **GAME)
    seed = 1000003                            # the warm start's first deal at run seed 0
    out = {"games": games, "worlds": worlds, "explore": explore, "workers": workers}
    server = JobServer("tcp://127.0.0.1:0")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "traverser", "--trainer", server.endpoint,
                               "--batcher", "tcp://127.0.0.1:1"], cwd=ROOT) for _ in range(workers)]
    try:
        while server.live_workers() < workers:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker exited while starting")
            time.sleep(0.01)
        out["startup_s"] = time.monotonic() - t0
        stage = LabelStage(server, {"game": {"name": game.name, "params": dict(game.params)}, "seed": 0},
                           workers=workers)
        t1 = time.monotonic()
        rows = heuristic_rows(game, games, seed=seed, advantage=0.2, worlds=worlds, explore=explore, stage=stage)
        out["seconds"] = time.monotonic() - t1
    finally:
        server.stop_workers()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        server.close()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["children_cpu_s"] = usage.ru_utime + usage.ru_stime
    out["decisions"] = int(len(rows[1]["weight"]))
    out["games_per_s"] = games / out["seconds"]
    if in_process:
        t1 = time.monotonic()
        here = heuristic_rows(game, games, seed=seed, advantage=0.2, worlds=worlds, explore=explore)
        out["in_process_s"] = time.monotonic() - t1
        out["in_process_games_per_s"] = games / out["in_process_s"]
        out["rows_equal"] = all(np.array_equal(a[k], b[k]) for a, b in ((rows[1], here[1]), (rows[0][0], here[0][0]),
                                                                       (rows[0][1], here[0][1])) for k in a)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=40)
    ap.add_argument("--worlds", type=int, default=64, help="the lookahead's worlds (0: the heuristic labels)")
    ap.add_argument("--explore", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--in-process", action="store_true", help="also label the deals in this process")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.games < 1 or args.workers < 1 or args.worlds < 0 or not 0 <= args.explore < 1:
        print("error: --games and --workers must be >= 1, --worlds >= 0 and --explore in [0, 1)", file=sys.stderr)
        return 2
    out = measure(args.games, args.worlds, args.explore, args.workers, args.in_process)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.games} games, {args.worlds} worlds, on {args.workers} workers: {out['seconds']:.1f} s, "
          f"{out['games_per_s']:.2f} games/s ({out['decisions']} decisions; the workers up in "
          f"{out['startup_s']:.2f} s, {out['children_cpu_s']:.1f} CPU s in all)")
    if args.in_process:
        print(f"in this process: {out['in_process_s']:.1f} s, {out['in_process_games_per_s']:.2f} games/s; "
              f"rows {'the same' if out['rows_equal'] else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
