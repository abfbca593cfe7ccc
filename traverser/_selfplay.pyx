"""Self-play games as a resumable group: many deals played to the end, each
parked at a decision with its info-state in a request buffer while the
batcher answers, the whole step and resume loops inside `with nogil:`.

A PlayGroup holds `n` game slots, a request buffer and a trajectory buffer,
preallocated; numpy owns the arrays and C writes through pointers set once.
One round is:

    n = group.step()                  # nogil: every slot that is not parked
                                      # and not over writes its row (the
                                      # player to move's info-state) and parks
    <answers[:n] = policy logits and value of group.requests[:n]>
    group.resume(n, answers, version) # nogil: softmax over the legal moves,
                                      # sample one, record the decision, apply

The answers are the served policy-value net's rows: num_actions logits, then
the critic's value (AdvantageValue's layout). Each decision records, in the
trajectory buffer: the info-state row, the legal mask, the move, its
log-probability under the answered policy (the behaviour policy, exact for
PPO's ratio whatever the weights lag), the value, the weights version of the
answer, the player, the game and its ply. A game that ends writes a record
of its own: the game, both players' returns, its decisions. drain() hands
both over and empties the buffers; step() parks no more games than the
trajectory buffer has room for, so nothing is ever dropped.

Deals and moves are reproducible: slot i's game is dealt as
`game.new_initial_state(seed=seeds[i])` deals it, and its moves are sampled
from an xorshift stream seeded by (seed, 0x5E1F), so a game's moves depend
only on its seed and the answers, never on the order of the slots or rounds.
"""
from libc.math cimport exp, log
from libc.string cimport memcpy, memset

import numpy as np

from engine._types cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from engine._rng cimport rng_seed, rng_double
from engine._game cimport Game, GameDef, TERMINAL_PLAYER

cdef enum:
    ACTIVE = 0          # runnable: step() writes its row
    PARKED = 1          # its row waits for an answer
    OVER = 2            # the game ended (its record is written)
    EMPTY = 3           # no game in the slot


