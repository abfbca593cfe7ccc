"""Deep CFR with a perfect function approximator, for Kuhn and Leduc.

    python -m benchmarks.tabular_oracle --game leduc_poker --iterations 1000 --traversals 300

The same traversals as the trainer (the state machines, external sampling,
LCFR weights, the SD-CFR average), but each advantage "net" is a table that
answers with the exact weighted mean of every regret sample of its info state
so far: the value an advantage net's weighted MSE is fitted to. The gap
between this curve and the trainer's is the nets' approximation error; what
is left here is the sampling error of external-sampling MCCFR.
"""
import argparse
import json
import time

import numpy as np
import torch

import engine
from agents.exact import exploitability
from agents.sdcfr import TabularAverage
from traverser.config import TraverserConfig
from traverser.local import LocalEvaluator, run_local


class RegretTable(torch.nn.Module):
    """An advantage "net" holding the weighted mean regret sample per info state."""

    def __init__(self, rows, num_states, num_actions):
        super().__init__()
        self.rows = rows          # tensor rows -> info-state ids (TabularAverage.rows)
        self.table = torch.nn.Parameter(torch.zeros(num_states, num_actions), requires_grad=False)
        self.sums = np.zeros((num_states, num_actions))
        self.weights = np.zeros(num_states)

    def forward(self, x):
        return self.table[torch.from_numpy(self.rows(x.cpu().numpy()))]

    def add(self, samples):
        i = self.rows(samples["info"])
        w = samples["weight"].astype(np.float64)
        np.add.at(self.sums, i, w[:, None] * samples["target"] * samples["mask"])
        np.add.at(self.weights, i, w)
        mean = self.sums / np.maximum(self.weights, 1e-300)[:, None]
        with torch.no_grad():
            self.table.copy_(torch.from_numpy(mean))


def run(game_name, iterations, traversals, seed=0, eval_every=50, value_scale=0.1, log=None):
    """Returns [(iteration, exploitability)] every eval_every iterations (and at the end)."""
    game = engine.load_game(game_name)
    avg = TabularAverage(game)
    tables = {p: RegretTable(avg.rows, len(avg.player), game.num_distinct_actions()) for p in (0, 1)}
    evaluator = LocalEvaluator(tables)
    cfg = TraverserConfig(algorithm="external", strategy_interval=1, fallback="argmax", value_scale=value_scale)
    curve = []
    for t in range(1, iterations + 1):
        for p in (0, 1):
            avg.add(1 - p, tables[1 - p], t)   # as the trainer does: before p's traversals
            adv, _, _ = run_local(game, cfg, p * traversals + np.arange(traversals), p, iteration=t,
                                  run_seed=seed, evaluator=evaluator, groups=1, machines=256)
            tables[p].add(adv)
        if t % eval_every == 0 or t == iterations:
            curve.append((t, exploitability(game, avg)["exploitability"]))
            if log:
                log(f"iteration {t}: exploitability {curve[-1][1]:.4f}")
    return curve


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tabular_oracle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", choices=["kuhn_poker", "leduc_poker"], default="leduc_poker")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--traversals", type=int, default=300, help="per player per iteration")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    curve = run(args.game, args.iterations, args.traversals, args.seed, args.eval_every,
                log=None if args.json else print)
    if args.json:
        print(json.dumps({"game": args.game, "traversals": args.traversals, "wall_s": time.perf_counter() - t0,
                          "curve": curve}))


if __name__ == "__main__":
    main()
