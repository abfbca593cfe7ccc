"""agents.valuesearch: the one-turn lookahead valued by a value net."""
import numpy as np
import pytest
import torch

import engine
from agents.valuesearch import ValueLookahead, value_net_of
from batcher.networks import MLP

GAME = dict(max_turns=200, features=1)
torch.set_num_threads(1)


def _constant_net(game, points, scale=0.01):
    """A value net whose every answer is `points` (in value units, points * scale)."""
    net = MLP(game.information_state_tensor_size(), 1, (4,), input_scale=game.input_scale())
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.net[-1].bias.fill_(points * scale)
    return net


def _play_until(game, seed, done):
    state = game.new_initial_state(seed=seed)
    while not done(state):
        state.apply_action(game.heuristic_action(state))
    return state


def test_with_one_card_left_each_play_is_worth_the_final_score_after_it_and_the_last_draw():
    game = engine.load_game("lost_cities", **GAME)
    deck = game.num_distinct_actions() - game.params["colours"] - 1
    for seed in (3, 8):
        state = _play_until(game, seed, lambda s: s.deck_size() == 1 and deck not in s.legal_actions())
        p = state.current_player()
        # every leaf that is not the end of the game is worth -1000 points, so a play is worth what drawing
        # the last card after it scores: the game's final score difference, worked out here move by move
        player = ValueLookahead(game, _constant_net(game, -1000.0), worlds=8, seed=1)
        values = player.values(state)
        assert set(values) == set(state.legal_actions())
        for a, v in values.items():
            s = state.clone()
            s.apply_action(a)
            s.apply_action(deck)
            assert s.is_terminal()
            assert v == pytest.approx(s.returns()[p], abs=1e-6), (seed, a)
        best = max(values.values())
        assert values[player.step(state)] == best


def test_mid_game_values_are_the_nets_in_points_and_the_worlds_are_the_decisions_own():
    game = engine.load_game("lost_cities", **GAME)
    state = _play_until(game, 5, lambda s: s.deck_size() <= 30)
    player = ValueLookahead(game, _constant_net(game, 7.5), worlds=4)
    values = player.values(state)
    assert set(values) == set(state.legal_actions())
    assert all(v == pytest.approx(7.5, abs=1e-5) for v in values.values())
    # a net that reads the view: the same decision gives the same values, whatever came before
    torch.manual_seed(0)
    net = MLP(game.information_state_tensor_size(), 1, (16,), input_scale=game.input_scale())
    a = ValueLookahead(game, net, worlds=6, seed=2)
    first = a.values(state)
    a.values(_play_until(game, 9, lambda s: s.deck_size() <= 20))
    assert a.values(state) == first
    assert ValueLookahead(game, net, worlds=6, seed=3).values(state) != first      # other worlds
    assert len(set(np.round(list(first.values()), 6))) > 1


def test_bad_settings_and_a_run_without_a_value_net_are_named():
    game = engine.load_game("lost_cities", **GAME)
    net = _constant_net(game, 0.0)
    with pytest.raises(ValueError, match="worlds"):
        ValueLookahead(game, net, worlds=0)
    with pytest.raises(ValueError, match="lost_cities"):
        ValueLookahead(engine.load_game("leduc_poker"), net)
    with pytest.raises(ValueError, match="no value net"):
        value_net_of({"path": "run/checkpoints/iter_000001.pt", "nets": {}})
    spec = net.spec()
    again = value_net_of({"value_net": net.state_dict(), "value_spec": spec})
    x = torch.rand(3, game.information_state_tensor_size())
    torch.testing.assert_close(again(x), net(x))
