"""The job protocol between the trainer and its workers: message types and
the packing of numpy arrays into raw frames. Documented in docs/protocol.md
("Job protocol").

Both sides import this module: the trainer's job server (trainer/jobs.py) and
the worker's job loop (traverser/jobworker.py). It lives with the worker so
that a worker process never imports the `trainer` package (and with it the
memories, the optimiser and the launcher); it must never import `trainer`
itself.

Messages are framed like the batcher's (batcher.protocol.pack and
unpack_header: a msgpack header with `v` and `type`, then raw frames). A
message that carries arrays lists them in its header's `arrays` field, one
{"name", "dtype", "shape"} entry per frame, in frame order. Nothing is pickled.
"""
import numpy as np

from batcher.protocol import ProtocolError, compact_rows

# worker -> trainer
HELLO = "hello"            # first message of a worker: its pid
READY = "ready"            # the worker waits for a job (repeated every second until one comes)
SAMPLES = "samples"        # one chunk of a job's advantage or strategy rows
HEARTBEAT = "heartbeat"    # progress of the running job
DONE = "done"              # the job finished; row counts of everything sent
FAILED = "failed"          # the job raised; the error text
# trainer -> worker
JOB = "job"                # a job: iteration, traverser, weight, traversal ids, configs
STOP = "stop"              # exit

ARRAY_DTYPES = frozenset({"uint8", "int8", "int32", "int64", "float16", "float32"})


def chunk_arrays(chunk):
    """A sample chunk's arrays as they travel: its info rows (`info`) in the
    narrowest dtype that holds them exactly."""
    arrays = dict(chunk)
    if "info" in chunk:
        _, arrays["info"] = compact_rows(chunk["info"])
    return arrays


def send_chunks(send, job_id, kinds, parts, counts):
    """Send one `samples` message per non-empty part (one array dict per
    kind of `kinds`) of job `job_id` through send(header, *frames), adding
    each part's rows to counts[i]."""
    for i, (kind, chunk) in enumerate(zip(kinds, parts)):
        rows = len(next(iter(chunk.values())))
        if rows:
            meta, frames = pack_arrays(chunk_arrays(chunk))
            send({"type": SAMPLES, "job": job_id, "kind": kind, "arrays": meta}, *frames)
            counts[i] += rows


def pack_arrays(arrays):
    """(meta, frames) for a dict of numpy arrays: meta goes into the header's
    `arrays` field, the frames follow the header. Arrays are made contiguous
    (C order); their dtypes must be in ARRAY_DTYPES."""
    meta, frames = [], []
    for name, arr in arrays.items():
        arr = np.asarray(arr, order="C")       # (ascontiguousarray would make a 0-d array 1-d)
        if str(arr.dtype) not in ARRAY_DTYPES:
            raise ValueError(f"array {name!r}: dtype {arr.dtype} cannot travel; "
                             f"allowed: {', '.join(sorted(ARRAY_DTYPES))}")
        meta.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape)})
        frames.append(arr)
    return meta, frames


def unpack_arrays(meta, frames):
    """Inverse of pack_arrays: {name: array} viewing the frames (no copy).
    Raises ProtocolError (code bad_frames, bad_dtype or bad_shape) naming the
    array when the meta does not describe the frames."""
    if not isinstance(meta, list) or len(meta) != len(frames):
        n = len(meta) if isinstance(meta, list) else "no list of"
        raise ProtocolError("bad_frames", f"{len(frames)} frames for {n} arrays")
    out = {}
    for i, (m, frame) in enumerate(zip(meta, frames)):
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise ProtocolError("bad_frames", f"array entry {i} is not a map with a string 'name'")
        name = m["name"]
        if m.get("dtype") not in ARRAY_DTYPES:
            raise ProtocolError("bad_dtype", f"array {name!r} dtype {m.get('dtype')!r} not allowed")
        dtype = np.dtype(m["dtype"])
        shape = m.get("shape")
        buf = memoryview(frame)
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != buf.nbytes):
            raise ProtocolError("bad_shape", f"array {name!r}: {buf.nbytes} bytes do not fit {shape!r} {dtype}")
        out[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return out
