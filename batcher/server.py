"""The batcher: one ROUTER socket, many workers, few large forwards.

Requests (rows for one model) are queued per model. A model's queue is run as
one forward when it holds max_batch rows, or max_wait_us after its oldest row
arrived, whichever comes first; requests are never split, so a forward holds
whole requests (at least one). Replies carry the weight version used.
Weight updates are installed between batches (the loop is single-threaded),
so a forward never sees half-loaded weights.

An infer message may carry rows for several models, one frame per model
(a worker's whole round in one message); each segment waits in its model's
queue and the reply goes out, one frame per segment, once every segment has
been run.

On a GPU, rows are staged in their wire dtype (uint8 for the games here) and
cast to float32 on the device, so the GPU receives a quarter of the bytes; on
the CPU they are cast to float32 while they are copied into the batch.

Answers are float32, or float16 for requests that ask for it (adv_dtype):
half the bytes to send, and on a GPU the cast runs on the device when every
request in a batch asked for float16.

On a GPU the loop does not wait for a forward: it launches it (the answers
copied back into pinned host memory, in stream order, then an event), goes
on receiving and staging, and answers the forward once its event has
completed, oldest first. Up to forwards_in_flight forwards are out at once;
with nothing left to receive it waits on the oldest event, which yields the
CPU instead of spinning. On the CPU each forward is answered at once.

With null_forward (a benchmark mode, never used by training) every forward is
skipped and every row is answered with equal advantages (ones, which regret
matching turns into the uniform policy); everything else (receiving,
checking, queueing, staging, replying) runs as usual, so the service's own
cost per row is what is left.

Bad input never stops the service: every malformed, unknown-model or
oversized message gets an error reply (or is dropped with a log line if it
cannot even be addressed), and the loop goes on.
"""
import collections
import copy
import logging
import os
import signal
import time

import numpy as np
import torch
import zmq

from batcher import protocol as P
from batcher.options import BatcherOptions, BindError, DeviceError, resolve_device  # noqa: F401 (users import them from here)
from batcher.networks import for_inference, padded_rows
from batcher.records import Flight, Model, Pending, Request, Stats
from batcher.shm import HEADER_BYTES, ServerMaps, ShmError
from batcher.weights import net_from_bytes

log = logging.getLogger("batcher")

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}     # forward precisions; "none": float32
MAX_HEADER_BYTES = 1 << 20      # headers are small maps; anything larger is refused
MAX_SPEC_PARAMS = 1 << 28       # a weights spec may not describe a larger net (about 1 GiB of float32)
MAX_WAIT_US = 1_000_000         # a model's own wait for more rows may not pass a second
SLICE_S = 100e-6                # a wait under a millisecond looks for input this often


def split_wait(wait_s):
    """(seconds to sleep, milliseconds to poll) for a wait of wait_s: whole
    milliseconds go to the poll, which input cuts short; a wait under one
    millisecond is slept."""
    if wait_s <= 0:
        return 0.0, 0
    if wait_s < 1e-3:
        return wait_s, 0
    return 0.0, int(wait_s * 1000)


