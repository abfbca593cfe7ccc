"""What colour renaming costs a training step. `python -m studies.lc_augment`

train.augment_colours renames every minibatch row's colours
(agents.symmetry.ColourAugment) before the step: in numpy when training on
the CPU, as tensors on the training device otherwise (trainer.learn.
train_net picks). This times the renaming of one batch alone both ways (the
tensors on --device), then strategy-net training steps on --device (one
torch thread) with and without it, alternating --rounds times in the same
process so that both see the same machine load. Rows are the heuristic's
decisions in --games self-play games (the classic game with the derived
segments, as the training configs use).
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import engine
from batcher.networks import net_for_game
from studies.lc_imitation import _Rows
from trainer.learn import strategy_loss, train_net
from agents.symmetry import ColourAugment
from trainer.warmstart import heuristic_rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_augment", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=400, help="training steps per timing")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--device", default="cpu", help="where the training steps and the tensor renaming run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: this torch build sees no CUDA device")
    game = engine.load_game("lost_cities", max_turns=200, features=1)
    _, rows = heuristic_rows(game, args.games, seed=1, advantage=0.2)
    augment = ColourAugment(game)
    rng = np.random.default_rng(0)
    batch = _Rows(rows).sample(args.batch_size, rng)
    tensors = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
    out = {"device": str(device), "plain_ms": [], "renamed_ms": []}
    for key, rows_in in (("rename_ms", batch), ("rename_tensors_ms", tensors)):
        augment(rows_in, rng)                       # the device's first call moves the layouts there
        t = time.perf_counter()
        for _ in range(args.steps):
            augment(rows_in, rng)
        if device.type == "cuda":
            torch.cuda.synchronize()
        out[key] = (time.perf_counter() - t) / args.steps * 1e3
    for _ in range(args.rounds):
        for key, aug in (("plain_ms", None), ("renamed_ms", augment)):
            net = net_for_game(game, hidden=tuple(args.hidden), seed=0).to(device)
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            t = time.perf_counter()
            train_net(net, _Rows(rows), args.steps, args.batch_size, opt, device,
                      np.random.default_rng(0), strategy_loss, augment=aug)
            out[key].append((time.perf_counter() - t) / args.steps * 1e3)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"renaming one batch of {args.batch_size}: {out['rename_ms']:.2f} ms in numpy, "
              f"{out['rename_tensors_ms']:.2f} ms as tensors on {device}")
        for i, (p, r) in enumerate(zip(out["plain_ms"], out["renamed_ms"])):
            print(f"round {i}: a training step on {device} {p:.2f} ms plain, {r:.2f} ms renamed ({r / p:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
