"""The embedded local default: the trainer starts the batcher and N workers
as subprocesses on this machine. They talk over an ipc:// endpoint (a Unix
socket in a fresh temporary directory, removed at stop) by default, or over
TCP on loopback with service.batcher_transport = tcp. With
service.batcher_shm (the default) the rows and answers of each round go
through shared-memory files in a second fresh directory (under /dev/shm where
there is one, removed at stop) and only small headers through the socket.

Both directories hold an `owner` file with the trainer's pid and start time.
A trainer killed outright cannot remove them; the next local start on the
machine does (remove_stale_dirs), for every such directory whose owner is no
longer running, and never one of a live run. Children get SIGTERM when the
trainer dies, however it dies (PR_SET_PDEATHSIG), so no orphans outlive a
run. trainer/supervise.py restarts children that die.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from batcher.client import wait_for_batcher


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_endpoint(transport="ipc"):
    """An endpoint for a batcher and workers on this machine: ipc://PATH (a
    socket file in a fresh temporary directory, short enough for a Unix
    socket path) or tcp://127.0.0.1:PORT (a free port). ipc falls back to tcp
    where ZeroMQ has no ipc transport (Windows builds)."""
    if local_transport(transport) == "ipc":
        import tempfile
        directory = tempfile.mkdtemp(prefix=SOCKET_PREFIX)
        write_owner(directory)
        return f"ipc://{directory}/batcher.sock"
    return f"tcp://127.0.0.1:{free_port()}"


def local_transport(transport):
    """The transport local_endpoint(transport) uses here: ipc, or tcp where
    ZeroMQ has no ipc transport."""
    import zmq
    if transport not in ("ipc", "tcp"):
        raise ValueError(f"transport must be ipc or tcp, got {transport!r}")
    return "ipc" if transport == "ipc" and zmq.has("ipc") else "tcp"


def remove_local_endpoint(endpoint):
    """Remove the socket file and temporary directory of a local_endpoint() ipc endpoint."""
    if not endpoint.startswith("ipc://"):
        return
    path = Path(endpoint[len("ipc://"):])
    directory = path.parent
    for p in (path, directory / OWNER_FILE, directory):
        try:
            p.rmdir() if p is directory else p.unlink()
        except OSError:
            pass


def local_shm_dir():
    """A fresh private directory for shared-memory slots (batcher.shm): under
    /dev/shm where there is one. The caller removes it."""
    import tempfile
    from batcher.shm import default_parent
    directory = tempfile.mkdtemp(prefix=SHM_PREFIX, dir=default_parent())
    write_owner(directory)
    return directory


SOCKET_PREFIX = "deepcfr-"          # ipc socket directories, in the temporary directory
SHM_PREFIX = "deepcfr-shm-"         # shared-memory slot directories, under /dev/shm where there is one
OWNER_FILE = "owner"


def process_start_time(pid):
    """When process `pid` started, in clock ticks since boot (Linux), or None
    where that cannot be read: with the pid, it names one process even after
    the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def write_owner(directory, pid=None):
    """Record in `directory` the process that owns it (this one by default)."""
    pid = os.getpid() if pid is None else pid
    Path(directory, OWNER_FILE).write_text(f"{pid} {process_start_time(pid) or 0}\n")


def owner_alive(directory):
    """Whether the process recorded in `directory`'s owner file still runs;
    True where there is no readable owner file (not ours to judge)."""
    try:
        pid, started = (int(x) for x in Path(directory, OWNER_FILE).read_text().split())
    except (OSError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True                 # another user's process: running
    now = process_start_time(pid)
    return not (started and now and now != started)    # a pid reused by a later process: the owner is gone


def remove_stale_dirs(log=None):
    """Remove the socket and shared-memory directories of local runs whose
    trainer is no longer running (killed before it could remove them); returns
    the paths removed. A directory without an owner file, of another user, or
    of a running process is left alone."""
    import tempfile
    from batcher.shm import default_parent
    removed = []
    for parent, prefix in ((tempfile.gettempdir(), SOCKET_PREFIX), (default_parent(), SHM_PREFIX)):
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            try:
                mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
            except OSError:
                continue
            if not (entry.name.startswith(prefix) and mine) or owner_alive(entry.path):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.exists(entry.path):
                removed.append(entry.path)
    if removed and log is not None:
        log(f"removed {len(removed)} directories left by killed runs: {', '.join(removed)}")
    return removed


def _die_with_parent():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except OSError:
        pass


class Child:
    def __init__(self, name, cmd, log_path):
        self.name = name
        self.cmd = cmd
        self.log_path = Path(log_path)
        self.proc = None
        self.restarts = 0

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent, env=env)
        log.close()
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n=5):
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, grace_s=5.0):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LocalServices:
    """Batcher (unless an endpoint is configured) and local workers."""

    def __init__(self, cfg, run_dir, jobs_endpoint, log=print):
        self.cfg = cfg
        self.svc = cfg.service
        self.run_dir = Path(run_dir)
        self.jobs_endpoint = jobs_endpoint
        self.log = log
        self.batcher = None
        self.workers = []
        self.shm_dir = ""
        remove_stale_dirs(log)
        if self.svc.batcher:
            self.batcher_endpoint = self.svc.batcher
        else:
            self.batcher_endpoint = local_endpoint(self.svc.batcher_transport)
            if self.svc.batcher_shm:
                self.shm_dir = local_shm_dir()

    def start(self):
        py = sys.executable
        if not self.svc.batcher:
            cmd = [py, "-m", "batcher", "--bind", self.batcher_endpoint, "--device", self.svc.batcher_device,
                   "--max-batch", str(self.svc.max_batch), "--max-wait-us", str(self.svc.max_wait_us),
                   "--torch-threads", str(self.svc.batcher_threads), "--log-interval", "30",
                   "--autocast", self.svc.autocast,
                   "--curve-keys", self.svc.curve_keys, "--shm-dir", self.shm_dir]
            self.batcher = Child("batcher", cmd, self.run_dir / "logs" / "batcher.log").start()
            try:
                wait_for_batcher(self.batcher_endpoint, timeout_s=60, curve_keys=self.svc.curve_keys)
            except Exception:
                raise RuntimeError(f"the batcher did not start:\n{self.batcher.tail()}") from None
        # label_workers: more workers for the prior's labels; CFR and self-play cut their jobs for svc.workers
        for i in range(max(self.svc.workers, self.svc.label_workers)):
            cmd = [py, "-m", "traverser", "--trainer", self.jobs_endpoint, "--batcher", self.batcher_endpoint,
                   "--threads", str(self.svc.worker_threads), "--groups", str(self.svc.groups),
                   "--machines", str(self.svc.machines), "--curve-keys", self.svc.curve_keys,
                   "--adv-dtype", self.svc.adv_dtype, "--shm-dir", self.shm_dir]
            self.workers.append(Child(f"worker{i}", cmd, self.run_dir / "logs" / f"worker{i}.log").start())
        return self

    def restarts(self):
        return {c.name: c.restarts for c in ([self.batcher] if self.batcher else []) + self.workers}

    def stop(self):
        for w in self.workers:
            w.stop()
        if self.batcher:
            self.batcher.stop()
            remove_local_endpoint(self.batcher_endpoint)
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
