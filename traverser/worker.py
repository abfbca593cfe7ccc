"""A traversal worker: machine groups on K threads, each thread with its own
batcher client and RemoteStepper (ZeroMQ sockets are per thread)."""
import itertools
import threading
import time

import numpy as np
import zmq

from batcher.client import BatcherClient
from traverser._traverse import MachineGroup
from traverser.stats import merge_stats
from traverser.remote import RemoteStepper

# glibc's malloc: arrays below this size come from the heap, and freed heap
# memory up to this much stays with the process
KEEP_FREED_BYTES = 256 << 20


def keep_freed_memory(nbytes=KEEP_FREED_BYTES):
    """Stop glibc from handing freed memory back to the kernel after every
    drain. Each drain allocates its sample chunks afresh (about 1.5 MB a
    group); with malloc's adaptive thresholds the heap was trimmed after each
    one and the next drain faulted every page in again (3% of a worker's
    time in page faults). Returns False where the C library has no mallopt
    (not glibc), which changes nothing else."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mmap_max = min(nbytes, 32 << 20)          # glibc's own ceiling for the mmap threshold
    return bool(mallopt(M_TRIM_THRESHOLD, nbytes)) and bool(mallopt(M_MMAP_THRESHOLD, mmap_max))


def run_remote(game, config, endpoint, traversal_ids, traversers, iteration, run_seed, weight, sink,
               groups_per_thread=4, machines=256, threads=1, capacity=4096, timeout_s=60.0, resend_s=5.0,
               context=None, on_groups=None, curve_keys="", seconds=None, stop=None, progress=None,
               progress_interval=0.5, adv_dtype="float32", shm_dir=""):
    """Run traversals against the batcher at `endpoint`; drained chunks go to
    sink(adv, strat) (from the stepping threads). Returns merged stats.

    With `seconds`, the run is timed instead (benchmarks): after
    traversal_ids, each group keeps taking fresh traversal ids (traverser =
    id % 2) so no machine runs dry, and the stepping stops `seconds` after the
    start, or once the threading.Event `stop` is set, with traversals
    unfinished. progress(sample), if given, is called
    every progress_interval seconds (from a helper thread) with the counters
    so far: t (time.monotonic()), cpu_s (this process), nodes, queries,
    traversals. adv_dtype: the dtype the batcher answers in, "float32" (exact:
    the samples of run_local with the same nets) or "float16" (half the
    bytes; advantages rounded to 11 significant bits). shm_dir: the batcher's
    --shm-dir, for a worker on its machine (rows and answers through shared
    memory; docs/protocol.md); "" sends them through the socket.
    """
    keep_freed_memory()
    ids = np.asarray(traversal_ids, dtype=np.int64)
    trav = np.broadcast_to(np.asarray(traversers, dtype=np.int8), ids.shape)
    n_groups = groups_per_thread * threads
    groups = []
    for i in range(n_groups):
        g = MachineGroup(game, config, n_machines=machines, adv_capacity=capacity, strat_capacity=capacity,
                         wire=True, adv_dtype=adv_dtype)
        g.start(ids[i::n_groups], trav[i::n_groups], iteration, run_seed, weight)
        groups.append(g)
    refill, deadline = None, None
    if seconds is not None:
        deadline = time.monotonic() + seconds
        next_id = itertools.count(int(ids.max()) + 1 if len(ids) else 0)
        lock = threading.Lock()

        def refill(g):
            with lock:
                fresh = np.fromiter((next(next_id) for _ in range(g.n_machines)), np.int64, g.n_machines)
            g.extend(fresh, fresh % 2)
            return True
    if on_groups is not None:
        on_groups(groups)
    errors, clients = [], []

    def work(my_groups):
        client = None
        try:
            client = BatcherClient(endpoint, timeout_s=timeout_s, resend_s=resend_s, context=context,
                                   curve_keys=curve_keys, shm_dir=shm_dir)
            clients.append(client)
            RemoteStepper(client, my_groups, sink, refill=refill, deadline=deadline, stop=stop).run()
        except BaseException as e:
            errors.append(e)
        finally:
            if client is not None:
                client.close()

    ts = [threading.Thread(target=work, args=(groups[t::threads],)) for t in range(threads)]
    for t in ts:
        t.start()
    if progress is not None:
        while True:
            alive = [t for t in ts if t.is_alive()]
            if not alive:
                break
            progress(counters(groups))
            alive[0].join(progress_interval)
        progress(counters(groups))
    for t in ts:
        t.join()
    if errors:
        e = errors[0]
        if isinstance(e, zmq.ZMQError):
            raise ValueError(f"cannot use batcher endpoint {endpoint!r}: {e.strerror}") from None
        raise e
    stats = merge_stats([g.stats() for g in groups])
    if seconds is None and stats["traversals"] != len(ids):
        raise RuntimeError(f"{stats['traversals']} of {len(ids)} traversals completed")
    stats["resends"] = sum(c.resends for c in clients)
    stats["wire_bytes"] = sum(c.wire_bytes for c in clients)
    stats["shm_fallback"] = next((c.shm_fallback for c in clients if c.shm_fallback), None)
    return stats


def counters(groups):
    """Progress counters of running groups (read while they step: a sample)."""
    total = {"t": time.monotonic(), "cpu_s": time.process_time(), "nodes": 0, "queries": 0, "traversals": 0}
    for g in groups:
        st = g.stats()
        for k in ("nodes", "queries", "traversals"):
            total[k] += st[k]
    return total
