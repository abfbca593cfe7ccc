"""What colour renaming costs a training step. `python -m benchmarks.lc_augment`

train.augment_colours renames every minibatch row's colours
(trainer.symmetry.ColourAugment) in numpy before the step. This times the
renaming of one batch alone, then strategy-net training steps (trainer.learn.
train_net, one torch thread) with and without it, alternating --rounds
times in the same process so that both see the same machine load. Rows are
the heuristic's decisions in --games self-play games (the classic game with
the derived segments, as the training configs use).
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import engine
from batcher.networks import net_for_game
from benchmarks.lc_imitation import _Rows
from trainer.learn import strategy_loss, train_net
from trainer.symmetry import ColourAugment
from trainer.warmstart import heuristic_rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lc_augment", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=400, help="training steps per timing")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    game = engine.load_game("lost_cities", max_turns=200, features=1)
    _, rows = heuristic_rows(game, args.games, seed=1, advantage=0.2)
    augment = ColourAugment(game)
    rng = np.random.default_rng(0)
    batch = _Rows(rows).sample(args.batch_size, rng)
    t = time.perf_counter()
    for _ in range(args.steps):
        augment(batch, rng)
    out = {"rename_ms": (time.perf_counter() - t) / args.steps * 1e3, "plain_ms": [], "renamed_ms": []}
    for _ in range(args.rounds):
        for key, aug in (("plain_ms", None), ("renamed_ms", augment)):
            net = net_for_game(game, hidden=tuple(args.hidden), seed=0)
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            t = time.perf_counter()
            train_net(net, _Rows(rows, aug), args.steps, args.batch_size, opt, "cpu",
                      np.random.default_rng(0), strategy_loss)
            out[key].append((time.perf_counter() - t) / args.steps * 1e3)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"renaming one batch of {args.batch_size}: {out['rename_ms']:.2f} ms")
        for i, (p, r) in enumerate(zip(out["plain_ms"], out["renamed_ms"])):
            print(f"round {i}: a training step {p:.2f} ms plain, {r:.2f} ms renamed ({r / p:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
