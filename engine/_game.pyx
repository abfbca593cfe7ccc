"""The game interface shared by every engine game, and its Python API.

A game is a `GameDef`: a config pointer plus `noexcept nogil` functions over a
plain state struct (see _game.pxd). The traverser steps games only through a
GameDef, from code that holds no GIL. This module wraps any GameDef in the
OpenSpiel-style Python classes `Game` and `State`; they are for tests, tools and
bots, never for the per-node hot path.

Python objects never enter the nogil functions. Errors found in nogil code come
back as integer codes and are raised here, after the GIL is held again.
"""
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memset

import numpy as np

from engine._types cimport uint64_t
from engine._rng cimport rng_seed, Rng


class ConsistencyError(AssertionError):
    """A state broke one of its game's invariants (see State.check_consistency)."""


cdef class Game:
    """A configured game. Subclasses fill `gd` and build their own states."""

    def __cinit__(self, *args, **kwargs):
        memset(&self.gd, 0, sizeof(GameDef))

    cdef State _make_state(self):
        raise NotImplementedError

    def num_distinct_actions(self):
        """Number of action ids; legal ids are always in [0, this)."""
        return self.gd.num_actions

    def information_state_tensor_size(self):
        """Floats in one info-state tensor."""
        return self.gd.tensor_size

    def max_legal_actions(self):
        """Most legal actions at any node."""
        return self.gd.max_legal if self.gd.max_legal > 0 else self.gd.num_actions

    def information_state_tensor_shape(self):
        return [self.gd.tensor_size]

    def deal_length(self):
        """Length of an explicit deal for new_initial_state(deal=...)."""
        return self.gd.deal_length

    def max_game_length(self):
        """Upper bound on the number of decisions in one game."""
        return self.gd.max_game_length

    def max_utility(self):
        return self.gd.max_utility

    def num_players(self):
        return 2

    def information_state_segments(self):
        """[(name, size), ...] in tensor order; the sizes sum to the tensor size."""
        raise NotImplementedError

    def input_scale(self):
        """Per-entry multipliers for network inputs (all 1 unless a game says otherwise)."""
        return [1.0] * self.gd.tensor_size

    def action_to_string(self, int action):
        raise NotImplementedError

    def deal_error(self, int code):
        """Human-readable reason for a nonzero deal_order return code."""
        return {DEAL_BAD_LENGTH: f"a deal must have exactly {self.gd.deal_length} entries",
                DEAL_BAD_CARD: "a deal entry is out of range",
                DEAL_DUPLICATE: "a deal entry is repeated"}.get(code, f"error {code}")

    def check_error(self, int code):
        """Human-readable reason for a nonzero check_consistency code."""
        return f"invariant {code} broken"

    def new_initial_state(self, seed=None, deal=None):
        """A freshly dealt state: from `deal` (explicit chance outcomes) if
        given, else from `seed` (an int; None draws one from the OS)."""
        cdef State st = self._make_state()
        cdef uint64_t rng
        cdef int rc, i, n
        cdef int* order
        if deal is not None:
            if seed is not None:
                raise ValueError("give either seed or deal, not both")
            values = [int(x) for x in deal]
            n = len(values)
            order = <int*>malloc(max(n, 1) * sizeof(int))
            if order == NULL:
                raise MemoryError()
            try:
                for i in range(n):
                    order[i] = values[i]
                rc = self.gd.deal_order(self.gd.cfg, st.data, order, n)
            finally:
                free(order)
            if rc != DEAL_OK:
                raise ValueError(f"bad deal for {self.name}: {self.deal_error(rc)}")
        else:
            if seed is None:
                seed = int.from_bytes(np.random.SeedSequence().generate_state(2, np.uint32).tobytes(), "little")
            rng = rng_seed(<uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF), 0x5EED, 0)
            self.gd.deal_seed(self.gd.cfg, st.data, &rng)
        return st

    def new_initial_state_from_rng(self, Rng rng):
        """A state dealt exactly as the traverser deals it: from the xorshift
        state in `rng` (which advances)."""
        cdef State st = self._make_state()
        self.gd.deal_seed(self.gd.cfg, st.data, &rng.state)
        return st

    def __repr__(self):
        args = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}({args})"


