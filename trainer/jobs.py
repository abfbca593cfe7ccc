"""Job hand-out and sample collection between the trainer and its workers.

The trainer binds a ROUTER socket; each worker connects a DEALER and says
`hello` (with its pid), then `ready`. The trainer answers `ready` with a
`job` (iteration, traversal ids, traverser, seeds, the game and traversal
config) as soon as it has one (it holds the request until then; the worker
repeats `ready` every second). While it runs a job the worker streams
`samples` chunks (raw column frames) and `heartbeat`s with its progress, and
ends with `done` (row counts). The trainer stages a job's samples and commits
them to the memories only at `done`, in job order; a job whose worker dies
(process exit, or silence past the heartbeat timeout) is handed out again and
its staged samples are dropped. So every traversal id is counted exactly once
and sample counts stay exact.

The messages and the array packing are in traverser/jobproto.py, which the
workers import too (they never import `trainer`); docs/protocol.md describes
them. This module is the trainer's side: the job accounting.
"""
import collections
import time

import numpy as np
import zmq

from batcher import protocol as P
from traverser.jobproto import DONE, FAILED, HEARTBEAT, HELLO, JOB, READY, SAMPLES, STOP, pack_arrays, unpack_arrays


class Job:
    """One job: its id, what the worker is to do (`kind`: "traverse",
    "selfplay" for a wave's games, "label" for deals to label), the header
    fields and arrays sent with it, and what comes back: the sample kinds it
    stages (`kinds`) and its units of work (`units`: traversals or games)
    for the progress counts. check(kind, arrays): raises ValueError naming
    what is wrong with a chunk, which is then dropped (None: the generic
    checks only). `finished`: the units the worker reports done (a label
    job under a deadline may end early; else all of them); `pid`: its
    worker's. Job(job_id, iteration, traverser, ids, weight) is a CFR
    traversal job."""
    __slots__ = ("job_id", "kind", "iteration", "traverser", "ids", "weight", "fields", "arrays", "kinds", "units",
                 "attempt", "worker", "assigned_at", "staged", "progress", "check", "finished", "pid")

    def __init__(self, job_id, iteration=0, traverser=0, ids=(), weight=1.0, kind="traverse", fields=None,
                 arrays=None, kinds=("adv", "strat"), check=None):
        self.job_id = job_id
        self.kind = kind
        self.iteration = iteration
        self.traverser = traverser
        self.ids = ids
        self.weight = weight
        if kind == "traverse":
            fields = {"iteration": iteration, "traverser": traverser, "weight": weight, **(fields or {})}
            arrays = {"ids": np.asarray(ids, dtype=np.int64), **(arrays or {})}
        self.fields = dict(fields or {})
        self.arrays = dict(arrays or {})
        self.kinds = tuple(kinds)
        self.units = len(ids)
        self.attempt = 0
        self.worker = None
        self.assigned_at = 0.0
        self.staged = {k: [] for k in self.kinds}
        self.progress = 0
        self.check = check
        self.finished = None
        self.pid = None

    def staged_rows(self):
        """Rows staged so far, per kind, in `kinds` order."""
        return [sum(chunk_rows(c) for c in self.staged[k]) for k in self.kinds]


def chunk_rows(chunk):
    """Rows of a sample chunk: the length of its columns (all alike)."""
    return len(next(iter(chunk.values()))) if chunk else 0


