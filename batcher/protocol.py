"""The batcher's wire protocol (docs/protocol.md is the written contract).

Every message is a ZeroMQ multipart message: one msgpack header frame, then
zero or more raw frames. Arrays travel as raw bytes, their dtype and shape in
the header; weights travel as safetensors bytes. Nothing is ever pickled.

An infer request may name the dtype of its answer, `adv_dtype`: "float32"
(the default, also when the field is absent) or "float16" (half the bytes;
values beyond float16's range are clipped to +-65504, NaN stays NaN).
"""
import msgpack
import numpy as np
import zmq
import zmq.backend

# pyzmq's own layer (flag enums, option decoding) costs more per call than the
# call itself on small messages; these go straight to its backend
_backend_send = zmq.backend.Socket.send
_backend_recv = zmq.backend.Socket.recv
_backend_getsockopt = zmq.backend.Socket.get
_SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)

PROTOCOL_VERSION = 1
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

# message types
INFER = "infer"          # client -> batcher: rows for one model
RESULT = "result"        # batcher -> client: advantages for those rows
WEIGHTS = "weights"      # trainer -> batcher: new weights for one model
ACK = "ack"              # batcher -> trainer: weights installed
STATS = "stats"          # anyone -> batcher: counters; reply carries them
PING = "ping"            # liveness; reply is "pong"
PONG = "pong"
ERROR = "error"          # batcher -> sender: the request was rejected

MAX_SEGMENTS = 64        # most model segments in one infer message

# dtypes an infer request may ask its advantages in (header field adv_dtype)
ADV_DTYPES = ("float32", "float16")
FLOAT16_MAX = 65504.0

# dtypes allowed for arrays on the wire, narrowest first
WIRE_DTYPES = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32}
_NP_DTYPES = {name: np.dtype(t) for name, t in WIRE_DTYPES.items()}
_DTYPE_NAMES = {dt: name for name, dt in _NP_DTYPES.items()}     # str(dtype) runs Python code in numpy


