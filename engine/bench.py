"""Engine benchmark: `python -m engine.bench [--json] [--games NAME ...]`.

Per game, on one core: random-playout moves/s at C level (legal actions +
apply, through the GameDef interface), apply+undo pairs/s, info-state
encodes/s, and the same random play through the Python API for comparison.
"""
import argparse
import json
import random
import sys
import time

import engine
from engine import _bench

DEFAULT_GAMES = ("lost_cities", "leduc_poker", "kuhn_poker")


def _rate(fn, min_seconds):
    """Call fn(scale) with a growing scale until one call takes min_seconds;
    returns count/seconds of that call."""
    scale = 1
    while True:
        t0 = time.perf_counter()
        count = fn(scale)
        dt = time.perf_counter() - t0
        if dt >= min_seconds or scale >= 1 << 30:
            return count / dt
        scale *= max(2, int(min_seconds / max(dt, 1e-6) * 1.2))


def python_api_moves_per_s(game, min_seconds):
    rng = random.Random(0)

    def run(n_games):
        moves = 0
        for g in range(n_games):
            state = game.new_initial_state(seed=g)
            while not state.is_terminal():
                state.apply_action(rng.choice(state.legal_actions()))
                moves += 1
        return moves
    return _rate(run, min_seconds)


def bench_game(name, min_seconds=1.0):
    game = engine.load_game(name)
    states = _bench.collect_states(game, 20000, 7)
    return {
        "c_random_moves_per_s": _rate(lambda n: _bench.random_playouts(game, n, 1), min_seconds),
        "c_apply_undo_pairs_per_s": _rate(lambda n: _bench.apply_undo_pairs(game, n, 2), min_seconds),
        "c_encodes_per_s": _rate(lambda n: _bench.encode_states(game, states, n), min_seconds),
        "python_api_moves_per_s": python_api_moves_per_s(game, min_seconds),
        "tensor_size": game.information_state_tensor_size(),
        "num_actions": game.num_distinct_actions(),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--games", nargs="+", default=list(DEFAULT_GAMES), choices=engine.game_names())
    ap.add_argument("--seconds", type=float, default=1.0, help="minimum time per measurement")
    args = ap.parse_args(argv)
    results = {}
    for name in args.games:
        results[name] = bench_game(name, args.seconds)
        if not args.json:
            r = results[name]
            print(f"{name:12s} C moves/s {r['c_random_moves_per_s']/1e6:7.2f} M | apply+undo/s "
                  f"{r['c_apply_undo_pairs_per_s']/1e6:7.2f} M | encodes/s {r['c_encodes_per_s']/1e6:6.2f} M | "
                  f"Python API moves/s {r['python_api_moves_per_s']/1e3:7.1f} k", flush=True)
    if args.json:
        json.dump({"engine": results, "threads": 1}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
