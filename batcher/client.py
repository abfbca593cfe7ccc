"""Client side of the batcher protocol (one DEALER socket; not thread-safe:
one client per thread).

Inference is asynchronous: `send_infer` returns a request id at once and
`poll` collects replies. A request unanswered for `resend_s` is sent again
with the same id (the batcher may have restarted and lost it; inference is
pure, so a duplicate answer is harmless and ignored); one unanswered for
`timeout_s` raises BatcherTimeout. Control calls (`push_weights`, `stats`,
`ping`) are synchronous with the same timeout.
"""
import itertools
import time

import numpy as np
import zmq

from batcher import protocol as P


class BatcherError(RuntimeError):
    """The batcher answered with an error reply."""

    def __init__(self, code, message):
        super().__init__(f"batcher error [{code}]: {message}")
        self.code = code


class BatcherTimeout(TimeoutError):
    pass


class BatcherClient:
    def __init__(self, endpoint, timeout_s=60.0, resend_s=5.0, context=None, curve_keys=""):
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
        self.in_flight = {}      # id -> [frames, first_sent, last_sent, last_error]
        self.resends = 0
        self.wire_bytes = 0
        self._ready = []         # answers received before an error was raised

    def close(self):
        self.sock.close(0)

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
        now = time.monotonic()
        self.in_flight[req_id] = [frames, now, now if self._try_send(frames) else 0.0, None]
        self.wire_bytes += wire.nbytes
        return req_id

    def send_infer_segments(self, segments, adv_dtype=None):
        """Queue one message with rows for several models: segments is a list
        of (model_id, rows), rows C-contiguous 2-D arrays of one wire dtype
        (uint8, float16 or float32), sent as they are. The reply's array is a
        list with one advantages array per segment, float32 or adv_dtype
        ("float32" or "float16") if given. Returns the request id."""
        req_id = next(self._ids)
        arrays = [rows for _, rows in segments]
        header = {"type": P.INFER, "id": req_id, "models": [int(m) for m, _ in segments],
                  **P.arrays_header("rows", arrays)}
        if adv_dtype is not None:
            header["adv_dtype"] = adv_dtype
        frames = P.pack(header, *arrays)
        now = time.monotonic()
        self.in_flight[req_id] = [frames, now, now if self._try_send(frames) else 0.0, None]
        self.wire_bytes += sum(a.nbytes for a in arrays)
        return req_id

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
        if header["type"] == P.ERROR and header.get("code") == "unknown_model":
            # a restarted batcher has no weights until the trainer pushes them again:
            # keep the request and send it again after resend_s (until timeout_s)
            entry = self.in_flight[req_id]
            entry[2] = time.monotonic()
            entry[3] = BatcherError(header.get("code"), header.get("error"))
            return None
        del self.in_flight[req_id]
        if header["type"] == P.ERROR:
            raise BatcherError(header.get("code"), header.get("error"))
        arr = None
        if header["type"] == P.RESULT:
            if "adv_shapes" in header:
                arr = P.decode_arrays(header, "adv", [f.buffer for f in frames[1:]], max_bytes=1 << 40)
            else:
                arr = P.decode_array(header, "adv", frames[1].buffer, max_bytes=1 << 40)
        return req_id, header, arr

    def _check_in_flight(self):
        now = time.monotonic()
        for req_id, entry in list(self.in_flight.items()):
            frames, first, last, error = entry
            if now - first > self.timeout_s:
                del self.in_flight[req_id]     # the error is reported once; the client stays usable
                if error is not None:
                    raise error
                raise BatcherTimeout(f"no reply from the batcher at {self.endpoint} for {self.timeout_s:.0f} s "
                                     f"({len(self.in_flight)} requests in flight); is it running?")
            if now - last > self.resend_s:
                if self._try_send(frames):
                    entry[2] = now
                    self.resends += 1

    # ---- control (synchronous)
    def call(self, header, *frames):
        req_id = next(self._ids)
        msg = P.pack({**header, "id": req_id}, *frames)
        now = time.monotonic()
        self.in_flight[req_id] = [msg, now, now if self._try_send(msg) else 0.0, None]
        while True:
            for rid, hdr, _ in self.poll(100):
                if rid == req_id:
                    return hdr

    def push_weights(self, model_id, net, version):
        """Install `net` as model_id at `version` (must increase); returns the ack."""
        from batcher.weights import net_to_bytes    # torch: only the trainer's client needs it
        spec, blob = net_to_bytes(net)
        return self.call({"type": P.WEIGHTS, "model": int(model_id), "version": int(version), "spec": spec}, blob)

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
