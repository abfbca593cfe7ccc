"""Kuhn and Leduc poker against OpenSpiel, node by node.

Our states never hold chance nodes: the deal (OpenSpiel's chance outcomes, in
its order) is given up front. The OpenSpiel state is driven with the same deal,
its chance nodes resolved from the deal as they come up.
"""
import itertools
import random
from collections import Counter

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

import engine

GAMES = ["kuhn_poker", "leduc_poker"]
NUM_CARDS = {"kuhn_poker": 3, "leduc_poker": 6}
PLAYOUTS = {"kuhn_poker": 2000, "leduc_poker": 2000}


def _resolve_chance(ps, deal, pos):
    """Apply deal entries to the OpenSpiel state while it is at a chance node;
    return the next unused deal position."""
    while ps.is_chance_node():
        outcomes = [a for a, _ in ps.chance_outcomes()]
        assert deal[pos] in outcomes, (deal, pos, outcomes)
        ps.apply_action(deal[pos])
        pos += 1
    return pos


def _assert_same(name, ours, ps, where):
    assert not ours.is_chance_node()
    assert ours.is_terminal() == ps.is_terminal(), where
    assert ours.current_player() == ps.current_player(), where
    assert ours.legal_actions() == list(ps.legal_actions()), where
    assert ours.returns() == list(ps.returns()), where
    if not ours.is_terminal():
        p = ours.current_player()
        assert ours.legal_actions(p) == ours.legal_actions()
        assert ours.legal_actions(1 - p) == []
        mask = ours.legal_actions_mask()
        assert list(np.flatnonzero(mask)) == ours.legal_actions(), where
        for player in (0, 1):
            t = ours.information_state_tensor(player)
            assert t.dtype == np.float32
            np.testing.assert_array_equal(
                t, np.asarray(ps.information_state_tensor(player), dtype=np.float32),
                err_msg=f"{name} player {player} at {where}")
        np.testing.assert_array_equal(ours.information_state_tensor(),
                                      ours.information_state_tensor(p))
    else:
        assert ours.legal_actions_mask().sum() == 0


def _spiel_state(name, deal):
    ps = pyspiel.load_game(name).new_initial_state()
    pos = _resolve_chance(ps, deal, 0)
    return ps, pos


def _deal_of(name, state):
    return list(state.to_dict()["cards"])


# -- game-level facts ------------------------------------------------------------


@pytest.mark.parametrize("name", GAMES)
def test_game_constants_match_openspiel(name):
    game = engine.load_game(name)
    sg = pyspiel.load_game(name)
    assert game.num_distinct_actions() == sg.num_distinct_actions()
    assert game.information_state_tensor_size() == sg.information_state_tensor_size()
    assert game.information_state_tensor_shape() == list(sg.information_state_tensor_shape())
    assert game.max_game_length() == sg.max_game_length()
    assert game.max_utility() == sg.max_utility()
    assert game.num_players() == sg.num_players()
    assert game.deal_length() == {"kuhn_poker": 2, "leduc_poker": 3}[name]
    ps, _ = _spiel_state(name, list(range(game.deal_length())))
    for a in range(game.num_distinct_actions()):
        # the state's names: OpenSpiel's Kuhn Game.action_to_string is generic
        assert game.action_to_string(a) == ps.action_to_string(0, a)


@pytest.mark.parametrize("name", GAMES)
def test_segments_sum_to_tensor_size(name):
    game = engine.load_game(name)
    segs = game.information_state_segments()
    assert all(size > 0 for _, size in segs)
    assert len({n for n, _ in segs}) == len(segs)
    assert sum(size for _, size in segs) == game.information_state_tensor_size()
    d = game.new_initial_state(seed=3).information_state_dict(0)
    assert [k for k, _ in segs] == list(d)


@pytest.mark.parametrize("name", GAMES)
def test_rejects_parameters(name):
    with pytest.raises(ValueError):
        engine.load_game(name, players=3)


# -- deals -----------------------------------------------------------------------