class JobServer:
    """Trainer side. `run_phase` hands out one phase's jobs and returns when
    all are done; `commit(job, *chunks)` receives each job's staged chunks,
    one list per kind of the job's `kinds` (adv, strat for CFR), in job
    order. `start_phase` and `pump` are the same loop in steps, for a
    caller that has other work while the workers run a phase (self-play's
    update); `add_jobs` adds jobs to the phase under way, and `close_phase`
    ends it early (a budget ran out): the jobs not handed out yet are
    dropped, those under way still commit."""

    def __init__(self, bind, heartbeat_timeout_s=60.0, context=None, curve_keys=""):
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve_keys:
            from batcher.keys import secure_server
            secure_server(self.sock, curve_keys)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        if bind.endswith(":0"):
            port = self.sock.bind_to_random_port(bind[:-2])
            self.endpoint = f"{bind[:-2]}:{port}"
        else:
            try:
                self.sock.bind(bind)
            except zmq.ZMQError as e:
                self.sock.close(0)
                raise RuntimeError(f"cannot bind the job endpoint {bind}: {e.strerror}") from None
            self.endpoint = bind
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.log = None
        # identity -> {"pid": int, "last": time, "job": Job or None, "next": Job or None}: "next" is a
        # self-play job handed out early, while "job" plays its last games (a worker asks with
        # `ready` and `held: 1`, traverser/selfplay_session.py)
        self.workers = {}
        self.waiting = collections.OrderedDict()   # identities whose `ready` awaits a job
        self.requeued = 0
        self.early = 0              # self-play jobs handed to a worker still ending its last one
        self.dropped_rows = 0
        self.failures = []
        self._pending = collections.deque()     # the phase's jobs not handed out yet
        self._job_config = {}
        self.dead = {}                          # local worker pid -> when it was seen dead (worker_died)
        self._phase = None                      # the phase in progress (start_phase)
        self._last_supervise = 0.0

    def close(self):
        self.sock.close(0)

    def live_workers(self):
        """Workers heard from within the heartbeat timeout, counted after
        reading what they sent while no phase ran (their hellos and repeated
        readies; anything about an old job is ignored)."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._handle(frames, {}, {}, None, None)
        now = time.monotonic()
        return sum(1 for w in self.workers.values()
                   if now - w["last"] <= self.heartbeat_timeout_s and not self._recently_dead(w["pid"]))

    def _send(self, identity, header, *frames):
        try:
            self.sock.send_multipart([identity, *P.pack(header, *frames)], copy=False)
        except zmq.ZMQError:
            pass

    def worker_died(self, pid):
        """A local worker process exited: hand its job out again. Its hello
        and ready may still wait in the socket: for a heartbeat timeout from
        now no job goes to that pid (_dispatch)."""
        self.dead[pid] = time.monotonic()
        for ident, w in list(self.workers.items()):
            if w["pid"] == pid:
                self._requeue_worker(ident, f"worker pid {pid} exited")

    def _requeue_worker(self, ident, why):
        self.waiting.pop(ident, None)
        w = self.workers.pop(ident, None)
        if w is None:
            return
        for job in [j for j in (w["next"], w["job"]) if j is not None]:      # back in job order
            rows = sum(job.staged_rows())
            self.dropped_rows += rows
            job.staged = {k: [] for k in job.kinds}
            job.worker = None
            job.progress = 0
            if self._phase is not None and self._phase.get("closed"):
                self._drop_jobs([job])
                self._log(f"job {job.job_id} dropped ({why}; the phase is closed; {rows} partial sample rows dropped)")
                continue
            self._pending.appendleft(job)
            self.requeued += 1
            self._log(f"job {job.job_id} handed out again ({why}; {rows} partial sample rows dropped)")
        self._dispatch()

    def _log(self, msg):
        if self.log is not None:
            self.log(msg)

    def run_phase(self, jobs, job_config, commit, supervise=None, progress=None, log=None, stop_check=None):
        """Hand out `jobs` until all are done. job_config: dict sent with
        every job (game, traversal config, run seed). supervise(): called
        about every 0.2 s (restart dead children; may raise). progress(n):
        units (traversals, games) newly completed."""
        self.start_phase(jobs, job_config, commit, log=log)
        while not self.pump(200, supervise, progress):
            pass

    def start_phase(self, jobs, job_config, commit, log=None):
        """Queue a phase's jobs and hand out as many as workers wait for;
        pump() does the rest. The previous phase must be complete."""
        if self._phase is not None and not self._phase["complete"]:
            raise RuntimeError("start_phase: the previous phase is not complete")
        self.log = log
        self._pending = collections.deque(jobs)
        self._job_config = job_config
        self._phase = {"by_id": {j.job_id: j for j in jobs}, "done": {}, "order": [j.job_id for j in jobs],
                       "next": 0, "commit": commit, "complete": not jobs}
        self._last_supervise = 0.0
        self._dispatch()

    def add_jobs(self, jobs):
        """Add `jobs` to the phase in progress, after its others in job
        order (a caller that hands a long phase out a few jobs at a time)."""
        ph = self._phase
        if ph is None or ph.get("closed"):
            raise RuntimeError("add_jobs: no open phase")
        for job in jobs:
            ph["by_id"][job.job_id] = job
            ph["order"].append(job.job_id)
        ph["complete"] = ph["next"] == len(ph["order"])
        self._pending.extend(jobs)
        self._dispatch()

    def pending_jobs(self):
        """Jobs of the phase not handed out yet."""
        return len(self._pending)

    def close_phase(self):
        """Hand out no more of the phase's jobs: those not handed out yet,
        and any handed out again later (their worker died), leave the phase,
        which completes once the jobs under way are committed. Returns how
        many jobs left now."""
        ph = self._phase
        if ph is None or ph["complete"]:
            return 0
        ph["closed"] = True
        gone = list(self._pending)
        self._pending.clear()
        self._drop_jobs(gone)
        return len(gone)

    def _drop_jobs(self, jobs):
        ph = self._phase
        ids = {j.job_id for j in jobs}
        ph["order"] = ph["order"][:ph["next"]] + [i for i in ph["order"][ph["next"]:] if i not in ids]
        for i in ids:
            ph["by_id"].pop(i, None)

    def pump(self, timeout_ms, supervise=None, progress=None):
        """Handle what the workers sent within timeout_ms (0: what is there
        now), restart what died, hand out jobs again whose workers fell
        silent, and commit the finished jobs in job order. Returns whether
        every job of the phase is committed."""
        ph = self._phase
        if ph is None or ph["complete"]:
            return True
        if timeout_ms <= 0 or self.sock.poll(timeout_ms):
            while True:
                try:
                    frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._handle(frames, ph["by_id"], ph["done"], self._job_config, progress)
        now = time.monotonic()
        if now - self._last_supervise > 0.2:
            self._last_supervise = now
            if supervise is not None:
                supervise()
            for ident, w in list(self.workers.items()):
                if w["job"] is not None and now - w["last"] > self.heartbeat_timeout_s:
                    self._requeue_worker(ident, f"no heartbeat for {self.heartbeat_timeout_s:.0f} s")
            if self.failures:
                raise RuntimeError(f"a worker failed: {self.failures[0]}")
        order, done = ph["order"], ph["done"]
        while ph["next"] < len(order) and order[ph["next"]] in done:
            job = done.pop(order[ph["next"]])
            ph["commit"](job, *(job.staged[k] for k in job.kinds))
            job.staged = None
            ph["next"] += 1
        ph["complete"] = ph["next"] == len(order)
        return ph["complete"]

    def _handle(self, frames, by_id, done, job_config, progress):
        """One message from a worker: its greeting, its readiness, or news of the job it holds."""
        ident = frames[0].bytes
        try:
            header = P.unpack_header(frames[1].buffer)
        except (P.ProtocolError, IndexError) as e:
            self._log(f"dropped a malformed message from a worker: {e}")
            return
        kind = header["type"]
        w = self.workers.get(ident)
        if w is None:
            w = self.workers[ident] = {"pid": header.get("pid"), "last": time.monotonic(), "job": None, "next": None}
        w["last"] = time.monotonic()
        if kind == HELLO:
            w["pid"] = header.get("pid")
        elif kind == READY:
            # held: 1 is a worker playing a self-play job's last games that takes the next one now
            if w["job"] is None:
                self.waiting[ident] = 0
                self._dispatch()
            elif header.get("held") == 1 and w["next"] is None and w["job"].kind == "selfplay":
                self.waiting[ident] = 1
                self._dispatch()
        elif kind in (SAMPLES, HEARTBEAT, DONE, FAILED):
            job = next((j for j in (w["job"], w["next"]) if j is not None and header.get("job") == j.job_id), None)
            if job is None:
                return   # a message about a job this worker no longer holds
            if kind == SAMPLES:
                self._stage_samples(w, job, header, frames)
            elif kind == HEARTBEAT:
                n = int(header.get("done", header.get("traversals_done", job.progress)))
                if progress is not None and n > job.progress:
                    progress(n - job.progress)
                job.progress = n
            elif kind == DONE:
                self._finish_job(ident, w, job, header, done, progress)
            elif kind == FAILED:
                self.failures.append(f"pid {w['pid']}: {header.get('error')}")
                self._requeue_worker(ident, "worker reported a failure")

    def _stage_samples(self, w, job, header, frames):
        """Stage a SAMPLES chunk of worker `w`'s job, or log and drop it if its kind or columns are bad."""
        try:
            if header.get("kind", "adv") not in job.staged:
                raise P.ProtocolError("bad_header", f"sample kind {header.get('kind')!r} is not one of "
                                                    f"this job's: {', '.join(job.kinds)}")
            arrays = unpack_arrays(header.get("arrays"), [f.buffer for f in frames[2:]])
            if len({len(v) for v in arrays.values()}) > 1:
                raise P.ProtocolError("bad_shape", "the chunk's columns differ in length")
            if job.check is not None:
                job.check(header.get("kind", "adv"), arrays)
        except (P.ProtocolError, ValueError) as e:
            self._log(f"bad sample chunk from worker pid {w['pid']} ({job.kind} job {job.job_id}, "
                      f"kind {header.get('kind', 'adv')!r}): {e}")
            return
        job.staged[header.get("kind", "adv")].append({k: v.copy() for k, v in arrays.items()})

    def _finish_job(self, ident, w, job, header, done, progress):
        """A DONE from worker `ident`: the job joins `done` if its counts and
        units agree with what was staged, else it is handed out again."""
        counts = header.get("counts", [])
        staged = job.staged_rows()
        if counts != staged:
            self._requeue_worker(ident, f"sample counts {staged} disagree with the worker's {counts}")
            return
        units = header.get("units", job.units)
        if not (isinstance(units, int) and not isinstance(units, bool) and 0 <= units <= job.units):
            self._requeue_worker(ident, f"done with {units!r} units of a job of {job.units}")
            return
        job.finished = units
        if progress is not None and units > job.progress:
            progress(units - job.progress)
        if w["job"] is job:
            w["job"], w["next"] = w["next"], None
        else:
            w["next"] = None
        done[job.job_id] = job
        if w["job"] is None:
            self.waiting[ident] = 0     # a worker that finished is ready for more
            self._dispatch()

    def _dispatch(self):
        """Give pending jobs to workers waiting for one."""
        pending = self._pending
        while pending and self.waiting:
            ident, held = self.waiting.popitem(last=False)
            w = self.workers.get(ident)
            if w is None or w["next"] is not None or (w["job"] is None) != (held == 0):
                continue            # it holds what it can (or its ready is out of date)
            if held and pending[0].kind != "selfplay":
                continue            # only a self-play job joins another's last games
            if self._recently_dead(w["pid"]):
                del self.workers[ident]      # a ready read after its sender was seen dead: no job for it
                continue
            job = pending.popleft()
            job.attempt += 1
            job.worker = ident
            job.pid = w["pid"]
            job.assigned_at = time.monotonic()
            w["next" if held else "job"] = job
            self.early += bool(held)
            w["last"] = time.monotonic()
            meta, frames_out = pack_arrays(job.arrays)
            # sent_at: the trainer's clock, against which a worker reads a job's deadline (label jobs)
            self._send(ident, {"type": JOB, "job": job.job_id, "kind": job.kind, **job.fields, "arrays": meta,
                               **self._job_config, "sent_at": time.time()}, *frames_out)

    def _recently_dead(self, pid):
        """Whether local worker `pid` was seen dead within a heartbeat timeout
        (a pid the system reuses later counts again)."""
        died = self.dead.get(pid)
        return died is not None and time.monotonic() - died < self.heartbeat_timeout_s

    def stop_workers(self, wait_s=2.0):
        """Tell every known worker to exit."""
        for ident in list(self.workers):
            self._send(ident, {"type": STOP})
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.sock.poll(50):
            try:
                self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break


