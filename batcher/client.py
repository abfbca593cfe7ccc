"""Client side of the batcher protocol (one DEALER socket; not thread-safe:
one client per thread).

Inference is asynchronous: `send_infer` returns a request id at once and
`poll` collects replies. A request unanswered for `resend_s` is sent again
with the same id (the batcher may have restarted and lost it; inference is
pure, so a duplicate answer is harmless and ignored); one unanswered for
`timeout_s` raises BatcherTimeout. Control calls (`push_weights`, `stats`,
`ping`) are synchronous with the same timeout.

With `shm_dir` (a client on the batcher's machine, the batcher started with
the same `--shm-dir`), segmented requests that say how wide their answers are
pass their rows and answers through shared-memory slots (batcher.shm)
instead of the socket. A batcher that refuses them (no or another
`--shm-dir`) is asked again the plain way, and the client stays plain.
"""
import itertools
import logging
import time

import numpy as np
import zmq

from batcher import protocol as P
from batcher.shm import ClientSlots, ShmError, layout

log = logging.getLogger("batcher.client")


class BatcherError(RuntimeError):
    """The batcher answered with an error reply."""

    def __init__(self, code, message):
        super().__init__(f"batcher error [{code}]: {message}")
        self.code = code


class BatcherTimeout(TimeoutError):
    pass


