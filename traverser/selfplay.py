"""Self-play games on a worker: PlayGroups (traverser/_selfplay.pyx) stepped
through the batcher, several groups in flight.

    play_remote(game, endpoint, games, seeds, model_id, sink)   # a worker's job
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


def play_remote(game, client, games, seeds, model_id, sink, groups=4, slots=128, stop=None, on_groups=None):
    """Play the deals through the batcher `client` (a BatcherClient) asking
    model `model_id`; each decision records the weights version its answer
    came from. stop: a threading.Event that abandons the games (a worker
    told to exit). on_groups(_Groups): called once they exist (the
    worker's heartbeat reads .ended). Returns the number of games played."""
    gs = _Groups(game, games, seeds, sink, groups, slots)
    if on_groups is not None:
        on_groups(gs)
    waiting, rows = {}, {}
    live = set(range(len(gs.groups)))
    busy = set()
    while live or waiting:
        if stop is not None and stop.is_set():
            raise InterruptedError("self-play stopped")
        progressed = False
        for k in sorted(live - busy):
            n = gs.step(k)
            if n < 0:
                live.discard(k)
                progressed = True
            elif n:
                rid = client.send_infer(model_id, gs.groups[k].requests[:n])
                waiting[rid], rows[k] = k, n
                busy.add(k)
                progressed = True
        if not waiting:
            continue
        for rid, header, answers in client.poll(0 if progressed else 50):
            k = waiting.pop(rid, None)
            if k is None:
                continue
            busy.discard(k)
            version = header.get("version", (header.get("versions") or [0])[0])
            gs.groups[k].resume(rows[k], answers, int(version))
    return gs.ended


def wave_seeds(run_seed, wave, games):
    """The deal seeds of a self-play wave's games: a stream per (run, wave),
    so a wave's deals do not depend on how its games are split into jobs."""
    return np.random.default_rng([int(run_seed), 0x5E1F, int(wave)]).integers(1 << 62, size=games, dtype=np.int64)

