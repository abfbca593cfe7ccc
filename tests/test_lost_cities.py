"""Lost Cities rules, scoring, hidden information, snapshots, bad input and bots.

The rule and score oracles here are written from the rules text (DESIGN.md
section 4) over the readable snapshot, independently of the C engine.
"""
import collections
import random

import numpy as np
import pytest

import engine
from engine._lost_cities import LostCitiesState
from engine.bots import CautiousBot, HeuristicBot, RandomBot, play_game

LETTERS = "YBWGRP"


# ---------------------------------------------------------------------------
# independent oracles over to_dict() snapshots

def card_value(card):
    return None if card[1:] == "w" else int(card[1:])


def oracle_score(expedition, params):
    if not expedition:
        return 0
    wagers = sum(card_value(c) is None for c in expedition)
    total = sum(card_value(c) or 0 for c in expedition)
    score = (total - params["expedition_cost"]) * (1 + wagers)
    if len(expedition) >= params["bonus_threshold"]:
        score += params["bonus_amount"]
    return score


def oracle_legal(game, d):
    """Legal action strings from the rules alone."""
    if d["terminal"]:
        return set()
    p = d["player"]
    out = set()
    if d["phase"] == "play":
        for card in set(d["hands"][p]):
            colour = LETTERS.index(card[0])
            exp = d["expeditions"][p][colour]
            numbers = [card_value(c) for c in exp if card_value(c) is not None]
            v = card_value(card)
            if (v is None and not numbers) or (v is not None and (not numbers or v > max(numbers))):
                out.add(f"play {card}")
            out.add(f"discard {card}")
        return out
    out.add("draw deck")
    for c, pile in enumerate(d["piles"]):
        if pile and c != d["blocked_pile"]:
            out.add(f"draw pile {LETTERS[c]}")
    return out


def test_rules_and_scores_match_oracles_on_random_playouts():
    for params in ({}, {"colours": 6}, {"colours": 2, "ranks": 5, "wagers": 2, "hand_size": 4,
                                         "expedition_cost": 10, "bonus_threshold": 4, "bonus_amount": 7}):
        game = engine.load_game("lost_cities", **params)
        rng = random.Random(9)
        for seed in range(60):
            state = game.new_initial_state(seed=seed)
            while True:
                d = state.to_dict()
                legal = {game.action_to_string(a) for a in state.legal_actions()}
                assert legal == oracle_legal(game, d)
                scores = [sum(oracle_score(e, game.params) for e in d["expeditions"][p]) for p in (0, 1)]
                assert state.scores() == scores
                assert state.returns() == [scores[0] - scores[1], scores[1] - scores[0]]
                if state.is_terminal():
                    assert d["deck"] == [] or d["turn"] == game.params["max_turns"]
                    break
                state.apply_action(rng.choice(state.legal_actions()))


# ---------------------------------------------------------------------------
# building states for scenarios

def make_state(game, hands=((), ()), expeditions=None, piles=None, player=0, phase="play",
               blocked=None, turn=0, deck=None):
    """A consistent snapshot: the given cards placed, hands topped up and the
    rest in the deck, from a fixed order."""
    colours = game.params["colours"]
    everything = collections.Counter()
    for c in range(colours):
        everything[LETTERS[c] + "w"] += game.params["wagers"]
        for r in range(game.params["ranks"]):
            everything[f"{LETTERS[c]}{game.params['lowest_value'] + r}"] += 1
    expeditions = expeditions or [[[] for _ in range(colours)] for _ in range(2)]
    piles = piles or [[] for _ in range(colours)]
    hands = [list(h) for h in hands]
    placed = collections.Counter()
    for group in (hands[0], hands[1], *expeditions[0], *expeditions[1], *piles, deck or []):
        placed.update(group)
    rest = sorted((everything - placed).elements(), key=lambda c: (LETTERS.index(c[0]), card_value(c) or 0))
    for p in (0, 1):
        need = game.params["hand_size"] - (1 if (phase == "draw" and p == player) else 0) - len(hands[p])
        hands[p] += rest[:need]
        rest = rest[need:]
    d = {"game": "lost_cities", "params": game.params, "player": player, "phase": phase,
         "blocked_pile": blocked, "turn": turn, "terminal": False, "hands": hands,
         "known_hands": [[], []], "expeditions": expeditions, "piles": piles,
         "deck": deck if deck is not None else rest}
    return LostCitiesState.from_dict(game, d)


