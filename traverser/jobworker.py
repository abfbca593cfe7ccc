"""Job mode of the worker process (`python -m traverser --trainer EP --batcher EP`).

Asks the trainer for jobs, runs each, streams the sample chunks back, and
reports `done`. A job is a CFR traversal job (kind "traverse": advantage and
strategy samples, through the batcher), a self-play job (kind "selfplay": a
wave's games played to the end on the batcher's policy,
traverser/selfplay.py; decision and game-end records) or a label job (kind
"label": deals played and labelled here by a lookahead, agents.labels; the
prior's rows and value rows, no batcher). The messages are in
traverser/jobproto.py (docs/protocol.md, "Job protocol"); this module never
imports `trainer`.
"""
import json
import os
import queue
import threading
import time

import numpy as np
import zmq

import engine
from batcher import protocol as P
# SAMPLES and pack_arrays are used through send_chunks; the worker's side names the whole protocol
from traverser.jobproto import (DONE, FAILED, HEARTBEAT, HELLO, JOB, READY, SAMPLES, STOP,  # noqa: F401
                                pack_arrays, send_chunks, unpack_arrays)
from batcher.client import BatcherClient
from traverser.config import TraverserConfig
from traverser.selfplay_session import SelfPlaySession
from traverser.worker import run_remote


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
    client = None       # the self-play jobs' batcher client, made at the first one

    def send(header, *frames):
        sock.send_multipart(P.pack(header, *frames), copy=False)

    send({"type": HELLO, "pid": os.getpid()})
    try:
        frames = None           # a message already read (a self-play session hands back one not for it)
        while True:
            if os.getppid() != parent:
                log("worker: parent process is gone; exiting")
                return 0
            if frames is None:
                send({"type": READY, "pid": os.getpid()})
                if not sock.poll(1000):
                    continue                # the trainer holds READY until it has a job; ask again
                frames = sock.recv_multipart(copy=False)
            header = P.unpack_header(frames[0].buffer)
            kind = header["type"]
            if kind == STOP:
                return 0
            if kind != JOB:
                frames = None
                continue
            arrays = unpack_arrays(header["arrays"], [f.buffer for f in frames[1:]])
            frames = None
            game = _game_of(games, header)
            if header.get("kind", "traverse") == "label":
                try:
                    label = _label_work(game, header, arrays)
                except (KeyError, TypeError, ValueError, RuntimeError) as e:
                    # a job this worker cannot read (RuntimeError: blueprint weights that do not fit
                    # their spec): said in one line, and the trainer stops the run with it
                    what = f"missing field {e}" if isinstance(e, KeyError) else " ".join(str(e).split())
                    send({"type": FAILED, "job": header["job"], "error": f"label job {header['job']}: {what}"})
                    continue
                _run_job(send, header["job"], *label, units=True)
                continue
            if header.get("kind", "traverse") == "selfplay":
                if client is None:
                    client = BatcherClient(batcher_endpoint, timeout_s=timeout_s, context=ctx, curve_keys=curve_keys,
                                           shm_dir=shm_dir)
                session = SelfPlaySession(sock, send, game, client, int(header["model"]), groups, machines)
                frames = session.run(header, arrays, lambda: os.getppid() != parent)
                if session.stopped:
                    return 0
                continue
            tcfg = header["traversal"]
            cfg = TraverserConfig(**{**tcfg, "model_ids": tuple(tcfg.get("model_ids", (0, 1)))})
            _run_job(send, header["job"], *_traverse_work(header, arrays["ids"].copy(), game, cfg, batcher_endpoint, threads, groups,
                                                        machines, timeout_s, ctx, curve_keys, adv_dtype, shm_dir))
    finally:
        if client is not None:
            client.close()
        sock.close()


def _game_of(games, header):
    """The job's game, loaded once per distinct game config."""
    key = json.dumps(header["game"], sort_keys=True)
    if key not in games:
        games[key] = engine.load_game(header["game"]["name"], **header["game"].get("params", {}))
    return games[key]


