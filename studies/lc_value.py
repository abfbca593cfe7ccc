"""How well the value net predicts the outcome of Lost Cities games it has
not seen, and what it is worth as a search's leaf value.
`python -m studies.lc_value [--games 300] [--worlds 64] [--explore 0.1] [--seed 1]
                               [--steps 2000 ...] [--hidden 256,256 ...] [--labels outcome both search]
                               [--lookahead-games 200] [--lookahead-worlds 16]
                               [--batch 512] [--lr 1e-3] [--no-augment] [--cache PATH] [--json]`

Plays the warm start's self-play games (trainer.warmstart.heuristic_rows:
the game of configs/lost_cities_cpu.yaml, the lookahead teacher over
--worlds redealt worlds, --explore random moves), then trains a value net
(trainer.value.train_value, as a run with train.value_steps does) once per
--steps x --hidden pair (--steps a ceiling: the training stops early by the
error on validation games), a tenth of the games held out whole, and prints its
held-out squared error next to the mean predictor's (the training rows' mean
target) and the zero predictor's, in traversal value units (points * 0.01).
--labels (train.value_labels): "outcome" trains on the games' outcomes
(each decision's player and the other player's view, each with its own
final return), "search" on the lookahead teacher's values of the move
chosen and two other candidates, "both" on both; one net per choice. Each
net's held-out errors of both kinds are printed.
--lookahead-games N: each net also plays N duplicate games against
HeuristicBot as the leaf value of a one-turn lookahead over
--lookahead-worlds worlds (agents.valuesearch.ValueLookahead).
--cache keeps the labelled games in a file, so that further nets need not
play them again. The same seed gives the same games and split.
"""
import argparse
import json
import sys
import time

GAME = {"max_turns": 200, "features": 1}      # configs/lost_cities_cpu.yaml's game
VALUE_SCALE = 0.01                            # and its traversal.value_scale


def measure(games=300, worlds=64, explore=0.1, seed=1, steps=(2000,), hidden=((256, 256),), batch=512,
            lr=1e-3, augment=True, cache=None, progress=None, labels=("search",), lookahead_games=0,
            lookahead_worlds=16):
    """(label stats, one dict of trainer.value.train_value's metrics per
    labels x steps x hidden, with the lookahead's match against HeuristicBot
    under "lookahead" when lookahead_games > 0)."""
    import numpy as np
    import torch

    import engine
    from batcher.networks import MLP
    from agents.symmetry import ColourAugment
    from trainer.value import train_value
    from trainer.warmstart import heuristic_rows
    torch.set_num_threads(1)
    game = engine.load_game("lost_cities", **GAME)
    stats = {}
    adv, _ = heuristic_rows(game, games, seed=(seed + 1) * 1000003, advantage=0.2, worlds=worlds, explore=explore,
                            cache=cache, stats=stats)
    out = []
    for label in labels:
        for h in hidden:
            for n in steps:
                torch.manual_seed(seed)
                net = MLP(game.information_state_tensor_size(), 1, h, input_scale=game.input_scale())
                opt = torch.optim.Adam(net.parameters(), lr=lr)
                m = train_value(net, opt, adv, VALUE_SCALE, n, batch, "cpu", np.random.default_rng(seed), seed=seed,
                                augment=ColourAugment(game) if augment else None, labels=label)
                m["value_hidden"], m["value_steps_max"], m["labels"] = list(h), n, label
                if lookahead_games > 0:
                    from agents.matches import duplicate_match
                    from agents.valuesearch import ValueLookahead
                    t0 = time.monotonic()
                    player = ValueLookahead(game, net, worlds=lookahead_worlds, seed=seed, value_scale=VALUE_SCALE)
                    m["lookahead"] = duplicate_match(game, player, "heuristic", lookahead_games, seed=7_000_001)
                    m["lookahead"]["seconds"] = time.monotonic() - t0
                out.append(m)
                if progress is not None:
                    progress(m)
    return stats, out


def _ints(text):
    return tuple(int(x) for x in text.split(","))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=300)
    ap.add_argument("--worlds", type=int, default=64, help="the teacher's worlds (0: the heuristic)")
    ap.add_argument("--explore", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, nargs="+", default=[2000])
    ap.add_argument("--hidden", type=_ints, nargs="+", default=[(256, 256)], help="e.g. 256,256")
    ap.add_argument("--labels", nargs="+", choices=("outcome", "both", "search"), default=["search"],
                    help="what the value net learns (train.value_labels): the outcomes, the search's values, or both")
    ap.add_argument("--lookahead-games", type=int, default=0,
                    help="duplicate games of each net as a one-turn lookahead's value against HeuristicBot")
    ap.add_argument("--lookahead-worlds", type=int, default=16)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--no-augment", action="store_true", help="no colour renaming of the info rows")
    ap.add_argument("--cache", default=None, help="file for the labelled games (read back if it fits)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.games < 2:
        print("error: --games must be at least 2 (one game is held out)", file=sys.stderr)
        return 2
    t0 = time.monotonic()

    def show(m):
        if args.json:
            return
        base = min(m["value_heldout_mean_mse"], m["value_heldout_zero_mse"])
        line = (f"labels {m['labels']}, hidden {m['value_hidden']} steps <= {m['value_steps_max']}: "
                f"held-out MSE {m['value_heldout_mse']:.5f}, "
                f"mean predictor {m['value_heldout_mean_mse']:.5f}, zero {m['value_heldout_zero_mse']:.5f} "
                f"({100 * (1 - m['value_heldout_mse'] / base):+.1f}% below the better); "
                f"train MSE {m['value_train_mse']:.5f}; kept step {m['value_best_step']} of {m['value_steps']}; "
                f"{m['value_train_s']:.0f} s")
        if m.get("value_heldout_search_mse") is not None:
            line += (f"\n  the search's values of held-out games: MSE {m['value_heldout_search_mse']:.5f}, "
                     f"mean predictor {m['value_heldout_search_mean_mse']:.5f}")
        if "lookahead" in m:
            r = m["lookahead"]
            line += (f"\n  as a one-turn lookahead's value against HeuristicBot ({r['games']} games): "
                     f"{100 * r['win_rate']:.1f}% ({100 * r['win_rate_lo']:.1f}-{100 * r['win_rate_hi']:.1f}%), "
                     f"{r['margin']:+.1f} ({r['margin_lo']:+.1f}..{r['margin_hi']:+.1f}) points a game, "
                     f"{r['seconds']:.0f} s")
        print(line, flush=True)

    try:
        stats, rows = measure(args.games, args.worlds, args.explore, args.seed, args.steps, args.hidden,
                              args.batch, args.lr, not args.no_augment, args.cache, show, args.labels,
                              args.lookahead_games, args.lookahead_worlds)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    head = {"games": stats["games"], "label_s": stats["seconds"], "cached": stats["cached"],
            "held_out_games": rows[0]["value_heldout_games"], "train_rows": rows[0]["value_train_rows"],
            "held_out_rows": rows[0]["value_heldout_rows"], "seconds": time.monotonic() - t0}
    if args.json:
        print(json.dumps({**head, "nets": rows}))
    else:
        how = "read back" if head["cached"] else f"labelled in {head['label_s']:.0f} s"
        print(f"{head['games']} games ({how}), "
              f"{head['held_out_games']} held out: {head['train_rows']} training rows, "
              f"{head['held_out_rows']} held-out rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
