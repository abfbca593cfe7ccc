"""Kuhn poker, 2 players, bit-for-bit compatible with OpenSpiel's `kuhn_poker`.

Cards 0 (J), 1 (Q), 2 (K); actions 0 = pass, 1 = bet; ante 1, bet 1. An
explicit deal is OpenSpiel's chance outcomes in order: [card of player 0,
card of player 1]. The info-state tensor is OpenSpiel's: player one-hot (2),
private card one-hot (3), then 2 bits per action taken (pass = 10, bet = 01).

The functions below are `noexcept nogil` and touch no Python object.
"""
from libc.string cimport memset

from engine._types cimport int8_t, uint64_t
from engine._rng cimport rng_below
from engine._game cimport (Game, State, GameDef, TERMINAL_PLAYER, DEAL_OK,
                           DEAL_BAD_LENGTH, DEAL_BAD_CARD, DEAL_DUPLICATE)

DEF NUM_CARDS = 3
DEF MAX_ACTIONS = 3
DEF TENSOR_SIZE = 2 + NUM_CARDS + 2 * MAX_ACTIONS

cdef struct KuhnState:
    int8_t card[2]              # private card of each player
    int8_t history[MAX_ACTIONS] # actions taken; slots at and past `n` are 0
    int8_t n                    # number of actions taken

cdef struct KuhnUndo:
    int8_t action               # the action undone (kept for the consistency of records)


cdef inline bint _terminal(const KuhnState* s) noexcept nogil:
    if s.n == 2:
        # pass-pass, bet-pass, bet-bet end; pass-bet continues
        return not (s.history[0] == 0 and s.history[1] == 1)
    return s.n == 3


cdef void _deal_seed(const void* cfg, void* state, uint64_t* rng) noexcept nogil:
    cdef KuhnState* s = <KuhnState*>state
    memset(s, 0, sizeof(KuhnState))
    s.card[0] = <int8_t>rng_below(rng, NUM_CARDS)
    s.card[1] = <int8_t>((s.card[0] + 1 + rng_below(rng, NUM_CARDS - 1)) % NUM_CARDS)


cdef int _deal_order(const void* cfg, void* state, const int* order, int n) noexcept nogil:
    cdef KuhnState* s = <KuhnState*>state
    if n != 2:
        return DEAL_BAD_LENGTH
    if order[0] < 0 or order[0] >= NUM_CARDS or order[1] < 0 or order[1] >= NUM_CARDS:
        return DEAL_BAD_CARD
    if order[0] == order[1]:
        return DEAL_DUPLICATE
    memset(s, 0, sizeof(KuhnState))
    s.card[0] = <int8_t>order[0]
    s.card[1] = <int8_t>order[1]
    return DEAL_OK


cdef int _current_player(const void* cfg, const void* state) noexcept nogil:
    cdef const KuhnState* s = <const KuhnState*>state
    if _terminal(s):
        return TERMINAL_PLAYER
    return s.n % 2


cdef int _legal_actions(const void* cfg, const void* state, int* out) noexcept nogil:
    if _terminal(<const KuhnState*>state):
        return 0
    out[0] = 0
    out[1] = 1
    return 2


cdef void _apply(const void* cfg, void* state, int action, void* undo) noexcept nogil:
    cdef KuhnState* s = <KuhnState*>state
    (<KuhnUndo*>undo).action = <int8_t>action
    s.history[s.n] = <int8_t>action
    s.n += 1


cdef void _undo(const void* cfg, void* state, const void* undo) noexcept nogil:
    cdef KuhnState* s = <KuhnState*>state
    s.n -= 1
    s.history[s.n] = 0


cdef bint _is_terminal(const void* cfg, const void* state) noexcept nogil:
    return _terminal(<const KuhnState*>state)


cdef void _returns(const void* cfg, const void* state, double* out) noexcept nogil:
    cdef const KuhnState* s = <const KuhnState*>state
    cdef int i, bets = 0, winner
    cdef double pot_share
    out[0] = 0.0
    out[1] = 0.0
    if not _terminal(s):
        return
    for i in range(s.n):
        bets += s.history[i]
    if s.history[s.n - 1] == 0 and bets == 1:
        # the last player to act passed facing a bet: the bettor takes the antes
        winner = s.n % 2
        pot_share = 1.0
    else:
        winner = 0 if s.card[0] > s.card[1] else 1
        pot_share = 1.0 + (1.0 if bets == 2 else 0.0)
    out[winner] = pot_share
    out[1 - winner] = -pot_share


