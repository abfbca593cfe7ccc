"""Does self-play policy gradient make a trained agent stronger?
`python -m benchmarks.lc_selfplay RUN --budget-s 900 --out tuned.pt [--from prior] [--eval-games 2000]`

Loads RUN's strategy net (its latest checkpoint, or with --from prior its
warm-start prior), fine-tunes it by PPO self-play (trainer.selfplay) for
--budget-s seconds, and saves it as a checkpoint (OUT, the loaded
checkpoint with the strategy net replaced), which every evaluation tool
reads as a run. With --eval-games N it then plays the tuned agent greedy on
duplicate deals (agents.evaluate) head to head against the agent it started
from, against RUN's latest agent, and against the rule-based bots.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from agents.checkpoint import build_net, game_of, load_checkpoint, prior_checkpoint
from trainer.checkpoint import write_durably
from trainer.selfplay import SelfPlay, SelfPlaySettings


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lc_selfplay", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory or checkpoint file")
    ap.add_argument("--from", dest="start", choices=("latest", "prior"), default="latest",
                    help="the agent to start from: the run's latest checkpoint or its warm-start prior")
    ap.add_argument("--out", required=True, help="where to save the tuned checkpoint (.pt)")
    ap.add_argument("--budget-s", type=float, default=600.0, help="seconds of self-play (default 600)")
    ap.add_argument("--waves", type=int, default=None, help="stop after this many waves instead")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--eval-games", type=int, default=0, help="duplicate games per evaluation afterwards (0: none)")
    ap.add_argument("--eval-seed", type=int, default=777)
    ap.add_argument("--jobs", type=int, default=2)
    for field, default in SelfPlaySettings.__dataclass_fields__.items():
        if field == "critic_hidden":
            continue
        ap.add_argument("--" + field.replace("_", "-"), type=type(default.default), default=default.default,
                        help=f"trainer.selfplay.SelfPlaySettings.{field} (default {default.default})")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    source = prior_checkpoint(args.run) if args.start == "prior" else args.run
    ckpt = load_checkpoint(source)
    game = game_of(ckpt)
    if game.name != "lost_cities":
        raise SystemExit(f"lc_selfplay: {ckpt['path']} is a {game.name} run; self-play here is for lost_cities")
    settings = SelfPlaySettings(**{f: getattr(args, f) for f in SelfPlaySettings.__dataclass_fields__
                                   if f != "critic_hidden"})
    net = build_net(ckpt, "strategy")
    tuner = SelfPlay(game, net, settings, seed=args.seed)
    print(f"self-play from {ckpt['path']}: {settings}", flush=True)
    stats = tuner.run(budget_s=None if args.waves else args.budget_s, waves=args.waves,
                      log=lambda line: print(line, flush=True))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tuned = {k: v for k, v in ckpt.items() if k != "path"}
    tuned["nets"] = dict(ckpt["nets"], strategy={k: v.detach().cpu() for k, v in net.state_dict().items()})
    tuned["selfplay"] = {"from": ckpt["path"], "settings": {k: getattr(settings, k) for k in
                                                           SelfPlaySettings.__dataclass_fields__},
                         **{k: v for k, v in stats.items() if isinstance(v, (int, float))}}
    write_durably(out, lambda f: torch.save(tuned, f))
    print(json.dumps({"out": str(out), **stats}), flush=True)
    if args.eval_games > 0:
        opponents = [f"run:{ckpt['path']}", "heuristic", "cautious"]
        if args.start == "prior":
            opponents.insert(1, f"run:{args.run}")
        cmd = [sys.executable, "-m", "agents.evaluate", str(out), "--greedy", "--opponent", ",".join(opponents),
               "--games", str(args.eval_games), "--seed", str(args.eval_seed), "--jobs", str(args.jobs)]
        print(" ".join(cmd), flush=True)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        print(f"evaluated in {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
