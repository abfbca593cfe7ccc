"""A worker's self-play jobs, played back to back with no gap between them.

A self-play job is a share of a wave: its games dealt at once and played to
the end through the batcher (traverser.selfplay.RemotePlay). Played one at
a time, a job ends in a tail: its games end one after another, each round
sends fewer rows, and every round still costs a round trip; then the worker
reports `done`, asks for more and waits for the trainer. So once the job's
first game has ended, the session asks for the next job early (`ready`
with `held: 1`), and the trainer's next job joins the rounds of the one
still ending. A worker holds at most two jobs; each is streamed, counted
and reported `done` on its own, so the trainer's exactly-once accounting
(trainer/jobs.py) is unchanged.

The play runs on a thread (stepping in nogil C, the batcher's socket); this
thread owns the trainer's socket: it streams each job's chunks, answers
heartbeats, takes the next job, and reports each job's end.
"""
import collections
import queue
import threading
import time

from batcher import protocol as P
from traverser.jobproto import DONE, FAILED, HEARTBEAT, JOB, READY, STOP, send_chunks, unpack_arrays
from traverser.selfplay import RemotePlay

HEARTBEAT_S = 2.0
KINDS = ("decisions", "ends")


class SelfPlaySession:
    """Self-play jobs on one worker until none is held. run() returns a
    message read from the trainer that is not for the session (a job of
    another kind), or None; `stopped` says the trainer said stop."""

    def __init__(self, sock, send, game, client, model_id, groups, machines):
        self.sock, self.send = sock, send
        self.game, self.model_id = game, model_id
        self.play = RemotePlay(game, client, model_id, groups, machines)
        self.events = queue.Queue()           # from the play thread
        self.inbox = collections.deque()      # jobs for the play thread: (key, games, seeds, sink)
        self.stop = threading.Event()
        self.held = {}                        # job id -> {"counts": [decisions, ends], "ended": games}
        self.asked = False                    # a ready with held: 1 is out, not yet answered
        self.stopped = False
        self.thread = None

    # ---- the play thread
    def _play(self):
        tails = set()

        def on_round():
            # the only job in play has begun to end: ask for the next one (once a job)
            if len(self.play.jobs) == 1:
                key = next(iter(self.play.jobs))
                if key not in tails and self.play.tail(key):
                    tails.add(key)
                    self.events.put(("tail", key))

        def take():
            out = []
            while self.inbox:
                out.append(self.inbox.popleft())
            return out

        error = None
        try:
            self.play.run(stop=self.stop, take=take, on_done=lambda key: self.events.put(("done", key)),
                          on_round=on_round)
        except BaseException as e:           # said to the trainer by the socket's thread
            error = e
        self.events.put(("exit", error))

    def _start_thread(self):
        self.thread = threading.Thread(target=self._play, daemon=True)
        self.thread.start()

    # ---- the socket's thread
    def _admit(self, header, arrays):
        jid = header["job"]
        self.held[jid] = {"counts": [0, 0], "ended": 0}
        self.inbox.append((jid, arrays["games"].copy(), arrays["seeds"].copy(),
                           lambda d, e, jid=jid: self.events.put(("samples", jid, d, e))))

    def _samples(self, jid, decisions, ends):
        h = self.held[jid]
        send_chunks(self.send, jid, KINDS, (decisions, ends), h["counts"])
        h["ended"] += len(ends["game"])

    def _read_trainer(self):
        """Take what the trainer sent: a self-play job joins the play; STOP
        stops it. Returns a message that is not for the session, else None."""
        while self.sock.poll(0):
            frames = self.sock.recv_multipart(copy=False)
            header = P.unpack_header(frames[0].buffer)
            if header["type"] == STOP:
                self.stopped = True
                self.stop.set()
                return None
            if header["type"] != JOB:
                continue
            if (header.get("kind") != "selfplay" or int(header.get("model", -1)) != self.model_id
                    or header["game"]["name"] != self.game.name):
                return frames                 # for after the session
            self.asked = False
            # a play thread that has run out still has its exit in the queue: it is restarted there
            self._admit(header, unpack_arrays(header["arrays"], [f.buffer for f in frames[1:]]))
        return None

    def run(self, header, arrays, parent_gone):
        """Play the job `header` (its `arrays`), and the jobs that follow it
        early, until none is held."""
        self._admit(header, arrays)
        self._start_thread()
        leftover, last_beat = None, time.monotonic()
        while True:
            if leftover is None and not self.stopped:
                leftover = self._read_trainer()
            if parent_gone():
                self.stop.set()
            try:
                item = self.events.get(timeout=0.005 if self.asked else 0.05)
            except queue.Empty:
                item = None
            if item is not None:
                what = item[0]
                if what == "samples":
                    self._samples(*item[1:])
                elif what == "tail":
                    if len(self.held) == 1 and leftover is None and not self.stopped:
                        self.send({"type": READY, "held": 1})
                        self.asked = True
                elif what == "done":
                    h = self.held.pop(item[1])
                    self.send({"type": DONE, "job": item[1], "counts": h["counts"]})
                elif what == "exit":
                    error = item[1]
                    if error is not None and not self.stop.is_set():
                        for jid in list(self.held)[:1]:
                            self.send({"type": FAILED, "job": jid, "error": f"{type(error).__name__}: {error}"})
                        raise error
                    if self.stop.is_set() or not self.held:
                        return leftover
                    if not self.inbox:
                        raise RuntimeError(f"self-play stopped with jobs {sorted(self.held)} unplayed")
                    self._start_thread()      # a job came in as the play ran out
            now = time.monotonic()
            if now - last_beat > HEARTBEAT_S:
                last_beat = now
                for jid, h in self.held.items():
                    self.send({"type": HEARTBEAT, "job": jid, "done": h["ended"]})
