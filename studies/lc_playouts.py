"""Heuristic playouts of Lost Cities from the deal, nogil through StateBatch:
`python -m studies.lc_playouts`. Prints the best of 5 CPU times of 2000
playouts (HeuristicBot's rule, lc_heuristic_action, for both sides), then of
the search player's race (engine._lc_search.race_values: every legal move,
640 worlds' budget, z = 3) on 60 positions from heuristic games. To compare
two builds in one sitting, run it alternately with PYTHONPATH set to each
checkout."""
import time

import engine
from engine._batch import StateBatch
from engine._lc_search import race_values


def best_of(reps, fn):
    best = None
    for rep in range(reps):
        t = time.process_time()
        fn(rep)
        dt = time.process_time() - t
        best = dt if best is None else min(best, dt)
    return best


def main():
    game = engine.load_game("lost_cities", max_turns=200)
    n = 2000
    states = [game.new_initial_state(seed=s) for s in range(n)]

    def playouts(rep):
        batch = StateBatch(game, n)
        for i, s in enumerate(states):
            batch.set(i, s)
        batch.playout(seed=rep)
    best = best_of(5, playouts)
    print(f"{n} heuristic playouts from the deal ({engine.__file__}): best of 5 {best * 1e3:.1f} ms CPU, "
          f"{best / n * 1e6:.2f} us per playout")

    positions = []
    for d in range(60):
        s = game.new_initial_state(seed=d)
        for _ in range(10 + d % 30):
            s.apply_action(game.heuristic_action(s))
        positions.append(s)

    def races(rep):
        for i, s in enumerate(positions):
            cands = s.legal_actions()
            race_values(s, s.current_player(), i, cands, 640 * len(cands), z=3.0)
    best = best_of(5, races)
    print(f"{len(positions)} races of 640 worlds: best of 5 {best / len(positions) * 1e3:.2f} ms CPU a race")


if __name__ == "__main__":
    main()