def _traverse_work(header, ids, game, cfg, batcher_endpoint, threads, groups, machines, timeout_s, ctx, curve_keys,
                   adv_dtype, shm_dir):
    """A CFR traversal job: (work(sink), kinds, units done so far)."""
    holder = {}

    def work(sink):
        run_remote(game, cfg, batcher_endpoint, ids, header["traverser"], header["iteration"], header["seed"],
                   header["weight"], sink, groups_per_thread=groups, machines=machines, threads=threads,
                   timeout_s=timeout_s, context=ctx, on_groups=lambda g: holder.setdefault("groups", g),
                   curve_keys=curve_keys, adv_dtype=adv_dtype, shm_dir=shm_dir)

    return work, ("adv", "strat"), lambda: sum(g.stats()["traversals"] for g in holder.get("groups", []))


def _label_work(game, header, arrays):
    """A label job: its deals played and labelled in order, a few whole
    games a chunk, until they are done or the job's deadline (the trainer's
    time.time(), read against the job's `sent_at`, so the two clocks need
    not agree) has passed: no game starts after it and the one in play is
    dropped. (work(sink), kinds, games finished so far). Raises
    KeyError, TypeError, ValueError or RuntimeError on a job it cannot read."""
    # agents.labels is the one module of a higher layer this package imports
    # (pyproject.toml's import-linter contract names it): the labels are
    # played by agents.searcher's SearchPlayer
    from agents.labels import Labeller, blueprint_policy, label_deals
    seeds = arrays["seeds"]
    if seeds.dtype != np.int64 or seeds.ndim != 1:
        raise ValueError(f"seeds must be int64 [n], got {seeds.dtype} {list(seeds.shape)}")
    seeds = [int(s) for s in seeds]
    deadline = header.get("deadline")
    if deadline is not None:
        deadline = time.time() + (float(deadline) - float(header["sent_at"]))
    agent = None
    if header.get("net_spec") is not None:
        import torch
        torch.set_num_threads(1)        # the agent's forwards are batch 1: one core a worker
        state = {k[len("blueprint/"):]: v.copy() for k, v in arrays.items() if k.startswith("blueprint/")}
        agent = blueprint_policy(header["net_spec"], state)
    labeller = Labeller(game, int(header["worlds"]), float(header["explore"]), agent, int(header.get("topk", 0)))
    finished = 0

    def game_done():
        nonlocal finished
        finished += 1

    def work(sink):
        label_deals(labeller, seeds, sink, deadline, on_game=game_done)

    return work, ("rows", "values"), lambda: finished


def _run_job(send, job_id, work_fn, kinds, done_fn, units=False):
    """Run work_fn(sink) on a thread, streaming each chunk it sinks (one
    array dict per kind of `kinds`) and a heartbeat every 2 s, then `done`
    with the row counts (or `failed`). units: `done` also says how many
    units done_fn() counts (a job that may end early: labels under a
    deadline)."""
    chunks = queue.Queue()
    errors = []

    def work():
        try:
            work_fn(lambda *parts: chunks.put(parts))
        except BaseException as e:
            errors.append(e)
        finally:
            chunks.put(None)            # wakes the sender at once

    t = threading.Thread(target=work, daemon=True)
    t.start()
    counts = [0] * len(kinds)
    last_beat = 0.0
    while True:
        try:
            item = chunks.get(timeout=0.5)
        except queue.Empty:
            item = ()
        if item is None:
            break
        send_chunks(send, job_id, kinds, item, counts)
        now = time.monotonic()
        if now - last_beat > 2.0:
            last_beat = now
            send({"type": HEARTBEAT, "job": job_id, "done": int(done_fn())})
    t.join()
    if errors:
        send({"type": FAILED, "job": job_id, "error": f"{type(errors[0]).__name__}: {errors[0]}"})
        raise errors[0]
    send({"type": DONE, "job": job_id, "counts": counts, **({"units": int(done_fn())} if units else {})})