def phase_config(cfg):
    """The dict sent with every job of a run (game, traversal config, run seed)."""
    return {"game": {"name": cfg.game.name, "params": dict(cfg.game.params)},
            "traversal": {**vars(cfg.traversal), "model_ids": list(cfg.traversal.model_ids)},
            "seed": cfg.run.seed}


class JobLedger:
    """RUN_DIR/jobs.jsonl, the job ledger: a line when a trainer starts
    ({"start": first iteration, "pid"}) and one per committed job ({"it",
    "p" (traverser), "job", "first" and "n" (its traversal ids), "attempt",
    "adv" and "strat" (rows committed)}; label and self-play jobs have lines
    of their own, marked "stage": commit_label, commit_selfplay). The lines
    after a start supersede those of earlier starts for the same iterations
    (a resumed run redoes the iterations after its checkpoint), so every
    traversal id of every phase appears exactly once in a run's effective
    ledger (benchmarks/chaos.py)."""

    def __init__(self, path, start_iteration, selfplay_wave=None):
        import json
        import os
        self._json = json
        self.f = open(path, "a")
        extra = {} if selfplay_wave is None else {"selfplay_wave": int(selfplay_wave)}
        self._write({"start": int(start_iteration), "pid": os.getpid(), **extra})

    def _write(self, line):
        self.f.write(self._json.dumps(line) + "\n")
        self.f.flush()

    def commit(self, job, adv_rows, strat_rows):
        ids = np.asarray(job.ids)
        self._write({"it": int(job.iteration), "p": int(job.traverser), "job": int(job.job_id),
                     "first": int(ids[0]) if len(ids) else 0, "n": int(len(ids)), "attempt": int(job.attempt),
                     "adv": int(adv_rows), "strat": int(strat_rows)})

    def commit_label(self, job, round, rows, values):
        """A label job's line: {"stage": "label", "round" (0: the warm
        start, r: expert-iteration round r), "job", "first" and "n" (its
        deal seeds, first .. first + n - 1), "attempt", "pid" (its worker),
        "games" (the first `games` of those deals, labelled whole: all of
        them unless a budget stopped the job), "rows" and "values" (rows
        committed)}."""
        ids = np.asarray(job.ids)
        self._write({"stage": "label", "round": int(round), "job": int(job.job_id),
                     "first": int(ids[0]) if len(ids) else 0, "n": int(len(ids)), "attempt": int(job.attempt),
                     "pid": job.pid, "games": int(job.finished), "rows": int(rows), "values": int(values)})

    def commit_selfplay(self, job, wave, decisions, ends):
        """A self-play job's line: {"stage": "selfplay", "wave", "job",
        "first" and "n" (its games within the wave), "attempt", "decisions"
        and "ends" (records committed)}."""
        ids = np.asarray(job.ids)
        self._write({"stage": "selfplay", "wave": int(wave), "job": int(job.job_id),
                     "first": int(ids[0]) if len(ids) else 0, "n": int(len(ids)), "attempt": int(job.attempt),
                     "decisions": int(decisions), "ends": int(ends)})

    def close(self):
        self.f.close()