def act(state, text):
    state.apply_action(state.game.string_to_action(text))


def legal_strings(state):
    return {state.action_to_string(a) for a in state.legal_actions()}


def test_wager_after_number_and_lower_number_are_illegal():
    game = engine.load_game("lost_cities")
    state = make_state(game, hands=(["Yw", "Y3", "Y5", "Y7", "Bw", "B2", "B3", "B4"], []))
    assert {"play Yw", "play Y3", "play Y5", "play Y7"} <= legal_strings(state)
    act(state, "play Y5")
    act(state, "draw deck")
    act(state, "discard " + state.hand(1)[0])
    act(state, "draw deck")
    legal = legal_strings(state)
    assert "play Yw" not in legal and "play Y3" not in legal and "play Y7" in legal
    assert {"discard Yw", "discard Y3"} <= legal
    for text in ("play Yw", "play Y3"):
        before = state.state_bytes()
        with pytest.raises(ValueError, match="illegal action"):
            act(state, text)
        assert state.state_bytes() == before
    # wagers stack before the first number card
    state2 = make_state(game, hands=(["Yw", "Yw", "Y2", "B3", "B4", "B5", "B6", "B7"], []))
    act(state2, "play Yw")
    act(state2, "draw deck")
    act(state2, "discard " + state2.hand(1)[0])
    act(state2, "draw deck")
    assert {"play Yw", "play Y2"} <= legal_strings(state2)


def test_just_discarded_card_cannot_be_drawn_back():
    game = engine.load_game("lost_cities")
    state = make_state(game, hands=(["Y3", "B4", "W5", "G6", "R7", "Y8", "B9", "W10"], ["G2"]),
                       piles=[["Y2"], ["B2"], [], [], []])
    act(state, "discard Y3")
    legal = legal_strings(state)
    assert "draw pile Y" not in legal and "draw pile B" in legal and "draw deck" in legal
    with pytest.raises(ValueError, match="draw pile Y"):
        act(state, "draw pile Y")
    act(state, "draw deck")
    assert "draw pile Y" not in legal_strings(state)  # play phase: no draws at all
    act(state, "discard G2")
    assert {"draw pile Y", "draw pile B", "draw deck"} <= legal_strings(state)
    assert "draw pile G" not in legal_strings(state)


def test_pile_draw_is_public_and_tracked():
    game = engine.load_game("lost_cities")
    state = make_state(game, hands=(["Y3", "W2"], ["B5", "B6"]), piles=[["Y4"], [], [], [], []])
    act(state, "discard Y3")
    act(state, "draw deck")
    act(state, "discard B5")
    act(state, "draw pile Y")          # player 1 takes the Y3 that player 0 discarded
    assert state.known_hand(1) == ["Y3"]
    kind = game.string_to_kind("Y3")
    assert state.information_state_dict(0)["opp_known_hand"][kind] == 1
    assert state.information_state_dict(1)["opp_known_hand"].sum() == 0
    act(state, "discard W2")
    act(state, "draw deck")
    act(state, "play Y3")
    assert state.known_hand(1) == []
    assert state.information_state_dict(0)["opp_known_hand"].sum() == 0


def test_game_ends_on_last_deck_draw_not_on_pile_draw():
    game = engine.load_game("lost_cities", colours=2, ranks=2, wagers=1, hand_size=2)
    # p0: Yw Y2; p1: Y3 Bw; deck: B2 drawn first, then B3
    state = game.new_initial_state(deal=[0, 1, 2, 3, 4, 5])
    assert state.hand(0) == ["Yw", "Y2"] and state.deck() == ["B2", "B3"]
    act(state, "discard Yw")
    act(state, "draw deck")
    assert not state.is_terminal() and state.deck_size() == 1
    act(state, "discard Bw")
    act(state, "draw pile Y")
    assert not state.is_terminal() and state.deck_size() == 1
    act(state, "discard Y2")
    act(state, "draw deck")
    assert state.is_terminal() and state.deck_size() == 0
    assert state.legal_actions() == [] and state.current_player() == -4


