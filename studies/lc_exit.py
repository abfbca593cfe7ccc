"""Which labels should an expert-iteration round's fresh net learn?
`python -m studies.lc_exit RUN --teacher-share pool 0.5 0 --reference OTHER`

RUN is a run with expert-iteration rounds (train.exit_rounds > 0): it keeps
the warm start's labelled games (warm_start_rows.npz, the lookahead
teacher's labels) and each round's (exit_rows_R.npz, the search over the
agent's labels of the agent's games). For each --teacher-share S this
trains a fresh strategy net of the run's shape, with the run's batch size,
learning rate, colour renaming and pretraining steps, on:
  pool  every row alike (what the trainer does: the teacher's rows are the
        share of the pool they happen to be);
  S     a share S of every batch from the teacher's rows and 1 - S from the
        rounds' (0: the rounds' labels alone).
The rounds' held-out games are the trainer's own (the same split), so the
agreement and squared error on them compare with the run's
exit_heldout_* metrics. Each net is saved as a checkpoint (OUT/share-S.pt,
the run's prior.pt with the strategy net replaced) and played greedy on
duplicate deals (agents.evaluate) against --reference (a run or checkpoint,
head to head) and the rule-based bots. No CFR: this compares the labels,
not the whole recipe.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from agents.checkpoint import load_checkpoint, prior_checkpoint
from batcher.networks import build_mlp
from trainer.config import config_from_dict
from trainer.learn import label_error, strategy_loss, train_net
from trainer.warmstart import exit_split_seed, hold_out_games, read_rows


class _Mix:
    """Minibatches from two fixed row sets, a share `share` from `a` (None:
    every row of both alike), each renamed by `augment` if given."""

    def __init__(self, a, b, share, augment=None):
        self.a, self.b, self.share, self.augment = a, b, share, augment
        self.pool = None if share is not None else {k: np.concatenate([a[k], b[k]]) for k in ("info", "target", "mask")}
        self.size = len(a["target"]) + len(b["target"])

    def sample(self, batch_size, rng):
        if self.pool is not None:
            idx = rng.integers(0, len(self.pool["target"]), size=batch_size)
            batch = {k: v[idx] for k, v in self.pool.items()}
        else:
            k = int(round(batch_size * self.share))
            ia = rng.integers(0, len(self.a["target"]), size=k)
            ib = rng.integers(0, len(self.b["target"]), size=batch_size - k)
            batch = {n: np.concatenate([self.a[n][ia], self.b[n][ib]]) for n in ("info", "target", "mask")}
        batch["weight"] = np.ones(batch_size, np.float32)
        return batch if self.augment is None else self.augment(batch, rng)


def load_labels(run):
    """(teacher's strategy rows, the rounds' strategy rows, the rounds'
    held-out strategy rows, the run's config) of a run with expert-iteration
    rounds, split as the trainer split them."""
    run = Path(run)
    cfg = config_from_dict(json.loads((run / "config.json").read_text()))
    adv_share = cfg.train.warm_start_advantage
    _, teacher, _ = read_rows(run / "warm_start_rows.npz", adv_share)
    rounds, tests = [], []
    r = 1
    while (run / f"exit_rows_{r}.npz").exists():
        adv, strat, _ = read_rows(run / f"exit_rows_{r}.npz", adv_share)
        _, strat, test, _ = hold_out_games(adv, strat, 0.1, exit_split_seed(cfg, r))
        rounds.append(strat)
        tests.append(test)
        r += 1
    if not rounds:
        raise SystemExit(f"{run} holds no exit_rows_1.npz: run it with train.exit_rounds > 0")
    cat = lambda parts: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}   # noqa: E731
    return teacher, cat(rounds), cat(tests), cfg


def train_one(share, teacher, rounds, cfg, prior, steps, seed, lr_decay=False):
    """A fresh strategy net of the prior's shape, trained as the trainer's
    pretraining trains it, on the mix `share`: (net, final loss)."""
    import engine
    from agents.symmetry import ColourAugment
    game = engine.load_game(cfg.game.name, **cfg.game.params)
    torch.manual_seed(seed)
    net = build_mlp(prior["net_spec"])
    for m in net.modules():                 # a fresh net: re-initialised, the prior's only for its shape
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.train.lr)
    augment = ColourAugment(game) if cfg.train.augment_colours else None
    loss = train_net(net, _Mix(teacher, rounds, share, augment), steps, cfg.train.batch_size, opt, "cpu",
                     np.random.default_rng(seed), strategy_loss, cfg.train.grad_clip, cosine_decay=lr_decay)
    return net.eval(), loss


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_exit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory with expert-iteration rounds")
    ap.add_argument("--teacher-share", nargs="+", default=["pool", "0.5", "0"],
                    help="'pool' or a share in [0, 1] of each batch from the teacher's rows")
    ap.add_argument("--steps", type=int, default=0, help="Adam steps (0: the run's train.warm_start_steps)")
    ap.add_argument("--reference", help="a run or checkpoint to play head to head")
    ap.add_argument("--opponents", default="heuristic,cautious", help="further opponents (agents.evaluate)")
    ap.add_argument("--games", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="the nets' seed")
    ap.add_argument("--lr-decay", action="store_true",
                    help="cosine decay of the learning rate to 0 over the steps (the pretraining has none)")
    ap.add_argument("--match-seed", type=int, default=777)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="lc_exit", help="folder for the nets' checkpoints and results.json")
    args = ap.parse_args(argv)
    shares = []
    for s in args.teacher_share:
        if s != "pool":
            try:
                v = float(s)
            except ValueError:
                ap.error(f"--teacher-share: {s!r} is neither 'pool' nor a number")
            if not 0.0 <= v <= 1.0:
                ap.error(f"--teacher-share: {s} is not in [0, 1]")
        shares.append(s)
    torch.set_num_threads(1)
    teacher, rounds, test, cfg = load_labels(args.run)
    prior = load_checkpoint(prior_checkpoint(args.run))
    steps = args.steps or cfg.train.warm_start_steps
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{args.run}: {len(teacher['target'])} teacher decisions, {len(rounds['target'])} of the rounds, "
          f"{len(test['target'])} held out; {steps} steps a net", flush=True)
    results = []
    for s in shares:
        t0 = time.perf_counter()
        net, loss = train_one(None if s == "pool" else float(s), teacher, rounds, cfg, prior, steps, args.seed,
                              args.lr_decay)
        score = label_error(net, test)
        path = out / f"share-{s}.pt"
        payload = {k: v for k, v in prior.items() if k not in ("path", "prior")}
        payload["nets"] = {**prior["nets"], "strategy": {n: v.detach().clone() for n, v in net.state_dict().items()}}
        torch.save(payload, path)
        opponents = ",".join(x for x in ([f"run:{args.reference}"] if args.reference else [])
                             + [args.opponents] if x)
        r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(path), "--greedy", "--opponent", opponents,
                            "--games", str(args.games), "--seed", str(args.match_seed), "--jobs", str(args.jobs),
                            "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"agents.evaluate failed on {path}: {r.stderr.strip().splitlines()[-1:]}")
        ev = json.loads(r.stdout)
        row = {"teacher_share": s, "loss": loss, "train_s": round(time.perf_counter() - t0, 1),
               **{f"heldout_{k}": v for k, v in score.items()},
               **{k: v for k, v in ev.items() if k.startswith("vs_")}}
        results.append(row)
        line = ", ".join(f"{k[3:-len('_margin')]} {ev[k]:+.1f} ({ev[k + '_lo']:+.1f}..{ev[k + '_hi']:+.1f}) "
                         f"{ev[k[:-len('margin')] + 'win_rate']:.1%}" for k in ev if k.endswith("_margin"))
        print(f"teacher share {s}: held-out agreement {score['agree']:.1%}, squared error {score['mse']:.4g} "
              f"(uniform {score['uniform_mse']:.4g}); {line}", flush=True)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
