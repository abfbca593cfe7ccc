"""The inner loop of the search player (trainer.search) for Lost Cities, in
nogil C: redeal a world, play every candidate action in it, play each out
with the heuristic to the end, score. Python calls it once per chunk of
worlds; nothing here touches a Python object per world or per move.

`lc_fast_heuristic` is the rule-based bot of engine/_lost_cities.pyx
(`lc_heuristic_action`) move for move, rewritten to walk the set bits of the
hand mask instead of every kind: the same rules, the same double arithmetic
and the same tie order (tests/test_search.py checks it against the original on
many states), about three times faster. Playouts spend nearly all of the
search's time in it.

Worlds: world w of a call is the root state redealt for the searching player
by lc_resample from the stream rng_seed(seed, 0x4E5A, w), as
`StateBatch.resample(player, seed)` redeals row w, so a search can be replayed
with a StateBatch. Every candidate is played in the same worlds (common random
numbers), and the heuristic is deterministic, so the candidates' values in a
world differ only by the action.
"""
from libc.string cimport memcpy
from libc.math cimport sqrt
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

import numpy as np

from engine._types cimport int8_t, int16_t, uint8_t, uint64_t
from engine._rng cimport rng_seed
from engine._game cimport Game, State
from engine._lost_cities cimport (LCConfig, LCState, LCUndo, LC_PLAY, LC_DRAW, LC_MAX_COLOURS,
                                  lc_apply, lc_score, lc_resample, lc_legal_actions)

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil


