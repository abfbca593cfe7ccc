"""Supervision of the local batcher and workers in every phase of a run.

The trainer names the phase it is in (warm start, traverse, train, push,
evaluate, checkpoint). A child that dies in any of them is restarted:

  - during the traversal and the self-play by the job server's loop
    (JobServer.pump calls `check` between messages, and self-play's update
    pumps between minibatches), which hands a dead worker's job out again;
  - in the other phases by a watcher thread, because the main thread is busy
    training, evaluating or writing and does not look at its children then;
  - while the main thread waits on the batcher (a weight push, a ping, the
    stats) by the client's `on_wait` hook, which abandons the call when the
    batcher it went to has been replaced: the call is then made again on the
    new batcher after both players' current nets are pushed to it.

A restarted batcher holds no weights; the first call on it (or the traversal
loop) pushes them before anything else, so workers whose requests it refuses
(`unknown_model`) keep resending until it has them. Restarts are counted over
the trainer's whole life, all children and phases together, against
service.max_restarts; each one logs one line naming the child, its exit code
and the phase. Only the main thread ever touches the job server or the
trainer's batcher client; the watcher thread only restarts processes and
notes dead workers for the main thread.
"""
import collections
import threading
import time

from batcher.client import BatcherClient, BatcherTimeout, wait_for_batcher
from batcher.networks import AdvantageValue
from trainer.launcher import LocalServices

PHASES = ("warm start", "traverse", "train", "push", "self-play", "evaluate", "checkpoint")


class BatcherRestarted(Exception):
    """The batcher was replaced while a call to it waited; the call was abandoned."""


