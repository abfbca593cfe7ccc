"""A traversal worker: machine groups on K threads, each thread with its own
batcher client and RemoteStepper (ZeroMQ sockets are per thread)."""
import threading

import numpy as np
import zmq

from batcher.client import BatcherClient
from traverser._traverse import MachineGroup
from traverser.local import merge_stats
from traverser.remote import RemoteStepper


def run_remote(game, config, endpoint, traversal_ids, traversers, iteration, run_seed, weight, sink,
               groups_per_thread=4, machines=256, threads=1, capacity=4096, timeout_s=60.0, resend_s=5.0,
               context=None, on_groups=None, curve_keys=""):
    """Run traversals against the batcher at `endpoint`; drained chunks go to
    sink(adv, strat) (from the stepping threads). Returns merged stats."""
    ids = np.asarray(traversal_ids, dtype=np.int64)
    trav = np.broadcast_to(np.asarray(traversers, dtype=np.int8), ids.shape)
    n_groups = groups_per_thread * threads
    groups = []
    for i in range(n_groups):
        g = MachineGroup(game, config, n_machines=machines, adv_capacity=capacity, strat_capacity=capacity)
        g.start(ids[i::n_groups], trav[i::n_groups], iteration, run_seed, weight)
        groups.append(g)
    if on_groups is not None:
        on_groups(groups)
    errors, clients = [], []

    def work(my_groups):
        client = None
        try:
            client = BatcherClient(endpoint, timeout_s=timeout_s, resend_s=resend_s, context=context,
                                   curve_keys=curve_keys)
            clients.append(client)
            RemoteStepper(client, my_groups, sink).run()
        except BaseException as e:
            errors.append(e)
        finally:
            if client is not None:
                client.close()

    ts = [threading.Thread(target=work, args=(groups[t::threads],)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        e = errors[0]
        if isinstance(e, zmq.ZMQError):
            raise ValueError(f"cannot use batcher endpoint {endpoint!r}: {e.strerror}") from None
        raise e
    stats = merge_stats([g.stats() for g in groups])
    if stats["traversals"] != len(ids):
        raise RuntimeError(f"{stats['traversals']} of {len(ids)} traversals completed")
    stats["resends"] = sum(c.resends for c in clients)
    stats["wire_bytes"] = sum(c.wire_bytes for c in clients)
    return stats
