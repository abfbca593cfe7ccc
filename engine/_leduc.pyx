"""Leduc poker, 2 players, bit-for-bit compatible with OpenSpiel's `leduc_poker`
(default parameters).

Cards 0..5, rank = card // 2 (two suits of J, Q, K); actions 0 = fold,
1 = call, 2 = raise. Ante 1 each; raises are 2 in round 1 and 4 in round 2, at
most 2 per round; player 0 opens both rounds. An explicit deal is OpenSpiel's
chance outcomes in order: [card of player 0, card of player 1, public card].
The public card is in the deal from the start and revealed when round 2
begins, so a state is never a chance node. The info-state tensor is
OpenSpiel's: player one-hot (2), private card one-hot (6), public card one-hot
(6, zero until revealed), then for each round 4 slots of 2 bits per action
taken (call = 10, raise = 01, fold = 00).

The functions below are `noexcept nogil` and touch no Python object.
"""
from libc.string cimport memset, memcpy, memcmp

from engine._types cimport int8_t, uint64_t
from engine._rng cimport rng_below
from engine._game cimport (Game, State, GameDef, TERMINAL_PLAYER, DEAL_OK,
                           DEAL_BAD_LENGTH, DEAL_BAD_CARD, DEAL_DUPLICATE)

DEF NUM_CARDS = 6
DEF NUM_ROUNDS = 2
DEF MAX_BETS = 4                # most actions in one round: call, raise, raise, call/fold
DEF MAX_RAISES = 2
DEF FOLD = 0
DEF CALL = 1
DEF RAISE = 2
DEF TENSOR_SIZE = 2 + 2 * NUM_CARDS + NUM_ROUNDS * MAX_BETS * 2

cdef struct LeducState:
    int8_t card[3]              # private card of player 0, of player 1, then the public card
    int8_t round                # betting round, 0 or 1; the public card is revealed in round 1
    int8_t player               # player to act, or TERMINAL_PLAYER once the game is over
    int8_t folded               # player who folded, or -1
    int8_t stakes               # contribution each player must match to stay in
    int8_t contrib[2]           # chips each player has put in the pot, ante included
    int8_t num_raises           # raises in the current round
    int8_t num_calls            # calls since the round began or since its last raise
    int8_t seq[NUM_ROUNDS][MAX_BETS]  # actions per round; slots at and past n_seq[r] are 0
    int8_t n_seq[NUM_ROUNDS]    # actions taken in each round

cdef struct LeducUndo:
    LeducState prev             # the whole state before the action (restores every byte)


cdef inline void _start(LeducState* s) noexcept nogil:
    """Everything but the cards, as at the first decision."""
    memset(s, 0, sizeof(LeducState))
    s.folded = -1
    s.stakes = 1
    s.contrib[0] = 1
    s.contrib[1] = 1


cdef inline int _legal(const LeducState* s, int* out) noexcept nogil:
    cdef int n = 0
    if s.player == TERMINAL_PLAYER:
        return 0
    if s.stakes > s.contrib[s.player]:
        out[n] = FOLD
        n += 1
    out[n] = CALL
    n += 1
    if s.num_raises < MAX_RAISES:
        out[n] = RAISE
        n += 1
    return n


cdef inline void _step(LeducState* s, int action) noexcept nogil:
    cdef int p = s.player
    s.seq[s.round][s.n_seq[s.round]] = <int8_t>action
    s.n_seq[s.round] += 1
    if action == FOLD:
        s.folded = <int8_t>p
        s.player = TERMINAL_PLAYER
        return
    if action == CALL:
        s.contrib[p] = s.stakes
        s.num_calls += 1
    else:
        s.stakes += 2 if s.round == 0 else 4
        s.contrib[p] = s.stakes
        s.num_raises += 1
        s.num_calls = 0
    if (s.num_raises == 0 and s.num_calls == 2) or (s.num_raises > 0 and s.num_calls == 1):
        if s.round == NUM_ROUNDS - 1:
            s.player = TERMINAL_PLAYER
        else:
            s.round += 1
            s.num_raises = 0
            s.num_calls = 0
            s.player = 0
    else:
        s.player = <int8_t>(1 - p)


