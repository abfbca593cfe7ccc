"""Lost Cities (2 players), configurable, as C structs with nogil functions.

Rules: ../shared/DESIGN.md section 4 and docs/lost_cities.md.

Cards and kinds. Card ids 0..num_cards-1 run colour by colour; within a colour
the wagers come first, then the number cards from lowest to highest. Wagers of
one colour are interchangeable, so the engine works on card *kinds*:
kind = colour * (ranks + 1) + rank_index, rank_index 0 the wager and 1..ranks
the number cards (face value lowest_value + rank_index - 1).

Actions (fixed per config; K = num_kinds, C = colours):
    [0, K)          play a card of kind k onto your expedition
    [K, 2K)         discard a card of kind k - K onto its colour's pile
    2K              draw the top card of the deck
    2K + 1 + c      draw the top card of discard pile c
A turn is a play/discard followed by a draw; the same player acts twice.

An explicit deal is a permutation of card ids: the first hand_size go to
player 0, the next hand_size to player 1, the rest form the deck, the first of
them drawn first.

Every function with `noexcept nogil` touches no Python object and allocates
nothing; they are what the traverser runs. The Python classes at the bottom
are for tests, tools and bots.
"""
from collections import namedtuple

from libc.string cimport memcpy, memset

from engine._types cimport int8_t, int16_t, uint8_t, uint64_t
from engine._rng cimport rng_below
from engine._game cimport (Game, State, GameDef, TERMINAL_PLAYER, DEAL_OK,
                           DEAL_BAD_LENGTH, DEAL_BAD_CARD, DEAL_DUPLICATE)

cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil
    int __builtin_popcountll(unsigned long long) nogil

cdef extern from *:
    """
    /* The encoder's row-wide loops, with restrict so that the compiler may
       vectorize them (a uint8 pointer may alias anything; without restrict
       every float store could change the counts it reads). On x86-64 Linux
       with GCC they are also built for AVX2 and the CPU picks at load. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define LC_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define LC_CLONES
    #endif
    LC_CLONES
    static void lc_u8_to_f32(const unsigned char* restrict src, float* restrict dst, int n) {
        for (int i = 0; i < n; i++) dst[i] = (float)src[i];
    }
    /* dst[i] = bit i of the two-word mask m, as 0 or 1 (n <= 128). Eight bits
       at a time: the byte is copied into every byte of a word, byte j keeps
       bit j, and adding 0x7F to each byte carries a set bit to the byte's top,
       shifted down to its bottom (little-endian: byte j lands at dst[j]). */
    static void lc_bits_to_u8(const uint64_t* restrict m, unsigned char* restrict dst, int n) {
        for (int i = 0; i < n; i += 8) {
            uint64_t b = (m[i >> 6] >> (i & 63)) & 0xFFu;
            uint64_t x = (b * 0x0101010101010101ULL) & 0x8040201008040201ULL;
            x = ((x + 0x7F7F7F7F7F7F7F7FULL) >> 7) & 0x0101010101010101ULL;
            if (i + 8 <= n) {
                memcpy(dst + i, &x, 8);
            } else {
                for (int j = 0; i + j < n; j++) dst[i + j] = (unsigned char)(x >> (8 * j));
            }
        }
    }
    static void lc_bits_to_f32(const uint64_t* restrict m, float* restrict dst, int n) {
        unsigned char tmp[128];
        lc_bits_to_u8(m, tmp, n);
        for (int i = 0; i < n; i++) dst[i] = (float)tmp[i];
    }
    /* unseen[k] = copies[k] - a[k] - b[k] - c[k] - d[k] - e[k], saturated to [0, 255] */
    #define LC_UNSEEN(NAME, T) \
    LC_CLONES \
    static void NAME(const unsigned char* restrict copies, const unsigned char* restrict a, \
                     const unsigned char* restrict b, const unsigned char* restrict c, \
                     const unsigned char* restrict d, const unsigned char* restrict e, T* restrict dst, int n) { \
        for (int i = 0; i < n; i++) { \
            int x = (int)copies[i] - a[i] - b[i] - c[i] - d[i] - e[i]; \
            x = x < 0 ? 0 : x; \
            dst[i] = (T)(x < 255 ? x : 255); \
        } \
    }
    LC_UNSEEN(lc_unseen_f32, float)
    LC_UNSEEN(lc_unseen_u8, unsigned char)
    """
    void lc_u8_to_f32(const uint8_t* src, float* dst, int n) noexcept nogil
    void lc_bits_to_f32(const uint64_t* m, float* dst, int n) noexcept nogil
    void lc_unseen_f32(const uint8_t* copies, const uint8_t* a, const uint8_t* b, const uint8_t* c,
                       const uint8_t* d, const uint8_t* e, float* dst, int n) noexcept nogil
    void lc_bits_to_u8(const uint64_t* m, uint8_t* dst, int n) noexcept nogil
    void lc_unseen_u8(const uint8_t* copies, const uint8_t* a, const uint8_t* b, const uint8_t* c,
                      const uint8_t* d, const uint8_t* e, uint8_t* dst, int n) noexcept nogil

# the info-state encoder writes float rows (the tensor) or uint8 rows (the
# same values: every entry is an integer in [0, 255], see SEGMENTS below)
ctypedef fused lc_out_t:
    float
    uint8_t

COLOUR_LETTERS = "YBWGRP"
COLOUR_NAMES = ("yellow", "blue", "white", "green", "red", "purple")
Action = namedtuple("Action", "verb colour value")


# ---------------------------------------------------------------------------
# small helpers

cdef inline void _set_bit(uint64_t* m, int k) noexcept nogil:
    m[k >> 6] |= (<uint64_t>1) << (k & 63)

cdef inline void _clear_bit(uint64_t* m, int k) noexcept nogil:
    m[k >> 6] &= ~((<uint64_t>1) << (k & 63))

cdef inline void _refresh_playable(const LCConfig* cfg, LCState* s, int p, int c) noexcept nogil:
    # clear colour c's bits, then set those that fit on the current top
    cdef int w
    for w in range(2):
        s.playable[p][w] = ((s.playable[p][w] & ~cfg.colour_mask[c][w])
                            | cfg.playable_mask[c][s.top[p][c]][w])


cdef inline int _colour_score(const LCConfig* cfg, int value_sum, int count, int wagers) noexcept nogil:
    """Score of one expedition of `count` cards summing to `value_sum` with `wagers` wagers."""
    if count == 0:
        return 0
    return ((value_sum - cfg.expedition_cost) * (1 + wagers)
            + (cfg.bonus_amount if count >= cfg.bonus_threshold else 0))


cdef int lc_score(const LCConfig* cfg, const LCState* s, int player) noexcept nogil:
    """Score of `player`'s expeditions as they stand."""
    cdef int c, total = 0
    for c in range(cfg.colours):
        total += _colour_score(cfg, s.value_sum[player][c], s.count[player][c], s.wagers_played[player][c])
    return total


