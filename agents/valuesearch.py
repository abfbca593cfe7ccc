"""A one-turn lookahead valued by a run's value net, for Lost Cities: what
the value net is worth as a search's leaf value.

    player = ValueLookahead(game, value_net, worlds=16)
    action = player.step(state)
    net = value_net_of(load_checkpoint(RUN))      # a run trained with train.value_steps > 0

At each decision of player p the lookahead
  1. redeals `worlds` worlds of what p cannot see (StateBatch.resample);
  2. plays every legal move in every world, and in the play phase every
     draw after it, so that each leaf is the end of p's turn (or of the
     game);
  3. values each leaf by the value net on p's view of it (its output is in
     traversal value units, points * value_scale), or by the final score
     difference where the game has ended;
  4. takes, for each move, the mean over the worlds (the best draw's after a
     play), and plays the move with the highest.
The copies, redeals, moves and encodings are nogil C loops over a
StateBatch; Python runs a few times a decision, and the net's forward is
one batch of every leaf.

studies.lc_value plays it against HeuristicBot: a value net that has
learned only the outcomes of the teacher's games picks moves by what
followed them in those games (a wager played early goes with a strong hand
there), which a lookahead turns into bad play; the lookahead teacher's own
values of the moves it weighed (train.value_labels) label the
moves it did not play too (docs/studies/2026-12-02-learned-value.md).
"""
import hashlib

import numpy as np
import torch

from engine._batch import StateBatch


def value_net_of(ckpt):
    """The value net of a checkpoint (agents.checkpoint.load_checkpoint's
    dict, or prior.pt's), rebuilt from its spec; ValueError if the run has
    none (it was trained without train.value_steps)."""
    from batcher.networks import build_mlp
    if "value_net" not in ckpt:
        raise ValueError(f"{ckpt.get('path', 'the checkpoint')} holds no value net: the run was trained with "
                         "train.value_steps 0")
    net = build_mlp(ckpt["value_spec"])
    net.load_state_dict(ckpt["value_net"])
    return net.eval()


class ValueLookahead:
    """One turn of lookahead over `worlds` redealt worlds, every leaf valued
    by `value_net` (info-state -> 1 value in points * value_scale); see the
    module docstring. A decision's worlds come from a stream seeded by
    `seed` and what the player sees, so its move does not depend on the
    games played before it."""

    def __init__(self, game, value_net, worlds=16, seed=0, value_scale=0.01):
        if game.name != "lost_cities":
            raise ValueError(f"the value lookahead plays lost_cities, not {game.name}")
        if worlds < 1:
            raise ValueError(f"worlds must be at least 1, got {worlds}")
        if value_scale <= 0:
            raise ValueError(f"value_scale must be > 0, got {value_scale}")
        self.game = game
        self.net = value_net.eval()
        self.worlds = int(worlds)
        self.seed = int(seed)
        self.value_scale = float(value_scale)
        # the most leaves of a decision: every play (at most the hand's cards, twice) times every draw
        C = int(game.params["colours"])
        cap = self.worlds * (1 + game.max_legal_actions() * (2 + C))
        self.batch = StateBatch(game, cap)
        self.info = np.zeros((cap, game.information_state_tensor_size()), np.float32)
        self.mask = np.zeros((cap, game.num_distinct_actions()), np.uint8)

    @property
    def name(self):
        return f"value-lookahead(worlds={self.worlds})"

    def _decision_seed(self, state, p):
        seen = np.asarray(state.information_state_tensor_u8(p)).tobytes()
        digest = hashlib.blake2b(seen, digest_size=8, key=self.seed.to_bytes(8, "little", signed=True)).digest()
        return int.from_bytes(digest, "little")

    def values(self, state):
        """{legal move: its value in points}, the mean over the worlds of the
        value at the end of the player's turn (the best draw's after a play)."""
        b, K = self.batch, self.worlds
        p = state.current_player()
        legal = state.legal_actions()
        b.fill(state, 0, K)
        b.resample(p, self._decision_seed(state, p), 0, K)
        base = np.arange(K)
        top = K
        leaves = []                                   # (move, first row of its K worlds)
        for a in legal:
            rows = np.arange(top, top + K)
            top += K
            b.copy_rows(base, rows)
            b.apply(rows, np.full(K, a, np.int32))
            if b.current_players(int(rows[0]), int(rows[0]) + 1)[0] != p:
                leaves.append((a, int(rows[0])))      # the turn (or the game) is over
                continue
            # p draws next: every draw, the same ones in every world (the piles are seen by both)
            b.encode(rows[:1], p, self.info, self.mask)
            for d in np.flatnonzero(self.mask[0]):
                after = np.arange(top, top + K)
                top += K
                b.copy_rows(rows, after)
                b.apply(after, np.full(K, d, np.int32))
                leaves.append((a, int(after[0])))
        rows = np.concatenate([np.arange(r, r + K) for _, r in leaves])
        b.encode(rows, p, self.info, self.mask)
        with torch.inference_mode():
            v = self.net(torch.from_numpy(self.info[:len(rows)]))[:, 0].double().numpy() / self.value_scale
        players = b.current_players(0, top)[rows]
        over = players < 0
        if over.any():
            v[over] = b.returns(p, 0, top)[rows][over]
        means = v.reshape(len(leaves), K).mean(axis=1)
        out = {}
        for (a, _), m in zip(leaves, means):
            out[a] = max(out.get(a, -np.inf), float(m))
        return out

    def step(self, state):
        legal = state.legal_actions()
        if len(legal) == 1:
            return legal[0]
        values = self.values(state)
        return max(legal, key=lambda a: (values[a], -a))

    def action_probs(self, state):
        """All the weight on the move step() plays."""
        a = self.step(state)
        return {x: float(x == a) for x in state.legal_actions()}
