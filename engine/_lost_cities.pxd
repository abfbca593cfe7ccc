# See engine/_lost_cities.pyx for details.
from engine._types cimport int8_t, int16_t, uint8_t, uint64_t

cdef enum:
    LC_MAX_COLOURS = 6
    LC_MAX_RANKS = 12           # number cards per colour
    LC_MAX_WAGERS = 4
    LC_MAX_HAND = 12
    LC_MAX_KINDS = LC_MAX_COLOURS * (LC_MAX_RANKS + 1)
    LC_MAX_PER_COLOUR = LC_MAX_RANKS + LC_MAX_WAGERS
    LC_MAX_CARDS = LC_MAX_COLOURS * LC_MAX_PER_COLOUR
    LC_PLAY = 0                 # phase: play or discard a card
    LC_DRAW = 1                 # phase: draw a card
    LC_TURN_LIMIT = 32767       # without a cap, a game that never empties the deck stops here
    LC_TENSOR_MAX_TURN = 255    # the tensor's turn entry saturates here (rows travel as uint8)


cdef struct LCConfig:
    int colours                 # expeditions (1..6)
    int ranks                   # number cards per colour (1..12)
    int lowest_value            # face value of the lowest number card
    int wagers                  # wager cards per colour (0..4)
    int hand_size               # cards in hand (1..12)
    int expedition_cost         # subtracted from each started expedition
    int bonus_threshold         # cards in an expedition that earn the bonus
    int bonus_amount            # the bonus (never multiplied by wagers)
    int max_turns               # turn cap: the game ends after this many turns (0 = none)
    int turn_limit              # max_turns, or LC_TURN_LIMIT with no cap (the int16 counter's guard)
    int kinds_per_colour        # ranks + 1: rank index 0 is the wager
    int num_kinds               # colours * kinds_per_colour
    int num_cards               # colours * (ranks + wagers)
    int deck_size               # cards left in the deck after the deal
    int num_actions             # 2 * num_kinds + 1 + colours
    int tensor_size             # see lc_info_state
    int features                # 1: the info state adds derived segments (FEATURE_SEGMENTS)
    int max_colour_sum          # face-value sum of one colour's number cards
    uint8_t card_kind[LC_MAX_CARDS]         # card id -> kind
    uint8_t kind_colour[LC_MAX_KINDS]       # kind -> colour
    uint8_t kind_rank[LC_MAX_KINDS]         # kind -> rank index (0 = wager)
    int16_t kind_value[LC_MAX_KINDS]        # kind -> face value (0 for wagers)
    uint8_t kind_copies[LC_MAX_KINDS]       # cards of that kind in the game
    uint64_t playable_mask[LC_MAX_COLOURS][LC_MAX_RANKS + 1][2]
        # [c][top]: kinds of colour c playable on an expedition whose highest
        # rank index is `top` (top 0 = nothing or wagers only: everything)
    uint64_t colour_mask[LC_MAX_COLOURS][2] # all kinds of colour c


cdef struct LCState:
    uint64_t hand_mask[2][2]                # bit k set iff hand[p][k] > 0
    uint64_t playable[2][2]                 # bit k set iff kind k fits p's expedition now
    uint8_t deck[LC_MAX_CARDS]              # undrawn kinds; deck[deck_len-1] is drawn next; rest 0
    uint8_t hand[2][LC_MAX_KINDS]           # cards of each kind in each hand
    uint8_t played[2][LC_MAX_KINDS]         # cards of each kind in each player's expeditions
    uint8_t known[2][LC_MAX_KINDS]          # of hand[p][k], how many p took from a pile (public)
    uint8_t pile[LC_MAX_COLOURS][LC_MAX_PER_COLOUR]  # discard piles, bottom first; rest 0
    uint8_t pile_len[LC_MAX_COLOURS]        # cards in each discard pile
    uint8_t pile_kinds[LC_MAX_KINDS]        # cards of each kind across all discard piles
    uint8_t top[2][LC_MAX_COLOURS]          # highest rank index played (0: none or only wagers)
    uint8_t wagers_played[2][LC_MAX_COLOURS]  # wager cards in each expedition
    uint8_t count[2][LC_MAX_COLOURS]        # cards in each expedition
    int16_t value_sum[2][LC_MAX_COLOURS]    # face-value sum of each expedition
    int16_t deck_len                        # undrawn cards
    int16_t turn                            # completed turns (a turn = play + draw)
    int8_t player                           # player to act
    int8_t phase                            # LC_PLAY or LC_DRAW
    int8_t blocked                          # colour discarded this turn (not drawable), or -1
    int8_t terminal                         # 1 once the game is over


cdef struct LCUndo:
    int16_t action              # the action applied
    uint8_t kind                # the card kind that moved
    uint8_t prev_top            # top[p][c] before a play
    int8_t prev_blocked         # blocked before a draw
    uint8_t known_used          # 1 if the card played/discarded was a known one


cdef int lc_score(const LCConfig* cfg, const LCState* s, int player) noexcept nogil
cdef int lc_legal_actions(const LCConfig* cfg, const LCState* s, int* out) noexcept nogil
cdef void lc_apply(const LCConfig* cfg, LCState* s, int action, LCUndo* u) noexcept nogil
cdef void lc_undo(const LCConfig* cfg, LCState* s, const LCUndo* u) noexcept nogil
cdef void lc_info_state(const LCConfig* cfg, const LCState* s, int player, float* out) noexcept nogil
cdef void lc_info_state_u8(const LCConfig* cfg, const LCState* s, int player, uint8_t* out) noexcept nogil
cdef int lc_heuristic_action(const LCConfig* cfg, const LCState* s) noexcept nogil
cdef void lc_resample(const LCConfig* cfg, LCState* s, int player, uint64_t* rng) noexcept nogil
