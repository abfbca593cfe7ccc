"""`python -m batcher`: the central inference service.

Workers send info-state rows over ZeroMQ; the batcher answers with advantages
from one batched forward per model. The trainer pushes versioned weights.
"""
import argparse
import gc
import logging
import sys

from batcher.server import Batcher, BatcherOptions, BindError, DeviceError, install_signal_handlers


def build_parser():
    d = BatcherOptions()
    ap = argparse.ArgumentParser(prog="python -m batcher", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default=d.device,
                    help="auto (cuda if available, else cpu), cuda, cuda:N or cpu; cuda without CUDA is an error")
    ap.add_argument("--bind", default=d.bind,
                    help="ZeroMQ endpoint to bind; loopback by default, tcp://0.0.0.0:PORT to serve other machines")
    ap.add_argument("--max-batch", type=int, default=d.max_batch, help="most rows in one forward")
    ap.add_argument("--max-wait-us", type=int, default=d.max_wait_us,
                    help="longest wait after a model's oldest queued row before its forward runs")
    ap.add_argument("--autocast", choices=["none", "bf16", "fp16"], default=d.autocast,
                    help="mixed-precision forward (GPU)")
    ap.add_argument("--max-message-mb", type=float, default=d.max_message_bytes / (1 << 20),
                    help="larger messages get a too_large error reply")
    ap.add_argument("--log-interval", type=float, default=d.log_interval_s,
                    help="seconds between periodic log lines (0 = off)")
    ap.add_argument("--torch-threads", type=int, default=d.torch_threads,
                    help="torch CPU threads (0 = torch default)")
    ap.add_argument("--init-game", default=None, metavar="GAME",
                    help="start with freshly initialised advantage nets (models 0 and 1) and a strategy "
                         "net (model 2) sized for GAME (lost_cities, leduc_poker, kuhn_poker); without it "
                         "the batcher waits for weights from the trainer")
    ap.add_argument("--game-param", action="append", default=[], metavar="KEY=VALUE",
                    help="game parameter for --init-game (repeatable), e.g. colours=6")
    ap.add_argument("--hidden", type=int, nargs="+", default=[512, 512, 512],
                    help="hidden layer widths for --init-game")
    ap.add_argument("--curve-keys", default="", metavar="DIR",
                    help="CURVE authentication with the keys in DIR (python -m batcher.keys DIR): "
                         "only clients holding DIR/client.key_secret can connect")
    ap.add_argument("--null-forward", action="store_true",
                    help="benchmark mode: answer every row with ones (the uniform policy) without running a "
                         "net, to measure the service's own cost; never for training")
    ap.add_argument("--forwards-in-flight", type=int, default=d.forwards_in_flight,
                    help="GPU: forwards launched before the oldest must be answered; the loop receives and "
                         "stages the next batch while the device computes (1 = wait for each forward)")
    ap.add_argument("--shm-dir", default=d.shm_dir, metavar="DIR",
                    help="take infer requests whose rows and answers sit in shared-memory files in DIR (workers "
                         "on this machine started with the same --shm-dir; e.g. a directory under /dev/shm); "
                         "empty: refuse them")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return ap


def parse_params(items):
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--game-param {item!r}: expected KEY=VALUE")
        try:
            params[key] = int(value)
        except ValueError:
            params[key] = value
    return params


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    opts = BatcherOptions(bind=args.bind, device=args.device, max_batch=args.max_batch,
                          max_wait_us=args.max_wait_us, autocast=args.autocast,
                          max_message_bytes=int(args.max_message_mb * (1 << 20)),
                          log_interval_s=args.log_interval, torch_threads=args.torch_threads,
                          curve_keys=args.curve_keys, null_forward=args.null_forward,
                          forwards_in_flight=args.forwards_in_flight, shm_dir=args.shm_dir)
    try:
        batcher = Batcher(opts)
        if args.init_game:
            import engine
            from batcher.networks import net_for_game
            game = engine.load_game(args.init_game, **parse_params(args.game_param))
            for model_id in (0, 1, 2):
                net = net_for_game(game, tuple(args.hidden), seed=model_id)
                batcher.install(model_id, net, 0, net.spec())
    except (DeviceError, BindError, ValueError, OSError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    install_signal_handlers(batcher)
    # everything imported and built so far (torch's modules, the nets) lives as
    # long as the process: out of the cyclic GC's way, so that the collections
    # triggered by each message's short-lived objects do not walk it
    gc.freeze()
    try:
        batcher.serve()
    finally:
        batcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