cdef int lc_fast_heuristic(const LCConfig* cfg, const LCState* s) noexcept nogil:
    """lc_heuristic_action's move (see there for the rules), from the hand's
    set bits: the kinds in hand are visited in increasing order, as the
    original's loops visit them, so every tie breaks the same way."""
    cdef int p = s.player, o = 1 - p, K = cfg.num_kinds, kpc = cfg.kinds_per_colour
    cdef int c, r, k, w, gap, best_action = -1, top
    cdef int hand_points[LC_MAX_COLOURS]
    cdef int hand_numbers[LC_MAX_COLOURS]
    cdef int lowest[LC_MAX_COLOURS]
    cdef double score, best_score = -1e9
    cdef bint late = s.deck_len <= 3 * cfg.colours
    cdef bint started
    cdef int open_points = cfg.expedition_cost - cfg.expedition_cost // 4
    cdef int wager_points = cfg.expedition_cost + cfg.expedition_cost // 2
    cdef int opp_top
    cdef bint opp_started
    cdef uint64_t m

    if s.phase == LC_DRAW:
        best_action = 2 * K
        for c in range(cfg.colours):
            if s.pile_len[c] == 0 or c == s.blocked:
                continue
            k = s.pile[c][s.pile_len[c] - 1]
            r = cfg.kind_rank[k]
            if r == 0 or s.count[p][c] == 0 or r <= s.top[p][c]:
                continue
            gap = r - s.top[p][c] - 1
            if s.top[p][c] == 0:
                gap = r - 1
            if gap <= 1:
                score = 2.0 - gap + cfg.kind_value[k] * 0.01
                if score > best_score:
                    best_score = score
                    best_action = 2 * K + 1 + c
        return best_action

    for c in range(cfg.colours):
        hand_points[c] = 0
        hand_numbers[c] = 0
        lowest[c] = 0
    for w in range(2):
        m = s.hand_mask[p][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            m &= m - 1
            c = cfg.kind_colour[k]
            r = cfg.kind_rank[k]
            if r > s.top[p][c]:            # r > 0 follows: a wager's rank is 0
                hand_points[c] += cfg.kind_value[k]
                hand_numbers[c] += 1
                if lowest[c] == 0:         # increasing kinds: the first is the lowest
                    lowest[c] = r

    for c in range(cfg.colours):
        started = s.count[p][c] > 0
        k = c * kpc
        if (s.hand[p][k] and s.top[p][c] == 0 and not late and s.deck_len > cfg.deck_size // 2
                and hand_points[c] >= wager_points and hand_numbers[c] >= 3):
            score = 3.0 + hand_points[c] * 0.01
            if score > best_score:
                best_score = score
                best_action = k
        if lowest[c] == 0:
            continue
        k = c * kpc + lowest[c]
        if started:
            gap = lowest[c] - s.top[p][c] - 1 if s.top[p][c] > 0 else lowest[c] - 1
            if gap <= 1 or late:
                score = 4.0 - gap * 0.5
            elif gap <= 3 and hand_numbers[c] >= 2:
                score = 1.0 - gap * 0.1
            else:
                continue
        else:
            if late or hand_points[c] < open_points or hand_numbers[c] < 2:
                continue
            score = 2.0 + (hand_points[c] - open_points) * 0.02 - (lowest[c] - 1) * 0.2
        if score > best_score:
            best_score = score
            best_action = k
    if best_action >= 0:
        return best_action

    best_score = 1e9
    for w in range(2):
        m = s.hand_mask[p][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            m &= m - 1
            c = cfg.kind_colour[k]
            r = cfg.kind_rank[k]
            score = 0.0
            opp_top = s.top[o][c]
            opp_started = s.count[o][c] > 0
            if r == 0:
                if opp_top == 0:
                    score += 3.0 if opp_started else 1.0
            elif r > opp_top:
                score += (2.0 if opp_started else 0.5) + cfg.kind_value[k] * 0.05
            top = s.top[p][c]
            if r > top and (r > 0 or top == 0):
                if s.count[p][c] > 0:
                    score += 2.0 + cfg.kind_value[k] * 0.05
                else:
                    score += hand_points[c] * 0.03
            if score < best_score:
                best_score = score
                best_action = K + k
    return best_action


cdef inline void lc_heuristic_playout(const LCConfig* cfg, LCState* s, int limit) noexcept nogil:
    """Play `s` to the end (or `limit` moves) with the heuristic for both sides."""
    cdef LCUndo u
    cdef int steps = 0
    while not s.terminal and steps < limit:
        lc_apply(cfg, s, lc_fast_heuristic(cfg, s), &u)
        steps += 1


cdef void lc_search_worlds(const LCConfig* cfg, const LCState* root, int me, uint64_t seed,
                           int first, int n_worlds, const int* cands, int n_cands,
                           double* out, int limit) noexcept nogil:
    """For worlds first .. first+n_worlds-1 and every candidate j: out[j *
    n_worlds + (w - first)] = me's final score difference after candidate j
    and heuristic playouts in world w."""
    cdef LCState world, s
    cdef LCUndo u
    cdef uint64_t rng
    cdef int w, j
    for w in range(n_worlds):
        memcpy(&world, root, sizeof(LCState))
        rng = rng_seed(seed, 0x4E5A, <uint64_t>(first + w))
        lc_resample(cfg, &world, me, &rng)
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
                 int* seen, int limit) noexcept nogil:
    """Racing with paired differences. Every candidate still in the race is
    played in the same worlds 0, 1, 2, ... (first `first_round` of them, then
    `chunk` at a time); after each step the leader is the best mean, and a
    candidate leaves the race once, even optimistically (its mean paired
    difference to the leader plus z standard errors), it is not `eps` points
    better than the leader. The race ends with one candidate left, after
    `budget` playouts, at `max_worlds` worlds, or at `deadline` (seconds of
    CLOCK_MONOTONIC; <= 0: none), always after the first step.

    vals[j * max_worlds + w]: candidate j's value in world w, for w <
    seen[j] (the worlds it was played in). Returns the leader's index."""
    cdef int alive[64]
    cdef double sums[64]
    cdef int n_alive = n_cands, nw = 0, step = first_round, i, j, b, w, a, keep
    cdef long used = 0
    cdef double best, d, dm, dv, se
    cdef LCState world, s
    cdef LCUndo u
    cdef uint64_t rng
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
            memcpy(&world, root, sizeof(LCState))
            rng = rng_seed(seed, 0x4E5A, <uint64_t>w)
            lc_resample(cfg, &world, me, &rng)
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
                double z=2.0, double eps=0.1, double time_limit=0.0):
    """Racing search (lc_race) of `player`'s candidate actions in `state`
    with heuristic playouts; at most `budget` playouts and `time_limit`
    seconds (0: none). Returns (leader index, vals [A, W] float64 with NaN
    where a candidate was not played, worlds each candidate saw [A])."""
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
                    first_round, chunk, z, eps, deadline, &vv[0, 0], &sv[0], limit)
    return b, vals[:, :int(seen.max())], seen


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


def fast_heuristic_action(State state):
    """lc_fast_heuristic's move in `state` (for tests: it must equal
    game.heuristic_action(state))."""
    cdef Game game = state.game
    _lc_cfg(game)
    if (<const LCState*>state.data).terminal:
        raise ValueError("the game is over")
    return lc_fast_heuristic(<const LCConfig*>game.gd.cfg, <const LCState*>state.data)


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
