"""C-level loops for engine.bench: random play, apply/undo pairs and encoding,
through the GameDef interface only (so they measure what the traverser gets).
Each loop runs with the GIL released; Python only times the call."""
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

from engine._types cimport uint64_t
from engine._rng cimport rng_seed, rng_below
from engine._game cimport Game, GameDef


cdef class _Scratch:
    """Buffers sized for one game (allocated outside the timed loops)."""
    cdef char* state
    cdef char* undo
    cdef int* legal
    cdef float* tensor

    def __cinit__(self, Game game):
        self.state = <char*>malloc(game.gd.state_size)
        self.undo = <char*>malloc(game.gd.undo_size)
        self.legal = <int*>malloc(game.gd.num_actions * sizeof(int))
        self.tensor = <float*>malloc(game.gd.tensor_size * sizeof(float))
        if not (self.state and self.undo and self.legal and self.tensor):
            raise MemoryError()

    def __dealloc__(self):
        free(self.state); free(self.undo); free(self.legal); free(self.tensor)


def random_playouts(Game game, long n_games, uint64_t seed):
    """Play n_games uniformly random games; returns the number of moves made."""
    cdef _Scratch sc = _Scratch(game)
    cdef const GameDef* gd = &game.gd
    cdef uint64_t rng = rng_seed(seed, 1, 0)
    cdef long g, moves = 0
    cdef int n
    with nogil:
        for g in range(n_games):
            gd.deal_seed(gd.cfg, sc.state, &rng)
            while True:
                n = gd.legal_actions(gd.cfg, sc.state, sc.legal)
                if n == 0:
                    break
                gd.apply_action(gd.cfg, sc.state, sc.legal[rng_below(&rng, n)], sc.undo)
                moves += 1
    return moves


def apply_undo_pairs(Game game, long n_games, uint64_t seed):
    """Random games where every move is first applied and undone once more;
    returns the number of apply+undo pairs."""
    cdef _Scratch sc = _Scratch(game)
    cdef const GameDef* gd = &game.gd
    cdef uint64_t rng = rng_seed(seed, 2, 0)
    cdef long g, pairs = 0
    cdef int n, a
    with nogil:
        for g in range(n_games):
            gd.deal_seed(gd.cfg, sc.state, &rng)
            while True:
                n = gd.legal_actions(gd.cfg, sc.state, sc.legal)
                if n == 0:
                    break
                a = sc.legal[rng_below(&rng, n)]
                gd.apply_action(gd.cfg, sc.state, a, sc.undo)
                gd.undo_action(gd.cfg, sc.state, sc.undo)
                gd.apply_action(gd.cfg, sc.state, a, sc.undo)
                pairs += 1
    return pairs


def collect_states(Game game, long n_states, uint64_t seed):
    """Up to n_states decision states from random games, as one bytes block."""
    cdef _Scratch sc = _Scratch(game)
    cdef const GameDef* gd = &game.gd
    cdef uint64_t rng = rng_seed(seed, 3, 0)
    cdef bytearray block = bytearray(n_states * gd.state_size)
    cdef char* out = block
    cdef long i = 0
    cdef int n
    with nogil:
        while i < n_states:
            gd.deal_seed(gd.cfg, sc.state, &rng)
            while i < n_states:
                n = gd.legal_actions(gd.cfg, sc.state, sc.legal)
                if n == 0:
                    break
                memcpy(out + i * gd.state_size, sc.state, gd.state_size)
                i += 1
                gd.apply_action(gd.cfg, sc.state, sc.legal[rng_below(&rng, n)], sc.undo)
    return block


def encode_states(Game game, bytearray block, int repeats):
    """Encode every state in `block` for the player to act, `repeats` times;
    returns the number of encodes."""
    cdef _Scratch sc = _Scratch(game)
    cdef const GameDef* gd = &game.gd
    cdef char* states = block
    cdef long n_states = len(block) // gd.state_size, i, r
    cdef const char* st
    with nogil:
        for r in range(repeats):
            for i in range(n_states):
                st = states + i * gd.state_size
                gd.info_state(gd.cfg, st, gd.current_player(gd.cfg, st), sc.tensor)
    return n_states * repeats
