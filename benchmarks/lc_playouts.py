"""Heuristic playouts of Lost Cities from the deal, nogil through StateBatch:
`python -m benchmarks.lc_playouts`. Prints the best of 5 CPU times of 2000
playouts (HeuristicBot's rule, lc_heuristic_action, for both sides). To
compare two builds in one sitting, run it alternately with PYTHONPATH set to
each checkout."""
import time

import engine
from engine._batch import StateBatch


def main():
    game = engine.load_game("lost_cities", max_turns=200)
    n = 2000
    states = [game.new_initial_state(seed=s) for s in range(n)]
    best = None
    for rep in range(5):
        batch = StateBatch(game, n)
        for i, s in enumerate(states):
            batch.set(i, s)
        t = time.process_time()
        batch.playout(seed=rep)
        dt = time.process_time() - t
        best = dt if best is None else min(best, dt)
    print(f"{n} heuristic playouts from the deal ({engine.__file__}): best of 5 {best * 1e3:.1f} ms CPU, "
          f"{best / n * 1e6:.2f} us per playout")


if __name__ == "__main__":
    main()
