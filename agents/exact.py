"""Exact exploitability of a policy on Kuhn and Leduc poker, from our own
best response over the whole game tree (every deal, every betting sequence).

Used by agents.evaluate (the judge of poker runs) and by agents.sdcfr (whose
exact average is kept over the same list of info states). It imports neither.
"""
import itertools

import numpy as np

from agents.probs import policy_probs

POKER_GAMES = ("kuhn_poker", "leduc_poker")
# Cards in the deck of each poker game (deals are ordered tuples of distinct cards).
_NUM_CARDS = {"kuhn_poker": 3, "leduc_poker": 6}


class _Tree:
    """The full game tree of a poker game, over every deal.

    Nodes are numbered in depth-first order. Per node: `player` (-1 for a
    terminal), `info` (index of the acting player's infoset, -1 at terminals),
    `children` (list of (action, node)), `ret` (returns at terminals). `roots`
    holds the root node of each deal; every deal has probability `chance_p`."""

    def __init__(self, game):
        name = game.name
        if name not in _NUM_CARDS:
            raise ValueError(f"exact exploitability covers {', '.join(POKER_GAMES)}, not {name}")
        deals = list(itertools.permutations(range(_NUM_CARDS[name]), game.deal_length()))
        self.chance_p = 1.0 / len(deals)
        self.player, self.info, self.children, self.ret = [], [], [], []
        self.roots = []
        self.info_index = {}          # tensor bytes (of the acting player) -> infoset id
        self.info_tensors, self.info_masks, self.info_player = [], [], []
        self.info_nodes = []          # infoset id -> [node, ...]
        for deal in deals:
            state = game.new_initial_state(deal=list(deal))
            self.roots.append(self._build(state))

    def _build(self, state):
        node = len(self.player)
        self.player.append(-1)
        self.info.append(-1)
        self.children.append([])
        self.ret.append(None)
        if state.is_terminal():
            self.ret[node] = state.returns()
            return node
        p = state.current_player()
        t = state.information_state_tensor(p)
        key = t.tobytes()
        i = self.info_index.get(key)
        if i is None:
            i = self.info_index[key] = len(self.info_tensors)
            self.info_tensors.append(t)
            self.info_masks.append(state.legal_actions_mask())
            self.info_player.append(p)
            self.info_nodes.append([])
        self.info_nodes[i].append(node)
        self.player[node] = p
        self.info[node] = i
        kids = []
        for a in state.legal_actions():
            state.apply_action(a)
            kids.append((a, self._build(state)))
            state.undo_action()
        self.children[node] = kids
        return node

    def best_response_value(self, br_player, policy):
        """Value for `br_player` of a best response to `policy` ([infosets, A])
        played by the other player."""
        n = len(self.player)
        # Opponent-and-chance reach of every node, top-down (children follow parents).
        reach = np.zeros(n)
        for root in self.roots:
            reach[root] = self.chance_p
            stack = [root]
            while stack:
                h = stack.pop()
                if self.player[h] < 0:
                    continue
                own = self.player[h] == br_player
                pol = policy[self.info[h]]
                for a, c in self.children[h]:
                    reach[c] = reach[h] if own else reach[h] * pol[a]
                    stack.append(c)

        value = [None] * n
        br_action = {}

        def val(h):
            v = value[h]
            if v is not None:
                return v
            p = self.player[h]
            if p < 0:
                v = self.ret[h][br_player]
            elif p == br_player:
                a = best(self.info[h])
                v = next(val(c) for b, c in self.children[h] if b == a)
            else:
                pol = policy[self.info[h]]
                v = sum(pol[a] * val(c) for a, c in self.children[h])
            value[h] = v
            return v

        def best(i):
            a = br_action.get(i)
            if a is not None:
                return a
            # Perfect recall: the subtrees below this infoset never return to it.
            totals = {}
            for h in self.info_nodes[i]:
                for b, c in self.children[h]:
                    totals[b] = totals.get(b, 0.0) + reach[h] * val(c)
            a = max(totals, key=lambda b: (totals[b], -b))  # ties: lowest action id
            br_action[i] = a
            return a

        # Recursion depth is bounded by the game length (a few dozen frames).
        return sum(self.chance_p * val(r) for r in self.roots)


_TREES = {}


def _tree(game):
    """The game tree of a poker game, built once per game name."""
    t = _TREES.get(game.name)
    if t is None:
        t = _TREES[game.name] = _Tree(game)
    return t


def exploitability(game, net):
    """Exact exploitability of the strategy net's policy on kuhn_poker or
    leduc_poker, from our own best response over the engine.

    Every deal (ordered tuple of distinct cards, equally likely) and the whole
    betting tree are enumerated; the net is queried once, in one batch, for
    all distinct info states. Returns {"nash_conv": BR_0 + BR_1,
    "exploitability": nash_conv / 2}, OpenSpiel's definitions."""
    tree = _tree(game)
    policy = policy_probs(net, np.stack(tree.info_tensors), np.stack(tree.info_masks))
    br = [tree.best_response_value(p, policy) for p in (0, 1)]
    nash_conv = float(br[0] + br[1])
    return {"nash_conv": nash_conv, "exploitability": nash_conv / 2,
            "br_value_0": float(br[0]), "br_value_1": float(br[1])}
