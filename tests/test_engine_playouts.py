"""The shared random-playout harness that every game runs.

After every step of thousands of seeded random playouts it checks: undo
restores the state byte for byte, legal actions are sorted, unique and agree
with the mask, check_consistency() holds, the tensor has the right size, and
the snapshot round trip is exact.
"""
import random

import numpy as np
import pytest

import engine

CASES = [
    # (game, params, playouts)
    ("kuhn_poker", {}, 3000),
    ("leduc_poker", {}, 3000),
    ("lost_cities", {}, 300),
    ("lost_cities", {"colours": 6}, 100),
    ("lost_cities", {"colours": 2, "ranks": 4, "wagers": 1, "hand_size": 3, "max_turns": 30}, 3000),
    ("lost_cities", {"colours": 3, "ranks": 12, "wagers": 4, "hand_size": 12, "lowest_value": 1}, 200),
]


def _snapshot_class(state):
    return type(state)


@pytest.mark.parametrize("name,params,playouts", CASES, ids=lambda x: str(x))
def test_random_playouts(name, params, playouts):
    game = engine.load_game(name, **params)
    size = game.information_state_tensor_size()
    assert sum(n for _, n in game.information_state_segments()) == size
    rng = random.Random(1234)
    steps = 0
    for g in range(playouts):
        state = game.new_initial_state(seed=g)
        while True:
            state.check_consistency()
            legal = state.legal_actions()
            assert legal == sorted(set(legal))
            mask = state.legal_actions_mask()
            assert mask.shape == (game.num_distinct_actions(),)
            assert np.flatnonzero(mask).tolist() == legal
            for p in (0, 1):
                t = state.information_state_tensor(p)
                assert t.shape == (size,) and t.dtype == np.float32
            restored = _snapshot_class(state).from_dict(game, state.to_dict())
            assert restored.state_bytes() == state.state_bytes()
            if state.is_terminal():
                assert legal == [] and state.current_player() == -4
                r = state.returns()
                assert r[0] == -r[1]
                break
            assert state.current_player() in (0, 1)
            before = state.state_bytes()
            action = rng.choice(legal)
            state.apply_action(action)
            after = state.state_bytes()
            state.undo_action()
            assert state.state_bytes() == before, f"undo of {state.action_to_string(action)} changed the state"
            state.apply_action(action)
            assert state.state_bytes() == after
            steps += 1
    assert steps > playouts


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "lost_cities"])
def test_undo_whole_game_restores_deal(name):
    game = engine.load_game(name)
    rng = random.Random(5)
    for seed in range(50):
        state = game.new_initial_state(seed=seed)
        start = state.state_bytes()
        trail = []
        while not state.is_terminal():
            trail.append(state.state_bytes())
            state.apply_action(rng.choice(state.legal_actions()))
        while trail:
            state.undo_action()
            assert state.state_bytes() == trail.pop()
        assert state.state_bytes() == start
        with pytest.raises(ValueError, match="no action to undo"):
            state.undo_action()


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "lost_cities"])
def test_seeded_deals_are_reproducible_and_vary(name):
    game = engine.load_game(name)
    a = game.new_initial_state(seed=42).state_bytes()
    assert game.new_initial_state(seed=42).state_bytes() == a
    assert len({game.new_initial_state(seed=s).state_bytes() for s in range(40)}) > 1


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "lost_cities"])
def test_illegal_action_raises_and_leaves_state(name):
    game = engine.load_game(name)
    state = game.new_initial_state(seed=3)
    legal = set(state.legal_actions())
    before = state.state_bytes()
    for bad in [a for a in range(game.num_distinct_actions()) if a not in legal] + [-1, 10**6]:
        with pytest.raises(ValueError, match=f"illegal action {bad}"):
            state.apply_action(bad)
        assert state.state_bytes() == before
    for junk in ["x", None, 1.5j]:
        with pytest.raises(ValueError, match="action must be an integer"):
            state.apply_action(junk)
    assert state.history() == []


def test_clone_is_independent():
    game = engine.load_game("lost_cities")
    state = game.new_initial_state(seed=1)
    state.apply_action(state.legal_actions()[0])
    copy = state.clone()
    assert copy == state and copy.history() == state.history()
    copy.apply_action(copy.legal_actions()[0])
    assert copy != state
    copy.undo_action()
    copy.undo_action()
    assert copy.history() == []


def test_unknown_game_and_bad_params():
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        engine.load_game("chess")
    with pytest.raises(ValueError, match="kuhn_poker takes no parameters"):
        engine.load_game("kuhn_poker", players=3)