class BatcherClient:
    def __init__(self, endpoint, timeout_s=60.0, resend_s=5.0, context=None, curve_keys="", shm_dir=""):
        try:
            self.shm = ClientSlots(shm_dir) if shm_dir else None
        except ShmError as e:
            raise ValueError(f"shm_dir: {e}") from None
        self.shm_fallback = None     # why the batcher refused shared memory, once it has
        self._lent = []              # slots whose answers the last poll handed out
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.resend_s = resend_s
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 100)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.sock.setsockopt(zmq.SNDHWM, 100000)
        self.sock.setsockopt(zmq.RCVHWM, 100000)
        if curve_keys:
            from batcher.keys import secure_client
            secure_client(self.sock, curve_keys)
        self.sock.connect(endpoint)
        self._ids = itertools.count(1)
        self.in_flight = {}      # id -> [frames, first_sent, last_sent, last_error, shm or None]
        self.resends = 0
        self.wire_bytes = 0
        self._ready = []         # answers received before an error was raised

    def close(self):
        self.sock.close(0)
        if self.shm is not None:
            self.shm.close()

    # ---- inference
    def send_infer(self, model_id, rows, adv_dtype=None):
        """Queue rows (float32 [n, tensor_size]) for model_id; returns the request id.
        Rows travel in the narrowest dtype that holds them exactly; the answer
        comes as float32, or as adv_dtype ("float32" or "float16") if given."""
        req_id = next(self._ids)
        dtype, wire = P.compact_rows(rows)
        extra = {"adv_dtype": adv_dtype} if adv_dtype is not None else {}
        frames = P.pack({"type": P.INFER, "id": req_id, "model": int(model_id),
                         **P.array_header("rows", wire), **extra}, wire)
        self._start(req_id, frames)
        self.wire_bytes += wire.nbytes
        return req_id

    def send_infer_segments(self, segments, adv_dtype=None, answer_cols=None):
        """Queue one message with rows for several models: segments is a list
        of (model_id, rows), rows C-contiguous 2-D arrays of one wire dtype
        (uint8, float16 or float32), sent as they are. The reply's array is a
        list with one advantages array per segment, float32 or adv_dtype
        ("float32" or "float16") if given. Returns the request id.

        answer_cols (one answer width per segment, the models' action counts)
        lets a client with shm_dir pass the request through a shared-memory
        slot; the answers poll() returns are then views of the slot, valid
        until the next poll()."""
        req_id = next(self._ids)
        arrays = [rows for _, rows in segments]
        header = {"type": P.INFER, "id": req_id, "models": [int(m) for m, _ in segments],
                  **P.arrays_header("rows", arrays)}
        if adv_dtype is not None:
            header["adv_dtype"] = adv_dtype
        self.wire_bytes += sum(a.nbytes for a in arrays)
        if self.shm is not None and self.shm_fallback is None and answer_cols is not None:
            try:
                self._send_shm(req_id, header, arrays, adv_dtype, answer_cols)
                return req_id
            except ShmError as e:               # e.g. the directory's file system is full
                self._give_up_shm(str(e))
                header.pop("shm", None)
        self._start(req_id, P.pack(header, *arrays))
        return req_id

    def _give_up_shm(self, why):
        if self.shm_fallback is None:
            self.shm_fallback = why
            log.warning("shared memory unusable for the batcher at %s (%s); sending rows through the socket",
                        self.endpoint, why)

    def _start(self, req_id, frames, shm=None):
        now = time.monotonic()
        self.in_flight[req_id] = [frames, now, now if self._try_send(frames) else 0.0, None, shm]

    def _send_shm(self, req_id, header, arrays, adv_dtype, answer_cols):
        """The request's rows copied into a free slot; the message names the
        slot, its sequence number and the offsets of the rows and answers."""
        item = 2 if adv_dtype == "float16" else 4
        rows_at, adv_at, nbytes = layout([a.nbytes for a in arrays],
                                         [a.shape[0] * int(cols) * item for a, cols in zip(arrays, answer_cols)])
        slot = self.shm.acquire(nbytes)
        seq = slot.bump()
        for a, at in zip(arrays, rows_at):
            np.copyto(slot.view(at, a.dtype, a.shape), a)
        header["shm"] = {"name": slot.name, "seq": seq, "rows": rows_at, "adv": adv_at}
        shapes = [[a.shape[0], int(c)] for a, c in zip(arrays, answer_cols)]
        self._start(req_id, P.pack(header), (slot, adv_at, shapes, header.get("adv_dtype", "float32"), rows_at))

    def _try_send(self, frames):
        """Send without blocking. With no batcher connected (down, restarting,
        or refusing our CURVE key) ZeroMQ cannot take the message; it stays in
        flight and goes out with the next resend, until timeout_s."""
        try:
            P.send_frames(self.sock, frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def poll(self, timeout_ms):
        """Replies that arrived within timeout_ms: a list of (id, header, array),
        array being a list of arrays for send_infer_segments requests.
        Error replies to in-flight requests raise BatcherError."""
        for slot in self._lent:           # the answers handed out last time are the caller's no more
            self.shm.release(slot)
        self._lent = []
        out = self._ready
        self._ready = []
        # EVENTS first: Socket.poll builds a Poller on every call
        if P.has_input(self.sock) or (timeout_ms > 0 and self.sock.poll(timeout_ms, zmq.POLLIN)):
            while P.has_input(self.sock):
                frames = P.recv_frames(self.sock)
                try:
                    item = self._decode(frames)
                except BatcherError:
                    self._ready = out          # answers already taken come with the next poll
                    raise
                if item is not None:
                    out.append(item)
        self._check_in_flight()
        return out

    def _decode(self, frames):
        header = P.unpack_header(frames[0].buffer)
        req_id = header.get("id")
        if req_id not in self.in_flight:
            return None                      # a duplicate answer to a resent request
        shm = self.in_flight[req_id][4]
        if shm is not None and header["type"] == P.ERROR and header.get("code") in ("shm_disabled", "bad_shm"):
            self._fall_back(req_id, header)
            return None
        if header["type"] == P.ERROR and header.get("code") == "unknown_model":
            # a restarted batcher has no weights until the trainer pushes them again:
            # keep the request and send it again after resend_s (until timeout_s)
            entry = self.in_flight[req_id]
            entry[2] = time.monotonic()
            entry[3] = BatcherError(header.get("code"), header.get("error"))
            return None
        del self.in_flight[req_id]
        if header["type"] == P.ERROR:
            if shm is not None:
                self.shm.release(shm[0])
            raise BatcherError(header.get("code"), header.get("error"))
        arr = None
        if header["type"] == P.RESULT and shm is not None:
            slot, adv_at, shapes, dtype, _ = shm
            if not header.get("shm") or header.get("adv_shapes") != shapes or header.get("adv_dtype") != dtype:
                self.shm.release(slot)
                raise BatcherError("bad_reply", f"a shared-memory answer with shapes {header.get('adv_shapes')} "
                                                f"{header.get('adv_dtype')}, asked {shapes} {dtype}")
            arr = [slot.view(at, dtype, shape) for at, shape in zip(adv_at, shapes)]
            self._lent.append(slot)
        elif header["type"] == P.RESULT:
            if "adv_shapes" in header:
                arr = P.decode_arrays(header, "adv", [f.buffer for f in frames[1:]], max_bytes=1 << 40)
            else:
                arr = P.decode_array(header, "adv", frames[1].buffer, max_bytes=1 << 40)
        return req_id, header, arr

    def _fall_back(self, req_id, header):
        """The batcher refused a shared-memory request: ask again with the rows
        in the message, and send every later request that way."""
        frames, first, _, _, (slot, _, _, _, rows_at) = self.in_flight[req_id]
        request = P.unpack_header(frames[0])
        del request["shm"]
        shapes = request["rows_shapes"]
        rows = [slot.view(at, P.WIRE_DTYPES[request["rows_dtype"]], shape).copy()
                for at, shape in zip(rows_at, shapes)]
        self.shm.release(slot)
        self._give_up_shm(f"the batcher refused it: [{header.get('code')}] {header.get('error')}")
        request.pop("v", None)
        frames = P.pack(request, *rows)
        now = time.monotonic()
        self.in_flight[req_id] = [frames, first, now if self._try_send(frames) else 0.0, None, None]

    def _check_in_flight(self):
        now = time.monotonic()
        for req_id, entry in list(self.in_flight.items()):
            frames, first, last, error, shm = entry
            if now - first > self.timeout_s:
                del self.in_flight[req_id]     # the error is reported once; the client stays usable
                if shm is not None:
                    self.shm.release(shm[0])   # a late answer finds the slot moved on and is dropped
                if error is not None:
                    raise error
                raise BatcherTimeout(f"no reply from the batcher at {self.endpoint} for {self.timeout_s:.0f} s "
                                     f"({len(self.in_flight)} requests in flight); is it running?")
            if now - last > self.resend_s:
                if self._try_send(frames):
                    entry[2] = now
                    self.resends += 1

    # ---- control (synchronous)
    on_wait = None      # called as a control call's request is out and every 0.1 s until its reply; may raise

    def call(self, header, *frames):
        """Send a control request and wait for its reply. If on_wait raises,
        the request is forgotten (never resent) and the exception propagates."""
        req_id = next(self._ids)
        self._start(req_id, P.pack({**header, "id": req_id}, *frames))
        try:
            while True:
                if self.on_wait is not None:
                    self.on_wait()
                for rid, hdr, _ in self.poll(100):
                    if rid == req_id:
                        return hdr
        except BaseException:
            self.in_flight.pop(req_id, None)
            raise

    def push_weights(self, model_id, net, version, autocast=None, max_wait_us=None):
        """Install `net` as model_id at `version` (must increase); returns the
        ack. autocast: its forwards' precision on the batcher (none, bf16,
        fp16), or None for the batcher's own; max_wait_us: how long its
        rows wait for more rows before a forward, or None for the batcher's
        own (--max-wait-us)."""
        from batcher.weights import net_to_bytes    # torch: only the trainer's client needs it
        spec, blob = net_to_bytes(net)
        header = {"type": P.WEIGHTS, "model": int(model_id), "version": int(version), "spec": spec}
        if autocast is not None:
            header["autocast"] = autocast
        if max_wait_us is not None:
            header["max_wait_us"] = max_wait_us
        return self.call(header, blob)

    def stats(self):
        return self.call({"type": P.STATS})["stats"]

    def ping(self):
        return self.call({"type": P.PING})


def wait_for_batcher(endpoint, timeout_s=30.0, context=None, curve_keys=""):
    """Ping until the batcher answers; returns its pong header."""
    client = BatcherClient(endpoint, timeout_s=timeout_s, resend_s=0.5, context=context, curve_keys=curve_keys)
    try:
        return client.ping()
    finally:
        client.close()


def infer_blocking(client, model_id, rows):
    """One synchronous inference (tests and tools)."""
    req_id = client.send_infer(model_id, np.ascontiguousarray(rows, dtype=np.float32))
    while True:
        for rid, header, arr in client.poll(100):
            if rid == req_id:
                return header, arr
