"""Stepping machine groups through the batcher, with several groups in flight.

While one group's rows are on the wire (or in the batcher's queue), the
others are stepped: the batcher always has work and the worker never idles
waiting for a single reply. Groups use the wire layout (MachineGroup(...,
wire=True)): the C step writes each round's rows ready to send, one block per
model, so a round goes out as one message with one frame per model and no
copy in Python, and the answers are copied straight into the group's
advantage rows. A client with a shared-memory directory (BatcherClient(...,
shm_dir=...)) passes each round through a slot there instead of the socket. Each group asks for its answers in its wire_adv_dtype
(MachineGroup(..., adv_dtype="float16"): half the bytes of float32; the C
resume converts the entries it reads).
"""
import time


class RemoteStepper:
    """Drives `groups` through `client`; drained samples go to sink(adv, strat).

    refill(group) -> bool, if given, is called whenever a group's queue holds
    fewer traversals than it has machines; it may add some (group.extend) and
    says whether it did. deadline (a time.monotonic() value) or stop (a
    threading.Event, once set) stops the stepping: the answers in flight are
    awaited and applied, the samples drained, and run() returns with
    traversals unfinished.
    """

    def __init__(self, client, groups, sink, refill=None, deadline=None, stop=None):
        self.client = client
        self.groups = list(groups)
        if not all(g.wire for g in self.groups):
            raise ValueError("RemoteStepper needs groups built with MachineGroup(..., wire=True)")
        self.sink = sink
        self.refill = refill
        self.deadline = deadline
        self.stop = stop
        self.waiting = {}          # request id -> (group index, rows)
        self.busy = set()          # groups with a request in flight
        self.rows_sent = 0
        self.messages_sent = 0

    def _has_work(self, g):
        if self.refill is not None and g.queued() < g.n_machines:
            self.refill(g)
        return not g.finished()

    def _send(self, gi):
        """Step group gi and send its round as one message; False if it wrote no rows."""
        g = self.groups[gi]
        n = g.step()
        if g.blocked() or g.finished():
            self.sink(g.drain_advantage(), g.drain_strategy())
        if n == 0:
            return False
        segments = g.wire_segments()
        adv_dtype = g.wire_adv_dtype
        rid = self.client.send_infer_segments([(m, rows) for m, rows, _ in segments],
                                              adv_dtype=None if adv_dtype == "float32" else adv_dtype,
                                              answer_cols=[adv.shape[1] for _, _, adv in segments])
        self.waiting[rid] = (gi, n)
        self.busy.add(gi)
        self.rows_sent += n
        self.messages_sent += 1
        return True

    def run(self):
        """Step every group until all its traversals are done (or the deadline)."""
        while True:
            stopping = ((self.deadline is not None and time.monotonic() >= self.deadline)
                        or (self.stop is not None and self.stop.is_set()))
            progressed = False
            if not stopping:
                for gi, g in enumerate(self.groups):
                    if gi in self.busy or not self._has_work(g):
                        continue
                    progressed = self._send(gi) or progressed
                    if gi not in self.busy and not g.finished():
                        progressed = True     # blocked on a buffer and drained: step again
            if not self.waiting:
                if stopping or all(g.finished() for g in self.groups):
                    break
                continue
            # block only when no group can be stepped
            for rid, header, advs in self.client.poll(0 if progressed else 50):
                gi, n = self.waiting.pop(rid)
                self.busy.discard(gi)
                self.groups[gi].resume(n, advs)       # read in place: no copy
        for g in self.groups:
            self.sink(g.drain_advantage(), g.drain_strategy())
