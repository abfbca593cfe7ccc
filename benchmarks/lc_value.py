"""How well the value net predicts the outcome of Lost Cities games it has not seen.
`python -m benchmarks.lc_value [--games 300] [--worlds 64] [--explore 0.1] [--seed 1] [--procs 2]
                               [--steps 2000 ...] [--hidden 256,256 ...] [--batch 512] [--lr 1e-3]
                               [--no-augment] [--cache PATH] [--json]`

Plays the warm start's self-play games (trainer.warmstart.heuristic_rows:
the game of configs/lost_cities_cpu.yaml, the lookahead teacher over
--worlds redealt worlds, --explore random moves), then trains a value net
(trainer.value.train_value, as a run with train.value_steps does) once per
--steps x --hidden pair (--steps a ceiling: the training stops early by the
error on validation games), a tenth of the games held out whole, and prints its
held-out squared error next to the mean predictor's (the training rows' mean
target) and the zero predictor's, in traversal value units (points * 0.01).
--cache keeps the labelled games in a file, so that further nets need not
play them again. The same seed gives the same games and split.
"""
import argparse
import json
import sys
import time

GAME = {"max_turns": 200, "features": 1}      # configs/lost_cities_cpu.yaml's game
VALUE_SCALE = 0.01                            # and its traversal.value_scale


def measure(games=300, worlds=64, explore=0.1, seed=1, procs=1, steps=(2000,), hidden=((256, 256),), batch=512,
            lr=1e-3, augment=True, cache=None, progress=None):
    """(label stats, one dict of trainer.value.train_value's metrics per steps x hidden)."""
    import numpy as np
    import torch

    import engine
    from batcher.networks import MLP
    from trainer.symmetry import ColourAugment
    from trainer.value import train_value
    from trainer.warmstart import heuristic_rows
    torch.set_num_threads(1)
    game = engine.load_game("lost_cities", **GAME)
    stats = {}
    adv, _ = heuristic_rows(game, games, seed=(seed + 1) * 1000003, advantage=0.2, worlds=worlds, explore=explore,
                            procs=procs, cache=cache, stats=stats)
    out = []
    for h in hidden:
        for n in steps:
            torch.manual_seed(seed)
            net = MLP(game.information_state_tensor_size(), 1, h, input_scale=game.input_scale())
            opt = torch.optim.Adam(net.parameters(), lr=lr)
            m = train_value(net, opt, adv, VALUE_SCALE, n, batch, "cpu", np.random.default_rng(seed), seed=seed,
                            augment=ColourAugment(game) if augment else None)
            m["value_hidden"], m["value_steps_max"] = list(h), n
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
    ap.add_argument("--procs", type=int, default=1, help="processes that play the games")
    ap.add_argument("--steps", type=int, nargs="+", default=[2000])
    ap.add_argument("--hidden", type=_ints, nargs="+", default=[(256, 256)], help="e.g. 256,256")
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
        print(f"hidden {m['value_hidden']} steps <= {m['value_steps_max']}: held-out MSE {m['value_heldout_mse']:.5f}, "
              f"mean predictor {m['value_heldout_mean_mse']:.5f}, zero {m['value_heldout_zero_mse']:.5f} "
              f"({100 * (1 - m['value_heldout_mse'] / base):+.1f}% below the better); "
              f"train MSE {m['value_train_mse']:.5f}; kept step {m['value_best_step']} of {m['value_steps']}; "
              f"{m['value_train_s']:.0f} s", flush=True)

    try:
        stats, rows = measure(args.games, args.worlds, args.explore, args.seed, args.procs, args.steps, args.hidden,
                              args.batch, args.lr, not args.no_augment, args.cache, show)
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