def test_scoring_negative_wagers_and_unmultiplied_bonus():
    game = engine.load_game("lost_cities")
    exps = [[["Yw", "Yw", "Y2", "Y3"], ["Bw", "Bw", "B2", "B3", "B4", "B5", "B6", "B7"], [], [], []],
            [["Y4"], [], ["W10"], [], ["Rw"]]]
    state = make_state(game, expeditions=exps)
    # yellow: (5 - 20) * 3 = -45; blue: (27 - 20) * 3 + 20 = 41 (not (7 + 20) * 3)
    assert state.scores()[0] == -45 + 41
    # Y4: -16; W10: -10; a lone wager: (0 - 20) * 2 = -40
    assert state.scores()[1] == -16 - 10 - 40
    assert state.returns() == [-4 - (-66), -66 - (-4)]
    assert oracle_score(exps[0][1], game.params) == 41


def test_turn_cap_ends_with_scores_as_they_stand():
    game = engine.load_game("lost_cities", max_turns=3)
    state = game.new_initial_state(seed=11)
    rng = random.Random(0)
    actions = 0
    while not state.is_terminal():
        state.apply_action(rng.choice(state.legal_actions()))
        actions += 1
    assert actions == 6 and state.turn() == 3 and state.deck_size() > 0
    s = state.scores()
    assert state.returns() == [s[0] - s[1], s[1] - s[0]]


# ---------------------------------------------------------------------------
# hidden information

def _reshuffle_hidden(d, viewer, rng):
    """Same public history for `viewer`; opponent's unseen cards and the deck reshuffled."""
    o = 1 - viewer
    known = collections.Counter(d["known_hands"][o])
    unseen = list((collections.Counter(d["hands"][o]) - known).elements())
    pool = unseen + list(d["deck"])
    rng.shuffle(pool)
    d2 = dict(d)
    hands = [list(h) for h in d["hands"]]
    hands[o] = list(known.elements()) + pool[:len(unseen)]
    d2["hands"] = hands
    d2["deck"] = pool[len(unseen):]
    return d2


def test_info_state_does_not_leak_hidden_cards_or_deck_order():
    game = engine.load_game("lost_cities")
    rng = random.Random(3)
    changed_for_opponent = 0
    checked = 0
    for seed in range(40):
        state = game.new_initial_state(seed=seed)
        while not state.is_terminal():
            if rng.random() < 0.15:
                d = state.to_dict()
                for viewer in (0, 1):
                    other = LostCitiesState.from_dict(game, _reshuffle_hidden(d, viewer, rng))
                    np.testing.assert_array_equal(state.information_state_tensor(viewer),
                                                  other.information_state_tensor(viewer))
                    checked += 1
                    if not np.array_equal(state.information_state_tensor(1 - viewer),
                                          other.information_state_tensor(1 - viewer)):
                        changed_for_opponent += 1
            state.apply_action(rng.choice(state.legal_actions()))
    assert checked > 200
    # the reshuffle really changed hidden cards: the opponent's own view moved
    assert changed_for_opponent > checked // 2


def test_info_state_sees_own_hand():
    game = engine.load_game("lost_cities")
    state = game.new_initial_state(seed=1)
    d = state.to_dict()
    d2 = dict(d)
    hands = [list(h) for h in d["hands"]]
    deck = list(d["deck"])
    hands[0][0], deck[0] = deck[0], hands[0][0]
    d2["hands"], d2["deck"] = hands, deck
    other = LostCitiesState.from_dict(game, d2)
    assert not np.array_equal(state.information_state_tensor(0), other.information_state_tensor(0))
    np.testing.assert_array_equal(state.information_state_tensor(1), other.information_state_tensor(1))


def test_segments_decode_by_name():
    game = engine.load_game("lost_cities")
    state = game.new_initial_state(seed=2)
    view = state.information_state_dict(0)
    assert list(view) == [n for n, _ in game.information_state_segments()]
    assert view["hand"].sum() == 8 and view["player"].tolist() == [1, 0]
    assert view["deck_count"][0] == 44 and view["turn"][0] == 0 and view["phase"].tolist() == [1, 0]
    t = state.information_state_tensor(0)
    assert (t == np.round(t)).all() and t.min() >= 0 and t.max() <= 255   # exact as uint8
    assert len(game.input_scale()) == t.size
    hand = [game.kind_to_string(k) for k in np.flatnonzero(view["hand"]) for _ in range(int(view["hand"][k]))]
    assert sorted(hand) == sorted(state.hand(0))