def effective_ledger(path):
    """The job lines of a ledger that stand (see JobLedger): {(iteration,
    traverser): [lines]}, from the last start at or before each iteration."""
    import json
    phases = {}
    for text in open(path):
        line = json.loads(text)
        if "start" in line:
            for key in [k for k in phases if k[0] >= line["start"]]:
                del phases[key]            # redone by this start
            continue
        if "stage" in line:
            continue            # selfplay_ledger and label_ledger read those
        phases.setdefault((line["it"], line["p"]), []).append(line)
    return phases


def selfplay_ledger(path):
    """The self-play lines of a ledger that stand: {wave: [lines]}. A start
    supersedes the waves from its "selfplay_wave" on (a run resumed in the
    self-play stage plays them again from its checkpoint), all of them
    without one (a run resumed before the stage plays it afresh)."""
    import json
    waves = {}
    for text in open(path):
        line = json.loads(text)
        if "start" in line:
            keep = line.get("selfplay_wave", 0)
            waves = {w: lines for w, lines in waves.items() if w < keep}
        elif line.get("stage") == "selfplay":
            waves.setdefault(line["wave"], []).append(line)
    return waves


def label_ledger(path):
    """The label lines that stand: {round: [lines]}, each round's from the
    last trainer start that labelled it (a start that dies mid-round leaves
    its lines to the next one, which labels the round again; a resumed run
    that reads a round's rows back from RUN/warm_start_rows.npz or
    exit_rows_R.npz writes no lines for it)."""
    import json
    rounds, of_start, start = {}, {}, 0
    for text in open(path):
        line = json.loads(text)
        if "start" in line:
            start += 1
        elif line.get("stage") == "label":
            r = line["round"]
            if of_start.get(r) != start:
                rounds[r], of_start[r] = [], start        # labelled again by this start
            rounds[r].append(line)
    return rounds


def counted_deals(lines):
    """The deal seeds a round's label lines count, ascending; ValueError
    naming a deal counted twice."""
    deals = [d for x in lines for d in range(x["first"], x["first"] + x["games"])]
    seen = set()
    for d in deals:
        if d in seen:
            raise ValueError(f"deal {d} is counted twice in the label ledger")
        seen.add(d)
    return sorted(deals)
