"""The batcher's bookkeeping: the models it holds, the infer requests and
their segments waiting in a model's queue, the forwards in flight, and its
counters (batcher/server.py runs the loop over them)."""
import collections
import math
import time

import numpy as np


class Model:
    __slots__ = ("net", "version", "spec", "input_size", "num_actions", "autocast", "max_wait_s")

    def __init__(self, net, version, spec, autocast=None, max_wait_s=None):
        self.net = net
        self.version = version
        self.spec = spec
        self.input_size = spec["input_size"]
        self.num_actions = spec["num_actions"]
        self.autocast = autocast        # this model's forward precision ("none", "bf16", "fp16"); None: the batcher's
        self.max_wait_s = max_wait_s    # how long its rows wait for more; None: the batcher's max_wait_us


class Request:
    """One infer message: its segments' answers are collected here until the
    last one is in, then the reply goes out (or one error, if any failed)."""
    __slots__ = ("identity", "req_id", "models", "parts", "versions", "left", "segmented", "failed", "adv_dtype",
                 "shm")

    def __init__(self, identity, req_id, models, segmented, adv_dtype, shm=None):
        self.adv_dtype = adv_dtype      # numpy dtype of the answer
        self.shm = shm                  # (slot bytes, its sequence view, seq, answer offsets), or None
        self.identity = identity
        self.req_id = req_id
        self.models = models
        self.parts = [None] * len(models)
        self.versions = [0] * len(models)
        self.left = len(models)
        self.segmented = segmented
        self.failed = False


class Pending:
    """One segment of a request, waiting in its model's queue."""
    __slots__ = ("request", "slot", "rows", "arrived")

    def __init__(self, request, slot, rows, arrived):
        self.request = request
        self.slot = slot
        self.rows = rows
        self.arrived = arrived


class Flight:
    """One forward launched on the device, its answers not yet sent: `out` is
    a numpy array (CPU, null forward) or a host tensor that is valid once
    `event` (None when already done) has completed."""
    __slots__ = ("model_id", "version", "batch", "total", "out", "event", "t0", "waits")

    def __init__(self, model_id, version, batch, total, out, event, t0, waits):
        self.model_id = model_id
        self.version = version
        self.batch = batch
        self.total = total
        self.out = out
        self.event = event
        self.t0 = t0
        self.waits = waits


class Stats:
    """Counters since start, plus a window since the last periodic log."""

    def __init__(self, max_batch):
        self.started = time.monotonic()
        self.requests = 0
        self.rows = 0
        self.forwards = 0
        self.forward_s = 0.0
        self.errors = collections.Counter()
        self.weight_updates = 0
        self.shm_requests = 0
        self.per_model = collections.defaultdict(lambda: {"requests": 0, "rows": 0, "forwards": 0})
        self.bins = [1 << i for i in range(int(math.log2(max(max_batch, 1))) + 2)]
        self.batch_hist = [0] * len(self.bins)
        self.waits_us = collections.deque(maxlen=20000)
        self.latest = collections.deque(maxlen=20000)   # (time, rows) of recent forwards

    def forward(self, model_id, rows, n_requests, seconds, waits_us):
        self.forwards += 1
        self.forward_s += seconds
        self.rows += rows
        self.requests += n_requests
        pm = self.per_model[model_id]
        pm["rows"] += rows
        pm["requests"] += n_requests
        pm["forwards"] += 1
        i = min(len(self.bins) - 1, max(0, math.ceil(math.log2(max(rows, 1)))))
        self.batch_hist[i] += 1
        self.waits_us.extend(waits_us)
        self.latest.append((time.monotonic(), rows, n_requests))

    def snapshot(self, models):
        now = time.monotonic()
        up = max(now - self.started, 1e-9)
        recent = [x for x in self.latest if now - x[0] <= 10.0]
        span = min(10.0, up)
        waits = np.asarray(self.waits_us, dtype=np.float64)
        pct = (lambda q: float(np.percentile(waits, q))) if len(waits) else (lambda q: 0.0)
        return {
            "uptime_s": up,
            "requests": self.requests, "rows": self.rows, "forwards": self.forwards,
            "requests_per_s": sum(x[2] for x in recent) / span,
            "rows_per_s": sum(x[1] for x in recent) / span,
            "mean_batch": self.rows / max(self.forwards, 1),
            "batch_hist": {"bins_upper": self.bins, "counts": list(self.batch_hist)},
            "queue_wait_us": {"mean": float(waits.mean()) if len(waits) else 0.0, "p50": pct(50), "p99": pct(99)},
            "forward_ms_mean": 1000 * self.forward_s / max(self.forwards, 1),
            "busy_fraction": self.forward_s / up,
            "per_model": {str(k): dict(v) for k, v in self.per_model.items()},
            "errors": dict(self.errors),
            "weight_updates": self.weight_updates,
            "shm_requests": self.shm_requests,
            "cpu_s": time.process_time(),       # this process, all threads (ZeroMQ's I/O thread too)
            "versions": {str(k): m.version for k, m in models.items()},
        }
