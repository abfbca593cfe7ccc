"""`python -m trainer --config configs/NAME.yaml [--set section.key=value ...] [--resume RUN_DIR]`
`python -m trainer --config configs/NAME.yaml --run-dir RUN_DIR --auto-resume [--set ...]`

Deep CFR training. With no service endpoints configured it starts the batcher
and the workers itself (the embedded local default), so one command trains.
SIGTERM (docker stop, a Kubernetes pod's end, kill) stops it as Ctrl-C does:
the batcher and workers stopped, their directories removed, exit code 143;
the run goes on from its last checkpoint with --resume or --auto-resume.
"""
import argparse
import signal
import sys
import time
from pathlib import Path

from trainer.config import ConfigError, config_from_dict, load_config, apply_overrides, validate


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m trainer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, help="YAML config (configs/*.yaml); defaults if omitted")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config value (repeatable), e.g. --set train.iterations=20")
    ap.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    ap.add_argument("--run-dir", default=None, help="run directory (default: run.dir/run.name)")
    ap.add_argument("--auto-resume", action="store_true",
                    help="with --run-dir: if the run there has a checkpoint, resume it as --resume would "
                         "(--config is then ignored), else start it; for a trainer a scheduler restarts")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    from trainer import checkpoint as ck
    if args.auto_resume:
        if not args.run_dir or args.resume:
            print("error: --auto-resume needs --run-dir and excludes --resume", file=sys.stderr)
            return 2
        if ck.latest_checkpoint(args.run_dir) is not None:
            args.resume = args.run_dir
        else:
            print(f"{args.run_dir}: no checkpoint yet; starting the run")
    try:
        resume = None
        if args.resume:
            resume = ck.load_checkpoint(args.resume)
            cfg = config_from_dict(resume["config"])
            apply_overrides(cfg, args.set)
            validate(cfg)
            run_dir = Path(args.resume)
        else:
            cfg = load_config(args.config, args.set)
            name = cfg.run.name or f"{cfg.game.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            run_dir = Path(args.run_dir) if args.run_dir else Path(cfg.run.dir) / name
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from trainer.loop import Trainer
    from trainer.summary import final_summary
    stopped = []

    def stop(signum, frame):
        # raised in the main thread at its next bytecode: the trainer's finally blocks stop the services;
        # a second SIGTERM while they do is let pass
        if not stopped:
            stopped.append(signum)
            raise KeyboardInterrupt
    before = signal.signal(signal.SIGTERM, stop)
    try:
        trainer = Trainer(cfg, run_dir, resume=resume)
        metrics = trainer.run()
    except KeyboardInterrupt:
        last = ck.latest_checkpoint(run_dir)
        print(f"{'stopped by SIGTERM' if stopped else 'interrupted'}; services stopped; "
              + (f"the run goes on from {last} with --resume {run_dir}" if last else "no checkpoint was written yet"),
              file=sys.stderr)
        return 128 + signal.SIGTERM if stopped else 130
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, before)
    print("\n" + final_summary(metrics, run_dir, cfg, trainer.start_iteration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
