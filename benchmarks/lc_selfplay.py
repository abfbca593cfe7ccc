"""Does self-play policy gradient make a trained agent stronger?
`python -m benchmarks.lc_selfplay RUN --budget-s 900 --out tuned.pt [--from prior] [--eval-games 2000]`

Loads RUN's strategy net (its latest checkpoint, or with --from prior its
warm-start prior), fine-tunes it by PPO self-play for --budget-s seconds on
the service, the trainer's own path (trainer/selfplay_stage.py: a batcher
and --workers local workers, started here and stopped at the end), and
saves it as a checkpoint (OUT, the loaded checkpoint with the strategy net
replaced), which every evaluation tool reads as a run. With --eval-games N
it then plays the tuned agent greedy on duplicate deals (agents.evaluate)
head to head against the agent it started from, against RUN's latest
agent, and against the rule-based bots.

Two timings save nothing: --speed-waves N plays N waves through the
service in float32 and in bfloat16 (seconds a wave, so a quiet box), and
--update-cpu ROWS gives the CPU seconds of one update of a ROWS-row wave
with the settings given next to the defaults (CPU time, so any box).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from agents.checkpoint import build_net, game_of, load_checkpoint, prior_checkpoint
from batcher.options import DeviceError, resolve_device
from trainer.checkpoint import write_durably
from trainer.config import apply_overrides, config_from_dict
from trainer.loop import Trainer
from agents.ppo import SelfPlay, SelfPlaySettings
from trainer.selfplay_stage import tune_on_service


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lc_selfplay", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory or checkpoint file")
    ap.add_argument("--from", dest="start", choices=("latest", "prior"), default="latest",
                    help="the agent to start from: the run's latest checkpoint or its warm-start prior")
    ap.add_argument("--out", help="where to save the tuned checkpoint (.pt); needed unless --speed-waves")
    ap.add_argument("--budget-s", type=float, default=600.0, help="seconds of self-play (default 600)")
    ap.add_argument("--waves", type=int, default=None, help="stop after this many waves instead")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the update (0: train.selfplay_threads of the run, auto by default)")
    ap.add_argument("--device", default="cpu", help="where the nets' forwards and updates run: cpu, cuda[:N] or auto")
    ap.add_argument("--eval-games", type=int, default=0, help="duplicate games per evaluation afterwards (0: none)")
    ap.add_argument("--eval-seed", type=int, default=777)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="local workers that play the games (default 1)")
    ap.add_argument("--run-dir", default=None, help="where the services' logs go (default: a temporary directory)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="more overrides of the run's config, e.g. service.max_wait_us=100")
    ap.add_argument("--speed-waves", type=int, default=0,
                    help="time N waves in float32 and in bfloat16 from the same agent and print both (no --out)")
    ap.add_argument("--update-cpu", type=int, default=0, metavar="ROWS",
                    help="CPU seconds of one update of a ROWS-row wave on one thread, these settings against the "
                         "defaults (no --out; the load beside it does not enter a CPU-time figure)")
    for field, default in SelfPlaySettings.__dataclass_fields__.items():
        if field == "critic_hidden":
            ap.add_argument("--critic-hidden", type=widths, default=default.default, metavar="W,W",
                            help="the critic's hidden layer widths, e.g. 128,128 "
                                 f"(default {','.join(map(str, default.default))})")
            continue
        ap.add_argument("--" + field.replace("_", "-"), type=type(default.default), default=default.default,
                        help=f"agents.ppo.SelfPlaySettings.{field} (default {default.default})")
    args = ap.parse_args(argv)
    if args.speed_waves < 0 or args.update_cpu < 0:
        ap.error(f"--speed-waves and --update-cpu must be >= 0, got {args.speed_waves} and {args.update_cpu}")
    if not args.out and not args.speed_waves and not args.update_cpu:
        ap.error("--out is needed (where to save the tuned checkpoint), unless --speed-waves or --update-cpu")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        args.device = str(resolve_device(args.device))
    except DeviceError as e:
        ap.error(str(e))
    source = prior_checkpoint(args.run) if args.start == "prior" else args.run
    ckpt = load_checkpoint(source)
    game = game_of(ckpt)
    if game.name != "lost_cities":
        raise SystemExit(f"lc_selfplay: {ckpt['path']} is a {game.name} run; self-play here is for lost_cities")
    settings = SelfPlaySettings(**{f: getattr(args, f) for f in SelfPlaySettings.__dataclass_fields__})
    if args.update_cpu:
        return update_cpu(ckpt, game, settings, args.update_cpu, args.seed)
    with tempfile.TemporaryDirectory(prefix="lc_selfplay_") as scratch:   # the services' logs, unless --run-dir
        if args.speed_waves:
            return speed(ckpt, settings, args, scratch)
        return tune(ckpt, settings, args, scratch)


def widths(text):
    """"128,128" -> (128, 128): hidden layer widths, each an int >= 1."""
    try:
        out = tuple(int(w) for w in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected widths like 128,128, got {text!r}")
    return out


def tune(ckpt, settings, args, scratch):
    """--budget-s (or --waves) of self-play, the tuned agent saved as --out
    and, with --eval-games, judged."""
    trainer = service_trainer(ckpt, args, scratch)
    stats = tune_on_service(trainer, settings, budget_s=None if args.waves else args.budget_s, waves=args.waves,
                            seed=args.seed)
    net = trainer.nets["strategy"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tuned = {k: v for k, v in ckpt.items() if k != "path"}
    tuned["nets"] = dict(ckpt["nets"], strategy={k: v.detach().cpu() for k, v in net.state_dict().items()})
    tuned.update(critic={k: v.detach().cpu() for k, v in trainer.critic.state_dict().items()},
                 critic_spec=trainer.critic.spec(), critic_value_scale=trainer.critic_value_scale)
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



def service_trainer(ckpt, args, scratch):
    """A Trainer of the checkpoint's config and nets whose services are
    --workers local workers and a batcher, its logs in --run-dir (else in a
    fresh directory under `scratch`, removed at the end)."""
    cfg = config_from_dict(ckpt["config"])
    apply_overrides(cfg, [f"service.workers={args.workers}", f"train.device={args.device}",
                          "train.selfplay_budget_s=0", "train.time_limit_s=0", "run.tensorboard=false"])
    if args.threads > 0:
        apply_overrides(cfg, [f"train.torch_threads={args.threads}", f"train.selfplay_threads={args.threads}"])
    apply_overrides(cfg, args.set)
    run_dir = args.run_dir or tempfile.mkdtemp(dir=scratch)
    trainer = Trainer(cfg, run_dir, log=lambda line: print(line, flush=True))
    for name, net in trainer.nets.items():
        net.load_state_dict(ckpt["nets"][name])
    return trainer


def speed(ckpt, settings, args, scratch):
    """Seconds a policy wave through the service with the update in float32
    and in bfloat16 from the same agent, each measured twice (none, bf16,
    none, bf16), printed side by side."""
    times = {"none": [], "bf16": []}
    print(f"self-play speed from {ckpt['path']}: {args.speed_waves} policy waves a measurement, "
          f"{settings.games} games a wave, {settings.epochs} epochs, {args.workers} worker(s), on {args.device}",
          flush=True)
    for autocast in ("none", "bf16", "none", "bf16"):
        trainer = service_trainer(ckpt, args, scratch)
        waves = settings.critic_waves + args.speed_waves
        stats = tune_on_service(trainer, replace(settings, autocast=autocast), waves=waves, seed=args.seed)
        per_wave = stats["selfplay_policy_s"] / args.speed_waves
        times[autocast].append(per_wave)
        print(f"  {autocast:>4}: {per_wave:.2f} s a wave (waited {stats['selfplay_wait_s']:.2f} s for the last; "
              f"{stats['selfplay_wave_decisions']:,} decisions in it, played in {stats['selfplay_play_s']:.2f} s); "
              f"last wave's kl {stats.get('selfplay_kl', float('nan')):.4f}", flush=True)
    f32, b16 = min(times["none"]), min(times["bf16"])
    print(json.dumps({"float32_s_per_wave": round(f32, 3), "bf16_s_per_wave": round(b16, 3),
                      "bf16_waves_per_float32_wave": round(f32 / b16, 2)}), flush=True)
    return {"float32_s_per_wave": f32, "bf16_s_per_wave": b16}


def update_cpu(ckpt, game, settings, rows, seed):
    """CPU seconds (time.thread_time, one torch thread) of SelfPlay.update on
    one wave of `rows` decisions from the checkpoint's strategy net, for
    `settings` and for the defaults (the baseline), each the lesser of two
    after a warm-up. The wave is made up (random legal masks, moves and
    advantages, no KL stop): an update's work depends on its size only."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    T, A = game.information_state_tensor_size(), game.num_distinct_actions()
    mask = rng.random((rows, A)) < 0.15
    action = rng.integers(0, A, rows)
    mask[np.arange(rows), action] = True
    wave = {"info": (rng.random((rows, T)) < 0.1).astype(np.uint8), "mask": mask, "action": action,
            "logp": np.full(rows, -1.5, np.float32)}
    adv, target = rng.standard_normal(rows), 0.3 * rng.standard_normal(rows)
    out = {}
    for name, s in (("defaults", SelfPlaySettings()), ("these settings", settings)):
        tuner = SelfPlay(game, build_net(ckpt, "strategy"), replace(s, target_kl=0), seed=seed)
        tuner.update(wave, adv, target)
        times = []
        for _ in range(2):
            t0 = time.thread_time()
            tuner.update(wave, adv, target)
            times.append(time.thread_time() - t0)
        out[name] = min(times)
        print(f"  {name}: {out[name]:.2f} s of CPU an update of {rows:,} rows (critic "
              f"{'x'.join(map(str, s.critic_hidden))} on {s.critic_epochs or s.epochs} of {s.epochs} passes, "
              f"minibatches of {s.minibatch}, {tuner.precision()})", flush=True)
    print(json.dumps({"update_cpu_s": round(out["these settings"], 3), "defaults_cpu_s": round(out["defaults"], 3),
                      "ratio": round(out["these settings"] / out["defaults"], 3)}), flush=True)
    return out


if __name__ == "__main__":
    main()
