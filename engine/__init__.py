"""Games for Deep CFR: Lost Cities (the product), Kuhn and Leduc poker (validation).

    game = engine.load_game("lost_cities", colours=5)
    state = game.new_initial_state(seed=7)

The games themselves are C structs with `noexcept nogil` functions behind one
interface (engine/_game.pxd); the classes here are their Python face.
"""
from engine._game import ConsistencyError, Game, State
from engine._kuhn import KuhnPokerGame
from engine._lost_cities import LostCitiesGame
from engine._leduc import LeducPokerGame

_GAMES = {
    "kuhn_poker": KuhnPokerGame,
    "lost_cities": LostCitiesGame,
    "leduc_poker": LeducPokerGame,
}


def load_game(name, **params):
    """A configured game by OpenSpiel-style short name. Unknown names and bad
    parameter values raise ValueError naming the problem."""
    try:
        cls = _GAMES[name]
    except KeyError:
        raise ValueError(f"unknown game {name!r}; known: {sorted(_GAMES)}") from None
    return cls(**params)


def game_names():
    return sorted(_GAMES)


__all__ = ["ConsistencyError", "Game", "State", "load_game", "game_names"]