# ---------------------------------------------------------------------------
# snapshots and bad input

def test_snapshot_round_trip_exact_and_json_safe():
    import json
    game = engine.load_game("lost_cities", colours=6)
    rng = random.Random(2)
    state = game.new_initial_state(seed=8)
    for _ in range(150):
        if state.is_terminal():
            break
        d = json.loads(json.dumps(state.to_dict()))
        assert LostCitiesState.from_dict(game, d).state_bytes() == state.state_bytes()
        state.apply_action(rng.choice(state.legal_actions()))


def test_bad_snapshots_are_rejected():
    game = engine.load_game("lost_cities")
    d = game.new_initial_state(seed=4).to_dict()
    bad = dict(d, deck=d["deck"][1:])
    with pytest.raises(ValueError, match="copies do not add up"):
        LostCitiesState.from_dict(game, bad)
    bad = dict(d, hands=[d["hands"][0][1:] + ["Q9"], d["hands"][1]])
    with pytest.raises(ValueError, match="bad card 'Q9'"):
        LostCitiesState.from_dict(game, bad)
    bad = {k: v for k, v in d.items() if k != "piles"}
    with pytest.raises(ValueError, match="lacks field 'piles'"):
        LostCitiesState.from_dict(game, bad)
    with pytest.raises(ValueError, match="params"):
        LostCitiesState.from_dict(engine.load_game("lost_cities", colours=4), d)


@pytest.mark.parametrize("key,value", [
    ("colours", 0), ("colours", 7), ("ranks", 13), ("wagers", 5), ("hand_size", 0),
    ("max_turns", -1), ("max_turns", 10001), ("bonus_threshold", 0), ("lowest_value", -1)])
def test_bad_config_value_names_the_field(key, value):
    with pytest.raises(ValueError, match=f"'{key}' = {value} is out of range"):
        engine.load_game("lost_cities", **{key: value})


def test_bad_config_other():
    with pytest.raises(ValueError, match="unknown parameter 'colors'"):
        engine.load_game("lost_cities", colors=5)
    with pytest.raises(ValueError, match="'ranks' must be an integer"):
        engine.load_game("lost_cities", ranks="9")
    with pytest.raises(ValueError, match="'hand_size' = 12 leaves no deck"):
        engine.load_game("lost_cities", colours=1, hand_size=12)
    with pytest.raises(ValueError, match="unknown variant"):
        engine.load_game("lost_cities", variant="seven")
    assert engine.load_game("lost_cities", variant="six_colours").params["colours"] == 6


def test_bad_deals():
    game = engine.load_game("lost_cities")
    with pytest.raises(ValueError, match="exactly 60 entries"):
        game.new_initial_state(deal=list(range(59)))
    with pytest.raises(ValueError, match="repeated"):
        game.new_initial_state(deal=[0] + list(range(59)))
    with pytest.raises(ValueError, match="out of range"):
        game.new_initial_state(deal=list(range(1, 61)))
    with pytest.raises(ValueError, match="either seed or deal"):
        game.new_initial_state(seed=1, deal=list(range(60)))


def test_explicit_deal_order():
    game = engine.load_game("lost_cities")
    order = list(range(60))
    state = game.new_initial_state(deal=order)
    # cards 0..7: yellow wagers x3, Y2..Y6; 8..15: Y7..Y10, blue wagers x3, B2
    assert state.hand(0) == ["Yw", "Yw", "Yw", "Y2", "Y3", "Y4", "Y5", "Y6"]
    assert state.hand(1) == ["Y7", "Y8", "Y9", "Y10", "Bw", "Bw", "Bw", "B2"]
    assert state.deck()[0] == game.kind_to_string(game.card_kind(16))
    assert len(state.deck()) == 44


def test_action_strings_round_trip():
    game = engine.load_game("lost_cities", colours=6)
    for a in range(game.num_distinct_actions()):
        assert game.string_to_action(game.action_to_string(a)) == a
    with pytest.raises(ValueError):
        game.string_to_action("fly away")


# ---------------------------------------------------------------------------
# bots

