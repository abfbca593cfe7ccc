"""A traversal worker's memory follows its machines, not the deepest
traversal its game allows.

Lost Cities with no turn cap allows games of 65534 decisions. Machine stacks
sized for that took 24 MB a machine: 1.5 GB for the 64 machines below, and
12 GB for a `python -m traverser` worker at batcher.bench's settings (4
groups of 128), until the OOM killer took one. Here a real worker process
runs outcome sampling against a real batcher process, and its peak RSS
(VmHWM, read until it exits) is compared with the same worker's on one machine
per group.
"""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import batcher_helpers as H  # noqa: E402

# benchmarks.end_to_end's worker flags (OS_FLAGS there)
OUTCOME = ("--algorithm", "outcome", "--value-scale", "0.01", "--value-clip", "10")
# what one machine may add to a worker's peak RSS: its stack at the few hundred
# frames an uncapped game reaches is under 0.4 MB, its request and answer rows
# a few kB
PER_MACHINE_BYTES = 1 << 20


@pytest.fixture(scope="module")
def lc_batcher(tmp_path_factory):
    log = tmp_path_factory.mktemp("lc_batcher") / "batcher.log"
    # --max-batch 1: a forward holds one request (a worker round), so the answers, and the traversals' paths
    # with them, do not depend on which requests the load on the box makes ride together; a path that
    # changed with them could be one of an uncapped game's long cycles (a 1 GB worker under CI's load)
    with H.BatcherProcess(args=["--init-game", "lost_cities", "--hidden", "16", "16", "--max-batch", "1"],
                          log_path=log) as bp:
        bp.start()
        yield bp


def vm_hwm(pid):
    """A live process's peak resident set in bytes (VmHWM in /proc/PID/status),
    or 0 once it is gone. Not wait4's ru_maxrss: exec carries the spawning
    process's peak into it, so under a full pytest session of ~1 GB every
    worker read ~1 GB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def worker_peak_rss(endpoint, tmp_path, groups, machines, traversals, timeout_s=180):
    """(peak RSS in bytes, the worker's stats line) of one `python -m traverser`
    run, its last VmHWM read before it exited (polled every 50 ms; the peak
    comes with its machines' stacks, long before the end)."""
    out = tmp_path / f"worker_{groups}x{machines}.out"
    cmd = [H.PY, "-m", "traverser", "--batcher", endpoint, "--game", "lost_cities", "--json",
           "--traversals", str(traversals), "--groups", str(groups), "--machines", str(machines),
           "--timeout", "60", *OUTCOME]
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=H.ROOT, env=H.subprocess_env(), stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    try:
        peak = 0
        while True:
            peak = max(peak, vm_hwm(proc.pid))
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            assert time.monotonic() < deadline, f"worker still running after {timeout_s} s"
            time.sleep(0.05)
    finally:
        if proc.returncode is None and pid != proc.pid:
            proc.kill()
            os.waitpid(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert peak > 0, "never read the worker's VmHWM"
    return peak, text.strip().splitlines()[-1]


def test_outcome_sampling_worker_peak_rss_follows_its_machines(lc_batcher, tmp_path):
    traversals = 64
    small, small_line = worker_peak_rss(lc_batcher.endpoint, tmp_path, groups=2, machines=1, traversals=traversals)
    big, big_line = worker_peak_rss(lc_batcher.endpoint, tmp_path, groups=2, machines=32, traversals=traversals)
    assert f'"traversals": {traversals}' in small_line and f'"traversals": {traversals}' in big_line
    extra = big - small
    assert extra < 62 * PER_MACHINE_BYTES, (
        f"62 more machines raised the worker's peak RSS by {extra / 2**20:.0f} MB "
        f"({small / 2**20:.0f} -> {big / 2**20:.0f} MB)")
    # and the whole worker stays small: the old stacks alone were 1.5 GB here
    assert big < 1 << 30, f"worker peak RSS {big / 2**20:.0f} MB"
