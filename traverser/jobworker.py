"""Job mode of the worker process (`python -m traverser --trainer EP --batcher EP`).

Asks the trainer for jobs, runs each through the batcher, streams the sample
chunks back, and reports `done`. The messages are in traverser/jobproto.py
(docs/protocol.md, "Job protocol"); this module never imports `trainer`.
"""
import json
import os
import queue
import threading
import time

import zmq

import engine
from batcher import protocol as P
from traverser.jobproto import DONE, FAILED, HEARTBEAT, HELLO, JOB, READY, SAMPLES, STOP, pack_arrays, unpack_arrays
from traverser.config import TraverserConfig
from traverser.worker import run_remote


def _chunk_arrays(chunk):
    arrays = dict(chunk)
    _, arrays["info"] = P.compact_rows(chunk["info"])
    return arrays


def serve_jobs(trainer_endpoint, batcher_endpoint, threads=1, groups=4, machines=128, timeout_s=60.0,
               log=print, context=None, curve_keys="", adv_dtype="float32", shm_dir=""):
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    # a trainer gone for good must not hang the worker: a send that cannot go
    # out within the timeout raises zmq.Again and the worker exits
    # (IMMEDIATE: messages queue only on a live connection, so "gone" is seen)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    sock.setsockopt(zmq.IMMEDIATE, 1)
    if curve_keys:
        from batcher.keys import secure_client
        secure_client(sock, curve_keys)
    sock.connect(trainer_endpoint)
    parent = os.getppid()
    games = {}

    def send(header, *frames):
        sock.send_multipart(P.pack(header, *frames), copy=False)

    send({"type": HELLO, "pid": os.getpid()})
    try:
        while True:
            if os.getppid() != parent:
                log("worker: parent process is gone; exiting")
                return 0
            send({"type": READY, "pid": os.getpid()})
            if not sock.poll(1000):
                continue                # the trainer holds READY until it has a job; ask again
            frames = sock.recv_multipart(copy=False)
            header = P.unpack_header(frames[0].buffer)
            kind = header["type"]
            if kind == STOP:
                return 0
            if kind != JOB:
                continue
            ids = unpack_arrays(header["arrays"], [f.buffer for f in frames[1:]])["ids"].copy()
            key = json.dumps(header["game"], sort_keys=True)
            if key not in games:
                games[key] = engine.load_game(header["game"]["name"], **header["game"].get("params", {}))
            game = games[key]
            tcfg = header["traversal"]
            cfg = TraverserConfig(**{**tcfg, "model_ids": tuple(tcfg.get("model_ids", (0, 1)))})
            _run_job(send, header, ids, game, cfg, batcher_endpoint, threads, groups, machines, timeout_s, ctx,
                     curve_keys, adv_dtype, shm_dir)
    finally:
        sock.close()


def _run_job(send, header, ids, game, cfg, batcher_endpoint, threads, groups, machines, timeout_s, ctx, curve_keys,
             adv_dtype="float32", shm_dir=""):
    job_id = header["job"]
    chunks = queue.Queue()
    holder, errors = {}, []

    def sink(adv, strat):
        chunks.put((adv, strat))

    def work():
        try:
            run_remote(game, cfg, batcher_endpoint, ids, header["traverser"], header["iteration"], header["seed"],
                       header["weight"], sink, groups_per_thread=groups, machines=machines, threads=threads,
                       timeout_s=timeout_s, context=ctx, on_groups=lambda g: holder.setdefault("groups", g),
                       curve_keys=curve_keys, adv_dtype=adv_dtype, shm_dir=shm_dir)
        except BaseException as e:
            errors.append(e)
        finally:
            chunks.put(None)            # wakes the sender at once

    t = threading.Thread(target=work, daemon=True)
    t.start()
    counts = [0, 0]
    last_beat = 0.0
    while True:
        try:
            item = chunks.get(timeout=0.5)
        except queue.Empty:
            item = ()
        if item is None:
            break
        if item:
            adv, strat = item
            for kind, chunk, i in (("adv", adv, 0), ("strat", strat, 1)):
                if len(chunk["weight"]):
                    meta, frames = pack_arrays(_chunk_arrays(chunk))
                    send({"type": SAMPLES, "job": job_id, "kind": kind, "arrays": meta}, *frames)
                    counts[i] += len(chunk["weight"])
        now = time.monotonic()
        if now - last_beat > 2.0:
            last_beat = now
            done = sum(g.stats()["traversals"] for g in holder.get("groups", []))
            send({"type": HEARTBEAT, "job": job_id, "traversals_done": int(done)})
    t.join()
    if errors:
        send({"type": FAILED, "job": job_id, "error": f"{type(errors[0]).__name__}: {errors[0]}"})
        raise errors[0]
    send({"type": DONE, "job": job_id, "counts": counts})
