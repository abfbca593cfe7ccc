"""What benchmarks.scaling measures with: counter growth inside a timed
window, and the CPU of the whole machine and of a process's threads (Linux
/proc). Split from benchmarks/scaling.py on 2026-12-02.
"""
import os


# ---------------------------------------------------------------------------
# window accounting

def window_delta(samples, t0, t1, keys=("nodes", "queries", "cpu_s")):
    """Counter growth between the first sample at or after t0 and the last at
    or before t1 (samples: dicts with "t" and the keys, in time order), with
    the span "seconds" it covers. Work done before t0 or after t1 is never
    counted. Raises ValueError if fewer than two samples fall in the window."""
    inside = [s for s in samples if t0 <= s["t"] <= t1]
    if len(inside) < 2:
        raise ValueError(f"{len(inside)} counter samples in the window [{t0:.3f}, {t1:.3f}]; "
                         "need two (longer window or shorter sampling interval)")
    first, last = inside[0], inside[-1]
    out = {k: last[k] - first[k] for k in keys}
    out["seconds"] = last["t"] - first["t"]
    return out


def summed_rate(deltas, key="nodes"):
    """Sum over workers of each worker's own rate within the window."""
    return sum(d[key] / d["seconds"] for d in deltas if d["seconds"] > 0)


# ---------------------------------------------------------------------------
# CPU of the machine and of a process's threads

def machine_cpu():
    """(busy, total) CPU jiffies of the whole machine (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
    return sum(fields) - idle, sum(fields)


def machine_busy(m0, m1):
    """Fraction of all the machine's cores busy between two machine_cpu() readings (any process)."""
    if m0 is None or m1 is None or m1[1] == m0[1]:
        return float("nan")
    return (m1[0] - m0[0]) / (m1[1] - m0[1])


def thread_cpu(pid):
    """CPU seconds so far of process pid's threads, by role: "main" (the
    thread whose id is pid), "zmq_io" (ZeroMQ's I/O threads) and "other"
    (Linux /proc; {} where it cannot be read)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue                       # the thread ended
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        role = "main" if int(tid) == pid else "zmq_io" if name.startswith("ZMQbg/IO") else "other"
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick    # utime + stime
    return out


THREAD_ROLES = ("main", "zmq_io", "other")


def thread_shares(c0, c1, seconds):
    """Each role's share of a core between two thread_cpu() readings, as
    batcher_<role>_cpu (NaN where /proc could not be read)."""
    if not c0 or not c1:
        return {f"batcher_{role}_cpu": float("nan") for role in THREAD_ROLES}
    return {f"batcher_{role}_cpu": (c1.get(role, 0.0) - c0.get(role, 0.0)) / seconds for role in THREAD_ROLES}
