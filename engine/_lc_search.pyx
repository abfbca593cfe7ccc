"""The inner loop of the search player (agents.searcher) for Lost Cities, in
nogil C: redeal a world, play every candidate action in it, play each out
with the heuristic to the end, score. Python calls it once per chunk of
worlds; nothing here touches a Python object per world or per move.

Playouts use the rule-based bot of engine/_lost_cities.pyx
(`lc_heuristic_action`, which walks the set bits of the hand mask); they
spend nearly all of the search's time in it.

Worlds: world w of a call is the root state redealt for the searching player
by lc_resample from the stream rng_seed(seed, 0x4E5A, w), as
`StateBatch.resample(player, seed)` redeals row w, so a search can be replayed
with a StateBatch. Every candidate is played in the same worlds (common random
numbers), and the heuristic is deterministic, so the candidates' values in a
world differ only by the action.

The race can also be told to redeal less than the player cannot see
(`hidden`), which no honest player can do: 1 keeps the opponent's true hand
and shuffles only the deck order; 2 plays the true state itself (perfect
information). These are for measuring what the hidden cards are worth
(benchmarks.lc_ceiling); a player searches with 0.
"""
from libc.string cimport memcpy
from libc.math cimport sqrt
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

import numpy as np

from engine._types cimport int8_t, int16_t, uint8_t, uint64_t
from engine._rng cimport rng_seed, rng_below
from engine._game cimport Game, State
from engine._lost_cities cimport (LCConfig, LCState, LCUndo, LC_PLAY, LC_DRAW, LC_MAX_COLOURS,
                                  lc_apply, lc_score, lc_resample, lc_legal_actions,
                                  lc_heuristic_action)

cdef inline void lc_heuristic_playout(const LCConfig* cfg, LCState* s, int limit) noexcept nogil:
    """Play `s` to the end (or `limit` moves) with the heuristic for both sides."""
    cdef LCUndo u
    cdef int steps = 0
    while not s.terminal and steps < limit:
        lc_apply(cfg, s, lc_heuristic_action(cfg, s), &u)
        steps += 1


cdef inline void lc_shuffle_deck(LCState* s, uint64_t* rng) noexcept nogil:
    """A Fisher-Yates shuffle of the deck order; the hands stay."""
    cdef int i, j
    cdef uint8_t t
    for i in range(s.deck_len - 1, 0, -1):
        j = rng_below(rng, i + 1)
        t = s.deck[i]; s.deck[i] = s.deck[j]; s.deck[j] = t


cdef inline void lc_world(const LCConfig* cfg, const LCState* root, int me, uint64_t seed, uint64_t w,
                          int hidden, LCState* world) noexcept nogil:
    """World `w` of a search seeded `seed`: `root` copied into `world` and
    redealt for `me` from the stream rng_seed(seed, 0x4E5A, w). hidden 0
    redeals all `me` cannot see (lc_resample), 1 only the deck order (a
    Fisher-Yates shuffle of the deck; the opponent keeps its true hand), 2
    nothing."""
    cdef uint64_t rng = rng_seed(seed, 0x4E5A, w)
    memcpy(world, root, sizeof(LCState))
    if hidden == 0:
        lc_resample(cfg, world, me, &rng)
    elif hidden == 1:
        lc_shuffle_deck(world, &rng)


cdef void lc_search_worlds(const LCConfig* cfg, const LCState* root, int me, uint64_t seed,
                           int first, int n_worlds, const int* cands, int n_cands,
                           double* out, int limit) noexcept nogil:
    """For worlds first .. first+n_worlds-1 and every candidate j: out[j *
    n_worlds + (w - first)] = me's final score difference after candidate j
    and heuristic playouts in world w."""
    cdef LCState world, s
    cdef LCUndo u
    cdef int w, j
    for w in range(n_worlds):
        lc_world(cfg, root, me, seed, <uint64_t>(first + w), 0, &world)
        for j in range(n_cands):
            memcpy(&s, &world, sizeof(LCState))
            lc_apply(cfg, &s, cands[j], &u)
            lc_heuristic_playout(cfg, &s, limit)
            out[j * n_worlds + w] = lc_score(cfg, &s, me) - lc_score(cfg, &s, 1 - me)