cdef class State:
    """A game state with OpenSpiel-style methods. Owns a copy of the C struct."""

    def __cinit__(self, Game game):
        self.game = game
        self.data = <char*>calloc(1, game.gd.state_size)
        self.undo_cap = 64
        self.undo_stack = <char*>calloc(self.undo_cap, max(game.gd.undo_size, 1))
        self.legal_buf = <int*>calloc(max(game.gd.num_actions, 1), sizeof(int))
        if self.data == NULL or self.undo_stack == NULL or self.legal_buf == NULL:
            raise MemoryError()
        self.n_undo = 0
        self._history = []

    def __dealloc__(self):
        free(self.data)
        free(self.undo_stack)
        free(self.legal_buf)

    cdef int _legal(self):
        return self.game.gd.legal_actions(self.game.gd.cfg, self.data, self.legal_buf)

    def current_player(self):
        """Player to act (0 or 1), or -4 when the game is over."""
        return self.game.gd.current_player(self.game.gd.cfg, self.data)

    def is_terminal(self):
        return bool(self.game.gd.is_terminal(self.game.gd.cfg, self.data))

    def is_chance_node(self):
        return False  # chance is resolved by the deal

    def legal_actions(self, player=None):
        """Sorted legal action ids (empty at a terminal state)."""
        if player is not None and player != self.current_player():
            return []
        cdef int n = self._legal()
        return [self.legal_buf[i] for i in range(n)]

    def legal_actions_mask(self):
        mask = np.zeros(self.game.gd.num_actions, dtype=np.int8)
        cdef int n = self._legal()
        for i in range(n):
            mask[self.legal_buf[i]] = 1
        return mask

    def returns(self):
        """Per-player returns. Before the end: the value as it stands (Lost
        Cities: the score difference; poker: 0, as in OpenSpiel)."""
        cdef double out[2]
        self.game.gd.returns(self.game.gd.cfg, self.data, out)
        return [out[0], out[1]]

    def apply_action(self, action):
        """Apply a legal action. An illegal one raises ValueError naming it and
        leaves the state untouched."""
        cdef int n, i, a
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action must be an integer, got {action!r}") from None
        if self.game.gd.is_terminal(self.game.gd.cfg, self.data):
            raise ValueError(f"illegal action {a}: the game is over")
        n = self._legal()
        for i in range(n):
            if self.legal_buf[i] == a:
                break
        else:
            if 0 <= a < self.game.gd.num_actions:
                desc = self.game.action_to_string(a)
            else:
                desc = f"out of range 0..{self.game.gd.num_actions - 1}"
            raise ValueError(f"illegal action {a} ({desc}) for player {self.current_player()}; "
                             f"legal: {self.legal_actions()}")
        if self.n_undo == self.undo_cap:
            new_stack = <char*>realloc(self.undo_stack, 2 * self.undo_cap * max(self.game.gd.undo_size, 1))
            if new_stack == NULL:
                raise MemoryError()
            self.undo_stack = new_stack
            self.undo_cap *= 2
        self.game.gd.apply_action(self.game.gd.cfg, self.data, a,
                                  self.undo_stack + self.n_undo * self.game.gd.undo_size)
        self.n_undo += 1
        self._history.append(a)

    def undo_action(self):
        """Undo the last applied action (last in, first out)."""
        if self.n_undo == 0:
            raise ValueError("undo_action: no action to undo")
        self.n_undo -= 1
        self.game.gd.undo_action(self.game.gd.cfg, self.data,
                                 self.undo_stack + self.n_undo * self.game.gd.undo_size)
        self._history.pop()

    def history(self):
        """Actions applied to this object since its deal (or from_dict)."""
        return list(self._history)

    def _viewer(self, player):
        """`player` checked (0 or 1; None: the player to act)."""
        if player is None:
            player = self.current_player()
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        return player

    def information_state_tensor(self, player=None):
        """The info-state tensor of `player` (default: the player to act)."""
        player = self._viewer(player)
        out = np.zeros(self.game.gd.tensor_size, dtype=np.float32)
        cdef float[::1] view = out
        self.game.gd.info_state(self.game.gd.cfg, self.data, <int>player, &view[0])
        return out

    def information_state_tensor_u8(self, player=None):
        """The same tensor as uint8, from the game's own uint8 encoder (the
        traverser's wire rows); None for a game without one."""
        player = self._viewer(player)
        if self.game.gd.info_state_u8 == NULL:
            return None
        out = np.zeros(self.game.gd.tensor_size, dtype=np.uint8)
        cdef unsigned char[::1] view = out
        self.game.gd.info_state_u8(self.game.gd.cfg, self.data, <int>player, &view[0])
        return out

    def information_state_dict(self, player=None):
        """The tensor split into its named segments (for dumps and debugging)."""
        t = self.information_state_tensor(player)
        out, pos = {}, 0
        for name, size in self.game.information_state_segments():
            out[name] = t[pos:pos + size]
            pos += size
        return out

    def action_to_string(self, action, player=None):
        return self.game.action_to_string(int(action))

    def check_consistency(self):
        """Re-derive every invariant of the state; raise ConsistencyError if one fails."""
        cdef int rc = self.game.gd.check(self.game.gd.cfg, self.data)
        if rc != 0:
            raise ConsistencyError(f"{self.game.name}: {self.game.check_error(rc)}")

    def resample(self, player, seed):
        """A new state that `player` cannot tell from this one: what it cannot
        see (the opponent's unseen cards, the deck order) is redealt uniformly
        over the consistent deals, from the PRNG seeded by `seed`. The result
        has no history to undo. Games without hidden cards to redeal raise
        ValueError."""
        return self.resample_from_rng(player, Rng(seed, 0x4E5A, player if player in (0, 1) else 0))

    def resample_from_rng(self, player, Rng rng):
        """resample() drawing from the xorshift state in `rng` (which advances),
        exactly as the traverser's rollouts do."""
        cdef State other
        if self.game.gd.resample == NULL:
            raise ValueError(f"{self.game.name} cannot resample hidden information")
        if player not in (0, 1):
            raise ValueError(f"player must be 0 or 1, got {player!r}")
        other = self.game._make_state()
        memcpy(other.data, self.data, self.game.gd.state_size)
        self.game.gd.resample(self.game.gd.cfg, other.data, <int>player, &rng.state)
        return other

    def clone(self):
        """An independent copy, undo history included."""
        cdef State other = self.game._make_state()
        memcpy(other.data, self.data, self.game.gd.state_size)
        if other.undo_cap < self.n_undo:
            free(other.undo_stack)
            other.undo_cap = self.undo_cap
            other.undo_stack = <char*>calloc(other.undo_cap, max(self.game.gd.undo_size, 1))
            if other.undo_stack == NULL:
                raise MemoryError()
        memcpy(other.undo_stack, self.undo_stack, self.n_undo * self.game.gd.undo_size)
        other.n_undo = self.n_undo
        other._history = list(self._history)
        return other

    def __copy__(self):
        return self.clone()

    def state_bytes(self):
        """The raw C struct, for byte-for-byte comparisons in tests."""
        return self.data[:self.game.gd.state_size]

    def to_dict(self):
        raise NotImplementedError

    def __eq__(self, other):
        return (isinstance(other, State) and (<State>other).game is self.game
                and self.state_bytes() == (<State>other).state_bytes())

    def __hash__(self):
        return hash(self.state_bytes())