cdef void _info_state(const void* cfg, const void* state, int player, float* out) noexcept nogil:
    cdef const KuhnState* s = <const KuhnState*>state
    cdef int i
    memset(out, 0, TENSOR_SIZE * sizeof(float))
    out[player] = 1.0
    out[2 + s.card[player]] = 1.0
    for i in range(s.n):
        out[2 + NUM_CARDS + 2 * i + s.history[i]] = 1.0


cdef int _check(const void* cfg, const void* state) noexcept nogil:
    cdef const KuhnState* s = <const KuhnState*>state
    cdef int i
    if s.card[0] < 0 or s.card[0] >= NUM_CARDS or s.card[1] < 0 or s.card[1] >= NUM_CARDS:
        return 1
    if s.card[0] == s.card[1]:
        return 2
    if s.n < 0 or s.n > MAX_ACTIONS:
        return 3
    for i in range(MAX_ACTIONS):
        if i < s.n and (s.history[i] < 0 or s.history[i] > 1):
            return 4
        if i >= s.n and s.history[i] != 0:
            return 5
    if s.n == 3 and not (s.history[0] == 0 and s.history[1] == 1):
        return 6  # play went on past a terminal node
    return 0


_CHECK_MESSAGES = {1: "card out of range", 2: "both players hold the same card",
                   3: "action count out of range", 4: "history holds an unknown action",
                   5: "history slot past the end is not cleared",
                   6: "actions were taken after the game ended"}


cdef class KuhnPokerGame(Game):
    """`engine.load_game("kuhn_poker")`."""

    def __init__(self, **params):
        if params:
            raise ValueError(f"kuhn_poker takes no parameters, got {sorted(params)}")
        self.name = "kuhn_poker"
        self.params = {}
        self.gd.cfg = NULL
        self.gd.state_size = sizeof(KuhnState)
        self.gd.undo_size = sizeof(KuhnUndo)
        self.gd.num_actions = 2
        self.gd.max_legal = 2
        self.gd.tensor_size = TENSOR_SIZE
        self.gd.deal_length = 2
        self.gd.max_game_length = MAX_ACTIONS
        self.gd.max_utility = 2.0
        self.gd.deal_seed = _deal_seed
        self.gd.deal_order = _deal_order
        self.gd.current_player = _current_player
        self.gd.legal_actions = _legal_actions
        self.gd.apply_action = _apply
        self.gd.undo_action = _undo
        self.gd.is_terminal = _is_terminal
        self.gd.returns = _returns
        self.gd.info_state = _info_state
        self.gd.check = _check

    cdef State _make_state(self):
        return KuhnPokerState(self)

    def information_state_segments(self):
        return [("player", 2), ("private_card", NUM_CARDS), ("betting", 2 * MAX_ACTIONS)]

    def action_to_string(self, int action):
        return {0: "Pass", 1: "Bet"}.get(action, f"unknown action {action}")

    def check_error(self, int code):
        return _CHECK_MESSAGES.get(code, f"invariant {code} broken")


cdef class KuhnPokerState(State):

    def private_cards(self):
        cdef KuhnState* s = <KuhnState*>self.data
        return [s.card[0], s.card[1]]

    def to_dict(self):
        cdef KuhnState* s = <KuhnState*>self.data
        return {"game": "kuhn_poker", "params": {}, "cards": [s.card[0], s.card[1]],
                "history": [s.history[i] for i in range(s.n)]}

    @staticmethod
    def from_dict(game, d):
        st = game.new_initial_state(deal=d["cards"])
        for a in d["history"]:
            st.apply_action(a)
        (<State>st).n_undo = 0
        (<State>st)._history = []
        return st

    def __str__(self):
        cdef KuhnState* s = <KuhnState*>self.data
        return f"cards {s.card[0]} {s.card[1]} history {''.join('pb'[s.history[i]] for i in range(s.n))}"