BAD_DEALS = {
    "kuhn_poker": [([], "exactly"), ([0], "exactly"), ([0, 1, 2], "exactly"),
                   ([3, 0], "out of range"), ([0, -1], "out of range"),
                   ([1, 1], "repeated")],
    "leduc_poker": [([], "exactly"), ([0, 1], "exactly"), ([0, 1, 2, 3], "exactly"),
                    ([6, 0, 1], "out of range"), ([0, 1, -1], "out of range"),
                    ([0, 1, 100], "out of range"),
                    ([0, 0, 1], "repeated"), ([0, 1, 0], "repeated"), ([2, 5, 5], "repeated")],
}


@pytest.mark.parametrize("name", GAMES)
def test_bad_deals_raise(name):
    game = engine.load_game(name)
    for deal, words in BAD_DEALS[name]:
        with pytest.raises(ValueError, match=words):
            game.new_initial_state(deal=deal)
    with pytest.raises(ValueError):
        game.new_initial_state(seed=1, deal=[0, 1, 2][:game.deal_length()])


@pytest.mark.parametrize("name", GAMES)
def test_seeded_deals_uniform_and_valid(name):
    game = engine.load_game(name)
    n, k = NUM_CARDS[name], game.deal_length()
    triples = list(itertools.permutations(range(n), k))
    draws = 200 * len(triples)
    counts = Counter(tuple(_deal_of(name, game.new_initial_state(seed=s))) for s in range(draws))
    assert set(counts) == set(triples)
    # 200 expected per outcome; sd ~14, so these bounds are > 5 sd away
    assert min(counts.values()) > 120 and max(counts.values()) < 280, counts
    a = game.new_initial_state(seed=12345)
    b = game.new_initial_state(seed=12345)
    assert a.state_bytes() == b.state_bytes()


def test_leduc_accessors():
    game = engine.load_game("leduc_poker")
    s = game.new_initial_state(deal=[3, 0, 5])
    assert s.private_cards() == [3, 0]
    assert s.public_card() is None
    s.apply_action(1)
    s.apply_action(1)
    assert s.public_card() == 5
    assert "5" in str(s)
    s.undo_action()
    assert s.public_card() is None


# -- illegal actions ---------------------------------------------------------------


@pytest.mark.parametrize("name", GAMES)
def test_illegal_action_raises_and_keeps_state(name):
    game = engine.load_game(name)
    rng = random.Random(7)
    for trial in range(200):
        s = game.new_initial_state(seed=trial)
        while True:
            before = s.state_bytes()
            legal = s.legal_actions()
            illegal = [a for a in range(-2, game.num_distinct_actions() + 2) if a not in legal]
            for a in illegal + ["x", None, 1.5j]:
                with pytest.raises(ValueError):
                    s.apply_action(a)
                assert s.state_bytes() == before
                assert s.legal_actions() == legal
            if s.is_terminal():
                break
            s.apply_action(rng.choice(legal))
    with pytest.raises(ValueError):
        game.new_initial_state(seed=0).undo_action()


def test_leduc_fold_illegal_when_not_facing_a_bet():
    s = engine.load_game("leduc_poker").new_initial_state(deal=[0, 1, 2])
    before = s.state_bytes()
    with pytest.raises(ValueError, match="Fold"):
        s.apply_action(0)
    assert s.state_bytes() == before


# -- random playouts ----------------------------------------------------------------


