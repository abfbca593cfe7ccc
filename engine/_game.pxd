# See engine/_game.pyx for details.
#
# The one game interface. Every game fills a GameDef with pointers to its own
# `noexcept nogil` functions; the traverser and the benchmarks call games only
# through it, so adding a game never touches them. No function behind a GameDef
# touches a Python object or allocates.
from engine._types cimport uint8_t, uint64_t
from engine._rng cimport Rng

# Player ids, as in OpenSpiel.
cdef enum:
    TERMINAL_PLAYER = -4

# Deal and config error codes returned by the nogil functions (0 = ok).
cdef enum:
    DEAL_OK = 0
    DEAL_BAD_LENGTH = -1
    DEAL_BAD_CARD = -2
    DEAL_DUPLICATE = -3

ctypedef void (*deal_seed_fn)(const void* cfg, void* state, uint64_t* rng) noexcept nogil
ctypedef int (*deal_order_fn)(const void* cfg, void* state, const int* order, int n) noexcept nogil
ctypedef int (*player_fn)(const void* cfg, const void* state) noexcept nogil
ctypedef int (*legal_fn)(const void* cfg, const void* state, int* out) noexcept nogil
ctypedef void (*apply_fn)(const void* cfg, void* state, int action, void* undo) noexcept nogil
ctypedef void (*undo_fn)(const void* cfg, void* state, const void* undo) noexcept nogil
ctypedef bint (*terminal_fn)(const void* cfg, const void* state) noexcept nogil
ctypedef void (*returns_fn)(const void* cfg, const void* state, double* out) noexcept nogil
ctypedef void (*tensor_fn)(const void* cfg, const void* state, int player, float* out) noexcept nogil
ctypedef void (*tensor_u8_fn)(const void* cfg, const void* state, int player, uint8_t* out) noexcept nogil
ctypedef int (*check_fn)(const void* cfg, const void* state) noexcept nogil
ctypedef int (*rollout_fn)(const void* cfg, const void* state, uint64_t* rng) noexcept nogil
ctypedef void (*resample_fn)(const void* cfg, void* state, int player, uint64_t* rng) noexcept nogil


cdef struct GameDef:
    const void* cfg             # the game's own config struct (owned by the Game object)
    int state_size              # bytes of one state; states are plain memcpy-able structs
    int undo_size               # bytes of one undo record
    int num_actions             # distinct action ids are 0 .. num_actions-1
    int max_legal               # most legal actions at any node (<= num_actions)
    int tensor_size             # floats in one info-state tensor
    int deal_length             # ints in an explicit deal
    int max_game_length         # upper bound on decisions in one game
    double max_utility          # largest |return|, for value clipping and scaling
    deal_seed_fn deal_seed      # deal a fresh state from a PRNG state
    deal_order_fn deal_order    # deal from an explicit list of chance outcomes
    player_fn current_player    # player to act, or TERMINAL_PLAYER
    legal_fn legal_actions      # sorted legal action ids into out; returns the count
    apply_fn apply_action       # apply a legal action, filling an undo record
    undo_fn undo_action         # undo the last applied action (strictly LIFO)
    terminal_fn is_terminal     # terminal test
    returns_fn returns          # per-player returns (at a non-terminal node: the
                                # value as it stands, e.g. the score difference)
    tensor_fn info_state        # info-state tensor of `player` into out[tensor_size]
    tensor_u8_fn info_state_u8  # optional (NULL): the same tensor as uint8, for games whose every
                                # entry is an integer in [0, 255] (the traverser's wire rows)
    check_fn check              # re-derive every invariant; 0 = ok, else a game error code
    rollout_fn rollout_action   # optional (NULL): the game's own playout policy for cutoff rollouts
    resample_fn resample        # optional (NULL): redeal what `player` cannot see, uniformly
                                # over the states consistent with its information


cdef class Game:
    cdef GameDef gd             # filled by the subclass constructor
    cdef bytes _cfg_bytes       # keeps the config struct's memory alive
    cdef readonly str name      # OpenSpiel-style short name
    cdef readonly dict params   # the validated parameters
    cdef State _make_state(self)


cdef class State:
    cdef readonly Game game
    cdef char* data             # state_size bytes
    cdef char* undo_stack       # undo records, undo_size bytes each
    cdef int n_undo             # records in use
    cdef int undo_cap           # records allocated
    cdef int* legal_buf         # num_actions ints of scratch
    cdef list _history          # actions applied since the deal (Python side only)
    cdef int _legal(self)