def test_heuristic_beats_random_in_95_percent_of_1000_games():
    game = engine.load_game("lost_cities")
    wins = 0
    for seed in range(1000):
        seat = seed % 2
        bots = [None, None]
        bots[seat] = HeuristicBot(game)
        bots[1 - seat] = RandomBot(seed)
        final = play_game(game, bots, seed)
        wins += final.returns()[seat] > 0
    assert wins >= 950, f"heuristic won only {wins} of 1000"


def test_heuristic_moves_are_legal_in_every_variant():
    for params in ({}, {"colours": 6}, {"colours": 1, "ranks": 6, "wagers": 0, "hand_size": 2}):
        game = engine.load_game("lost_cities", **params)
        for seed in range(30):
            final = play_game(game, [HeuristicBot(game), HeuristicBot(game)], seed)  # apply_action checks
            assert final.is_terminal()
    with pytest.raises(ValueError, match="plays lost_cities"):
        HeuristicBot(engine.load_game("kuhn_poker"))


def test_cautious_bot_plays_legal_moves_sees_only_its_seat_and_beats_random():
    for params in ({}, {"colours": 6}, {"colours": 3, "ranks": 5, "wagers": 0, "hand_size": 4},
                   {"colours": 1, "ranks": 6, "wagers": 1, "hand_size": 2, "lowest_value": 1}):
        game = engine.load_game("lost_cities", **params)
        bot = CautiousBot(game)
        for seed in range(6):
            assert play_game(game, [bot, HeuristicBot(game)], seed).is_terminal()   # apply_action checks
    game = engine.load_game("lost_cities")
    bot = CautiousBot(game)
    # its move depends only on what its seat sees: redealing the hidden cards changes nothing
    checked = differs = 0
    for seed in range(6):
        state = game.new_initial_state(seed=seed)
        while not state.is_terminal():
            a = bot.step(state)
            turn = state.to_dict()["turn"]
            if turn % 7 == 0:
                for k in range(3):
                    other = state.resample(state.current_player(), seed * 1000 + turn * 10 + k)
                    differs += other.to_dict()["deck"] != state.to_dict()["deck"]
                    assert bot.step(other) == a
                    checked += 1
            state.apply_action(a)
    assert checked > 30 and differs > 0
    wins = 0
    for seed in range(40):
        seat = seed % 2
        bots = [RandomBot(seed), RandomBot(seed)]
        bots[seat] = bot
        wins += play_game(game, bots, seed).returns()[seat] > 0
    assert wins >= 38, f"the cautious bot won only {wins} of 40 against random"
    with pytest.raises(ValueError, match="plays lost_cities"):
        CautiousBot(engine.load_game("kuhn_poker"))

# ---------------------------------------------------------------------------
# the derived info-state segments (features=1)

def oracle_features(game, d, player):
    """FEATURE_SEGMENTS from the rules over a snapshot, as `player` sees it."""
    p = game.params
    colours, ranks, low = p["colours"], p["ranks"], p["lowest_value"]
    kinds = [(c, None) if r == 0 else (c, low + r - 1) for c in range(colours) for r in range(ranks + 1)]
    name = [LETTERS[c] + ("w" if v is None else str(v)) for c, v in kinds]
    opp = 1 - player
    hand = collections.Counter(d["hands"][player])
    known = collections.Counter(d["known_hands"][opp])
    played = [collections.Counter(c for e in d["expeditions"][q] for c in e) for q in (0, 1)]
    piles = collections.Counter(c for pile in d["piles"] for c in pile)

    def fits(q, c, v):
        exp = d["expeditions"][q][c]
        numbers = [card_value(x) for x in exp if card_value(x) is not None]
        if v is None:
            return not numbers
        return not numbers or v > max(numbers)

    out = collections.defaultdict(list)
    pot = [[0] * colours for _ in range(2)]
    for (c, v), n in zip(kinds, name):
        copies = p["wagers"] if v is None else 1
        unseen = copies - hand[n] - played[0][n] - played[1][n] - piles[n] - known[n]
        out["unseen"].append(unseen)
        out["my_playable"].append(int(fits(player, c, v)))
        out["opp_playable"].append(int(fits(opp, c, v)))
        gain = 0
        if hand[n] and fits(player, c, v):
            exp = d["expeditions"][player][c]
            gain = oracle_score(exp + [n], p) - oracle_score(exp, p)
        out["play_gain"].append(max(gain, 0))
        out["play_loss"].append(max(-gain, 0))
        if v is not None:
            if fits(player, c, v):
                pot[0][c] += v * (unseen + piles[n] + hand[n])
            if fits(opp, c, v):
                pot[1][c] += v * (unseen + piles[n] + known[n])
    for q, who in ((player, "my"), (opp, "opp")):
        for c in range(colours):
            exp = d["expeditions"][q][c]
            score = oracle_score(exp, p)
            out[f"{who}_sum"].append(sum(card_value(x) or 0 for x in exp))
            out[f"{who}_count"].append(len(exp))
            out[f"{who}_score"].append(max(score, 0))
            out[f"{who}_score_neg"].append(max(-score, 0))
            out[f"{who}_potential"].append(pot[0 if who == "my" else 1][c])
    return out


