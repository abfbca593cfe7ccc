"""How well can a net of the run's shape learn to play like its warm-start
teacher, with and without the derived info-state segments?
`python -m studies.lc_imitation [--worlds 64 --explore 0.1]`

The warm start trains the strategy net on labelled self-play, and the
lasting prior keeps those rows in every batch, so the greedy average policy
plays the teacher's move wherever the prior has rows. The teacher is the
heuristic (--worlds 0) or a one-step lookahead over --worlds redealt worlds
with heuristic playouts (trainer.warmstart.heuristic_rows).
For each encoding (`features` 0 and 1) this builds the warm start's rows
from --games games, trains a fresh strategy net on them for --steps Adam
steps with the trainer's loss, and reports, on the decisions of
--test-games other games:
  - agreement: how often the net's most likely legal move is the teacher's;
  - the greedy net against the heuristic and against random on duplicate
    deals (--match-games games each; agents.evaluate.duplicate_match).
Both encodings see the same games, batches and seeds.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import engine
from batcher.networks import net_for_game
from agents.matches import duplicate_match
from trainer.learn import strategy_loss, train_net
from agents.policy import AveragePolicy, policy_probs
from agents.symmetry import ColourAugment
from trainer.warmstart import heuristic_rows


class _Rows:
    """The minimal memory train_net samples from: fixed rows, uniform draws,
    each renamed by a random colour permutation if `augment` is given."""

    def __init__(self, rows, augment=None):
        self.rows = rows
        self.size = len(rows["weight"])
        self.augment = augment

    def sample(self, batch_size, rng):
        idx = rng.integers(0, self.size, size=batch_size)
        batch = {k: v[idx] for k, v in self.rows.items()}
        return batch if self.augment is None else self.augment(batch, rng)


def imitate(features, args):
    game = engine.load_game("lost_cities", max_turns=200, features=features)
    t0 = time.perf_counter()
    teacher = dict(worlds=args.worlds, explore=args.explore)        # labelled in this process
    cache = {}
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
        tag = f"f{features}-w{args.worlds}-x{args.explore:g}"
        cache = {"train": os.path.join(args.cache, f"train-{args.games}-{tag}.npz"),
                 "test": os.path.join(args.cache, f"test-{args.test_games}-{tag}.npz")}
    _, train = heuristic_rows(game, args.games, seed=1_000_003, advantage=0.2, cache=cache.get("train"), **teacher)
    _, test = heuristic_rows(game, args.test_games, seed=9_000_017, advantage=0.2, cache=cache.get("test"),
                             **teacher)
    t_rows = time.perf_counter() - t0
    torch.manual_seed(args.seed)
    net = net_for_game(game, hidden=tuple(args.hidden), seed=args.seed)
    if args.weight_decay > 0:
        opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    t0 = time.perf_counter()
    augment = ColourAugment(game) if args.augment_colours else None
    loss = train_net(net, _Rows(train, augment), args.steps, args.batch_size, opt, "cpu",
                     np.random.default_rng(args.seed), strategy_loss, cosine_decay=args.lr_decay)
    t_train = time.perf_counter() - t0
    probs = policy_probs(net, test["info"].astype(np.float32), test["mask"])
    agree = float((probs.argmax(1) == test["target"].argmax(1)).mean())
    out = {"features": features, "worlds": args.worlds, "explore": args.explore,
           "augment_colours": bool(args.augment_colours), "weight_decay": args.weight_decay, "tensor_size": game.information_state_tensor_size(),
           "train_rows": int(train["weight"].size), "test_rows": int(test["weight"].size),
           "train_loss": loss, "agreement": agree, "rows_s": round(t_rows, 1), "train_s": round(t_train, 1)}
    for opponent in ("heuristic", "random"):
        r = duplicate_match(game, AveragePolicy(net, greedy=True, seed=args.seed), opponent,
                            args.match_games, seed=777)
        out[opponent] = {k: r[k] for k in ("win_rate", "win_rate_lo", "win_rate_hi",
                                           "margin", "margin_lo", "margin_hi")}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_imitation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=2000, help="labelled self-play games to learn from")
    ap.add_argument("--test-games", type=int, default=200, help="other games whose decisions are scored")
    ap.add_argument("--worlds", type=int, default=0,
                    help="label with a one-step lookahead over this many worlds (0: the heuristic's move)")
    ap.add_argument("--explore", type=float, default=0.0,
                    help="share of random moves in the labelled games (trainer.warmstart.heuristic_rows)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-decay", action="store_true",
                    help="cosine decay of the learning rate to 0 over the steps (the trainer's strategy_lr_decay)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's decoupled weight decay (0: Adam)")
    ap.add_argument("--augment-colours", action="store_true",
                    help="rename each training row's colours by a random permutation (agents/symmetry.py)")
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--match-games", type=int, default=1000)
    ap.add_argument("--features", type=int, nargs="+", default=[0, 1], choices=[0, 1])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", metavar="DIR",
                    help="keep the labelled rows here and read them back when the games and teacher match, "
                         "so runs that vary only the net or its training label once")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    for features in args.features:
        r = imitate(features, args)
        results.append(r)
        h, rnd = r["heuristic"], r["random"]
        print(f"features={features} ({r['tensor_size']} entries): agreement {r['agreement']:.1%} on "
              f"{r['test_rows']} held-out decisions; greedy vs heuristic {h['win_rate']:.1%} "
              f"({h['win_rate_lo']:.1%}..{h['win_rate_hi']:.1%}), {h['margin']:+.1f} "
              f"({h['margin_lo']:+.1f}..{h['margin_hi']:+.1f}); vs random {rnd['win_rate']:.1%}, "
              f"{rnd['margin']:+.1f}; train {r['train_s']} s, loss {r['train_loss']:.3f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
