"""Stepping machine groups through the batcher, with several groups in flight.

While one group's rows are on the wire (or in the batcher's queue), the
others are stepped: the batcher always has work and the worker never idles
waiting for a single reply. A group's rows are sent as one message per model.
"""
import numpy as np

from batcher.client import BatcherClient


class RemoteStepper:
    """Drives `groups` to completion through `client`; drained samples go to sink(adv, strat)."""

    def __init__(self, client: BatcherClient, groups, sink):
        self.client = client
        self.groups = list(groups)
        self.sink = sink
        self.waiting = {}          # request id -> (group index, row indices)
        self.outstanding = {}      # group index -> (requests still unanswered, rows)
        self.rows_sent = 0
        self.messages_sent = 0

    def _send(self, gi):
        g = self.groups[gi]
        n = g.step()
        if g.blocked() or g.finished():
            self.sink(g.drain_advantage(), g.drain_strategy())
        if n == 0:
            return False
        ids = g.request_model[:n]
        models = np.unique(ids)
        parts = 0
        for m in models:
            idx = np.arange(n) if len(models) == 1 else np.flatnonzero(ids == m)
            rid = self.client.send_infer(int(m), g.requests[idx] if len(models) > 1 else g.requests[:n])
            self.waiting[rid] = (gi, idx)
            parts += 1
        self.outstanding[gi] = [parts, n]
        self.rows_sent += n
        self.messages_sent += parts
        return True

    def run(self):
        """Step every group until all its traversals are done."""
        while True:
            progressed = False
            for gi, g in enumerate(self.groups):
                if gi in self.outstanding or g.finished():
                    continue
                progressed = self._send(gi) or progressed
                if not g.finished() and gi not in self.outstanding:
                    progressed = True     # blocked on a buffer and drained: step again
            if not self.outstanding:
                if all(g.finished() for g in self.groups):
                    break
                continue
            # block only when no group can be stepped
            for rid, header, adv in self.client.poll(0 if progressed else 50):
                gi, idx = self.waiting.pop(rid)
                g = self.groups[gi]
                g.advantages[idx] = adv
                left = self.outstanding[gi]
                left[0] -= 1
                if left[0] == 0:
                    del self.outstanding[gi]
                    g.resume(left[1])
        for g in self.groups:
            self.sink(g.drain_advantage(), g.drain_strategy())