@pytest.mark.parametrize("name", GAMES)
def test_random_playouts_match_openspiel(name):
    game = engine.load_game(name)
    rng = random.Random(20240601 + len(name))
    terminal_returns = Counter()
    for i in range(PLAYOUTS[name]):
        if i % 2:
            deal = rng.sample(range(NUM_CARDS[name]), game.deal_length())
            ours = game.new_initial_state(deal=deal)
            assert _deal_of(name, ours) == deal
        else:
            ours = game.new_initial_state(seed=rng.getrandbits(64))
            deal = _deal_of(name, ours)
        ps, pos = _spiel_state(name, deal)
        trail = []  # state bytes before each action
        while True:
            _assert_same(name, ours, ps, (deal, ours.history()))
            ours.check_consistency()
            if ours.is_terminal():
                terminal_returns[tuple(ours.returns())] += 1
                assert sum(ours.returns()) == 0
                assert max(abs(r) for r in ours.returns()) <= game.max_utility()
                break
            a = rng.choice(ours.legal_actions())
            trail.append(ours.state_bytes())
            ours.apply_action(a)
            ps.apply_action(a)
            pos = _resolve_chance(ps, deal, pos)
        assert pos == len(deal) or ps.is_terminal()
        assert ours.history() == [h.action for h in ps.full_history() if h.player >= 0]
        # undo back to the deal, byte for byte at every step
        while trail:
            ours.undo_action()
            assert ours.state_bytes() == trail.pop()
        assert ours.history() == []
    assert len(terminal_returns) > 3


@pytest.mark.parametrize("name", GAMES)
def test_dict_round_trip_and_clone(name):
    game = engine.load_game(name)
    cls = type(game.new_initial_state(seed=0))
    rng = random.Random(99)
    for i in range(300):
        s = game.new_initial_state(seed=i)
        while True:
            d = s.to_dict()
            assert d["game"] == name
            back = cls.from_dict(game, d)
            assert back.state_bytes() == s.state_bytes()
            assert back.to_dict() == d
            assert back == s and hash(back) == hash(s)
            assert str(back) == str(s)
            back.check_consistency()
            c = s.clone()
            assert c.state_bytes() == s.state_bytes() and c.history() == s.history()
            if s.is_terminal():
                break
            s.apply_action(rng.choice(s.legal_actions()))


# -- exhaustive Leduc (and Kuhn) ------------------------------------------------------


def _walk(name, game, ours, ps, deal, pos, stats):
    _assert_same(name, ours, ps, (deal, ours.history()))
    ours.check_consistency()
    d = ours.to_dict()
    assert type(ours).from_dict(game, d).state_bytes() == ours.state_bytes()
    stats["nodes"] += 1
    if ours.is_terminal():
        stats["terminals"] += 1
        stats["returns"][tuple(ours.returns())] += 1
        return
    for a in ours.legal_actions():
        before = ours.state_bytes()
        child = ps.clone()
        child.apply_action(a)
        cpos = _resolve_chance(child, deal, pos)
        ours.apply_action(a)
        _walk(name, game, ours, child, deal, cpos, stats)
        ours.undo_action()
        assert ours.state_bytes() == before


@pytest.mark.parametrize("name", GAMES)
def test_exhaustive_tree_matches_openspiel(name):
    game = engine.load_game(name)
    stats = {"nodes": 0, "terminals": 0, "returns": Counter()}
    deals = list(itertools.permutations(range(NUM_CARDS[name]), game.deal_length()))
    for deal in deals:
        deal = list(deal)
        ours = game.new_initial_state(deal=deal)
        ps, pos = _spiel_state(name, deal)
        _walk(name, game, ours, ps, deal, pos, stats)
    if name == "leduc_poker":
        assert len(deals) == 120
        # each round has 4 ways to end by a fold (cRf, cRRf, Rf, RRf) and 5 by
        # calling (cc, cRc, cRRc, Rc, RRc): 4 + 5 * (4 + 5) = 49 terminals per deal
        assert stats["terminals"] == 120 * 49
        assert max(abs(r) for rs in stats["returns"] for r in rs) == 13.0
        assert (0.0, 0.0) in stats["returns"]  # split pots happen
    else:
        assert stats["terminals"] == 6 * 5


def test_from_dict_refuses_illegal_history():
    game = engine.load_game("leduc_poker")
    cls = type(game.new_initial_state(seed=0))
    with pytest.raises(ValueError):
        cls.from_dict(game, {"cards": [0, 3, 4], "history": [0]})  # fold not facing a bet
    with pytest.raises(ValueError):
        cls.from_dict(game, {"cards": [0, 3, 4], "history": [2, 0, 1]})  # after a fold
    with pytest.raises(ValueError):
        cls.from_dict(game, {"cards": [0, 3, 3], "history": []})
