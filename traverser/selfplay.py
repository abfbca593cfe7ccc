"""Self-play games on a worker: PlayGroups (traverser/_selfplay.pyx) stepped
through the batcher, several groups in flight.

    RemotePlay(game, client, model_id).add(key, games, seeds, sink); .run()   # a worker's jobs
    play_local(game, forward, games, seeds, sink)               # in-process (tests, tools)

The model answers each info-state row with the policy's logits and the
critic's value (batcher.networks.AdvantageValue: num_actions + 1 columns).
While one group's rows are on the wire the others are stepped, as the
traversal worker does (traverser/remote.py). Every decision and every
game's end lands in sink(decisions, ends) as drained chunks; Python runs
once per round of a group, the moves, encodings and records in C.
"""
import numpy as np

from traverser._selfplay import PlayGroup


class _Groups:
    """`groups` PlayGroups of `slots` games each, and the games still to
    deal: group k plays the games k, k + groups, ... (a whole group's worth
    at a time), so any number of games fits."""

    def __init__(self, game, games, seeds, sink, groups, slots):
        games = np.asarray(games, dtype=np.int64)
        seeds = np.asarray(seeds, dtype=np.int64)
        if games.shape != seeds.shape or games.ndim != 1:
            raise ValueError(f"self-play needs one seed per game, got {games.shape} and {seeds.shape}")
        groups = max(1, min(groups, len(games)))
        # every game of the job at once when `slots` allows: a group's rounds are its longest game's
        # decisions, so games dealt in turns would take their rounds one after the other
        slots = max(1, min(slots, -(-len(games) // groups)))
        self.sink = sink
        self.groups = [PlayGroup(game, slots, 4 * slots) for _ in range(groups)]
        self.todo = [(games[k::groups], seeds[k::groups]) for k in range(groups)]
        self.ended = 0
        for k, g in enumerate(self.groups):
            self._deal(k)

    def _deal(self, k):
        """Start group k's next games; False when it has none left."""
        games, seeds = self.todo[k]
        if not len(games):
            return False
        n = self.groups[k].n
        self.groups[k].start(games[:n], seeds[:n])
        self.todo[k] = (games[n:], seeds[n:])
        return True

    def flush(self, k):
        decisions, ends = self.groups[k].drain()
        self.ended += len(ends["game"])
        if len(decisions["action"]) or len(ends["game"]):
            self.sink(decisions, ends)

    def step(self, k):
        """Step group k (dealing its next games once it is done): the rows
        to answer (0 when it has nothing to ask), or -1 when it is done for good."""
        g = self.groups[k]
        while True:
            if g.room() < g.n:
                self.flush(k)
            n = g.step()
            if n:
                return n
            if not g.finished():
                return 0
            self.flush(k)
            if not self._deal(k):
                return -1


def play_local(game, forward, games, seeds, sink, groups=1, slots=256, version=0, seated=False):
    """Play the deals seeds (ids `games`) to the end in this process:
    forward(rows float32 [n, T]) -> answers float32 [n, A + 1]; with seated,
    forward(rows, players, games): each row's player to move (int8) and game
    id (int64), so that the seats can play different policies (the learned
    best response, agents/best_response.py). Returns the number of games played."""
    gs = _Groups(game, games, seeds, sink, groups, slots)
    live = list(range(len(gs.groups)))
    while live:
        for k in list(live):
            n = gs.step(k)
            if n < 0:
                live.remove(k)
            elif n:
                g = gs.groups[k]
                rows = g.requests[:n].astype(np.float32)
                out = (forward(rows, g.request_player[:n], g.slot_game[g.request_slot[:n]]) if seated
                       else forward(rows))
                answers = np.ascontiguousarray(out, dtype=np.float32)
                g.resume(n, answers, version)
    return gs.ended


class RemotePlay:
    """A worker's self-play jobs, played together through the batcher
    `client`: each job's games in `groups` PlayGroups of at least `machines`
    slots (all of a job's games at once where that fits), every group of
    every job stepped while others' rows are on the wire.

    A job added while another plays joins its rounds: a worker that asks for
    its next job once its current one's games start to end (tail()) keeps
    the batcher's batches full through the last games of each job, where a
    job played alone sends ever fewer rows a round, each a round trip."""

    def __init__(self, game, client, model_id, groups=4, machines=128):
        self.game, self.client, self.model_id = game, client, int(model_id)
        self.groups, self.machines = max(1, int(groups)), int(machines)
        # one segment a round, with its answer width: a client with a shared-memory
        # directory passes the round's rows and answers through a slot
        self.cols = [game.num_distinct_actions() + 1]
        self.jobs = {}          # key -> (_Groups, its groups still playing)
        self.waiting = {}       # request id -> (key, group, rows)
        self.busy = set()       # (key, group) with a request in flight

    def add(self, key, games, seeds, sink, slots=None):
        """Deal job `key`'s games (`slots` a group; by default all of them at
        once, at least `machines` a group); each drained chunk goes to
        sink(decisions, ends). Returns its _Groups."""
        if slots is None:
            slots = max(self.machines, -(-len(games) // self.groups))
        gs = _Groups(self.game, games, seeds, sink, self.groups, slots)
        self.jobs[key] = (gs, set(range(len(gs.groups))))
        return gs

    def tail(self, key):
        """Whether job `key`'s games have begun to end."""
        return self.jobs[key][0].ended > 0

    def run(self, stop=None, take=None, on_done=None, on_round=None):
        """Step every job until all are done (then it returns, whatever
        take() may hand over later). take(): jobs to add now, as
        (key, games, seeds, sink) tuples (called every round); on_done(key)
        once a job's last game ended and its records are in its sink;
        on_round(): called every round (a worker's tail check). stop: a
        threading.Event that abandons the games."""
        while True:
            if stop is not None and stop.is_set():
                raise InterruptedError("self-play stopped")
            for job in (take() if take is not None else ()):
                self.add(*job)
            progressed = self._send_rounds(on_done)
            if on_round is not None:
                on_round()
            if not self.waiting:
                if not self.jobs:
                    return
                continue
            for rid, header, answers in self.client.poll(0 if progressed else 50):
                entry = self.waiting.pop(rid, None)
                if entry is None:
                    continue
                key, k, n = entry
                self.busy.discard((key, k))
                # answers: one array per segment, read in place (a slot's are valid until the next poll)
                self.jobs[key][0].groups[k].resume(n, answers[0], int(header["versions"][0]))

    def _send_rounds(self, on_done):
        """Step each idle group of each job and send its round; retire the
        jobs that are done. Whether anything moved."""
        progressed = False
        for key in list(self.jobs):
            gs, live = self.jobs[key]
            for k in sorted(live):
                if (key, k) in self.busy:
                    continue
                n = gs.step(k)
                if n < 0:
                    live.discard(k)
                    progressed = True
                elif n:
                    rid = self.client.send_infer_segments([(self.model_id, gs.groups[k].requests[:n])],
                                                          answer_cols=self.cols)
                    self.waiting[rid] = (key, k, n)
                    self.busy.add((key, k))
                    progressed = True
            if not live:
                del self.jobs[key]
                if on_done is not None:
                    on_done(key)
        return progressed


def wave_seeds(run_seed, wave, games):
    """The deal seeds of a self-play wave's games: a stream per (run, wave),
    so a wave's deals do not depend on how its games are split into jobs."""
    return np.random.default_rng([int(run_seed), 0x5E1F, int(wave)]).integers(1 << 62, size=games, dtype=np.int64)