# ---------------------------------------------------------------------------
# the game interface

cdef void _fill_from_order(const LCConfig* cfg, LCState* s, const int* order) noexcept nogil:
    cdef int i, k, h = cfg.hand_size
    memset(s, 0, sizeof(LCState))
    for i in range(2 * h):
        k = cfg.card_kind[order[i]]
        s.hand[i // h][k] += 1
        _set_bit(s.hand_mask[i // h], k)
    s.deck_len = <int16_t>cfg.deck_size
    for i in range(cfg.deck_size):
        s.deck[cfg.deck_size - 1 - i] = cfg.card_kind[order[2 * h + i]]
    for i in range(2):
        for k in range(cfg.colours):
            _refresh_playable(cfg, s, i, k)
    s.blocked = -1


cdef void _deal_seed(const void* cfgp, void* state, uint64_t* rng) noexcept nogil:
    cdef const LCConfig* cfg = <const LCConfig*>cfgp
    cdef int order[LC_MAX_CARDS]
    cdef int i, j, t
    for i in range(cfg.num_cards):
        order[i] = i
    for i in range(cfg.num_cards - 1, 0, -1):
        j = rng_below(rng, i + 1)
        t = order[i]; order[i] = order[j]; order[j] = t
    _fill_from_order(cfg, <LCState*>state, order)


cdef int _deal_order(const void* cfgp, void* state, const int* order, int n) noexcept nogil:
    cdef const LCConfig* cfg = <const LCConfig*>cfgp
    cdef uint8_t seen[LC_MAX_CARDS]
    cdef int i
    if n != cfg.num_cards:
        return DEAL_BAD_LENGTH
    memset(seen, 0, sizeof(seen))
    for i in range(n):
        if order[i] < 0 or order[i] >= n:
            return DEAL_BAD_CARD
        if seen[order[i]]:
            return DEAL_DUPLICATE
        seen[order[i]] = 1
    _fill_from_order(cfg, <LCState*>state, order)
    return DEAL_OK


cdef int _current_player(const void* cfgp, const void* state) noexcept nogil:
    cdef const LCState* s = <const LCState*>state
    if s.terminal:
        return TERMINAL_PLAYER
    return s.player


cdef int lc_legal_actions(const LCConfig* cfg, const LCState* s, int* out) noexcept nogil:
    """Sorted legal actions into out; returns how many."""
    cdef int n = 0, w, c, k
    cdef uint64_t m
    if s.terminal:
        return 0
    if s.phase == LC_PLAY:
        for w in range(2):
            m = s.hand_mask[s.player][w] & s.playable[s.player][w]
            while m:
                out[n] = (w << 6) + __builtin_ctzll(m)
                n += 1
                m &= m - 1
        for w in range(2):
            m = s.hand_mask[s.player][w]
            while m:
                out[n] = cfg.num_kinds + (w << 6) + __builtin_ctzll(m)
                n += 1
                m &= m - 1
        return n
    out[0] = 2 * cfg.num_kinds
    n = 1
    for c in range(cfg.colours):
        if s.pile_len[c] > 0 and c != s.blocked:
            out[n] = 2 * cfg.num_kinds + 1 + c
            n += 1
    return n


cdef int _legal_actions(const void* cfgp, const void* state, int* out) noexcept nogil:
    return lc_legal_actions(<const LCConfig*>cfgp, <const LCState*>state, out)


cdef inline void _take_from_hand(LCState* s, int p, int k, LCUndo* u) noexcept nogil:
    s.hand[p][k] -= 1
    if s.hand[p][k] == 0:
        _clear_bit(s.hand_mask[p], k)
    if s.known[p][k] > s.hand[p][k]:
        # a card from a pile left the hand; wagers of a kind are identical, so
        # a known copy leaves first only when no unknown copy is left
        s.known[p][k] -= 1
        u.known_used = 1
    else:
        u.known_used = 0


cdef inline void _return_to_hand(LCState* s, int p, int k, const LCUndo* u) noexcept nogil:
    s.hand[p][k] += 1
    _set_bit(s.hand_mask[p], k)
    if u.known_used:
        s.known[p][k] += 1


cdef void lc_apply(const LCConfig* cfg, LCState* s, int action, LCUndo* u) noexcept nogil:
    """Apply a legal action (unchecked) and fill the undo record."""
    cdef int p = s.player, k, c, r
    u.action = <int16_t>action
    u.prev_blocked = s.blocked
    u.known_used = 0
    u.prev_top = 0
    if s.phase == LC_PLAY:
        if action < cfg.num_kinds:
            k = action
            c = cfg.kind_colour[k]
            r = cfg.kind_rank[k]
            _take_from_hand(s, p, k, u)
            u.prev_top = s.top[p][c]
            s.played[p][k] += 1
            s.count[p][c] += 1
            if r == 0:
                s.wagers_played[p][c] += 1
            else:
                s.top[p][c] = <uint8_t>r
                s.value_sum[p][c] += cfg.kind_value[k]
                _refresh_playable(cfg, s, p, c)
        else:
            k = action - cfg.num_kinds
            c = cfg.kind_colour[k]
            _take_from_hand(s, p, k, u)
            s.pile[c][s.pile_len[c]] = <uint8_t>k
            s.pile_len[c] += 1
            s.pile_kinds[k] += 1
            s.blocked = <int8_t>c
        u.kind = <uint8_t>k
        s.phase = LC_DRAW
        return
    # draw, then the turn passes
    if action == 2 * cfg.num_kinds:
        s.deck_len -= 1
        k = s.deck[s.deck_len]
        s.deck[s.deck_len] = 0
        s.hand[p][k] += 1
    else:
        c = action - 2 * cfg.num_kinds - 1
        s.pile_len[c] -= 1
        k = s.pile[c][s.pile_len[c]]
        s.pile[c][s.pile_len[c]] = 0
        s.pile_kinds[k] -= 1
        s.hand[p][k] += 1
        s.known[p][k] += 1
    _set_bit(s.hand_mask[p], k)
    u.kind = <uint8_t>k
    s.blocked = -1
    s.phase = LC_PLAY
    s.turn += 1
    s.player = 1 - p
    if s.deck_len == 0 or s.turn >= cfg.turn_limit:
        s.terminal = 1


cdef void lc_undo(const LCConfig* cfg, LCState* s, const LCUndo* u) noexcept nogil:
    """Undo the action recorded in u, which must be the last one applied."""
    cdef int action = u.action, k = u.kind, c, p
    if action >= 2 * cfg.num_kinds:
        s.terminal = 0
        s.player = 1 - s.player
        p = s.player
        s.turn -= 1
        s.phase = LC_DRAW
        s.blocked = u.prev_blocked
        s.hand[p][k] -= 1
        if s.hand[p][k] == 0:
            _clear_bit(s.hand_mask[p], k)
        if action == 2 * cfg.num_kinds:
            s.deck[s.deck_len] = <uint8_t>k
            s.deck_len += 1
        else:
            c = action - 2 * cfg.num_kinds - 1
            s.known[p][k] -= 1
            s.pile[c][s.pile_len[c]] = <uint8_t>k
            s.pile_len[c] += 1
            s.pile_kinds[k] += 1
        return
    p = s.player
    c = cfg.kind_colour[k]
    s.phase = LC_PLAY
    s.blocked = -1
    if action < cfg.num_kinds:
        s.played[p][k] -= 1
        s.count[p][c] -= 1
        if cfg.kind_rank[k] == 0:
            s.wagers_played[p][c] -= 1
        else:
            s.value_sum[p][c] -= cfg.kind_value[k]
            s.top[p][c] = u.prev_top
            _refresh_playable(cfg, s, p, c)
    else:
        s.pile_len[c] -= 1
        s.pile[c][s.pile_len[c]] = 0
        s.pile_kinds[k] -= 1
    _return_to_hand(s, p, k, u)


cdef void _apply(const void* cfgp, void* state, int action, void* undo) noexcept nogil:
    lc_apply(<const LCConfig*>cfgp, <LCState*>state, action, <LCUndo*>undo)


cdef void _undo(const void* cfgp, void* state, const void* undo) noexcept nogil:
    lc_undo(<const LCConfig*>cfgp, <LCState*>state, <const LCUndo*>undo)


cdef bint _is_terminal(const void* cfgp, const void* state) noexcept nogil:
    return (<const LCState*>state).terminal != 0


cdef void _returns(const void* cfgp, const void* state, double* out) noexcept nogil:
    cdef int d = (lc_score(<const LCConfig*>cfgp, <const LCState*>state, 0)
                  - lc_score(<const LCConfig*>cfgp, <const LCState*>state, 1))
    out[0] = d
    out[1] = -d


# Info-state segments, in order (K = num_kinds, C = colours). Only what
# `player` can see: its own hand, both expeditions, the discard piles, the
# cards the opponent is known to hold (taken from a pile), and public counters.
# Scores are not included: they are a function of the expeditions.
SEGMENTS = (
    ("player", "2"),            # one-hot: whose view this is
    ("to_move", "1"),           # 1 if this player acts next
    ("phase", "2"),             # one-hot: play/discard, draw
    ("hand", "K"),              # own cards per kind
    ("my_expeditions", "K"),    # own played cards per kind
    ("opp_expeditions", "K"),   # opponent's played cards per kind
    ("opp_known_hand", "K"),    # cards the opponent took from a pile and still holds
    ("discards", "K"),          # cards per kind in the discard piles
    ("discard_tops", "K"),      # one-hot per colour: the drawable top of each pile
    ("blocked_pile", "C"),      # one-hot: the pile discarded onto this turn
    ("deck_count", "1"),        # cards left in the deck
    ("turn", "1"),              # turns played
)
# With the game parameter features=1 these derived segments follow. A net
# could compute each from the segments above, but they are what a player
# reasons with, and the advantage nets generalise poorly from the raw counts
# alone (docs/lost_cities_strength.md):
FEATURE_SEGMENTS = (
    ("unseen", "K"),            # cards per kind this player has not seen (deck or hidden opponent hand)
    ("my_playable", "K"),       # 1 if kind k still fits this player's expedition
    ("opp_playable", "K"),      # 1 if kind k still fits the opponent's expedition
    ("play_gain", "K"),         # for a card in hand that fits: points gained by playing it now
    ("play_loss", "K"),         # ... or points lost (a wager or low card on an empty expedition)
    ("my_sum", "C"),            # face-value sum of each own expedition
    ("opp_sum", "C"),
    ("my_count", "C"),          # cards in each own expedition (the length bonus)
    ("opp_count", "C"),
    ("my_score", "C"),          # each own expedition's score as it stands, positive part
    ("my_score_neg", "C"),      # ... and negative part
    ("opp_score", "C"),
    ("opp_score_neg", "C"),
    ("my_potential", "C"),      # face values still addable: fitting number cards in hand, unseen or on a pile
    ("opp_potential", "C"),     # the same for the opponent, as this player sees it
)
# Every entry is a small non-negative integer, so rows travel exactly as uint8;
# the turn entry saturates at 255 (only games without a turn cap get there),
# and so do the derived segments (never reached with the published cards).
# Networks rescale the entries with input_scale().


cdef inline int _sat(int x) noexcept nogil:
    return 0 if x < 0 else (x if x < 255 else 255)


cdef inline bint _fits(const LCState* s, int p, int k) noexcept nogil:
    return (s.playable[p][k >> 6] >> (k & 63)) & 1


cdef void _lc_features(const LCConfig* cfg, const LCState* s, int player, lc_out_t* out) noexcept nogil:
    # the FEATURE_SEGMENTS, written from out[0] (which is zeroed)
    cdef int o = 1 - player, K = cfg.num_kinds, C = cfg.colours, k, c, p, q, n, old, new, free, w
    cdef int pot[2 * LC_MAX_COLOURS]            # [me, opponent][colour]
    cdef uint64_t m
    memset(pot, 0, sizeof(pot))
    if lc_out_t is float:
        lc_unseen_f32(cfg.kind_copies, s.hand[player], s.played[0], s.played[1], s.pile_kinds, s.known[o], out, K)
        lc_bits_to_f32(s.playable[player], out + K, K)
        lc_bits_to_f32(s.playable[o], out + 2 * K, K)
    else:
        lc_unseen_u8(cfg.kind_copies, s.hand[player], s.played[0], s.played[1], s.pile_kinds, s.known[o], out, K)
        lc_bits_to_u8(s.playable[player], out + K, K)
        lc_bits_to_u8(s.playable[o], out + 2 * K, K)
    for w in range(2):                          # play gain / loss: the fitting cards in hand only
        m = s.hand_mask[player][w] & s.playable[player][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            m &= m - 1
            c = cfg.kind_colour[k]
            old = _colour_score(cfg, s.value_sum[player][c], s.count[player][c], s.wagers_played[player][c])
            new = _colour_score(cfg, s.value_sum[player][c] + cfg.kind_value[k], s.count[player][c] + 1,
                                s.wagers_played[player][c] + (1 if cfg.kind_rank[k] == 0 else 0))
            if new >= old:
                out[3 * K + k] = _sat(new - old)
            else:
                out[4 * K + k] = _sat(old - new)
    for q in range(2):                          # potentials: fitting number cards not yet out of reach
        p = player if q == 0 else o
        for w in range(2):
            m = s.playable[p][w]
            while m:
                k = (w << 6) + __builtin_ctzll(m)
                m &= m - 1
                free = <int>out[k] + s.pile_kinds[k]     # unseen (exact below 255) + on a pile; wagers: value 0
                pot[q * LC_MAX_COLOURS + cfg.kind_colour[k]] += cfg.kind_value[k] * (
                    free + (s.hand[player][k] if q == 0 else s.known[o][k]))
    out += 5 * K
    for c in range(C):
        for q in range(2):
            p = player if q == 0 else o
            out[q * C + c] = _sat(s.value_sum[p][c])
            out[(2 + q) * C + c] = _sat(s.count[p][c])
            n = _colour_score(cfg, s.value_sum[p][c], s.count[p][c], s.wagers_played[p][c])
            out[(4 + 2 * q) * C + c] = _sat(n)
            out[(5 + 2 * q) * C + c] = _sat(-n)
            out[(8 + q) * C + c] = _sat(pot[q * LC_MAX_COLOURS + c])


cdef void lc_info_state(const LCConfig* cfg, const LCState* s, int player, float* out) noexcept nogil:
    _lc_encode(cfg, s, player, out)


cdef void lc_info_state_u8(const LCConfig* cfg, const LCState* s, int player, uint8_t* out) noexcept nogil:
    """The info-state tensor as uint8 (every entry is an integer in [0, 255]):
    what the traverser's wire rows hold, written without a float pass."""
    _lc_encode(cfg, s, player, out)


cdef void _lc_encode(const LCConfig* cfg, const LCState* s, int player, lc_out_t* out) noexcept nogil:
    cdef int o = 1 - player, K = cfg.num_kinds, k, c, w, pos
    cdef uint64_t m
    memset(out, 0, cfg.tensor_size * sizeof(lc_out_t))
    out[player] = 1
    out[2] = 1 if (not s.terminal and s.player == player) else 0
    out[3 + s.phase] = 1
    pos = 5
    for w in range(2):                      # hand: only set bits
        m = s.hand_mask[player][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            out[pos + k] = s.hand[player][k]
            m &= m - 1
    pos += K
    if lc_out_t is float:
        lc_u8_to_f32(s.played[player], out + pos, K)
        lc_u8_to_f32(s.played[o], out + pos + K, K)
        lc_u8_to_f32(s.known[o], out + pos + 2 * K, K)
        lc_u8_to_f32(s.pile_kinds, out + pos + 3 * K, K)
    else:
        memcpy(out + pos, s.played[player], K)
        memcpy(out + pos + K, s.played[o], K)
        memcpy(out + pos + 2 * K, s.known[o], K)
        memcpy(out + pos + 3 * K, s.pile_kinds, K)
    pos += 4 * K
    for c in range(cfg.colours):
        if s.pile_len[c] > 0:
            out[pos + s.pile[c][s.pile_len[c] - 1]] = 1
    pos += K
    if s.blocked >= 0:
        out[pos + s.blocked] = 1
    pos += cfg.colours
    out[pos] = s.deck_len
    out[pos + 1] = s.turn if s.turn < LC_TENSOR_MAX_TURN else LC_TENSOR_MAX_TURN
    if cfg.features:
        _lc_features(cfg, s, player, out + pos + 2)


cdef void lc_resample(const LCConfig* cfg, LCState* s, int player, uint64_t* rng) noexcept nogil:
    """Redeal what `player` cannot see, uniformly over the deals consistent
    with its information: the opponent's cards that did not come from a
    discard pile, and the deck order, are shuffled together (a Fisher-Yates
    shuffle of the pooled cards), then the opponent gets back as many as it
    held. Everything `player` has seen stays: its hand, both expeditions, the
    piles, the opponent's known cards, the counts. So does its info-state
    tensor. The undo records of earlier moves no longer apply to the result."""
    cdef int o = 1 - player, k, i, j, n = 0, n_opp, w
    cdef uint8_t t
    cdef uint8_t pool[LC_MAX_CARDS]
    for k in range(cfg.num_kinds):
        for i in range(s.hand[o][k] - s.known[o][k]):
            pool[n] = <uint8_t>k
            n += 1
        s.hand[o][k] = s.known[o][k]
    n_opp = n
    for i in range(s.deck_len):
        pool[n] = s.deck[i]
        n += 1
    for i in range(n - 1, 0, -1):
        j = rng_below(rng, i + 1)
        t = pool[i]; pool[i] = pool[j]; pool[j] = t
    for i in range(n_opp):
        s.hand[o][pool[i]] += 1
    for i in range(s.deck_len):
        s.deck[i] = pool[n_opp + i]
    for w in range(2):
        s.hand_mask[o][w] = 0
    for k in range(cfg.num_kinds):
        if s.hand[o][k] > 0:
            _set_bit(s.hand_mask[o], k)


cdef void _resample(const void* cfgp, void* state, int player, uint64_t* rng) noexcept nogil:
    lc_resample(<const LCConfig*>cfgp, <LCState*>state, player, rng)


cdef int _rollout_action(const void* cfgp, const void* state, uint64_t* rng) noexcept nogil:
    return lc_heuristic_action(<const LCConfig*>cfgp, <const LCState*>state)


cdef void _info_state(const void* cfgp, const void* state, int player, float* out) noexcept nogil:
    lc_info_state(<const LCConfig*>cfgp, <const LCState*>state, player, out)


cdef void _info_state_u8(const void* cfgp, const void* state, int player, uint8_t* out) noexcept nogil:
    lc_info_state_u8(<const LCConfig*>cfgp, <const LCState*>state, player, out)


# check_consistency error codes; messages in CHECK_MESSAGES
CHECK_MESSAGES = {
    1: "a card kind's copies do not add up across hands, expeditions, piles and deck",
    2: "hand_mask disagrees with the hand counts",
    3: "a known card count exceeds the hand count",
    4: "expedition caches (top, wagers, count, value sum) disagree with the played cards",
    5: "the playable mask disagrees with the expedition tops",
    6: "a discard pile holds a card of another colour, or slots past its end are not cleared",
    7: "pile_kinds disagrees with the discard piles",
    8: "deck slots past its end are not cleared, or deck_len is out of range",
    9: "hand sizes are wrong for the phase",
    10: "blocked pile is set outside the draw phase, or names an empty or unknown pile",
    11: "terminal flag disagrees with the deck and the turn cap",
    12: "player, phase or turn out of range",
    13: "a number card was played below a higher one (wager after a number card)",
}


cdef int _check(const void* cfgp, const void* state) noexcept nogil:
    cdef const LCConfig* cfg = <const LCConfig*>cfgp
    cdef const LCState* s = <const LCState*>state
    cdef int K = cfg.num_kinds, k, p, c, i, n, top, hs, r
    cdef int tally[LC_MAX_KINDS]
    cdef int pk[LC_MAX_KINDS]
    cdef int cnt, wag, vs
    cdef uint64_t m[2]
    if s.player < 0 or s.player > 1 or s.phase < 0 or s.phase > 1 or s.turn < 0 or s.turn > cfg.turn_limit:
        return 12
    if s.deck_len < 0 or s.deck_len > cfg.deck_size:
        return 8
    for i in range(LC_MAX_CARDS):
        if i >= s.deck_len and s.deck[i] != 0:
            return 8
    memset(tally, 0, sizeof(tally))
    memset(pk, 0, sizeof(pk))
    for i in range(s.deck_len):
        if s.deck[i] >= K:
            return 1
        tally[s.deck[i]] += 1
    for c in range(LC_MAX_COLOURS):
        for i in range(LC_MAX_PER_COLOUR):
            if i < s.pile_len[c]:
                k = s.pile[c][i]
                if c >= cfg.colours or k >= K or cfg.kind_colour[k] != c:
                    return 6
                pk[k] += 1
            elif s.pile[c][i] != 0:
                return 6
    for k in range(LC_MAX_KINDS):
        if pk[k] != s.pile_kinds[k]:
            return 7
    for p in range(2):
        m[0] = 0
        m[1] = 0
        hs = 0
        for k in range(LC_MAX_KINDS):
            if k >= K and (s.hand[p][k] or s.played[p][k] or s.known[p][k]):
                return 1
            if s.hand[p][k]:
                m[k >> 6] |= (<uint64_t>1) << (k & 63)
            if s.known[p][k] > s.hand[p][k]:
                return 3
            hs += s.hand[p][k]
            if k < K:
                tally[k] += s.hand[p][k] + s.played[p][k]
        if m[0] != s.hand_mask[p][0] or m[1] != s.hand_mask[p][1]:
            return 2
        if s.terminal or s.phase == LC_PLAY or p != s.player:
            if hs != cfg.hand_size:
                return 9
        elif hs != cfg.hand_size - 1:
            return 9
        m[0] = 0
        m[1] = 0
        for c in range(cfg.colours):
            top = 0
            cnt = 0
            wag = 0
            vs = 0
            for r in range(cfg.kinds_per_colour):
                k = c * cfg.kinds_per_colour + r
                n = s.played[p][k]
                cnt += n
                if r == 0:
                    wag = n
                elif n:
                    if n != 1:
                        return 1
                    top = r
                    vs += cfg.kind_value[k]
            if (top != s.top[p][c] or cnt != s.count[p][c] or wag != s.wagers_played[p][c]
                    or vs != s.value_sum[p][c]):
                return 4
            m[0] |= cfg.playable_mask[c][top][0]
            m[1] |= cfg.playable_mask[c][top][1]
        if m[0] != s.playable[p][0] or m[1] != s.playable[p][1]:
            return 5
    for k in range(K):
        if tally[k] + pk[k] != cfg.kind_copies[k]:
            return 1
    if s.phase == LC_PLAY and s.blocked != -1:
        return 10
    if s.blocked < -1 or s.blocked >= cfg.colours or (s.blocked >= 0 and s.pile_len[s.blocked] == 0):
        return 10
    if s.terminal:
        if s.phase != LC_PLAY or not (s.deck_len == 0 or s.turn >= cfg.turn_limit):
            return 11
    elif s.deck_len == 0 or s.turn >= cfg.turn_limit:
        return 11
    return 0


# ---------------------------------------------------------------------------
# rule-based heuristic bot, in C so that evaluation matches run fast

cdef inline double _discard_score(const LCConfig* cfg, const LCState* s, int p, int k,
                                  const int* hand_points) noexcept nogil:
    """The heuristic's discard score of kind k (lowest is discarded): what the
    card would give the opponent, then what it is still worth to us."""
    cdef int o = 1 - p, c = cfg.kind_colour[k], r = cfg.kind_rank[k]
    cdef int opp_top = s.top[o][c]
    cdef bint opp_started = s.count[o][c] > 0
    cdef double score = 0.0
    if r == 0:
        if opp_top == 0:
            score += 3.0 if opp_started else 1.0
    elif r > opp_top:
        score += (2.0 if opp_started else 0.5) + cfg.kind_value[k] * 0.05
    if r > s.top[p][c] and (r > 0 or s.top[p][c] == 0):
        if s.count[p][c] > 0:
            score += 2.0 + cfg.kind_value[k] * 0.05
        else:
            score += hand_points[c] * 0.03
    return score


cdef int lc_heuristic_action(const LCConfig* cfg, const LCState* s) noexcept nogil:
    """A rule-based move for the player to act. Deterministic.

    Play phase: continue a started expedition with the lowest card that fits
    with a small gap; open a new one only with enough points of that colour in
    hand and not late in the game; play a wager only with strong support.
    Otherwise discard the card that helps the opponent least and us least.
    Draw phase: take a pile's top card only if it fits a started expedition
    with a small gap, else draw from the deck.
    """
    cdef int p = s.player, K = cfg.num_kinds, kpc = cfg.kinds_per_colour
    cdef int c, r, k, w, gap, best_action = -1
    cdef uint64_t m
    cdef int hand_points[LC_MAX_COLOURS]     # playable number points in hand per colour
    cdef int hand_numbers[LC_MAX_COLOURS]    # playable number cards in hand per colour
    cdef int lowest[LC_MAX_COLOURS]          # lowest playable rank index in hand (0: none)
    cdef double score, best_score = -1e9
    cdef bint late = s.deck_len <= 3 * cfg.colours
    cdef bint started
    cdef int open_points = cfg.expedition_cost - cfg.expedition_cost // 4
    cdef int wager_points = cfg.expedition_cost + cfg.expedition_cost // 2

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
    for w in range(2):                      # the kinds in hand, in increasing order
        m = s.hand_mask[p][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            m &= m - 1
            c = cfg.kind_colour[k]
            r = cfg.kind_rank[k]
            if r > s.top[p][c]:             # so r > 0: a wager's rank is 0
                hand_points[c] += cfg.kind_value[k]
                hand_numbers[c] += 1
                if lowest[c] == 0:          # the first fitting number card is the lowest
                    lowest[c] = r

    for c in range(cfg.colours):
        started = s.count[p][c] > 0
        k = c * kpc
        # a wager: only before numbers, with strong support, not late
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

    # discard: the card that helps the opponent least, then us least
    best_score = 1e9
    for w in range(2):                      # the kinds in hand, in increasing order (the same ties)
        m = s.hand_mask[p][w]
        while m:
            k = (w << 6) + __builtin_ctzll(m)
            m &= m - 1
            score = _discard_score(cfg, s, p, k, hand_points)
            if score < best_score:
                best_score = score
                best_action = K + k
    return best_action


# ---------------------------------------------------------------------------
# Python face

DEFAULTS = dict(colours=5, ranks=9, lowest_value=2, wagers=3, hand_size=8,
                expedition_cost=20, bonus_threshold=8, bonus_amount=20, max_turns=0, features=0)
# parameters that change what a player sees, not the rules: a snapshot taken
# under one value loads under another
ENCODING_PARAMS = ("features",)
LIMITS = dict(colours=(1, LC_MAX_COLOURS), ranks=(1, LC_MAX_RANKS), lowest_value=(0, 100),
              wagers=(0, LC_MAX_WAGERS), hand_size=(1, LC_MAX_HAND), expedition_cost=(0, 1000),
              bonus_threshold=(1, 100), bonus_amount=(0, 1000), max_turns=(0, 10000),
              features=(0, 1))
VARIANTS = {"classic": {}, "six_colours": {"colours": 6}}


cdef class LostCitiesGame(Game):
    """`engine.load_game("lost_cities", **params)`; params and defaults in DEFAULTS,
    `variant="six_colours"` for the newer edition's sixth expedition."""
    cdef LCConfig cfg

    def __init__(self, variant=None, **params):
        cdef int c, r, k, w, t, card
        values = dict(DEFAULTS)
        if variant is not None:
            if variant not in VARIANTS:
                raise ValueError(f"lost_cities: unknown variant {variant!r}; known: {sorted(VARIANTS)}")
            values.update(VARIANTS[variant])
        for key, v in params.items():
            if key not in DEFAULTS:
                raise ValueError(f"lost_cities: unknown parameter {key!r}; known: {sorted(DEFAULTS)}")
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"lost_cities: parameter {key!r} must be an integer, got {v!r}")
            values[key] = v
        for key, (lo, hi) in LIMITS.items():
            if not lo <= values[key] <= hi:
                raise ValueError(f"lost_cities: parameter {key!r} = {values[key]} is out of range [{lo}, {hi}]")
        num_cards = values["colours"] * (values["ranks"] + values["wagers"])
        if 2 * values["hand_size"] >= num_cards:
            raise ValueError(f"lost_cities: parameter 'hand_size' = {values['hand_size']} leaves no deck "
                             f"({num_cards} cards in the game)")
        self.name = "lost_cities"
        self.params = values
        memset(&self.cfg, 0, sizeof(LCConfig))
        cfg = &self.cfg
        cfg.colours = values["colours"]
        cfg.ranks = values["ranks"]
        cfg.lowest_value = values["lowest_value"]
        cfg.wagers = values["wagers"]
        cfg.hand_size = values["hand_size"]
        cfg.expedition_cost = values["expedition_cost"]
        cfg.bonus_threshold = values["bonus_threshold"]
        cfg.bonus_amount = values["bonus_amount"]
        cfg.max_turns = values["max_turns"]
        cfg.turn_limit = cfg.max_turns if cfg.max_turns > 0 else LC_TURN_LIMIT
        cfg.kinds_per_colour = cfg.ranks + 1
        cfg.num_kinds = cfg.colours * cfg.kinds_per_colour
        cfg.num_cards = num_cards
        cfg.deck_size = num_cards - 2 * cfg.hand_size
        cfg.num_actions = 2 * cfg.num_kinds + 1 + cfg.colours
        cfg.features = values["features"]
        cfg.max_colour_sum = sum(cfg.lowest_value + i for i in range(cfg.ranks))
        cfg.tensor_size = sum(size for _, size in self.information_state_segments())
        card = 0
        for c in range(cfg.colours):
            for w in range(cfg.wagers):
                cfg.card_kind[card] = c * cfg.kinds_per_colour
                card += 1
            for r in range(1, cfg.ranks + 1):
                cfg.card_kind[card] = c * cfg.kinds_per_colour + r
                card += 1
            for r in range(cfg.kinds_per_colour):
                k = c * cfg.kinds_per_colour + r
                cfg.kind_colour[k] = c
                cfg.kind_rank[k] = r
                cfg.kind_value[k] = 0 if r == 0 else cfg.lowest_value + r - 1
                cfg.kind_copies[k] = cfg.wagers if r == 0 else 1
                cfg.colour_mask[c][k >> 6] |= (<uint64_t>1) << (k & 63)
            for t in range(cfg.kinds_per_colour):
                for r in range(cfg.kinds_per_colour):
                    if (t == 0) or (r > t):
                        k = c * cfg.kinds_per_colour + r
                        cfg.playable_mask[c][t][k >> 6] |= (<uint64_t>1) << (k & 63)
        self.gd.cfg = &self.cfg
        self.gd.state_size = sizeof(LCState)
        self.gd.undo_size = sizeof(LCUndo)
        self.gd.num_actions = cfg.num_actions
        self.gd.max_legal = max(2 * min(cfg.hand_size, cfg.num_kinds), 1 + cfg.colours)
        self.gd.tensor_size = cfg.tensor_size
        self.gd.deal_length = cfg.num_cards
        self.gd.max_game_length = 2 * cfg.turn_limit
        self.gd.max_utility = self._max_score()
        self.gd.deal_seed = _deal_seed
        self.gd.deal_order = _deal_order
        self.gd.current_player = _current_player
        self.gd.legal_actions = _legal_actions
        self.gd.apply_action = _apply
        self.gd.undo_action = _undo
        self.gd.is_terminal = _is_terminal
        self.gd.returns = _returns
        self.gd.info_state = _info_state
        self.gd.info_state_u8 = _info_state_u8
        self.gd.check = _check
        self.gd.rollout_action = _rollout_action
        self.gd.resample = _resample

    def __reduce__(self):
        return (_load_lost_cities, (self.params,))

    def _segment_size(self, str size):
        return {"K": self.cfg.num_kinds, "C": self.cfg.colours}.get(size) or int(size)

    def _max_score(self):
        # every card of every colour on one side: an upper bound on |score diff|
        best = (self.cfg.max_colour_sum + self.cfg.expedition_cost) * (1 + self.cfg.wagers) + self.cfg.bonus_amount
        return float(self.cfg.colours * best)

    cdef State _make_state(self):
        return LostCitiesState(self)

    def information_state_segments(self):
        segments = SEGMENTS + (FEATURE_SEGMENTS if self.cfg.features else ())
        return [(name, self._segment_size(sz)) for name, sz in segments]

    def input_scale(self):
        """Per-entry multipliers that bring the integer tensor to about [0, 1]
        (used by the networks' first layer)."""
        scale = []
        for name, size in self.information_state_segments():
            div = {"hand": self.cfg.wagers or 1, "my_expeditions": self.cfg.wagers or 1,
                   "opp_expeditions": self.cfg.wagers or 1, "opp_known_hand": self.cfg.wagers or 1,
                   "discards": self.cfg.wagers or 1, "deck_count": self.cfg.deck_size,
                   "turn": self.cfg.max_turns or LC_TENSOR_MAX_TURN,
                   "unseen": self.cfg.wagers or 1, "play_gain": 40, "play_loss": 40,
                   "my_sum": self.cfg.max_colour_sum, "opp_sum": self.cfg.max_colour_sum,
                   "my_count": self.cfg.ranks + self.cfg.wagers, "opp_count": self.cfg.ranks + self.cfg.wagers,
                   "my_score": 100, "my_score_neg": 40, "opp_score": 100, "opp_score_neg": 40,
                   "my_potential": self.cfg.max_colour_sum,
                   "opp_potential": self.cfg.max_colour_sum}.get(name, 1)
            scale += [1.0 / max(div, 1)] * size
        return scale

    # ---- cards, kinds and actions as text
    def kind_to_string(self, int kind):
        if not 0 <= kind < self.cfg.num_kinds:
            raise ValueError(f"card kind {kind} out of range 0..{self.cfg.num_kinds - 1}")
        c, r = divmod(kind, self.cfg.kinds_per_colour)
        return COLOUR_LETTERS[c] + ("w" if r == 0 else str(self.cfg.lowest_value + r - 1))

    def string_to_kind(self, str text):
        c = COLOUR_LETTERS.find(text[:1])
        if c < 0 or c >= self.cfg.colours:
            raise ValueError(f"bad card {text!r}: colour must be one of {COLOUR_LETTERS[:self.cfg.colours]}")
        if text[1:] == "w":
            return c * self.cfg.kinds_per_colour
        try:
            r = int(text[1:]) - self.cfg.lowest_value + 1
        except ValueError:
            raise ValueError(f"bad card {text!r}") from None
        if not 1 <= r <= self.cfg.ranks:
            raise ValueError(f"bad card {text!r}: no such value")
        return c * self.cfg.kinds_per_colour + r

    def card_kind(self, int card):
        """Kind of a card id (as used in explicit deals)."""
        if not 0 <= card < self.cfg.num_cards:
            raise ValueError(f"card id {card} out of range")
        return self.cfg.card_kind[card]

    def action_to_string(self, int action):
        K = self.cfg.num_kinds
        if 0 <= action < K:
            return "play " + self.kind_to_string(action)
        if K <= action < 2 * K:
            return "discard " + self.kind_to_string(action - K)
        if action == 2 * K:
            return "draw deck"
        if 2 * K < action < self.cfg.num_actions:
            return "draw pile " + COLOUR_LETTERS[action - 2 * K - 1]
        return f"unknown action {action}"

    def string_to_action(self, str text):
        K = self.cfg.num_kinds
        verb, _, arg = text.partition(" ")
        if verb == "play":
            return self.string_to_kind(arg)
        if verb == "discard":
            return K + self.string_to_kind(arg)
        if text == "draw deck":
            return 2 * K
        if text.startswith("draw pile "):
            c = COLOUR_LETTERS.find(text[10:])
            if 0 <= c < self.cfg.colours and len(text) == 11:
                return 2 * K + 1 + c
        raise ValueError(f"cannot parse action {text!r}")

    def check_error(self, int code):
        return CHECK_MESSAGES.get(code, f"invariant {code} broken")

    # ---- the action codec: ids to and from (verb, colour, value)
    def _codec_check(self):
        if self.cfg.lowest_value == 0:
            raise ValueError("the action codec writes a wager as value 0, so it does not serve "
                             "variants whose lowest card is 0 (lowest_value=0); use action_to_string")

    def decode_action(self, int action):
        """An action id as an `Action(verb, colour, value)`: verb "play",
        "discard" or "draw"; colour the expedition's index (None for a draw
        from the deck); value the card's face value, 0 for a wager, None for
        draws. The action space has a wager slot per colour even in variants
        without wagers. Out-of-range ids raise ValueError."""
        K = self.cfg.num_kinds
        self._codec_check()
        if not 0 <= action < self.cfg.num_actions:
            raise ValueError(f"action {action} out of range 0..{self.cfg.num_actions - 1}")
        if action < 2 * K:
            c, r = divmod(action % K, self.cfg.kinds_per_colour)
            return Action("play" if action < K else "discard", c,
                          0 if r == 0 else self.cfg.lowest_value + r - 1)
        if action == 2 * K:
            return Action("draw", None, None)
        return Action("draw", action - 2 * K - 1, None)

    def encode_action(self, verb, colour=None, value=None):
        """The action id of (verb, colour, value), the inverse of decode_action.
        `colour` may be an index or a letter of COLOUR_LETTERS; a draw with
        colour None draws from the deck. Anything that names no action of
        this game raises ValueError saying why."""
        self._codec_check()
        if isinstance(colour, str):
            c = COLOUR_LETTERS.find(colour.upper()) if len(colour) == 1 else -1
            if c < 0:
                raise ValueError(f"unknown colour {colour!r}; colours: {COLOUR_LETTERS[:self.cfg.colours]}")
            colour = c
        if colour is not None and not (isinstance(colour, int) and 0 <= colour < self.cfg.colours):
            raise ValueError(f"colour {colour!r} out of range 0..{self.cfg.colours - 1}")
        K = self.cfg.num_kinds
        if verb == "draw":
            if value is not None:
                raise ValueError("a draw takes no card value")
            return 2 * K if colour is None else 2 * K + 1 + colour
        if verb not in ("play", "discard"):
            raise ValueError(f"unknown verb {verb!r}; verbs: play, discard, draw")
        if colour is None or value is None:
            raise ValueError(f"{verb} needs a colour and a card value (0 for a wager)")
        if isinstance(value, int) and not isinstance(value, bool) and value == 0:
            r = 0
        else:
            r = value - self.cfg.lowest_value + 1
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= r <= self.cfg.ranks:
                raise ValueError(f"no card of value {value!r} (values {self.cfg.lowest_value}.."
                                 f"{self.cfg.lowest_value + self.cfg.ranks - 1}, 0 for a wager)")
        kind = colour * self.cfg.kinds_per_colour + r
        return kind if verb == "play" else K + kind

    def heuristic_action(self, State state):
        """The rule-based bot's move in `state` (see lc_heuristic_action)."""
        if state.game is not self:
            raise ValueError("state belongs to another game")
        if (<LCState*>state.data).terminal:
            raise ValueError("heuristic_action: the game is over")
        return lc_heuristic_action(&self.cfg, <LCState*>state.data)


def _rules(params):
    return {k: v for k, v in params.items() if k not in ENCODING_PARAMS}


def _load_lost_cities(params):
    return LostCitiesGame(**params)


cdef class LostCitiesState(State):
    """A Lost Cities state. Beyond the common API: scores, hands, piles,
    expeditions, and an exact snapshot as a dict of readable card strings."""

    cdef inline LCState* _s(self):
        return <LCState*>self.data

    def scores(self):
        """Raw score of each player as it stands."""
        cfg = &(<LostCitiesGame>self.game).cfg
        return [lc_score(cfg, self._s(), 0), lc_score(cfg, self._s(), 1)]

    cdef list _kinds(self, const uint8_t* counts):
        cdef int k
        game = <LostCitiesGame>self.game
        out = []
        for k in range(game.cfg.num_kinds):
            out.extend([game.kind_to_string(k)] * counts[k])
        return out

    def hand(self, int player):
        """Cards in `player`'s hand (hidden information: for tests and tools)."""
        return self._kinds(self._s().hand[player])

    def known_hand(self, int player):
        """Cards `player` took from a discard pile and still holds (public)."""
        return self._kinds(self._s().known[player])

    def expedition(self, int player, int colour):
        """`player`'s expedition of `colour`, in play order."""
        game = <LostCitiesGame>self.game
        kpc = game.cfg.kinds_per_colour
        return [game.kind_to_string(colour * kpc + r)
                for r in range(kpc) for _ in range(self._s().played[player][colour * kpc + r])]

    def expeditions(self, int player):
        return [self.expedition(player, c) for c in range((<LostCitiesGame>self.game).cfg.colours)]

    def piles(self):
        """Public discard piles, bottom card first."""
        game = <LostCitiesGame>self.game
        s = self._s()
        return [[game.kind_to_string(s.pile[c][i]) for i in range(s.pile_len[c])]
                for c in range(game.cfg.colours)]

    def deck(self):
        """Undrawn cards, the next one drawn first (hidden information)."""
        game = <LostCitiesGame>self.game
        s = self._s()
        return [game.kind_to_string(s.deck[i]) for i in range(s.deck_len - 1, -1, -1)]

    def deck_size(self):
        return self._s().deck_len

    def capped(self):
        """True if the game ended at the turn cap with cards left in the deck
        (the published rules would have gone on)."""
        return bool(self._s().terminal and self._s().deck_len > 0)

    def turn(self):
        return self._s().turn

    def phase(self):
        return "draw" if self._s().phase == LC_DRAW else "play"

    def blocked_pile(self):
        return None if self._s().blocked < 0 else int(self._s().blocked)

    def to_dict(self):
        s = self._s()
        return {
            "game": "lost_cities",
            "params": dict(self.game.params),
            "player": int(s.player),
            "phase": self.phase(),
            "blocked_pile": self.blocked_pile(),
            "turn": int(s.turn),
            "terminal": bool(s.terminal),
            "hands": [self.hand(0), self.hand(1)],
            "known_hands": [self.known_hand(0), self.known_hand(1)],
            "expeditions": [self.expeditions(0), self.expeditions(1)],
            "piles": self.piles(),
            "deck": self.deck(),
        }

    @staticmethod
    def from_dict(game, d):
        """Rebuild a state from to_dict() output; exact round trip. A snapshot
        that breaks a rule raises ValueError naming it."""
        cdef LostCitiesGame g
        cdef LostCitiesState st
        cdef LCState* s
        cdef int p, c, k, i
        if not isinstance(game, LostCitiesGame):
            raise ValueError("from_dict needs a lost_cities game")
        g = <LostCitiesGame>game
        if _rules(d.get("params", g.params)) != _rules(g.params):
            raise ValueError(f"snapshot params {d.get('params')} differ from the game's {g.params}")
        st = LostCitiesState(g)
        s = st._s()
        memset(s, 0, sizeof(LCState))
        try:
            s.player = int(d["player"])
            s.phase = {"play": LC_PLAY, "draw": LC_DRAW}[d["phase"]]
            s.blocked = -1 if d["blocked_pile"] is None else int(d["blocked_pile"])
            s.turn = int(d["turn"])
            s.terminal = 1 if d["terminal"] else 0
            for p in range(2):
                for card in d["hands"][p]:
                    k = g.string_to_kind(card)
                    s.hand[p][k] += 1
                    s.hand_mask[p][k >> 6] |= (<uint64_t>1) << (k & 63)
                for card in d["known_hands"][p]:
                    s.known[p][g.string_to_kind(card)] += 1
                if len(d["expeditions"][p]) != g.cfg.colours:
                    raise ValueError(f"expeditions[{p}] must list {g.cfg.colours} colours")
                for c in range(g.cfg.colours):
                    for card in d["expeditions"][p][c]:
                        k = g.string_to_kind(card)
                        if g.cfg.kind_colour[k] != c:
                            raise ValueError(f"card {card} is in expedition {c} of another colour")
                        s.played[p][k] += 1
                        s.count[p][c] += 1
                        if g.cfg.kind_rank[k] == 0:
                            s.wagers_played[p][c] += 1
                        else:
                            s.top[p][c] = max(s.top[p][c], g.cfg.kind_rank[k])
                            s.value_sum[p][c] += g.cfg.kind_value[k]
                    _refresh_playable(&g.cfg, s, p, c)
            if len(d["piles"]) != g.cfg.colours:
                raise ValueError(f"piles must list {g.cfg.colours} colours")
            for c in range(g.cfg.colours):
                for card in d["piles"][c]:
                    k = g.string_to_kind(card)
                    if s.pile_len[c] >= LC_MAX_PER_COLOUR:
                        raise ValueError(f"pile {c} is too long")
                    s.pile[c][s.pile_len[c]] = k
                    s.pile_len[c] += 1
                    s.pile_kinds[k] += 1
            deck = list(d["deck"])
            if len(deck) > g.cfg.deck_size:
                raise ValueError("deck is longer than the deck after the deal")
            s.deck_len = len(deck)
            for i, card in enumerate(deck):
                s.deck[s.deck_len - 1 - i] = g.string_to_kind(card)
        except KeyError as e:
            raise ValueError(f"snapshot lacks field {e.args[0]!r}") from None
        rc = _check(&g.cfg, s)
        if rc:
            raise ValueError(f"inconsistent snapshot: {CHECK_MESSAGES.get(rc, rc)}")
        return st

    def __str__(self):
        s = self._s()
        g = <LostCitiesGame>self.game
        lines = [f"turn {s.turn}, player {s.player} to {self.phase()}, deck {s.deck_len}, "
                 f"scores {self.scores()}" + (" (over)" if s.terminal else "")]
        for p in range(2):
            exps = " ".join("".join(e) or "-" for e in self.expeditions(p))
            lines.append(f"  p{p} hand {' '.join(self.hand(p))} | expeditions {exps}")
        lines.append("  piles " + " ".join((pl[len(pl) - 1] if pl else "-") for pl in self.piles()))
        return "\n".join(lines)
