"""Bots that play any engine game through the Python API.

    RandomBot(seed)        uniform over legal actions
    HeuristicBot(game)     Lost Cities rule-based bot (rules in _lost_cities.pyx)

`play_game(game, bots, seed)` plays one seeded game and returns the final state.
"""
import random

from engine._lost_cities import LostCitiesGame


class RandomBot:
    """Uniformly random legal actions from its own seeded generator."""

    def __init__(self, seed=None):
        self.rng = random.Random(seed)

    def step(self, state):
        return self.rng.choice(state.legal_actions())


class HeuristicBot:
    """Lost Cities rule-based bot. It opens an expedition only with enough
    points of that colour in hand, continues with low cards and small gaps,
    plays wagers only with strong support, opens nothing late, discards what
    helps the opponent least, and draws from a pile only when the card fits.
    The rules run in C (`lc_heuristic_action`); the bot is deterministic."""

    def __init__(self, game):
        if not isinstance(game, LostCitiesGame):
            raise ValueError(f"HeuristicBot plays lost_cities, not {game.name}")
        self.game = game

    def step(self, state):
        return self.game.heuristic_action(state)


def play_game(game, bots, seed):
    """Play one game from the deal of `seed`; bots[p] moves for player p."""
    if len(bots) != 2:
        raise ValueError("play_game needs one bot per player")
    state = game.new_initial_state(seed=seed)
    while not state.is_terminal():
        state.apply_action(bots[state.current_player()].step(state))
    return state
