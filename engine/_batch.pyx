"""Many states of one game in one buffer, stepped together by nogil loops.

Search and evaluation tools (the local best response of agents.exploiter,
for one) hold hundreds of copies of a game: one per sampled world and
candidate action. A `StateBatch` keeps them as raw state structs in one numpy
buffer, and every per-state operation (copy, redeal the hidden cards, encode,
apply, playouts to the end) runs in C over a range or a list of rows, with
the GIL released. Python runs once per batch, never once per state.

Rows are plain memcpy-able game structs with no undo history: a StateBatch
moves forward only.
"""
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

import numpy as np

from engine._types cimport int8_t, int32_t, uint8_t, uint64_t
from engine._rng cimport rng_seed, rng_below
from engine._game cimport Game, State, GameDef, TERMINAL_PLAYER

cdef enum:
    ROLLOUT_RANDOM = 0
    ROLLOUT_GAME = 1


cdef inline int _step_policy(const GameDef* gd, char* s, int* legal, char* undo, int policy,
                             uint64_t* rng) noexcept nogil:
    """Apply one move of the playout policy; returns the action."""
    cdef int a, n
    if policy == ROLLOUT_GAME:
        a = gd.rollout_action(gd.cfg, s, rng)
    else:
        n = gd.legal_actions(gd.cfg, s, legal)
        a = legal[rng_below(rng, n)]
    gd.apply_action(gd.cfg, s, a, undo)
    return a