def test_feature_segments_match_the_rules_and_leave_the_base_tensor_alone():
    game = engine.load_game("lost_cities", features=1)
    base = engine.load_game("lost_cities")
    base_size = base.information_state_tensor_size()
    names = [n for n, _ in game.information_state_segments()]
    assert names[:len(base.information_state_segments())] == [n for n, _ in base.information_state_segments()]
    assert len(game.input_scale()) == game.information_state_tensor_size() > base_size
    rng = random.Random(5)
    seen_gain = seen_loss = 0
    for seed in range(30):
        state = game.new_initial_state(seed=seed)
        for _ in range(rng.randrange(0, 120)):
            if state.is_terminal():
                break
            legal = state.legal_actions()
            piles = [a for a in legal if a > 2 * 50]
            state.apply_action(rng.choice(piles) if piles and rng.random() < 0.5 else rng.choice(legal))
        d = state.to_dict()
        twin = LostCitiesState.from_dict(base, d)        # the same position under the base encoding
        for player in (0, 1):
            t = state.information_state_tensor(player)
            assert np.array_equal(t[:base_size], twin.information_state_tensor(player))
            assert (t == np.round(t)).all() and t.min() >= 0 and t.max() <= 255
            view = state.information_state_dict(player)
            for key, want in oracle_features(game, d, player).items():
                assert view[key].astype(int).tolist() == want, (seed, player, key)
            seen_gain += view["play_gain"].sum() > 0
            seen_loss += view["play_loss"].sum() > 0
    assert seen_gain > 5 and seen_loss > 5


@pytest.mark.parametrize("params", [{}, {"features": 1}, {"features": 1, "colours": 6, "wagers": 4},
                                    {"features": 1, "colours": 4, "ranks": 12}])
def test_the_uint8_encoder_writes_the_tensor_exactly(params):
    """The traverser's wire rows come from the game's uint8 encoder: entry for
    entry the float tensor, for both players, all through random games."""
    game = engine.load_game("lost_cities", **params)
    rng = random.Random(11)
    checked = 0
    for seed in range(40):
        state = game.new_initial_state(seed=seed)
        while True:
            for player in (0, 1):
                u8 = state.information_state_tensor_u8(player)
                assert u8.dtype == np.uint8
                np.testing.assert_array_equal(u8.astype(np.float32), state.information_state_tensor(player))
                checked += 1
            if state.is_terminal():
                break
            state.apply_action(rng.choice(state.legal_actions()))
    assert checked > 40 * 100
    assert engine.load_game("leduc_poker").new_initial_state(seed=0).information_state_tensor_u8(0) is None


def test_features_is_an_encoding_choice_not_a_rule():
    with pytest.raises(ValueError, match="'features' = 2 is out of range"):
        engine.load_game("lost_cities", features=2)
    d = engine.load_game("lost_cities").new_initial_state(seed=4).to_dict()
    rich = engine.load_game("lost_cities", features=1)
    loaded = LostCitiesState.from_dict(rich, d).to_dict()
    assert loaded["params"]["features"] == 1
    assert {k: v for k, v in loaded.items() if k != "params"} == {k: v for k, v in d.items() if k != "params"}
    with pytest.raises(ValueError, match="params"):
        LostCitiesState.from_dict(engine.load_game("lost_cities", features=1, colours=4), d)
