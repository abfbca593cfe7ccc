"""Redealing hidden cards (State.resample, lc_resample), StateBatch, the action
codec and the published rules' default of no turn cap."""
import collections
import random

import numpy as np
import pytest

import engine
from engine._batch import StateBatch


def _played_state(game, seed, moves):
    state = game.new_initial_state(seed=seed)
    rng = random.Random(seed)
    for _ in range(moves):
        if state.is_terminal():
            break
        legal = state.legal_actions()
        # prefer pile draws now and then, so the opponent holds known cards
        piles = [a for a in legal if a > 2 * (game.num_distinct_actions() // 2)]
        state.apply_action(rng.choice(piles) if piles and rng.random() < 0.5 else rng.choice(legal))
    return state


def _hidden(state, player):
    """What `player` cannot see: the opponent's unknown cards and the deck."""
    opp = collections.Counter(state.hand(1 - player)) - collections.Counter(state.known_hand(1 - player))
    return opp, collections.Counter(state.deck())


@pytest.mark.parametrize("features", [0, 1])
def test_resample_keeps_the_players_view_and_the_card_counts(features):
    game = engine.load_game("lost_cities", features=features)
    changed = 0
    for seed in range(40):
        state = _played_state(game, seed, moves=seed * 3)
        if state.is_terminal():
            continue
        for player in (0, 1):
            world = state.resample(player, seed=100 + seed)
            world.check_consistency()
            assert np.array_equal(world.information_state_tensor(player), state.information_state_tensor(player))
            assert world.hand(player) == state.hand(player)
            assert world.known_hand(1 - player) == state.known_hand(1 - player)
            assert len(world.hand(1 - player)) == len(state.hand(1 - player))
            assert world.deck_size() == state.deck_size()
            assert world.legal_actions() == state.legal_actions() or world.current_player() != player
            # the hidden cards are the same multiset, only redealt
            o0, d0 = _hidden(state, player)
            o1, d1 = _hidden(world, player)
            assert o0 + d0 == o1 + d1
            changed += world.state_bytes() != state.state_bytes()
            assert world.history() == []
    assert changed > 50


def test_resample_is_seeded():
    game = engine.load_game("lost_cities")
    state = _played_state(game, 3, 20)
    assert state.resample(0, 7) == state.resample(0, 7)
    assert state.resample(0, 7) != state.resample(0, 8)


def test_resampled_worlds_are_uniform_on_a_small_variant():
    # 8 distinct cards (no wagers), hands of 2, a deck of 4. Player 0 sees its
    # own 2; the other 6 can lie in C(6, 2) * 4! = 360 ways (opponent's hand
    # unordered, deck ordered), each equally likely.
    game = engine.load_game("lost_cities", colours=2, ranks=4, wagers=0, hand_size=2)
    state = game.new_initial_state(seed=5)
    batch = StateBatch(game, 36000)
    batch.fill(state)
    batch.resample(0, seed=11)
    counts = collections.Counter()
    for row in batch.buffer:
        counts[row.tobytes()] += 1
    assert len(counts) == 360
    expected = 36000 / 360
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    # 359 degrees of freedom: mean 359, sd 26.8; a biased shuffle lands far above
    assert chi2 < 359 + 5 * 26.8
    for i in (0, 1, 2):
        w = batch.state(i)
        w.check_consistency()
        assert np.array_equal(w.information_state_tensor(0), state.information_state_tensor(0))


def test_known_cards_stay_with_the_opponent():
    game = engine.load_game("lost_cities", colours=2, ranks=4, wagers=1, hand_size=3)
    found = 0
    for seed in range(200):
        state = game.new_initial_state(seed=seed)
        rng = random.Random(seed)
        while not state.is_terminal() and not state.known_hand(1):
            state.apply_action(rng.choice(state.legal_actions()))
        if state.is_terminal():
            continue
        known = state.known_hand(1)
        for k in range(20):
            world = state.resample(0, seed=k)
            assert collections.Counter(known) <= collections.Counter(world.hand(1))
            assert world.known_hand(1) == known
        found += 1
    assert found > 20


def test_games_without_hidden_cards_to_redeal_say_so():
    kuhn = engine.load_game("kuhn_poker")
    with pytest.raises(ValueError, match="cannot resample"):
        kuhn.new_initial_state(seed=1).resample(0, 1)
    with pytest.raises(ValueError, match="player must be 0 or 1"):
        engine.load_game("lost_cities").new_initial_state(seed=1).resample(2, 1)


# ---------------------------------------------------------------------------
# StateBatch

def test_batch_encode_and_apply_match_the_state_api():
    game = engine.load_game("lost_cities")
    states = [_played_state(game, s, 2 * s) for s in range(12)]
    batch = StateBatch(game, len(states))
    for i, s in enumerate(states):
        batch.set(i, s)
    rows = np.arange(len(states))
    info = np.zeros((len(states), game.information_state_tensor_size()), np.float32)
    mask = np.zeros((len(states), game.num_distinct_actions()), np.uint8)
    batch.encode(rows, 1, info, mask)
    for i, s in enumerate(states):
        assert np.array_equal(info[i], s.information_state_tensor(1))
        assert np.array_equal(mask[i], s.legal_actions_mask())
    assert list(batch.current_players(0, len(states))) == [s.current_player() for s in states]
    actions = [s.legal_actions()[-1] for s in states]
    batch.apply(rows, actions)
    for i, (s, a) in enumerate(zip(states, actions)):
        s.apply_action(a)
        assert batch.state(i) == s


def test_batch_apply_checks_every_action_before_applying_any():
    game = engine.load_game("lost_cities")
    state = game.new_initial_state(seed=2)
    batch = StateBatch(game, 3)
    batch.fill(state)
    before = batch.buffer.copy()
    good = state.legal_actions()[0]
    bad = next(a for a in range(game.num_distinct_actions()) if a not in state.legal_actions())
    with pytest.raises(ValueError, match=f"illegal action {bad} in row 2"):
        batch.apply([0, 1, 2], [good, good, bad])
    assert np.array_equal(batch.buffer, before)
    with pytest.raises(ValueError, match="out of range"):
        batch.apply([3], [good])


def test_batch_playouts_follow_the_heuristic_exactly():
    game = engine.load_game("lost_cities")
    state = _played_state(game, 4, 31)
    batch = StateBatch(game, 4)
    batch.fill(state)
    batch.playout(seed=0)
    ref = state.clone()
    while not ref.is_terminal():
        ref.apply_action(game.heuristic_action(ref))
    for i in range(4):
        assert batch.state(i) == ref
    assert list(batch.returns(0)) == [ref.returns()[0]] * 4
    # random playouts end too, and differ between rows (own stream per row)
    batch.fill(state)
    batch.playout(seed=1, policy="random")
    assert all(batch.state(i).is_terminal() for i in range(4))
    assert len({batch.buffer[i].tobytes() for i in range(4)}) > 1


def test_batch_advance_stops_at_the_other_players_turn():
    game = engine.load_game("lost_cities")
    state = game.new_initial_state(seed=8)
    state.apply_action(state.legal_actions()[0])     # player 0 played; its draw is next
    batch = StateBatch(game, 2)
    batch.fill(state)
    batch.advance(0, seed=0)
    assert list(batch.current_players()) == [1, 1]
    assert batch.state(0).turn() == 1


def test_batch_rejects_bad_arguments():
    game = engine.load_game("lost_cities")
    with pytest.raises(ValueError, match="capacity"):
        StateBatch(game, 0)
    batch = StateBatch(game, 2)
    with pytest.raises(ValueError, match="another game"):
        batch.fill(engine.load_game("lost_cities", colours=6).new_initial_state(seed=1))
    with pytest.raises(ValueError, match="policy must be"):
        batch.playout(0, policy="greedy")
    with pytest.raises(ValueError, match="no playout policy"):
        StateBatch(engine.load_game("kuhn_poker"), 1).playout(0)


# ---------------------------------------------------------------------------
# The action codec and the turn cap

def test_action_codec_round_trips_every_id():
    for params in ({}, {"colours": 6}, {"wagers": 0, "lowest_value": 1}):
        game = engine.load_game("lost_cities", **params)
        for a in range(game.num_distinct_actions()):
            act = game.decode_action(a)
            assert game.encode_action(*act) == a
            assert game.encode_action(act.verb, colour=act.colour, value=act.value) == a
            text = game.action_to_string(a)
            assert text.split()[0] == act.verb
    game = engine.load_game("lost_cities")
    assert game.decode_action(0) == ("play", 0, 0)                     # a yellow wager
    assert game.encode_action("discard", "B", 10) == game.string_to_action("discard B10")
    assert game.encode_action("draw") == game.string_to_action("draw deck")
    assert game.encode_action("draw", "r") == game.string_to_action("draw pile R")
    with pytest.raises(ValueError, match="lowest_value=0"):
        engine.load_game("lost_cities", lowest_value=0).decode_action(0)


@pytest.mark.parametrize("args,match", [
    (("fold",), "unknown verb"), (("play", 0, 11), "no card of value"), (("play", 5, 2), "out of range"),
    (("play", "Q", 2), "unknown colour"), (("play", None, 2), "needs a colour"), (("draw", 0, 3), "no card value"),
    (("play", 0, True), "no card of value")])
def test_action_codec_rejects_what_names_no_action(args, match):
    game = engine.load_game("lost_cities")
    with pytest.raises(ValueError, match=match):
        game.encode_action(*args)
    with pytest.raises(ValueError, match="out of range"):
        game.decode_action(game.num_distinct_actions())


def _cycle_turn(game, state):
    """Discard a card, then draw another pile's top: the deck never shrinks
    once a pile holds a card."""
    from engine._lost_cities import COLOUR_LETTERS
    piles = state.piles()
    full = [c for c in range(len(piles)) if piles[c]]
    hand = state.hand(state.current_player())
    card = next((h for h in hand if any(COLOUR_LETTERS[c] != h[0] for c in full)), hand[0])
    state.apply_action(game.string_to_action("discard " + card))
    others = [c for c in full if COLOUR_LETTERS[c] != card[0]]
    state.apply_action(game.string_to_action("draw pile " + COLOUR_LETTERS[others[0]]) if others
                       else game.string_to_action("draw deck"))


def test_published_rules_have_no_turn_cap_by_default():
    game = engine.load_game("lost_cities")
    assert game.params["max_turns"] == 0
    # players who keep passing cards through the discard piles never empty the
    # deck; with no cap the game goes on (here past 300 turns)
    state = game.new_initial_state(seed=1)
    for _ in range(300):
        _cycle_turn(game, state)
    assert not state.is_terminal() and state.turn() == 300 and state.deck_size() == 43
    assert state.information_state_dict(0)["turn"][0] == 255          # saturates for uint8 rows
    capped = engine.load_game("lost_cities", max_turns=200)
    s = capped.new_initial_state(seed=1)
    while not s.is_terminal():
        _cycle_turn(capped, s)
    assert s.turn() == 200 and s.capped() and s.deck_size() == 43
    done = capped.new_initial_state(seed=1)
    while not done.is_terminal():
        done.apply_action(capped.heuristic_action(done))
    assert not done.capped()
