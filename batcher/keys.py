"""CURVE keys for the services: `python -m batcher.keys DIR`.

Writes DIR/server.key and DIR/server.key_secret (the batcher's and the
trainer's job endpoint's key pair), DIR/client.key and DIR/client.key_secret
(the key pair workers and the trainer use as clients), and
DIR/authorized/client.key (the public keys the servers accept). Copy DIR to
every machine; anyone without client.key_secret cannot talk to the services.
Pass it as `--curve-keys DIR` (batcher, worker) and `service.curve_keys`
(trainer).
"""
import argparse
import shutil
import sys
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

_authenticators = {}


def make_keys(directory):
    d = Path(directory)
    if (d / "server.key_secret").exists():
        raise FileExistsError(f"{d} already holds keys; remove them first to make new ones")
    d.mkdir(parents=True, exist_ok=True)
    zmq.auth.create_certificates(str(d), "server")
    zmq.auth.create_certificates(str(d), "client")
    (d / "authorized").mkdir(exist_ok=True)
    shutil.copy(d / "client.key", d / "authorized" / "client.key")
    for secret in d.glob("*.key_secret"):
        secret.chmod(0o600)
    return d


def _load(directory, name):
    path = Path(directory) / name
    if not path.exists():
        raise FileNotFoundError(f"CURVE key file {path} not found (make keys with `python -m batcher.keys DIR`)")
    return zmq.auth.load_certificate(str(path))


def secure_server(sock, directory):
    """Make `sock` a CURVE server accepting only DIR/authorized keys."""
    ctx = sock.context
    if id(ctx) not in _authenticators:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=str(Path(directory) / "authorized"))
        _authenticators[id(ctx)] = auth
    public, secret = _load(directory, "server.key_secret")
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def secure_client(sock, directory):
    """Make `sock` a CURVE client of the servers whose key is in DIR."""
    public, secret = _load(directory, "client.key_secret")
    server_public, _ = _load(directory, "server.key")
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m batcher.keys", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory")
    args = ap.parse_args(argv)
    try:
        d = make_keys(args.directory)
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"keys written to {d}: server.key(_secret), client.key(_secret), authorized/client.key")
    return 0


if __name__ == "__main__":
    sys.exit(main())