cdef inline int _hand_rank(const LeducState* s, int player) noexcept nogil:
    cdef int own = s.card[player] // 2, pub = s.card[2] // 2
    if own == pub:
        return 100 + own            # a pair beats every high card
    if own > pub:
        return 3 * own + pub
    return 3 * pub + own


cdef void _deal_seed(const void* cfg, void* state, uint64_t* rng) noexcept nogil:
    cdef LeducState* s = <LeducState*>state
    cdef int8_t deck[NUM_CARDS]
    cdef int i, j
    cdef int8_t t
    for i in range(NUM_CARDS):
        deck[i] = <int8_t>i
    _start(s)
    for i in range(3):  # partial Fisher-Yates: uniform over ordered triples
        j = i + <int>rng_below(rng, NUM_CARDS - i)
        t = deck[i]
        deck[i] = deck[j]
        deck[j] = t
        s.card[i] = deck[i]


cdef int _deal_order(const void* cfg, void* state, const int* order, int n) noexcept nogil:
    cdef LeducState* s = <LeducState*>state
    cdef int i
    if n != 3:
        return DEAL_BAD_LENGTH
    for i in range(3):
        if order[i] < 0 or order[i] >= NUM_CARDS:
            return DEAL_BAD_CARD
    if order[0] == order[1] or order[0] == order[2] or order[1] == order[2]:
        return DEAL_DUPLICATE
    _start(s)
    for i in range(3):
        s.card[i] = <int8_t>order[i]
    return DEAL_OK


cdef int _current_player(const void* cfg, const void* state) noexcept nogil:
    return (<const LeducState*>state).player


cdef int _legal_actions(const void* cfg, const void* state, int* out) noexcept nogil:
    return _legal(<const LeducState*>state, out)


cdef void _apply(const void* cfg, void* state, int action, void* undo) noexcept nogil:
    memcpy(&(<LeducUndo*>undo).prev, state, sizeof(LeducState))
    _step(<LeducState*>state, action)


cdef void _undo(const void* cfg, void* state, const void* undo) noexcept nogil:
    memcpy(state, &(<const LeducUndo*>undo).prev, sizeof(LeducState))


cdef bint _is_terminal(const void* cfg, const void* state) noexcept nogil:
    return (<const LeducState*>state).player == TERMINAL_PLAYER


cdef void _returns(const void* cfg, const void* state, double* out) noexcept nogil:
    cdef const LeducState* s = <const LeducState*>state
    cdef int r0, r1, f
    out[0] = 0.0
    out[1] = 0.0
    if s.player != TERMINAL_PLAYER:
        return
    if s.folded >= 0:
        # the folder loses what it put in; the other player wins it
        f = s.folded
        out[f] = -<double>s.contrib[f]
        out[1 - f] = <double>s.contrib[f]
        return
    r0 = _hand_rank(s, 0)
    r1 = _hand_rank(s, 1)
    if r0 > r1:
        out[0] = <double>s.contrib[1]
        out[1] = -<double>s.contrib[1]
    elif r1 > r0:
        out[0] = -<double>s.contrib[0]
        out[1] = <double>s.contrib[0]
    # a tie splits the pot: contributions are equal at a showdown, so 0 each


cdef void _info_state(const void* cfg, const void* state, int player, float* out) noexcept nogil:
    cdef const LeducState* s = <const LeducState*>state
    cdef int r, i, a
    memset(out, 0, TENSOR_SIZE * sizeof(float))
    out[player] = 1.0
    out[2 + s.card[player]] = 1.0
    if s.round > 0:
        out[2 + NUM_CARDS + s.card[2]] = 1.0
    for r in range(NUM_ROUNDS):
        for i in range(s.n_seq[r]):
            a = s.seq[r][i]
            if a != FOLD:
                out[2 + 2 * NUM_CARDS + 2 * (MAX_BETS * r + i) + a - 1] = 1.0