class Batcher:
    """The service. `serve()` runs until `stop()` (or SIGINT/SIGTERM in main)."""

    def __init__(self, options, context=None):
        self.opts = options
        self.device = resolve_device(options.device)
        if self.device.type == "cpu" and options.torch_threads > 0:
            torch.set_num_threads(options.torch_threads)
        if options.autocast not in ("none", "bf16", "fp16"):
            raise ValueError(f"autocast must be none, bf16 or fp16, got {options.autocast!r}")
        if options.max_batch < 1 or options.max_wait_us < 0:
            raise ValueError("max_batch must be >= 1 and max_wait_us >= 0")
        if options.forwards_in_flight < 1:
            raise ValueError("forwards_in_flight must be >= 1")
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # transport-level guard well above the application limit
        self.sock.setsockopt(zmq.MAXMSGSIZE, 4 * options.max_message_bytes + 4096)
        self.sock.setsockopt(zmq.RCVHWM, 100000)
        self.sock.setsockopt(zmq.SNDHWM, 100000)
        if options.curve_keys:
            from batcher.keys import secure_server
            secure_server(self.sock, options.curve_keys)
        try:
            self.sock.bind(options.bind)
        except zmq.ZMQError as e:
            self.sock.close(0)
            raise BindError(f"cannot bind {options.bind}: {e.strerror}") from None
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        try:
            self.shm = ServerMaps(options.shm_dir) if options.shm_dir else None
        except ShmError as e:
            self.sock.close(0)
            raise ValueError(f"--shm-dir: {e}") from None
        self._last_sweep = time.monotonic()
        self.models = {}
        self.queues = collections.defaultdict(collections.deque)
        self.queued_rows = collections.Counter()
        self.stats = Stats(options.max_batch)
        self._running = False
        self._stage = {}            # (slot, wire dtype) -> host staging tensor (pinned on GPU)
        self._flights = collections.deque()     # forwards launched, answers not yet sent (oldest first)
        # only a GPU computes while the loop goes on; a slot's staging buffer is reused
        # once its forward is answered, so there are as many slots as forwards in flight
        self._max_flights = (options.forwards_in_flight
                             if self.device.type == "cuda" and not options.null_forward else 1)
        self._slot = 0
        self._last_done = 0.0       # when the last forward was answered (busy time is not counted twice)
        self._ones = {}             # answer dtype -> ones [rows, num_actions] (null forward)
        self._autocast_dtype = _AUTOCAST_DTYPES.get(options.autocast)
        self._last_log = time.monotonic()

    # ---- models
    def install(self, model_id, net, version, spec, autocast=None, max_wait_us=None):
        """Install (or replace) a model's weights; called between batches. The
        batcher serves its own copy on its device: the caller's net is neither
        moved nor shared, so training it further does not change the answers.
        autocast: this model's forward precision (none, bf16, fp16), or None
        for the batcher's own (--autocast); max_wait_us: how long its rows
        wait for more rows, or None for the batcher's own (--max-wait-us)."""
        self._set_model(model_id, copy.deepcopy(net).to(self.device), version, spec, autocast, max_wait_us)

    def _set_model(self, model_id, net, version, spec, autocast=None, max_wait_us=None):
        dtype = self._autocast_dtype if autocast is None else _AUTOCAST_DTYPES.get(autocast)
        if self.device.type == "cpu" and dtype is torch.bfloat16:
            net = for_inference(net, dtype)     # the same answers as autocast, the weights cast once
        self.models[int(model_id)] = Model(net.eval(), int(version), dict(spec), autocast,
                                           None if max_wait_us is None else max_wait_us * 1e-6)

    def _max_wait_s(self, model_id):
        model = self.models.get(model_id)
        return self.opts.max_wait_us * 1e-6 if model is None or model.max_wait_s is None else model.max_wait_s

    # ---- main loop
    def stop(self):
        self._running = False

    def serve(self, max_seconds=None):
        self._running = True
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        log.info("batcher serving on %s (device %s, max_batch %d, max_wait %d us)",
                 self.endpoint, self.device, self.opts.max_batch, self.opts.max_wait_us)
        if self.opts.null_forward:
            log.warning("null forward: every row is answered with ones (uniform policy), no net runs; "
                        "a benchmark mode, not for training")
        while self._running:
            if deadline is not None and time.monotonic() >= deadline:
                break
            timeout_ms = 0 if self._flights else self._poll_timeout_ms()
            if poller.poll(timeout_ms):
                self._receive_all()
            self._run_due_batches()
            if self._flights:       # with nothing to receive, wait (without spinning) for the device
                self._retire(wait=not P.has_input(self.sock))
            self._maybe_log()
        while self._flights:
            self._retire(wait=True)
        return self

    def close(self):
        self.sock.close(0)
        if self.shm is not None:
            self.shm.close()

    def _poll_timeout_ms(self):
        """How long the loop may wait for input: until the first queue's
        oldest row has waited its model's max wait. zmq polls in whole
        milliseconds, so a wait under one is spent here in slices of
        SLICE_S, ending early when input arrives: rounding it up held every
        due batch up to a millisecond past max_wait, a round trip's worth
        for a worker whose rows are all in flight."""
        due = min((q[0].arrived + self._max_wait_s(mid) for mid, q in self.queues.items() if q), default=None)
        if due is None:
            return 100
        sleep_s, timeout_ms = split_wait(due - time.monotonic())
        while sleep_s > 0 and not P.has_input(self.sock):
            time.sleep(min(sleep_s, SLICE_S))
            sleep_s = due - time.monotonic()
        return timeout_ms

    def _receive_all(self, budget=10000):
        for _ in range(budget):
            if not P.has_input(self.sock):
                return
            self._handle(P.recv_frames(self.sock))
            # a model queue that filled up runs right away
            for mid in [m for m, n in self.queued_rows.items() if n >= self.opts.max_batch]:
                self._run_model(mid)

    def _reply(self, identity, header, *frames):
        try:
            P.send_frames(self.sock, [identity, *P.pack(header, *frames)])
        except zmq.ZMQError as e:  # peer gone, queue full: the service goes on
            log.warning("could not reply to a client: %s", e.strerror)

    def _error(self, identity, req_id, code, message):
        self.stats.errors[code] += 1
        log.warning("rejected request %r: %s", req_id, message)
        self._reply(identity, {"type": P.ERROR, "id": req_id, "code": code, "error": message})

    def _handle(self, frames):
        if len(frames) < 2:
            self.stats.errors["no_header"] += 1
            log.warning("dropped a message with no header frame")
            return
        identity, header_frame, payload = frames[0].bytes, frames[1], frames[2:]
        req_id = None
        try:
            if len(header_frame) > MAX_HEADER_BYTES:
                raise P.ProtocolError("too_large", f"header of {len(header_frame)} bytes exceeds "
                                                   f"{MAX_HEADER_BYTES} bytes")
            header = P.unpack_header(header_frame.buffer)
            req_id = header.get("id")
            size = sum(len(f) for f in frames[1:])
            if size > self.opts.max_message_bytes:
                raise P.ProtocolError("too_large", f"message of {size} bytes exceeds the "
                                                   f"{self.opts.max_message_bytes}-byte limit")
            kind = header["type"]
            if kind == P.INFER:
                self._on_infer(identity, header, payload)
            elif kind == P.WEIGHTS:
                self._on_weights(identity, header, payload)
            elif kind == P.STATS:
                stats = self.stats.snapshot(self.models)
                stats["null_forward"] = self.opts.null_forward
                self._reply(identity, {"type": P.STATS, "id": req_id, "stats": stats})
            elif kind == P.PING:
                self._reply(identity, {"type": P.PONG, "id": req_id, "pid": os.getpid(),
                                       "models": {str(k): m.version for k, m in self.models.items()},
                                       "null_forward": self.opts.null_forward,
                                       "shm_dir": self.shm.directory if self.shm is not None else ""})
            else:
                raise P.ProtocolError("bad_type", f"unknown message type {kind!r}")
        except P.ProtocolError as e:
            self._error(identity, req_id, e.code, str(e))
        except Exception as e:  # never let one message stop the service
            log.exception("error handling a message")
            self._error(identity, req_id, "internal", f"{type(e).__name__}: {e}")

    def _model(self, model_id):
        if not isinstance(model_id, int) or isinstance(model_id, bool):
            raise P.ProtocolError("bad_header", f"infer needs integer model ids, got {model_id!r}")
        model = self.models.get(model_id)
        if model is None:
            raise P.ProtocolError("unknown_model", f"unknown model {model_id}; loaded: {sorted(self.models)}")
        return model

    def _on_infer(self, identity, header, payload):
        limit = self.opts.max_message_bytes
        name = header.get("adv_dtype", "float32")
        adv_dtype = _ADV_NP.get(name) if isinstance(name, str) else None
        if adv_dtype is None:
            raise P.ProtocolError("bad_dtype", f"adv_dtype {name!r} not allowed (allowed: {list(P.ADV_DTYPES)})")
        if "models" in header:                  # segmented: one frame per model
            models = header["models"]
            if not isinstance(models, list) or not 1 <= len(models) <= P.MAX_SEGMENTS:
                raise P.ProtocolError("bad_header", f"'models' must be a list of 1 to {P.MAX_SEGMENTS} model "
                                                    f"ids, got {models!r}")
            specs = [self._model(m) for m in models]
            cols = [m.input_size for m in specs]
            if "shm" in header:
                if payload:
                    raise P.ProtocolError("bad_frames", f"a shared-memory infer carries no array frames, got "
                                                        f"{len(payload)}")
                segments, shm = self._shm_segments(header, specs, adv_dtype)
            else:
                if len(payload) != len(models):
                    raise P.ProtocolError("bad_frames", f"infer for {len(models)} models takes {len(models)} "
                                                        f"array frames, got {len(payload)}")
                segments = P.decode_arrays(header, "rows", [f.buffer for f in payload], limit, expect_cols=cols)
                shm = None
            request = Request(identity, header.get("id"), models, True, adv_dtype, shm)
        else:
            if "shm" in header:
                raise P.ProtocolError("bad_shm", "a shared-memory infer takes the segmented form ('models')")
            model_id = header.get("model")
            model = self._model(model_id)
            if len(payload) != 1:
                raise P.ProtocolError("bad_frames", f"infer takes exactly 1 array frame, got {len(payload)}")
            segments = [P.decode_array(header, "rows", payload[0].buffer, limit, expect_cols=model.input_size)]
            request = Request(identity, header.get("id"), [model_id], False, adv_dtype)
        if any(rows.shape[0] == 0 for rows in segments):
            raise P.ProtocolError("bad_shape", "infer with zero rows")
        if request.shm is not None:
            self.stats.shm_requests += 1
        now = time.monotonic()
        for slot, (model_id, rows) in enumerate(zip(request.models, segments)):
            self.queues[model_id].append(Pending(request, slot, rows, now))
            self.queued_rows[model_id] += rows.shape[0]

    def _shm_segments(self, header, specs, adv_dtype):
        """A shared-memory infer's rows, as views of the client's slot, and
        where its answers go: (segments, (slot bytes, sequence view, seq,
        answer offsets)). Every offset and size is checked against the slot."""
        if self.shm is None:
            raise P.ProtocolError("shm_disabled", "this batcher takes no shared-memory requests (start it with "
                                                  "--shm-dir DIR, the directory the clients' slots are in)")
        shm = header["shm"]
        k = len(specs)
        if (not isinstance(shm, dict) or not isinstance(shm.get("seq"), int)
                or not all(isinstance(shm.get(f), list) and len(shm[f]) == k
                           and all(type(o) is int for o in shm[f]) for f in ("rows", "adv"))):
            raise P.ProtocolError("bad_shm", f"'shm' must be a map with a 'name', an integer 'seq' and 'rows' "
                                             f"and 'adv' lists of {k} integer offsets")
        try:
            _, buf, seq_view = self.shm.get(shm.get("name"))
        except ShmError as e:
            raise P.ProtocolError("bad_shm", str(e)) from None
        if int(seq_view[0]) != shm["seq"]:
            raise P.ProtocolError("stale_shm", f"slot {shm['name']} holds request {int(seq_view[0])}, "
                                               f"not {shm['seq']} (a late duplicate)")
        size = buf.shape[0]
        shapes = header.get("rows_shapes")
        if not isinstance(shapes, list) or len(shapes) != k:
            raise P.ProtocolError("bad_shape", f"rows_shapes must be a list of {k} shapes, got {shapes!r}")
        segments = []
        for i, (spec, shape, off) in enumerate(zip(specs, shapes, shm["rows"])):
            _, nbytes = P.array_nbytes("rows", header.get("rows_dtype"), shape, self.opts.max_message_bytes)
            if not HEADER_BYTES <= off <= size - nbytes:
                raise P.ProtocolError("bad_shm", f"rows of segment {i} ({nbytes} bytes at {off}) lie outside "
                                                 f"the {size}-byte slot's payload")
            segments.append(P.check_array("rows", header.get("rows_dtype"), shape, buf[off:off + nbytes],
                                          self.opts.max_message_bytes, spec.input_size))
        for i, (spec, rows, off) in enumerate(zip(specs, segments, shm["adv"])):
            nbytes = rows.shape[0] * spec.num_actions * adv_dtype.itemsize
            if not HEADER_BYTES <= off <= size - nbytes:
                raise P.ProtocolError("bad_shm", f"answers of segment {i} ({nbytes} bytes at {off}) lie outside "
                                                 f"the {size}-byte slot's payload")
        return segments, (buf, seq_view, shm["seq"], list(shm["adv"]))

    def _on_weights(self, identity, header, payload):
        model_id, version, spec = header.get("model"), header.get("version"), header.get("spec")
        if not isinstance(model_id, int) or not isinstance(version, int):
            raise P.ProtocolError("bad_header", "weights need integer 'model' and 'version'")
        if not isinstance(spec, dict) or len(payload) != 1:
            raise P.ProtocolError("bad_header", "weights need a 'spec' map and one safetensors frame")
        autocast = header.get("autocast")
        if autocast not in (None, "none", "bf16", "fp16"):
            raise P.ProtocolError("bad_header", f"weights 'autocast' must be none, bf16 or fp16, got {autocast!r}")
        max_wait_us = header.get("max_wait_us")
        if max_wait_us is not None and (type(max_wait_us) is not int or not 0 <= max_wait_us <= MAX_WAIT_US):
            raise P.ProtocolError("bad_header", f"weights 'max_wait_us' must be an integer from 0 to "
                                                f"{MAX_WAIT_US}, got {max_wait_us!r}")
        current = self.models.get(model_id)
        if current is not None and version <= current.version:
            raise P.ProtocolError("stale_version", f"model {model_id} is at version {current.version}; "
                                                   f"refusing version {version}")
        try:
            net = net_from_bytes(spec, payload[0].bytes, self.device, max_params=MAX_SPEC_PARAMS)
        except ValueError as e:
            raise P.ProtocolError("bad_weights", str(e)) from None
        # rows queued for the old weights are answered by them (the input size may change)
        while self.queues.get(model_id):
            self._run_model(model_id)
        self._set_model(model_id, net, version, spec, autocast, max_wait_us)   # on self.device, owned by nobody else
        self.stats.weight_updates += 1
        log.info("model %d now at version %d", model_id, version)
        self._reply(identity, {"type": P.ACK, "id": header.get("id"), "model": model_id, "version": version})

    # ---- batching
    def _run_due_batches(self):
        now = time.monotonic()
        for mid in list(self.queues):
            q = self.queues[mid]
            limit = self._max_wait_s(mid)
            while q and (self.queued_rows[mid] >= self.opts.max_batch or now - q[0].arrived >= limit):
                self._run_model(mid)
            if not q:
                del self.queues[mid]

    def _staged(self, batch, total, cols, slot, pad=False):
        """The batch's rows copied into one host tensor [total, cols], with
        pad (a bf16 model on the CPU) [padded_rows(total), cols] (the spare
        rows hold zeros or an earlier batch's rows; their answers are
        dropped): on a GPU
        (pinned) in their wire dtype when all share one, so the device gets
        the compact bytes and casts them itself; on the CPU as float32, cast
        while copying (no second pass). The null forward stages as a GPU does."""
        dtype = batch[0].rows.dtype
        if ((self.device.type == "cpu" and not self.opts.null_forward)
                or any(p.rows.dtype != dtype for p in batch)):
            dtype = np.dtype(np.float32)
        host = self._stage.get((slot, dtype))
        rows = padded_rows(total) if pad else total
        if host is None or host.shape[0] < rows or host.shape[1] != cols:
            cap = max(rows, padded_rows(self.opts.max_batch))
            host = torch.from_numpy(np.zeros((cap, cols), dtype))   # rows past a batch: zeros or earlier rows
            if self.device.type == "cuda":
                host = host.pin_memory()
            self._stage[(slot, dtype)] = host
        view = host.numpy()
        off = 0
        for p in batch:
            n = p.rows.shape[0]
            view[off:off + n] = p.rows     # a copy (a cast only for mixed dtypes)
            off += n
        return host[:rows]

    def _launch(self, model, batch, total, slot):
        """Start the forward of a batch: (out, event). On the CPU (and with the
        null forward) it is done: out is the answers [total, num_actions] as
        numpy, float16 when every request of the batch asked for it, else
        float32, and event is None. On a GPU out is a pinned host tensor that
        the device fills asynchronously; it is valid once event has completed."""
        dtype = self._autocast_dtype if model.autocast is None else _AUTOCAST_DTYPES.get(model.autocast)
        pad = self.device.type == "cpu" and dtype is torch.bfloat16 and not self.opts.null_forward
        x = self._staged(batch, total, model.input_size, slot, pad)
        half = all(p.request.adv_dtype is _F16 for p in batch)
        if self.opts.null_forward:
            dtype = _F16 if half else _F32
            ones = self._ones.get(dtype)
            if ones is None or ones.shape[0] < total or ones.shape[1] != model.num_actions:
                ones = self._ones[dtype] = np.ones((max(total, self.opts.max_batch), model.num_actions), dtype)
            return ones[:total], None
        with torch.inference_mode():
            x = x.to(self.device, non_blocking=True)
            if x.dtype != torch.float32:
                x = x.float()
            if dtype is not None:
                with torch.autocast(self.device.type, dtype=dtype):
                    y = model.net(x)
            else:
                y = model.net(x)
            if self.device.type == "cpu":
                y = y[:total].float().numpy()
                return (to_float16(y) if half else y), None
            y = y.float().clamp_(-P.FLOAT16_MAX, P.FLOAT16_MAX).half() if half else y.float()
            out = y.to("cpu", non_blocking=True)        # into pinned memory, in stream order
            event = torch.cuda.Event(blocking=True)     # waiting on it yields the CPU
            event.record(torch.cuda.current_stream(self.device))
            return out, event

    def _run_model(self, model_id):
        q = self.queues[model_id]
        model = self.models.get(model_id)
        batch, total = [], 0
        while q and (not batch or total + q[0].rows.shape[0] <= self.opts.max_batch):
            p = q.popleft()
            batch.append(p)
            total += p.rows.shape[0]
        self.queued_rows[model_id] -= total
        if not batch:
            return
        while len(self._flights) >= self._max_flights:  # this slot's staging buffer must be free
            self._retire(wait=True)
        t0 = time.monotonic()
        waits = [(t0 - p.arrived) * 1e6 for p in batch]
        try:
            out, event = self._launch(model, batch, total, self._slot)
        except Exception as e:
            log.exception("forward failed for model %d", model_id)
            for p in batch:
                self._fail(p.request, "forward_failed", f"{type(e).__name__}: {e}")
            return
        self._slot = (self._slot + 1) % self._max_flights
        self._flights.append(Flight(model_id, model.version, batch, total, out, event, t0, waits))
        if event is None:
            self._retire()

    def _retire(self, wait=False):
        """Answer the finished forwards, oldest first. With wait, block for the
        oldest if it is still running. A device error that surfaces here fails
        that forward's requests; the service goes on."""
        while self._flights:
            f = self._flights[0]
            if f.event is not None:
                try:
                    if not f.event.query():
                        if not wait:
                            return
                        f.event.synchronize()
                    out = f.out.numpy()
                except Exception as e:
                    self._flights.popleft()
                    log.exception("forward failed for model %d", f.model_id)
                    for p in f.batch:
                        self._fail(p.request, "forward_failed", f"{type(e).__name__}: {e}")
                    continue
            else:
                out = f.out
            wait = False
            self._flights.popleft()
            now = time.monotonic()
            self.stats.forward(f.model_id, f.total, len(f.batch), now - max(f.t0, self._last_done), f.waits)
            self._last_done = now
            off = 0
            for p in f.batch:
                n = p.rows.shape[0]
                self._answer(p, out[off:off + n], f.version)
                off += n

    def _fail(self, request, code, message):
        if not request.failed:
            request.failed = True
            self._error(request.identity, request.req_id, code, message)

    def _answer(self, p, part, version):
        r = p.request
        if r.failed:
            return
        if part.dtype != r.adv_dtype:       # a batch of mixed answer dtypes is run in float32
            part = to_float16(part) if r.adv_dtype is _F16 else part.astype(np.float32)
        r.parts[p.slot] = part
        r.versions[p.slot] = version
        r.left -= 1
        if r.left:
            return
        if r.shm is not None:
            buf, seq_view, seq, offsets = r.shm
            if int(seq_view[0]) != seq:     # the client gave the slot up (it timed out): not ours to write
                self.stats.errors["stale_shm"] += 1
                return
            for part, off in zip(r.parts, offsets):
                buf[off:off + part.nbytes].view(part.dtype).reshape(part.shape)[...] = part
            self._reply(r.identity, {"type": P.RESULT, "id": r.req_id, "models": r.models, "versions": r.versions,
                                     "shm": True, **P.arrays_header("adv", r.parts)})
        elif r.segmented:
            self._reply(r.identity, {"type": P.RESULT, "id": r.req_id, "models": r.models, "versions": r.versions,
                                     **P.arrays_header("adv", r.parts)}, *r.parts)
        else:
            self._reply(r.identity, {"type": P.RESULT, "id": r.req_id, "model": r.models[0],
                                     "version": version, **P.array_header("adv", part)}, part)

    def _maybe_log(self):
        now = time.monotonic()
        if self.shm is not None and now - self._last_sweep >= 10.0:
            self._last_sweep = now
            self.shm.sweep()            # slots of clients that closed or died
        if self.opts.log_interval_s <= 0:
            return
        if now - self._last_log < self.opts.log_interval_s:
            return
        self._last_log = now
        s = self.stats.snapshot(self.models)
        log.info("%.0f rows/s, %.0f req/s, mean batch %.1f, wait p50 %.0f us p99 %.0f us, forward %.2f ms, "
                 "busy %.0f%%, models %s, errors %s", s["rows_per_s"], s["requests_per_s"], s["mean_batch"],
                 s["queue_wait_us"]["p50"], s["queue_wait_us"]["p99"], s["forward_ms_mean"],
                 100 * s["busy_fraction"], s["versions"], s["errors"] or "none")


_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_ADV_NP = {"float32": _F32, "float16": _F16}


def to_float16(x):
    """float32 array x as float16, clipped to float16's finite range (NaN stays NaN)."""
    return np.clip(x, -P.FLOAT16_MAX, P.FLOAT16_MAX).astype(np.float16)


def install_signal_handlers(batcher):
    def handler(signum, frame):
        log.info("signal %d: shutting down", signum)
        batcher.stop()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