cdef class PlayGroup:
    """`n` self-play games of `game`, stepped together. `capacity`: decisions
    the trajectory buffer holds between drains (at least n)."""
    cdef readonly Game game
    cdef readonly int n, capacity, tensor_size, num_actions
    cdef readonly bint u8              # info rows as uint8 (the game encodes them exactly so)
    cdef readonly object states, requests, request_slot, request_player
    # trajectory columns (capacity rows) and game records (n rows)
    cdef readonly object t_info, t_mask, t_action, t_logp, t_value, t_version, t_player, t_game, t_ply
    cdef readonly object e_game, e_returns, e_decisions
    cdef readonly object slot_game, slot_seed
    cdef char* sdata
    cdef int ssize
    cdef uint8_t* req_u8
    cdef float* req_f32
    cdef int32_t* req_slot
    cdef int8_t* req_player
    cdef uint8_t* ti_u8
    cdef float* ti_f32
    cdef uint8_t* tmask
    cdef int32_t* tact
    cdef float* tlogp
    cdef float* tvalue
    cdef int32_t* tver
    cdef int8_t* tplayer
    cdef int64_t* tgame
    cdef int32_t* tply
    cdef int64_t* egame
    cdef float* eret
    cdef int32_t* edec
    cdef int64_t* sgame
    cdef uint64_t[::1] rng
    cdef int8_t[::1] status
    cdef int32_t[::1] plies
    cdef int[::1] legal
    cdef double[::1] probs
    cdef int8_t[::1] undo
    cdef int n_req, n_rows, n_ended, over

    def __cinit__(self, Game game, int n, int capacity=0):
        cdef const GameDef* gd = &game.gd
        if n < 1:
            raise ValueError(f"a PlayGroup needs at least one game slot, got {n}")
        if capacity == 0:
            capacity = 4 * n
        if capacity < n:
            raise ValueError(f"the trajectory buffer ({capacity} decisions) must hold at least one round ({n})")
        self.game = game
        self.n = n
        self.capacity = capacity
        self.tensor_size = gd.tensor_size
        self.num_actions = gd.num_actions
        self.u8 = gd.info_state_u8 != NULL
        self.ssize = gd.state_size
        T, A = gd.tensor_size, gd.num_actions
        row_dtype = np.uint8 if self.u8 else np.float32
        self.states = np.zeros((n, self.ssize), np.uint8)
        self.requests = np.zeros((n, T), row_dtype)
        self.request_slot = np.zeros(n, np.int32)
        self.request_player = np.zeros(n, np.int8)
        self.t_info = np.zeros((capacity, T), row_dtype)
        self.t_mask = np.zeros((capacity, A), np.uint8)
        self.t_action = np.zeros(capacity, np.int32)
        self.t_logp = np.zeros(capacity, np.float32)
        self.t_value = np.zeros(capacity, np.float32)
        self.t_version = np.zeros(capacity, np.int32)
        self.t_player = np.zeros(capacity, np.int8)
        self.t_game = np.zeros(capacity, np.int64)
        self.t_ply = np.zeros(capacity, np.int32)
        self.e_game = np.zeros(n, np.int64)
        self.e_returns = np.zeros((n, 2), np.float32)
        self.e_decisions = np.zeros(n, np.int32)
        self.slot_game = np.zeros(n, np.int64)
        self.slot_seed = np.zeros(n, np.int64)
        self.rng = np.zeros(n, np.uint64)
        self.status = np.full(n, EMPTY, np.int8)
        self.plies = np.zeros(n, np.int32)
        self.legal = np.zeros(max(A, 1), np.intc)
        self.probs = np.zeros(max(A, 1), np.float64)
        self.undo = np.zeros(max(gd.undo_size, 1), np.int8)
        self.sdata = <char*>_ptr(self.states)
        self.req_u8 = <uint8_t*>_ptr(self.requests) if self.u8 else NULL
        self.req_f32 = NULL if self.u8 else <float*>_ptr(self.requests)
        self.req_slot = <int32_t*>_ptr(self.request_slot)
        self.req_player = <int8_t*>_ptr(self.request_player)
        self.ti_u8 = <uint8_t*>_ptr(self.t_info) if self.u8 else NULL
        self.ti_f32 = NULL if self.u8 else <float*>_ptr(self.t_info)
        self.tmask = <uint8_t*>_ptr(self.t_mask)
        self.tact = <int32_t*>_ptr(self.t_action)
        self.tlogp = <float*>_ptr(self.t_logp)
        self.tvalue = <float*>_ptr(self.t_value)
        self.tver = <int32_t*>_ptr(self.t_version)
        self.tplayer = <int8_t*>_ptr(self.t_player)
        self.tgame = <int64_t*>_ptr(self.t_game)
        self.tply = <int32_t*>_ptr(self.t_ply)
        self.egame = <int64_t*>_ptr(self.e_game)
        self.eret = <float*>_ptr(self.e_returns)
        self.edec = <int32_t*>_ptr(self.e_decisions)
        self.sgame = <int64_t*>_ptr(self.slot_game)
        self.n_req = self.n_rows = self.n_ended = 0
        self.over = n

    def start(self, games, seeds):
        """Deal a fresh game into each slot: games[i] (an int64 id the records
        carry) dealt from seeds[i]. Fewer games than slots leave the rest empty.
        The group must be idle (nothing parked)."""
        g = np.ascontiguousarray(games, dtype=np.int64)
        s = np.ascontiguousarray(seeds, dtype=np.int64)
        if g.ndim != 1 or g.shape != s.shape or len(g) > self.n:
            raise ValueError(f"start needs as many seeds as games, at most {self.n}; got {g.shape} and {s.shape}")
        if self.n_req:
            raise ValueError("start: the group has rows waiting for answers")
        cdef const GameDef* gd = &self.game.gd
        cdef int64_t[::1] gv = g, sv = s
        cdef int i, k = len(g)
        cdef uint64_t deal
        with nogil:
            for i in range(self.n):
                if i < k:
                    deal = rng_seed(<uint64_t>sv[i], 0x5EED, 0)
                    gd.deal_seed(gd.cfg, self.sdata + <Py_ssize_t>i * self.ssize, &deal)
                    self.rng[i] = rng_seed(<uint64_t>sv[i], 0x5E1F, 0)
                    self.sgame[i] = gv[i]
                    self.status[i] = ACTIVE
                    self.plies[i] = 0
                else:
                    self.status[i] = EMPTY
        self.slot_seed[:k] = s
        self.over = self.n - k

    def finished(self):
        """Every game in the group has ended (and its record is written)."""
        return self.over == self.n

    def pending(self):
        """Rows written by the last step() that still wait for their answers."""
        return self.n_req

    def room(self):
        """Decisions the trajectory buffer can take before a drain."""
        return self.capacity - self.n_rows

    def step(self):
        """Write the row of every runnable game (at most room()) and park it;
        end the games that are over. Returns the rows written: requests[:n],
        of the slots request_slot[:n], each the info state of the player
        request_player[:n] (the one to move)."""
        if self.n_req:
            raise ValueError("step: the last round's rows have not been answered (resume first)")
        with nogil:
            self._step()
        return self.n_req

    cdef void _step(self) noexcept nogil:
        cdef const GameDef* gd = &self.game.gd
        cdef int i, p, room = self.capacity - self.n_rows
        cdef char* s
        cdef double r[2]
        cdef int T = self.tensor_size
        for i in range(self.n):
            if self.status[i] != ACTIVE:
                continue
            s = self.sdata + <Py_ssize_t>i * self.ssize
            p = gd.current_player(gd.cfg, s)
            if p == TERMINAL_PLAYER or self.plies[i] >= gd.max_game_length:
                if self.n_ended >= self.n:
                    continue        # records full until a drain (never: a slot ends once a start)
                gd.returns(gd.cfg, s, r)
                self.egame[self.n_ended] = self.sgame[i]
                self.eret[2 * self.n_ended] = <float>r[0]
                self.eret[2 * self.n_ended + 1] = <float>r[1]
                self.edec[self.n_ended] = self.plies[i]
                self.n_ended += 1
                self.status[i] = OVER
                self.over += 1
                continue
            if self.n_req >= room:
                continue
            if self.u8:
                gd.info_state_u8(gd.cfg, s, p, self.req_u8 + <Py_ssize_t>self.n_req * T)
            else:
                gd.info_state(gd.cfg, s, p, self.req_f32 + <Py_ssize_t>self.n_req * T)
            self.req_slot[self.n_req] = i
            self.req_player[self.n_req] = <int8_t>p
            self.status[i] = PARKED
            self.n_req += 1

    def resume(self, int n, const float[:, ::1] answers, int version):
        """Answer the last step's n rows: answers float32 [n, num_actions + 1]
        (logits, then the value), from weights `version`. Samples a move for
        each, records the decision and applies the move."""
        if n != self.n_req:
            raise ValueError(f"resume: {n} answers for {self.n_req} rows")
        if answers.shape[0] < n or answers.shape[1] != self.num_actions + 1:
            raise ValueError(f"resume: answers must be float32 [>= {n}, {self.num_actions + 1}] "
                             f"(logits and the value), got [{answers.shape[0]}, {answers.shape[1]}]")
        cdef int bad
        with nogil:
            bad = self._resume(answers, version)
        if bad >= 0:
            raise ValueError(f"resume: the answer to row {bad} is not finite over its legal moves")

    cdef int _resume(self, const float[:, ::1] ans, int version) noexcept nogil:
        cdef const GameDef* gd = &self.game.gd
        cdef int j, i, k, m, p, a, T = self.tensor_size, A = self.num_actions
        cdef double mx, total, u, acc, x
        cdef char* s
        cdef Py_ssize_t row
        for j in range(self.n_req):          # a NaN or infinite answer refuses the whole round, unapplied
            s = self.sdata + <Py_ssize_t>self.req_slot[j] * self.ssize
            m = gd.legal_actions(gd.cfg, s, &self.legal[0])
            for k in range(m):
                x = ans[j, self.legal[k]]
                if not (x > -1e300 and x < 1e300):
                    return j
        for j in range(self.n_req):
            i = self.req_slot[j]
            s = self.sdata + <Py_ssize_t>i * self.ssize
            p = gd.current_player(gd.cfg, s)
            m = gd.legal_actions(gd.cfg, s, &self.legal[0])
            mx = -1e300
            for k in range(m):
                if ans[j, self.legal[k]] > mx:
                    mx = ans[j, self.legal[k]]
            total = 0.0
            for k in range(m):
                self.probs[k] = exp(ans[j, self.legal[k]] - mx)
                total += self.probs[k]
            u = rng_double(&self.rng[i]) * total
            acc = 0.0
            a = m - 1
            for k in range(m):
                acc += self.probs[k]
                if u < acc:
                    a = k
                    break
            row = self.n_rows
            if self.u8:
                memcpy(self.ti_u8 + row * T, self.req_u8 + <Py_ssize_t>j * T, T)
            else:
                memcpy(self.ti_f32 + row * T, self.req_f32 + <Py_ssize_t>j * T, T * sizeof(float))
            memset(self.tmask + row * A, 0, A)
            for k in range(m):
                self.tmask[row * A + self.legal[k]] = 1
            self.tact[row] = self.legal[a]
            self.tlogp[row] = <float>(log(self.probs[a] / total))
            self.tvalue[row] = ans[j, A]
            self.tver[row] = version
            self.tplayer[row] = <int8_t>p
            self.tgame[row] = self.sgame[i]
            self.tply[row] = self.plies[i]
            self.n_rows += 1
            gd.apply_action(gd.cfg, s, self.legal[a], <void*>&self.undo[0])
            self.plies[i] += 1
            self.status[i] = ACTIVE
        self.n_req = 0
        return -1

    def drain(self):
        """(decisions, ends): copies of the recorded decisions (info, mask,
        action, logp, value, version, player, game, ply) and the games that
        ended (game, returns [k, 2], decisions) since the last drain; the
        buffers are then empty."""
        k, e = self.n_rows, self.n_ended
        decisions = {"info": self.t_info[:k].copy(), "mask": self.t_mask[:k].copy(),
                     "action": self.t_action[:k].copy(), "logp": self.t_logp[:k].copy(),
                     "value": self.t_value[:k].copy(), "version": self.t_version[:k].copy(),
                     "player": self.t_player[:k].copy(), "game": self.t_game[:k].copy(),
                     "ply": self.t_ply[:k].copy()}
        ends = {"game": self.e_game[:e].copy(), "returns": self.e_returns[:e].copy(),
                "decisions": self.e_decisions[:e].copy()}
        self.n_rows = self.n_ended = 0
        return decisions, ends


cdef void* _ptr(arr):
    """The data pointer of a C-contiguous numpy array."""
    cdef Py_ssize_t addr = arr.ctypes.data
    return <void*>addr