cdef class StateBatch:
    """`capacity` states of `game`. Rows are filled from State objects
    (`fill`, `set`), copied between rows, redealt, stepped and played out."""
    cdef readonly Game game
    cdef readonly int capacity
    cdef readonly object buffer         # uint8 [capacity, state_size]: the rows
    cdef char* data                     # the buffer's memory
    cdef int* legal                     # num_actions ints of scratch
    cdef char* undo                     # one undo record of scratch (never read back)
    cdef int size                       # bytes of one row

    def __cinit__(self, Game game, int capacity):
        if capacity < 1:
            raise ValueError(f"StateBatch capacity must be at least 1, got {capacity}")
        self.game = game
        self.capacity = capacity
        self.size = game.gd.state_size
        self.buffer = np.zeros((capacity, self.size), dtype=np.uint8)
        cdef uint8_t[:, ::1] view = self.buffer
        self.data = <char*>&view[0, 0]
        self.legal = <int*>malloc(max(game.gd.num_actions, 1) * sizeof(int))
        self.undo = <char*>malloc(max(game.gd.undo_size, 1))
        if self.legal == NULL or self.undo == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.legal)
        free(self.undo)

    cdef inline char* _row(self, int i) noexcept nogil:
        return self.data + <Py_ssize_t>i * self.size

    cdef int _span(self, int start, int stop) except -1:
        """stop (-1: the capacity), once [start, stop) is checked to be rows."""
        if stop < 0:
            stop = self.capacity
        if not 0 <= start <= stop <= self.capacity:
            raise ValueError(f"rows [{start}, {stop}) out of range for capacity {self.capacity}")
        return stop

    cdef object _rows(self, rows):
        r = np.ascontiguousarray(rows, dtype=np.int32)
        if r.ndim != 1:
            raise ValueError("rows must be a 1-d array of row indices")
        if len(r) and (r.min() < 0 or r.max() >= self.capacity):
            raise ValueError(f"a row index is out of range 0..{self.capacity - 1}")
        return r

    def fill(self, State state, int start=0, int stop=-1):
        """Copy `state` into rows [start, stop) (stop -1: to the end)."""
        cdef int i
        if state.game is not self.game:
            raise ValueError("the state belongs to another game")
        stop = self._span(start, stop)
        for i in range(start, stop):
            memcpy(self._row(i), state.data, self.size)

    def set(self, int i, State state):
        self.fill(state, i, i + 1)

    def state(self, int i):
        """Row i as a new State (no history)."""
        self._span(i, i + 1)
        cdef State st = self.game._make_state()
        memcpy(st.data, self._row(i), self.size)
        return st

    def copy_rows(self, src, dst):
        """Row dst[j] becomes a copy of row src[j], for every j."""
        s = self._rows(src)
        d = self._rows(dst)
        if len(s) != len(d):
            raise ValueError("copy_rows needs as many sources as destinations")
        cdef int[::1] sv = s, dv = d
        cdef Py_ssize_t j
        with nogil:
            for j in range(sv.shape[0]):
                if sv[j] != dv[j]:
                    memcpy(self._row(dv[j]), self._row(sv[j]), self.size)

    def resample(self, int player, seed, int start=0, int stop=-1):
        """Redeal what `player` cannot see in rows [start, stop), row i from its
        own stream seeded by (seed, i): see the game's resample (Lost Cities:
        lc_resample). Raises ValueError for games without hidden cards."""
        cdef const GameDef* gd = &self.game.gd
        cdef uint64_t base = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
        cdef uint64_t rng
        cdef int i
        if gd.resample == NULL:
            raise ValueError(f"{self.game.name} cannot resample hidden information")
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        stop = self._span(start, stop)
        with nogil:
            for i in range(start, stop):
                rng = rng_seed(base, 0x4E5A, <uint64_t>i)
                gd.resample(gd.cfg, self._row(i), player, &rng)

    def current_players(self, int start=0, int stop=-1):
        """int8 [stop - start]: the player to act in each row, -4 when over."""
        cdef const GameDef* gd = &self.game.gd
        cdef int i
        stop = self._span(start, stop)
        out = np.empty(stop - start, dtype=np.int8)
        cdef int8_t[::1] ov = out
        with nogil:
            for i in range(start, stop):
                ov[i - start] = <int8_t>gd.current_player(gd.cfg, self._row(i))
        return out

    def returns(self, int player=0, int start=0, int stop=-1):
        """float64 [stop - start]: `player`'s return in each row (as it stands
        before the end)."""
        cdef const GameDef* gd = &self.game.gd
        cdef double r[2]
        cdef int i
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        stop = self._span(start, stop)
        out = np.empty(stop - start, dtype=np.float64)
        cdef double[::1] ov = out
        with nogil:
            for i in range(start, stop):
                gd.returns(gd.cfg, self._row(i), r)
                ov[i - start] = r[player]
        return out

    def encode(self, rows, int player, float[:, ::1] info, uint8_t[:, ::1] mask):
        """Row rows[j]'s info-state tensor of `player` into info[j] and its
        legal-action mask into mask[j] (all zero at a terminal row)."""
        cdef const GameDef* gd = &self.game.gd
        r = self._rows(rows)
        cdef int[::1] rv = r
        cdef Py_ssize_t j
        cdef int n, k
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        if info.shape[0] < rv.shape[0] or info.shape[1] != gd.tensor_size:
            raise ValueError(f"info must be float32 [>= {rv.shape[0]}, {gd.tensor_size}]")
        if mask.shape[0] < rv.shape[0] or mask.shape[1] != gd.num_actions:
            raise ValueError(f"mask must be uint8 [>= {rv.shape[0]}, {gd.num_actions}]")
        with nogil:
            for j in range(rv.shape[0]):
                gd.info_state(gd.cfg, self._row(rv[j]), player, &info[j, 0])
                for k in range(gd.num_actions):
                    mask[j, k] = 0
                n = gd.legal_actions(gd.cfg, self._row(rv[j]), self.legal)
                for k in range(n):
                    mask[j, self.legal[k]] = 1

    def apply(self, rows, actions):
        """Apply actions[j] in row rows[j]. Every action is checked first; an
        illegal one raises ValueError naming the row and nothing is applied."""
        cdef const GameDef* gd = &self.game.gd
        r = self._rows(rows)
        a = np.ascontiguousarray(actions, dtype=np.int32)
        if a.shape != r.shape:
            raise ValueError(f"apply needs one action per row, got {a.shape} for {r.shape}")
        cdef int[::1] rv = r, av = a
        cdef Py_ssize_t j, bad = -1
        cdef int n, k
        with nogil:
            for j in range(rv.shape[0]):
                n = gd.legal_actions(gd.cfg, self._row(rv[j]), self.legal)
                for k in range(n):
                    if self.legal[k] == av[j]:
                        break
                else:
                    bad = j
                    break
            if bad < 0:
                for j in range(rv.shape[0]):
                    gd.apply_action(gd.cfg, self._row(rv[j]), av[j], self.undo)
        if bad >= 0:
            raise ValueError(f"illegal action {int(a[bad])} in row {int(r[bad])}")

    def advance(self, int player, seed, int start=0, int stop=-1, str policy="game"):
        """In rows [start, stop), let the playout policy move for `player` as
        long as it is `player`'s turn (e.g. to finish a turn's draw)."""
        self._run(player, seed, start, stop, policy)

    def playout(self, seed, int start=0, int stop=-1, str policy="game"):
        """Play rows [start, stop) to the end with the playout policy for both
        players ("game": the game's own, Lost Cities' heuristic; "random":
        uniform), row i from its own stream seeded by (seed, i)."""
        self._run(-1, seed, start, stop, policy)

    cdef _run(self, int player, seed, int start, int stop, str policy):
        cdef const GameDef* gd = &self.game.gd
        cdef uint64_t base = <uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF)
        cdef uint64_t rng
        cdef int i, p, pol, steps, limit = gd.max_game_length + 1
        if policy == "game":
            if gd.rollout_action == NULL:
                raise ValueError(f"{self.game.name} has no playout policy of its own; use policy='random'")
            pol = ROLLOUT_GAME
        elif policy == "random":
            pol = ROLLOUT_RANDOM
        else:
            raise ValueError(f"policy must be 'game' or 'random', got {policy!r}")
        stop = self._span(start, stop)
        with nogil:
            for i in range(start, stop):
                rng = rng_seed(base, 0x9A7, <uint64_t>i)
                steps = 0
                while steps < limit:
                    p = gd.current_player(gd.cfg, self._row(i))
                    if p == TERMINAL_PLAYER or (player >= 0 and p != player):
                        break
                    _step_policy(gd, self._row(i), self.legal, self.undo, pol, &rng)
                    steps += 1