class ProtocolError(ValueError):
    """A message broke the protocol; `code` is a short machine-readable tag."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def pack(header, *frames):
    """[msgpack(header), *frames] ready for send_multipart."""
    return [msgpack.packb({"v": PROTOCOL_VERSION, **header}, use_bin_type=True), *frames]


def unpack_header(frame):
    """Decode and check the header frame of a message."""
    try:
        header = msgpack.unpackb(bytes(frame), raw=False, strict_map_key=True)
    except Exception as e:
        raise ProtocolError("bad_header", f"header is not valid msgpack ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise ProtocolError("bad_header", f"header must be a map, got {type(header).__name__}")
    v = header.get("v")
    if v != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", f"protocol version {v!r} not supported (this side speaks {PROTOCOL_VERSION})")
    if not isinstance(header.get("type"), str):
        raise ProtocolError("bad_header", "header lacks a string 'type'")
    return header


def compact_rows(x):
    """The narrowest wire dtype that holds float32 rows `x` exactly, and x in it."""
    if x.dtype == np.uint8:
        return "uint8", x
    if x.size == 0:
        return "float32", x
    lo, hi = x.min(), x.max()
    if lo >= 0 and hi <= 255:
        as_u8 = x.astype(np.uint8)
        if np.array_equal(as_u8, x):
            return "uint8", as_u8
    if -65504 <= lo and hi <= 65504:
        as_f16 = x.astype(np.float16)
        if np.array_equal(as_f16.astype(np.float32), x):
            return "float16", as_f16
    return "float32", np.ascontiguousarray(x, dtype=np.float32)


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype) or str(dtype)


def array_header(name, arr):
    return {f"{name}_dtype": dtype_name(arr.dtype), f"{name}_shape": list(arr.shape)}


def arrays_header(name, arrays):
    """Header fields of a segmented message: one dtype, one shape per array."""
    return {f"{name}_dtype": dtype_name(arrays[0].dtype), f"{name}_shapes": [list(a.shape) for a in arrays]}


def has_input(sock):
    """True if a whole message can be received from sock without waiting
    (cheaper than receiving with NOBLOCK until zmq.Again is raised)."""
    return bool(_backend_getsockopt(sock, _EVENTS) & _POLLIN)


def recv_frames(sock):
    """sock.recv_multipart(copy=False) without pyzmq's per-frame Python layer.
    A frame received without a copy carries its own more-flag (read in C at
    receipt), so no getsockopt(RCVMORE) per frame."""
    frame = _backend_recv(sock, 0, False)
    frames = [frame]
    while frame.more:
        frame = _backend_recv(sock, 0, False)
        frames.append(frame)
    return frames


def send_frames(sock, frames, copy=False, flags=0):
    """sock.send_multipart(frames, flags, copy=copy) without pyzmq's per-frame
    Python layer. Raises zmq.ZMQError (zmq.Again with NOBLOCK) like
    send_multipart; a message is queued whole or not at all."""
    flags = int(flags)
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _backend_send(sock, frame, flags | _SNDMORE if i < last else flags, copy)


def decode_array(header, name, frame, max_bytes=DEFAULT_MAX_MESSAGE_BYTES, expect_cols=None):
    """The 2-D array described by header[name_dtype/name_shape] in `frame`,
    checked against the header, the size limit and the expected column count."""
    return check_array(name, header.get(f"{name}_dtype"), header.get(f"{name}_shape"), frame, max_bytes,
                       expect_cols)


def decode_arrays(header, name, frames, max_bytes=DEFAULT_MAX_MESSAGE_BYTES, expect_cols=None):
    """The 2-D arrays of a segmented message: one dtype header[name_dtype],
    one shape per frame in header[name_shapes]; expect_cols is None or one
    column count per frame."""
    shapes = header.get(f"{name}_shapes")
    if not isinstance(shapes, list) or len(shapes) != len(frames):
        raise ProtocolError("bad_shape", f"{name}_shapes must be a list of {len(frames)} shapes, got {shapes!r}")
    dtype_name = header.get(f"{name}_dtype")
    cols = expect_cols or [None] * len(frames)
    return [check_array(name, dtype_name, shape, frame, max_bytes, c) for shape, frame, c in zip(shapes, frames, cols)]


def array_nbytes(name, dtype_name, shape, max_bytes=DEFAULT_MAX_MESSAGE_BYTES):
    """(dtype, bytes) of the 2-D array a header describes with wire dtype
    `dtype_name` and `shape`, both checked, and the size against the limit."""
    dtype = _NP_DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise ProtocolError("bad_dtype", f"{name} dtype {dtype_name!r} not allowed (allowed: {sorted(WIRE_DTYPES)})")
    # type() is int: bool (a subclass of int) is refused
    if (type(shape) is not list or len(shape) != 2 or type(shape[0]) is not int or type(shape[1]) is not int
            or shape[0] < 0 or shape[1] < 0):
        raise ProtocolError("bad_shape", f"{name} shape must be [rows, cols] of non-negative ints, got {shape!r}")
    nbytes = shape[0] * shape[1] * dtype.itemsize
    if nbytes > max_bytes:
        raise ProtocolError("too_large", f"{name} of {nbytes} bytes exceeds the {max_bytes}-byte limit")
    return dtype, nbytes


def check_array(name, dtype_name, shape, frame, max_bytes=DEFAULT_MAX_MESSAGE_BYTES, expect_cols=None):
    """`frame` as a 2-D array of wire dtype `dtype_name` and `shape`, checked."""
    dtype, nbytes = array_nbytes(name, dtype_name, shape, max_bytes)
    buf = memoryview(frame)
    if buf.nbytes != nbytes:
        raise ProtocolError("bad_shape", f"{name} frame has {buf.nbytes} bytes, header says {shape} {dtype_name} = {nbytes}")
    if expect_cols is not None and shape[1] != expect_cols:
        raise ProtocolError("bad_shape", f"{name} has {shape[1]} columns, the model takes {expect_cols}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)
