"""Bots that play any engine game through the Python API.

    RandomBot(seed)        uniform over legal actions
    HeuristicBot(game)     Lost Cities rule-based bot (rules in _lost_cities.pyx)
    CautiousBot(game)      a second Lost Cities rule-based bot, written apart from
                           the first and never used in training: a check that an
                           agent's strength is not tuned to HeuristicBot's quirks

`play_game(game, bots, seed)` plays one seeded game and returns the final state.
"""
import random

from engine._lost_cities import COLOUR_LETTERS, LostCitiesGame


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


class CautiousBot:
    """A second Lost Cities rule-based bot, in Python, with its own rules. It
    sees only what its seat may: its hand, both sides' expeditions, the
    discard piles and the deck's size.
      - play: continue an expedition with a card at most `gap` above its
        top (any gap once the deck is short); else open the colour with the
        most points in hand if they reach `open_points` and the deck is long
        enough (a wager first only with `wager_points`); else discard the
        card that helps the opponent least and itself least;
      - draw: a pile's top card that continues one of its expeditions within
        `gap` + 1, else the deck.
    Deterministic; slower than HeuristicBot (a to_dict per decision)."""

    def __init__(self, game, gap=2, open_points=22, wager_points=30, late_deck=8):
        if not isinstance(game, LostCitiesGame):
            raise ValueError(f"CautiousBot plays lost_cities, not {game.name}")
        self.game = game
        self.gap, self.open_points, self.wager_points, self.late_deck = gap, open_points, wager_points, late_deck

    @staticmethod
    def _card(text):
        return COLOUR_LETTERS.index(text[0]), (0 if text[1:] == "w" else int(text[1:]))

    @staticmethod
    def _top(expedition):
        """-1: not opened; 0: wagers only; else the highest number."""
        return max(expedition) if expedition else -1

    def _fits(self, value, top):
        return top == -1 or (value == 0 and top == 0) or (value > 0 and value > top)

    def step(self, state):
        legal = set(state.legal_actions())
        d = state.to_dict()
        me = d["player"]
        mine = [[self._card(c)[1] for c in e] for e in d["expeditions"][me]]
        theirs = [[self._card(c)[1] for c in e] for e in d["expeditions"][1 - me]]
        deck = len(d["deck"])
        enc = self.game.encode_action
        if d["phase"] == "draw":
            for c, pile in enumerate(d["piles"]):
                if not pile or c == d["blocked_pile"]:
                    continue
                v = self._card(pile[-1])[1]
                top = self._top(mine[c])
                if top >= 0 and v > top and v - max(top, 1) <= self.gap + 1 and enc("draw", c) in legal:
                    return enc("draw", c)
            return enc("draw", None) if enc("draw", None) in legal else min(legal)
        hand = [self._card(t) for t in d["hands"][me]]
        # continue an expedition
        best = None
        for c, v in hand:
            top = self._top(mine[c])
            if top < 0 or v == 0 or not self._fits(v, top):
                continue
            gap = v - max(top, self.game.params["lowest_value"] - 1)
            if best is None or gap < best[0]:
                best = (gap, c, v)
        if best is not None and (best[0] <= self.gap or deck <= self.late_deck):
            a = enc("play", best[1], best[2])
            if a in legal:
                return a
        # open a colour
        if deck > self.late_deck + 4:
            support = {}
            for c, v in hand:
                if self._top(mine[c]) < 0:
                    support[c] = support.get(c, 0) + v
            if support:
                c = max(support, key=lambda k: (support[k], -k))
                if support[c] >= self.open_points:
                    values = sorted(v for cc, v in hand if cc == c)
                    v = values[0] if values[0] > 0 or support[c] >= self.wager_points else \
                        next(x for x in values if x > 0)
                    a = enc("play", c, v)
                    if a in legal:
                        return a
        # discard: least help to the opponent, least use to me
        def cost(card):
            c, v = card
            top_t, top_m = self._top(theirs[c]), self._top(mine[c])
            helps_them = top_t >= 0 and self._fits(v, top_t)
            useful_to_me = self._fits(v, top_m) and (top_m >= 0 or deck > self.late_deck)
            return (helps_them, useful_to_me, v if useful_to_me else -v)
        for c, v in sorted(hand, key=cost):
            a = enc("discard", c, v)
            if a in legal:
                return a
        return min(legal)


def play_game(game, bots, seed):
    """Play one game from the deal of `seed`; bots[p] moves for player p."""
    if len(bots) != 2:
        raise ValueError("play_game needs one bot per player")
    state = game.new_initial_state(seed=seed)
    while not state.is_terminal():
        state.apply_action(bots[state.current_player()].step(state))
    return state
