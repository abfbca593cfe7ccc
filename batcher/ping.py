"""`python -m batcher.ping ENDPOINT [--timeout S]`: exit 0 if the batcher at
ENDPOINT answers a ping (used by the compose healthcheck), else print why and
exit 1."""
import argparse
import sys

from batcher.client import BatcherTimeout, wait_for_batcher


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m batcher.ping", description=__doc__)
    ap.add_argument("endpoint")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--curve-keys", default="", metavar="DIR")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        pong = wait_for_batcher(args.endpoint, timeout_s=args.timeout, curve_keys=args.curve_keys)
    except BatcherTimeout:
        print(f"no answer from the batcher at {args.endpoint} within {args.timeout:g} s", file=sys.stderr)
        return 1
    print(f"batcher at {args.endpoint}: pid {pong.get('pid')}, models {pong.get('models')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