cdef double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int lc_race(const LCConfig* cfg, const LCState* root, int me, uint64_t seed,
                 const int* cands, int n_cands, long budget, int max_worlds, int first_round,
                 int chunk, double z, double eps, double deadline, double* vals,
                 int* seen, int limit, int hidden) noexcept nogil:
    """Racing with paired differences. Every candidate still in the race is
    played in the same worlds 0, 1, 2, ... (first `first_round` of them, then
    `chunk` at a time); after each step the leader is the best mean, and a
    candidate leaves the race once, even optimistically (its mean paired
    difference to the leader plus z standard errors), it is not `eps` points
    better than the leader. The race ends with one candidate left, after
    `budget` playouts, at `max_worlds` worlds, or at `deadline` (seconds of
    CLOCK_MONOTONIC; <= 0: none), always after the first step.

    vals[j * max_worlds + w]: candidate j's value in world w, for w <
    seen[j] (the worlds it was played in). `hidden`: what a world redeals
    (lc_world; 0 for a player). Returns the leader's index."""
    cdef int alive[64]
    cdef double sums[64]
    cdef int n_alive = n_cands, nw = 0, step = first_round, i, j, b, w, a, keep
    cdef long used = 0
    cdef double best, d, dm, dv, se
    cdef LCState world, s
    cdef LCUndo u
    for j in range(n_cands):
        alive[j] = j
        sums[j] = 0.0
        seen[j] = 0
    b = 0
    while n_alive > 1:
        if step > (budget - used) // n_alive:
            step = <int>((budget - used) // n_alive)
        if step > max_worlds - nw:
            step = max_worlds - nw
        if step < 1:
            break
        for w in range(nw, nw + step):
            lc_world(cfg, root, me, seed, <uint64_t>w, hidden, &world)
            for i in range(n_alive):
                j = alive[i]
                memcpy(&s, &world, sizeof(LCState))
                lc_apply(cfg, &s, cands[j], &u)
                lc_heuristic_playout(cfg, &s, limit)
                vals[j * max_worlds + w] = lc_score(cfg, &s, me) - lc_score(cfg, &s, 1 - me)
                sums[j] += vals[j * max_worlds + w]
        nw += step
        used += <long>step * n_alive
        for i in range(n_alive):
            seen[alive[i]] = nw
        b = alive[0]
        best = sums[b]
        for i in range(1, n_alive):
            if sums[alive[i]] > best:
                b = alive[i]
                best = sums[b]
        if nw >= 2:
            keep = 0
            for i in range(n_alive):
                j = alive[i]
                if j != b:
                    dm = (sums[j] - sums[b]) / nw
                    dv = 0.0
                    for w in range(nw):
                        d = vals[j * max_worlds + w] - vals[b * max_worlds + w] - dm
                        dv += d * d
                    se = sqrt(dv / (nw - 1) / nw)
                    if dm + z * se < eps:
                        continue
                alive[keep] = j
                keep += 1
            n_alive = keep
        step = chunk
        if deadline > 0 and _now() >= deadline:
            break
    return b


def race_values(State state, int player, seed, cands, long budget, int first_round=16, int chunk=16,
                double z=2.0, double eps=0.1, double time_limit=0.0, int hidden=0):
    """Racing search (lc_race) of `player`'s candidate actions in `state`
    with heuristic playouts; at most `budget` playouts and `time_limit`
    seconds (0: none). `hidden` 1 or 2 redeals less than `player` cannot
    see (the module docstring; diagnostics only). Returns (leader index,
    vals [A, W] float64 with NaN where a candidate was not played, worlds
    each candidate saw [A])."""
    cdef Game game = state.game
    _lc_cfg(game)
    cdef const LCConfig* cfg = <const LCConfig*>game.gd.cfg
    cdef uint64_t base = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
    cdef int limit = game.gd.max_game_length + 1
    cdef double deadline = 0.0
    c = _checked_cands(state, player, cands)
    if len(c) < 1 or len(c) > 64:
        raise ValueError(f"the race needs 1 to 64 candidates, got {len(c)}")
    if budget < 1 or first_round < 1 or chunk < 1:
        raise ValueError("budget, first_round and chunk must be >= 1")
    if hidden not in (0, 1, 2):
        raise ValueError(f"hidden must be 0 (redeal all unseen cards), 1 (the deck order) or 2 (nothing), "
                         f"got {hidden}")
    cdef int W = <int>max(1, min(budget // 2 if len(c) > 1 else 1, 1 << 20))
    vals = np.full((len(c), W), np.nan, dtype=np.float64)
    seen = np.zeros(len(c), dtype=np.int32)
    cdef int[::1] cv = c
    cdef double[:, ::1] vv = vals
    cdef int[::1] sv = seen
    cdef int b
    if time_limit > 0:
        deadline = _now() + time_limit
    with nogil:
        b = lc_race(cfg, <const LCState*>state.data, player, base, &cv[0], <int>cv.shape[0], budget, W,
                    first_round, chunk, z, eps, deadline, &vv[0, 0], &sv[0], limit, hidden)
    return b, vals[:, :int(seen.max())], seen


def race_world(State state, int player, seed, long w, int hidden=0):
    """World `w` of a race (or search_values call) seeded `seed`, as a new
    State: `state` redealt for `player` as lc_world redeals it. Like
    State.resample's, the result has no history to undo."""
    cdef Game game = state.game
    _lc_cfg(game)
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    if hidden not in (0, 1, 2) or w < 0:
        raise ValueError(f"hidden must be 0, 1 or 2 and w >= 0, got {hidden} and {w}")
    cdef State out = game._make_state()
    lc_world(<const LCConfig*>game.gd.cfg, <const LCState*>state.data, player,
             <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF), <uint64_t>w, hidden, <LCState*>out.data)
    return out


def _checked_cands(State state, int player, cands):
    cdef Game game = state.game
    cdef const LCConfig* cfg = <const LCConfig*>game.gd.cfg
    cdef int legal[256]
    cdef int n_legal, k
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    if (<const LCState*>state.data).terminal:
        raise ValueError("the game is over")
    c = np.ascontiguousarray(cands, dtype=np.int32)
    if c.ndim != 1:
        raise ValueError("cands must be a 1-d list of actions")
    n_legal = lc_legal_actions(cfg, <const LCState*>state.data, legal)
    legal_set = {legal[k] for k in range(n_legal)}
    for a in c:
        if int(a) not in legal_set:
            raise ValueError(f"illegal candidate action {int(a)}")
    return c


def _lc_cfg(Game game):
    if game.name != "lost_cities":
        raise ValueError(f"the search loop plays lost_cities, not {game.name}")
    return None


def search_values(State state, int player, seed, cands, int first, int n_worlds):
    """float64 [len(cands), n_worlds]: `player`'s final score difference when
    it plays cands[j] in world first + w (see the module docstring) and both
    sides follow the heuristic to the end. Every candidate must be legal."""
    cdef Game game = state.game
    _lc_cfg(game)
    cdef const LCConfig* cfg = <const LCConfig*>game.gd.cfg
    cdef const LCState* root = <const LCState*>state.data
    cdef uint64_t base = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
    cdef int limit = game.gd.max_game_length + 1
    if n_worlds < 0 or first < 0:
        raise ValueError("first and n_worlds must be >= 0")
    c = _checked_cands(state, player, cands)
    out = np.empty((len(c), n_worlds), dtype=np.float64)
    if len(c) == 0 or n_worlds == 0:
        return out
    cdef int[::1] cv = c
    cdef double[:, ::1] ov = out
    with nogil:
        lc_search_worlds(cfg, root, player, base, first, n_worlds, &cv[0], <int>cv.shape[0],
                         &ov[0, 0], limit)
    return out


def heuristic_playouts(State state, int n):
    """Time helper: n heuristic playouts of `state` to the end; returns the
    last final score difference for player 0."""
    cdef Game game = state.game
    _lc_cfg(game)
    cdef const LCConfig* cfg = <const LCConfig*>game.gd.cfg
    cdef LCState s
    cdef int i, limit = game.gd.max_game_length + 1, d = 0
    with nogil:
        for i in range(n):
            memcpy(&s, state.data, sizeof(LCState))
            lc_heuristic_playout(cfg, &s, limit)
            d = lc_score(cfg, &s, 0) - lc_score(cfg, &s, 1)
    return d


def shuffle_decks(batch, seed, int start=0, int stop=-1):
    """Shuffle only the deck order in rows [start, stop) of a Lost Cities
    StateBatch (stop -1: its capacity), row i from the stream
    rng_seed(seed, 0x4E5A, i); the hands stay as they are. The worlds of a
    search that sees the opponent's hand (oracle=hand, a diagnostic), as
    lc_world's hidden=1 deals them for the race."""
    cdef Game game = batch.game
    _lc_cfg(game)
    if batch.buffer.shape[1] != sizeof(LCState):
        raise ValueError("the batch's rows are not Lost Cities states")
    if stop < 0:
        stop = batch.capacity
    if not 0 <= start <= stop <= batch.capacity:
        raise ValueError(f"rows [{start}, {stop}) are not in a batch of {batch.capacity}")
    cdef uint8_t[:, ::1] rows = batch.buffer
    cdef uint64_t base = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
    cdef uint64_t rng
    cdef int i
    with nogil:
        for i in range(start, stop):
            rng = rng_seed(base, 0x4E5A, <uint64_t>i)
            lc_shuffle_deck(<LCState*>&rows[i, 0], &rng)
