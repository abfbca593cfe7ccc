"""Helpers for the batcher test files (tests/test_batcher.py,
test_batcher_robustness.py, test_service_ceiling.py, test_wire_layout.py and
others): in-process and subprocess batchers, raw DEALER sockets, a random
message generator for the fuzz test, and the games, nets, rows and the
module-scoped kuhn batcher fixture those files share.

Everything here is bounded: every wait has a timeout, every socket is closed
with linger 0 and every subprocess is killed by the context managers.
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
import zmq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from batcher import protocol as P  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from batcher.server import Batcher, BatcherOptions  # noqa: E402

PY = sys.executable
# The batchers these tests start run on this device: cpu by default; on a GPU
# box `DEEPCFR_TEST_DEVICE=cuda pytest tests/test_batcher.py` runs the same
# suite against the CUDA path (scripts/gpu_check.sh does).
DEVICE = os.environ.get("DEEPCFR_TEST_DEVICE", "cpu")


# ---------------------------------------------------------------------------
# ports and subprocesses

def stop_processes(procs, timeout=10):
    """Terminate every process still running, then kill any that outlives `timeout`."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_cli(args, timeout=60):
    """Run `python <args>` in the repo root; returns CompletedProcess (text)."""
    return subprocess.run([PY, *args], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


def ping(endpoint, timeout_s=1.0, context=None):
    """The pong header from the batcher at `endpoint`, or None within timeout_s."""
    ctx = context or zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(endpoint)
        s.send_multipart(P.pack({"type": P.PING, "id": "ping"}))
        if not s.poll(int(timeout_s * 1000)):
            return None
        return P.unpack_header(s.recv_multipart()[0])
    finally:
        s.close(0)


class BatcherProcess:
    """`python -m batcher ...` as a subprocess on a fixed loopback port."""

    def __init__(self, port=None, args=(), log_path=None):
        self.port = port or free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.args = list(args)
        self.log_path = log_path
        self.proc = None
        self._log = None

    def start(self, ready_timeout=60.0):
        assert self.proc is None or self.proc.poll() is not None
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([PY, "-m", "batcher", "--bind", self.endpoint, "--device", DEVICE,
                                      "--log-interval", "0", "--torch-threads", "1", *self.args],
                                     cwd=ROOT, env=subprocess_env(), stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"batcher exited with {self.proc.returncode} while starting"
                                   f" (log: {self.log_path})")
            if ping(self.endpoint, 0.5) is not None:
                return self
        raise RuntimeError(f"batcher at {self.endpoint} did not answer within {ready_timeout} s")

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self):
        """Resident set size of the batcher process (VmRSS, kB)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


# ---------------------------------------------------------------------------
# in-process batcher

class InProcessBatcher:
    """A Batcher on tcp://127.0.0.1:* serving in a background thread, with its
    own zmq.Context. `models` is {model_id: (net, version)}."""

    def __init__(self, models, **options):
        opts = dict(bind="tcp://127.0.0.1:*", device=DEVICE, log_interval_s=0)
        opts.update(options)
        self.ctx = zmq.Context()
        self.batcher = Batcher(BatcherOptions(**opts), context=self.ctx)
        for mid, (net, version) in models.items():
            self.batcher.install(mid, net, version, net.spec())
        self.endpoint = self.batcher.endpoint
        self.errors = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self._sockets = []

    def _serve(self):
        try:
            self.batcher.serve(max_seconds=300)
        except BaseException as e:  # recorded: a crashed serve loop fails the test
            self.errors.append(e)

    def start(self):
        self.thread.start()
        return self

    def dealer(self, rcvhwm=100000):
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, rcvhwm)
        s.setsockopt(zmq.SNDHWM, 100000)
        s.connect(self.endpoint)
        self._sockets.append(s)
        return s

    def client(self, timeout_s=10.0, resend_s=5.0):
        from batcher.client import BatcherClient
        c = BatcherClient(self.endpoint, timeout_s=timeout_s, resend_s=resend_s, context=self.ctx)
        self._sockets.append(c.sock)
        return c

    def serving(self):
        return self.thread.is_alive() and not self.errors

    def close(self):
        self.batcher.stop()
        self.thread.join(10)
        for s in self._sockets:
            if not s.closed:
                s.close(0)
        if not self.thread.is_alive():
            self.batcher.close()
            self.ctx.destroy(linger=0)     # closes anything a failed test left open

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# raw sockets

def recv_reply(sock, timeout_ms=5000):
    """(header dict, payload frames) of the next reply on a DEALER, or None."""
    if not sock.poll(timeout_ms):
        return None
    frames = sock.recv_multipart()
    return msgpack.unpackb(frames[0], raw=False), frames[1:]


def exchange(sock, frames, timeout_ms=5000):
    sock.send_multipart(frames)
    return recv_reply(sock, timeout_ms)


def header(**fields):
    """A msgpack header with v=1 unless fields say otherwise."""
    return msgpack.packb({"v": P.PROTOCOL_VERSION, **fields}, use_bin_type=True)


def infer_frames(model, rows, req_id=1, dtype=None):
    rows = np.ascontiguousarray(rows, dtype=dtype or np.float32)
    return [header(type=P.INFER, id=req_id, model=model, rows_dtype=str(rows.dtype), rows_shape=list(rows.shape)),
            rows.tobytes()]


# ---------------------------------------------------------------------------
# fuzz messages

_TYPES = [P.INFER, P.WEIGHTS, P.STATS, P.PING, P.RESULT, P.ERROR, P.ACK, P.PONG, "", "INFER", "x" * 40]
_DTYPES = ["uint8", "float16", "float32", "int64", "float64", "int8", "bool", "", "<f4", None, 3, b"uint8"]
_SCALARS = [0, 1, 2, -1, 99, 2 ** 31, 2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1, True, False, None, 1.5, -0.0,
            float("nan"), "0", "", b"\x00\xff", [], {}, [1, 2], {"a": 1}]


class Fuzzer:
    """Random but valid-looking messages. `cols` is a real model's input size,
    so some infer messages are accepted (and answered with results)."""

    def __init__(self, seed, cols, model_ids=(0, 1)):
        self.rng = random.Random(seed)
        self.cols = cols
        self.model_ids = list(model_ids)

    def _bytes(self, lo=0, hi=64):
        r = self.rng
        n = r.randint(lo, hi) if r.random() < 0.97 else r.randint(hi, 8192)
        return r.randbytes(n)

    def _value(self, depth=0):
        r = self.rng
        k = r.random()
        if k < 0.5 or depth > 2:
            return r.choice(_SCALARS)
        if k < 0.65:
            return r.randint(-(2 ** 40), 2 ** 40)
        if k < 0.75:
            return "".join(r.choice("abcxyz_ \u00e9") for _ in range(r.randint(0, 12)))
        if k < 0.85:
            return [self._value(depth + 1) for _ in range(r.randint(0, 4))]
        return {r.choice(["v", "type", "id", "model", "x", ""]): self._value(depth + 1) for _ in range(r.randint(0, 3))}

    def _shape(self):
        r = self.rng
        k = r.random()
        if k < 0.6:
            return [r.choice([0, 1, 2, 3, 7, 64]), r.choice([self.cols, self.cols, 0, 1, self.cols + 1])]
        if k < 0.8:
            return [r.choice([-1, 0, 1, 2 ** 20, 2 ** 31, 2 ** 62, True, 1.0, "3"])
                    for _ in range(r.randint(0, 3))]
        return self._value()

    def _spec(self):
        r = self.rng
        if r.random() < 0.3:
            return self._value()
        small = lambda: r.choice([-1, 0, 1, 2, 3, 8, self.cols, 1.5, "4", None, True, []])  # noqa: E731
        spec = {"input_size": small(), "num_actions": small(),
                "hidden": r.choice([[small() for _ in range(r.randint(0, 3))], small(), "ab"])}
        for key in list(spec):
            if r.random() < 0.15:
                del spec[key]
        return spec

    def _header_fields(self):
        r = self.rng
        fields = {}
        if r.random() < 0.92:
            fields["v"] = P.PROTOCOL_VERSION if r.random() < 0.85 else r.choice(_SCALARS)
        if r.random() < 0.95:
            fields["type"] = (r.choice([P.INFER] * 6 + [P.WEIGHTS] * 3 + _TYPES) if r.random() < 0.9
                              else self._value())
        if r.random() < 0.8:
            fields["id"] = self._value()
        t = fields.get("type")
        if (t == P.INFER or r.random() < 0.2) and r.random() < 0.3:       # segmented: one frame per model
            k = r.choice([1, 2, 2, 3])
            if r.random() < 0.9:
                fields["models"] = ([r.choice(self.model_ids) for _ in range(k)] if r.random() < 0.7
                                    else r.choice([[], list(range(P.MAX_SEGMENTS + 1)), self._value(), [True]]))
            if r.random() < 0.9:
                fields["rows_dtype"] = r.choice(_DTYPES[:3]) if r.random() < 0.6 else r.choice(_DTYPES)
            if r.random() < 0.9:
                fields["rows_shapes"] = ([self._shape() for _ in range(k)] if r.random() < 0.8
                                         else r.choice([self._value(), [self._shape()] * (k + 1)]))
        elif t == P.INFER or r.random() < 0.2:
            if r.random() < 0.9:
                fields["model"] = r.choice(self.model_ids) if r.random() < 0.6 else r.choice(_SCALARS)
            if r.random() < 0.9:
                fields["rows_dtype"] = r.choice(_DTYPES[:3]) if r.random() < 0.6 else r.choice(_DTYPES)
            if r.random() < 0.9:
                fields["rows_shape"] = self._shape()
        if t == P.WEIGHTS or r.random() < 0.1:
            fields["model"] = r.choice([0, 1, 5]) if r.random() < 0.7 else r.choice(_SCALARS)
            fields["version"] = r.randint(-5, 10 ** 6) if r.random() < 0.7 else r.choice(_SCALARS)
            fields["spec"] = self._spec()
        for _ in range(r.randint(0, 2)):
            fields[r.choice(["extra", "adv_dtype", "adv_shape", "code", "stats"])] = self._value()
        return fields

    def _payload_for(self, fields):
        """Frames that sometimes match the header's dtype/shape(s) exactly."""
        r = self.rng
        shapes = fields.get("rows_shapes")
        if isinstance(shapes, list) and shapes and r.random() < 0.8:
            frames = [f for shape in shapes for f in self._frames_for(shape, fields.get("rows_dtype"))[:1]]
            if r.random() < 0.1:
                frames = frames[:-1] if r.random() < 0.5 else frames + [self._bytes()]
            return frames
        return self._frames_for(fields.get("rows_shape"), fields.get("rows_dtype"))

    def _frames_for(self, shape, dtype):
        r = self.rng
        if (r.random() < 0.5 and isinstance(shape, list) and len(shape) == 2 and dtype in P.WIRE_DTYPES
                and all(type(s) is int and 0 <= s <= 4096 for s in shape)):
            n = shape[0] * shape[1] * np.dtype(P.WIRE_DTYPES[dtype]).itemsize
            if r.random() < 0.8:
                arr = np.frombuffer(r.randbytes(n), dtype=np.uint8)
                if dtype != "uint8":   # finite values, so accepted rows give finite answers
                    arr = np.asarray(r.choices(range(-3, 4), k=n // np.dtype(P.WIRE_DTYPES[dtype]).itemsize),
                                     dtype=P.WIRE_DTYPES[dtype])
                return [arr.tobytes()]
            return [r.randbytes(max(0, n + r.choice([-1, 1])))]
        return [self._bytes() for _ in range(r.choice([0, 0, 1, 1, 1, 2, 3]))]

    def message(self):
        """One multipart message (a list of 1+ frames) for a DEALER socket."""
        r = self.rng
        k = r.random()
        if k < 0.003:      # over the 64 KiB application limit, under the transport limit
            return [header(type=r.choice([P.INFER, P.PING, P.WEIGHTS]), id=1), r.randbytes(70_000)]
        if k < 0.12:       # random bytes in random frames
            return [self._bytes(0, 32) for _ in range(r.randint(1, 4))]
        if k < 0.18:       # valid msgpack that is not a map (or a map with non-string keys)
            obj = r.choice([self._value(1), [self._value()], {1: "x", "v": 1, "type": P.PING}, {b"v": 1}])
            return [msgpack.packb(obj, use_bin_type=True),
                    *[self._bytes() for _ in range(r.randint(0, 2))]]
        fields = self._header_fields()
        head = msgpack.packb(fields, use_bin_type=True)
        if r.random() < 0.1:   # a corrupted header (flipped or truncated bytes)
            b = bytearray(head)
            if b and r.random() < 0.5:
                for _ in range(r.randint(1, 3)):
                    b[r.randrange(len(b))] = r.randrange(256)
            else:
                b = b[:r.randint(0, len(b))]
            head = bytes(b)
        return [head, *self._payload_for(fields)]


# ---------------------------------------------------------------------------
# games, nets and rows shared by the batcher, robustness, wire-layout and
# service-ceiling tests, and the module-scoped kuhn batcher subprocess

HIDDEN = (16, 16)
ATOL = 1e-5
LEDUC = engine.load_game("leduc_poker")
KUHN = engine.load_game("kuhn_poker")
COLS = LEDUC.information_state_tensor_size()
LC = engine.load_game("lost_cities", max_turns=200)
# the default Lost Cities traversal, shortened: sampled roots, a short depth, heuristic rollouts
LC_CFG = dict(algorithm="external", max_depth=2, prefix_max=30, rollouts=1, rollout_policy="game",
              value_scale=0.01)


def forward(net, rows):
    with torch.inference_mode():
        return net(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))).float().numpy()