cdef int _check(const void* cfg, const void* state) noexcept nogil:
    cdef const LeducState* s = <const LeducState*>state
    cdef LeducState replay
    cdef int legal[3]
    cdef int r, i, j, n, a
    cdef bint ok
    for i in range(3):
        if s.card[i] < 0 or s.card[i] >= NUM_CARDS:
            return 1
    if s.card[0] == s.card[1] or s.card[0] == s.card[2] or s.card[1] == s.card[2]:
        return 2
    for r in range(NUM_ROUNDS):
        if s.n_seq[r] < 0 or s.n_seq[r] > MAX_BETS:
            return 3
        for i in range(MAX_BETS):
            if i < s.n_seq[r] and (s.seq[r][i] < FOLD or s.seq[r][i] > RAISE):
                return 4
            if i >= s.n_seq[r] and s.seq[r][i] != 0:
                return 5
    # replay the betting from the deal: every action must have been legal when
    # taken, and every derived field must come out the same, byte for byte
    _start(&replay)
    memcpy(replay.card, s.card, sizeof(s.card))
    for r in range(NUM_ROUNDS):
        for i in range(s.n_seq[r]):
            if replay.player == TERMINAL_PLAYER or replay.round != r:
                return 6
            a = s.seq[r][i]
            n = _legal(&replay, legal)
            ok = False
            for j in range(n):
                if legal[j] == a:
                    ok = True
            if not ok:
                return 7
            _step(&replay, a)
    if memcmp(&replay, s, sizeof(LeducState)) != 0:
        return 8
    return 0


_CHECK_MESSAGES = {1: "card out of range", 2: "two deal slots hold the same card",
                   3: "action count out of range", 4: "betting sequence holds an unknown action",
                   5: "betting slot past the end is not cleared",
                   6: "actions were taken after their round or the game ended",
                   7: "betting sequence holds an illegal action",
                   8: "round, player, stakes, contributions or counters disagree with the betting"}
_ACTION_NAMES = {FOLD: "Fold", CALL: "Call", RAISE: "Raise"}


cdef class LeducPokerGame(Game):
    """`engine.load_game("leduc_poker")`."""

    def __init__(self, **params):
        if params:
            raise ValueError(f"leduc_poker takes no parameters, got {sorted(params)}")
        self.name = "leduc_poker"
        self.params = {}
        self.gd.cfg = NULL
        self.gd.state_size = sizeof(LeducState)
        self.gd.undo_size = sizeof(LeducUndo)
        self.gd.num_actions = 3
        self.gd.max_legal = 3
        self.gd.tensor_size = TENSOR_SIZE
        self.gd.deal_length = 3
        self.gd.max_game_length = NUM_ROUNDS * MAX_BETS
        self.gd.max_utility = 13.0
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
        return LeducPokerState(self)

    def information_state_segments(self):
        return [("player", 2), ("private_card", NUM_CARDS), ("public_card", NUM_CARDS),
                ("betting_round1", 2 * MAX_BETS), ("betting_round2", 2 * MAX_BETS)]

    def action_to_string(self, int action):
        return _ACTION_NAMES.get(action, f"unknown action {action}")

    def check_error(self, int code):
        return _CHECK_MESSAGES.get(code, f"invariant {code} broken")


cdef class LeducPokerState(State):

    def private_cards(self):
        cdef LeducState* s = <LeducState*>self.data
        return [s.card[0], s.card[1]]

    def public_card(self):
        """The public card once round 2 has begun, else None (not yet revealed)."""
        cdef LeducState* s = <LeducState*>self.data
        return s.card[2] if s.round > 0 else None

    def to_dict(self):
        cdef LeducState* s = <LeducState*>self.data
        return {"game": "leduc_poker", "params": {}, "cards": [s.card[0], s.card[1], s.card[2]],
                "history": [s.seq[r][i] for r in range(NUM_ROUNDS) for i in range(s.n_seq[r])]}

    @staticmethod
    def from_dict(game, d):
        st = game.new_initial_state(deal=d["cards"])
        for a in d["history"]:
            st.apply_action(a)
        (<State>st).n_undo = 0
        (<State>st)._history = []
        return st

    def __str__(self):
        cdef LeducState* s = <LeducState*>self.data
        rounds = " / ".join("".join("fcr"[s.seq[r][i]] for i in range(s.n_seq[r]))
                            for r in range(NUM_ROUNDS))
        public = s.card[2] if s.round > 0 else f"({s.card[2]})"
        return f"cards {s.card[0]} {s.card[1]} public {public} betting {rounds}"