class Supervisor:
    """The local services of a run (LocalServices), the trainer's batcher
    client, and the restarts of both in every phase."""

    listeners = []      # fn(supervisor, phase) at every phase entry: fault injection (benchmarks/chaos.py, tests)
    BATCHER_START_S = 60.0

    def __init__(self, trainer, server):
        cfg = trainer.cfg
        self.trainer = trainer
        self.server = server
        self.log = trainer.log
        self.max_restarts = cfg.service.max_restarts
        self.curve_keys = cfg.service.curve_keys
        self.phase = "start"
        self.iteration = 0
        self.restarts = collections.Counter()        # "batcher" / "worker" -> restarts by this trainer
        self.generation = 0                          # batcher (re)starts; the current one is this number
        self._pushed = -1                            # generation that holds the current weights
        self._call_generation = 0                    # generation a waiting call went to
        self._dead_workers = []                      # pids the watcher saw exit, for the job server
        self._died = {}                              # pid -> (phase, iteration) it was seen dead in
        self._error = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None
        self.services = LocalServices(cfg, trainer.run_dir, server.endpoint, log=self.log)
        self.client = None
        self.served = {}             # model id -> (module, version, push_weights' options): besides the players' nets

    # ---- life
    def start(self):
        self.services.start()
        self.client = BatcherClient(self.services.batcher_endpoint, timeout_s=120,
                                    curve_keys=self.curve_keys)
        self.client.on_wait = self._on_wait
        # the thread that restarts children must live until they are stopped: each child
        # gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG)
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()
        return self

    def close(self):
        """Stop restarting, then stop the workers and the batcher and remove
        the run's socket and shared-memory directories."""
        self._stop.set()
        try:
            if self.client is not None:
                self.client.close()
            self.server.stop_workers(wait_s=0.5)
        finally:
            with self._lock:                 # a restart under way finishes first, and is then stopped
                self.services.stop()
            if self._thread is not None:
                self._thread.join(timeout=5)

    def enter(self, phase, iteration=None):
        """The trainer enters `phase` (one of PHASES); raise if a restart failed meanwhile."""
        self._note_deaths()             # a child that died in the phase now ending is restarted as of it
        self.phase = phase
        if iteration is not None:
            self.iteration = iteration
        self.raise_error()
        for fn in list(self.listeners):
            fn(self, phase)

    def raise_error(self):
        if self._error is not None:
            raise RuntimeError(self._error)

    def total_restarts(self):
        return sum(self.restarts.values())

    # ---- the batcher's weights and calls
    def push(self, player):
        """Push the trainer's current net for `player` with a new version."""
        self.call(lambda: self._push_one(player))

    def serve(self, model_id, module, autocast=None, max_wait_us=None):
        """Serve `module` (a CPU net the caller no longer changes) as
        `model_id` with the next version, which it returns, its forwards in
        `autocast` and its rows waiting `max_wait_us` for more (None: the
        batcher's own); a batcher that restarts later gets it again."""
        options = {"autocast": autocast, "max_wait_us": max_wait_us}

        def push():
            # a higher version at every attempt: a push to a batcher that was replaced may still reach the
            # new one from the socket's queue
            version = self.served.get(model_id, (None, 0, None))[1] + 1
            self.served[model_id] = (module, version, options)
            self.client.push_weights(model_id, module, version, **options)

        self.call(push)
        return self.served[model_id][1]

    def stats(self):
        """The batcher's stats, stamped with the local time of the reply (`taken_at`), for counter_growth."""
        stats = self.call(self.client.stats)
        stats["taken_at"] = time.monotonic()
        return stats

    def ensure_weights(self):
        """A batcher that (re)started since the last push gets both players' current nets."""
        self.call(lambda: None)

    def call(self, fn):
        """fn() on a batcher that holds the current weights. If the batcher is
        replaced while fn (or the push before it) waits, the weights go to the
        new one and fn runs again."""
        while True:
            self.raise_error()
            try:
                if self._pushed != self.generation:
                    generation = self.generation
                    self._push_all()
                    self._pushed = generation
                self._call_generation = self.generation
                return fn()
            except BatcherRestarted:
                continue

    def _push_one(self, player):
        """Player's advantage net as model `player`; with value cutoffs
        (traversal.value_cutoff > 0) that net and the value net as one
        AdvantageValue, whose answers carry the value in one more column."""
        tr = self.trainer
        tr.versions[player] += 1
        net = tr.nets[f"adv{player}"]
        value = tr.value_net if tr.cfg.traversal.value_cutoff > 0 else None
        try:
            served = net.to("cpu") if value is None else AdvantageValue(net.to("cpu"), value.to("cpu"))
            self.client.push_weights(player, served, tr.versions[player])
        finally:
            net.to(tr.device)
            if value is not None:
                value.to(tr.device)

    def _push_all(self):
        self._call_generation = self.generation
        pong = self.client.ping()
        for p in (0, 1):
            current = int(pong.get("models", {}).get(str(p), -1))
            self.trainer.versions[p] = max(self.trainer.versions[p], current)
            self._push_one(p)
        for model_id, (module, version, options) in list(self.served.items()):
            self.served[model_id] = (module, version + 1, options)
            self.client.push_weights(model_id, module, version + 1, **options)

    def _on_wait(self):
        """Called by the client while a control call waits."""
        self.check(push=False)
        if self.generation != self._call_generation:
            raise BatcherRestarted()

    # ---- restarts
    def check(self, push=True):
        """Restart dead children now (main thread: also tell the job server of
        dead workers, and with `push` give a new batcher its weights)."""
        with self._lock:
            self._restart_dead()
            dead, self._dead_workers = self._dead_workers, []
        for pid in dead:
            self.server.worker_died(pid)
        self.raise_error()
        if push and self._pushed != self.generation:
            self.ensure_weights()

    def _watch(self):
        while not self._stop.wait(0.05):
            self._note_deaths()
            if self.phase in ("traverse", "self-play"):
                continue            # the job server's loop calls check() itself
            try:
                with self._lock:
                    self._restart_dead()
            except Exception as e:          # noqa: BLE001 - the thread must not die: its children would get SIGTERM
                if self._error is None:
                    self._error = f"supervision failed: {e}"

    def _note_deaths(self):
        """Remember the phase each child died in (the restart may come a phase later)."""
        svc = self.services
        for child in ([svc.batcher] if svc.batcher else []) + svc.workers:
            proc = child.proc
            if proc is not None and proc.pid not in self._died and child_exited(proc):
                self._died[proc.pid] = (self.phase, self.iteration)

    def _restart_dead(self):
        if self._error is not None or self._stop.is_set():
            return
        svc = self.services
        for child in ([svc.batcher] if svc.batcher else []) + svc.workers:
            if child.alive() or self._stop.is_set():
                continue
            kind = "batcher" if child is svc.batcher else "worker"
            code, pid = child.proc.returncode, child.proc.pid
            phase, iteration = self._died.pop(pid, (self.phase, self.iteration))
            where = f"in phase {phase}" + (f" of iteration {iteration}" if iteration else "")
            if self.total_restarts() >= self.max_restarts:
                self._error = (f"{child.name} (pid {pid}) exited with code {code} {where}; the run's "
                               f"{self.max_restarts} restarts (service.max_restarts) are used up; "
                               f"see {child.log_path}: {child.tail(1)}")
                return
            self.restarts[kind] += 1
            child.restarts += 1
            child.start()
            self.log(f"restart: {child.name} (pid {pid}) exited with code {code} {where}; restarted as "
                     f"pid {child.proc.pid} ({self.total_restarts()}/{self.max_restarts} restarts used)")
            if kind == "worker":
                self._dead_workers.append(pid)
            else:
                self.generation += 1
                self._wait_batcher(child)

    def _wait_batcher(self, child):
        """Until the new batcher answers; one that dies while starting is left
        to the next check (a restart more)."""
        deadline = time.monotonic() + self.BATCHER_START_S
        while child.alive():
            try:
                wait_for_batcher(self.services.batcher_endpoint, timeout_s=1.0, curve_keys=self.curve_keys)
                return
            except BatcherTimeout:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the restarted batcher did not answer in {self.BATCHER_START_S:.0f} s; "
                                       f"see {child.log_path}: {child.tail(1)}") from None


def child_exited(proc):
    """Whether the child `proc` has exited, without reaping it: Popen.poll
    answers None while another thread polls the same child."""
    if proc.returncode is not None:
        return True
    try:
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    except OSError:
        return proc.poll() is not None          # no /proc here
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] in (b"Z", b"X")


def counter_growth(before, after, key):
    """(growth, restarted): how much the counter `key` of a service grew
    between two stats snapshots, and whether the service restarted in between.

    Snapshots are dicts holding `key`, the service's `uptime_s` and the local
    `taken_at` (Supervisor.stats); a `pid` is compared when both have one. The
    service restarted if its uptime is shorter than the time between the
    snapshots, its pid changed, or the counter went down. A restarted service
    counts from zero, so the growth is then its count since the restart (what
    the old process counted after `before` is lost). Never negative."""
    restarted = (after["uptime_s"] < after["taken_at"] - before["taken_at"]
                 or after[key] < before[key]
                 or ("pid" in before and "pid" in after and before["pid"] != after["pid"]))
    growth = after[key] if restarted else after[key] - before[key]
    return max(0, growth), restarted