def leduc_nets():
    """Leduc-sized nets for models 0 and 1, seeded as `--init-game` seeds them."""
    return {0: net_for_game(LEDUC, HIDDEN, seed=0), 1: net_for_game(LEDUC, HIDDEN, seed=1)}


def nets_for(game):
    return {0: net_for_game(game, HIDDEN, seed=0), 1: net_for_game(game, HIDDEN, seed=1)}


def served(nets, version=0):
    """{model: (net, version)} for InProcessBatcher."""
    return {m: (net, version) for m, net in nets.items()}


def int_rows(n, cols, seed=0, hi=4):
    return np.random.default_rng(seed).integers(0, hi, (n, cols)).astype(np.float32)


def segmented_frames(models, arrays, req_id=1, **extra):
    head = {"type": P.INFER, "id": req_id, "models": models, **P.arrays_header("rows", arrays), **extra}
    return P.pack(head, *[np.ascontiguousarray(a) for a in arrays])


def rows_of(kind, n, cols=COLS, seed=0):
    """float32 rows whose narrowest exact wire dtype is `kind`."""
    rng = np.random.default_rng(seed)
    if kind == "uint8":
        x = rng.integers(0, 256, (n, cols)).astype(np.float32)
        x[0, 0] = 255.0
    elif kind == "float16":
        x = (rng.integers(-40, 40, (n, cols)) / 8.0).astype(np.float32)
        x[0, 0] = -1.5
    else:
        x = rng.standard_normal((n, cols)).astype(np.float32)
    assert P.compact_rows(x)[0] == kind
    return x


def assert_serves(srv, nets, model=0, n=3):
    """A ping and a valid infer on fresh sockets succeed with the right answer."""
    assert srv.serving(), srv.errors
    s = srv.dealer()
    got = exchange(s, P.pack({"type": P.PING, "id": "p"}), 5000)
    assert got is not None and got[0]["type"] == P.PONG and got[0]["id"] == "p"
    rows = rows_of("float32", n, seed=99)
    got = exchange(s, infer_frames(model, rows, req_id=12345), 5000)
    assert got is not None, "no reply to a valid infer"
    head, frames = got
    assert head["type"] == P.RESULT and head["id"] == 12345, head
    adv = P.decode_array(head, "adv", frames[0])
    np.testing.assert_allclose(adv, forward(nets[model], rows), atol=ATOL, rtol=0)
    s.close(0)


@pytest.fixture(scope="module")
def kuhn_batcher(tmp_path_factory):
    log = tmp_path_factory.mktemp("kuhn_batcher") / "batcher.log"
    with BatcherProcess(args=["--init-game", "kuhn_poker", "--hidden", "16", "16"], log_path=log) as bp:
        bp.start()
        yield bp
