"""Single Deep CFR's average policy, computed exactly, for games whose info
states can all be listed (Kuhn and Leduc poker).

SD-CFR (Steinberger 2019) drops the strategy network: the average policy is
the mixture of the policies the advantage nets played, each iteration's
weighted by its linear-CFR weight t and by the player's own reach:

    avg(I)  ∝  sum_t  t * reach_p^t(I) * sigma_p^t(I)

sigma_p^t is regret matching on player p's advantage net as it stood when the
other player traversed in iteration t (the same policy the strategy memory
samples), and reach_p^t(I) the product of p's own action probabilities on the
way to I. The paper evaluates this mixture from a buffer of every iteration's
net; for a game with a few hundred info states we keep the running sums
instead, which gives the same policy with no buffer and no strategy-net
approximation error. Games too large to list (Lost Cities) use the strategy
net (`train.average: network`).
"""
import numpy as np
import torch

from agents.exact import _tree
from agents.probs import regret_matching


class TabularAverage:
    """Running reach-weighted sums of every iteration's regret-matching policy
    over all info states of a small game.

    `fallback` is the traverser's: with no positive advantage, "argmax" plays
    the highest advantage (lowest action id on ties), "uniform" plays uniformly."""

    def __init__(self, game, fallback="argmax"):
        if fallback not in ("argmax", "uniform"):
            raise ValueError(f"fallback must be argmax or uniform, got {fallback!r}")
        tree = _tree(game)
        self.fallback = fallback
        self.infos = np.stack(tree.info_tensors).astype(np.float32)
        self.masks = np.stack(tree.info_masks).astype(bool)
        self.player = np.asarray(tree.info_player, dtype=np.int64)
        self.index = dict(tree.info_index)
        n, A = self.masks.shape
        # Own-reach parents: the last info state of the same player on the way
        # to I and the action taken there (-1 at the player's first decision).
        # Perfect recall makes them the same for every node of I.
        parent = np.full(n, -2, dtype=np.int64)
        parent_action = np.full(n, -1, dtype=np.int64)
        depth = np.zeros(n, dtype=np.int64)
        for root in tree.roots:
            stack = [(root, (-1, -1), (-1, -1))]
            while stack:
                h, last0, last1 = stack.pop()
                p = tree.player[h]
                if p < 0:
                    continue
                i = tree.info[h]
                j, a = last0 if p == 0 else last1
                if parent[i] == -2:
                    parent[i], parent_action[i] = j, a
                    depth[i] = 0 if j < 0 else depth[j] + 1
                elif parent[i] != j or parent_action[i] != a:
                    raise ValueError(f"{game.name}: info state {i} is reached by two own histories "
                                     "(no perfect recall)")
                for b, c in tree.children[h]:
                    stack.append((c, (i, b) if p == 0 else last0, (i, b) if p == 1 else last1))
        self.parent, self.parent_action = parent, parent_action
        self.order = np.argsort(depth, kind="stable")  # parents before children
        self.num = np.zeros((n, A), dtype=np.float64)
        self.den = np.zeros(n, dtype=np.float64)
        self.iterations_added = np.zeros(2, dtype=np.int64)

    # ---- accumulation
    def regret_matching(self, advantages, masks):
        """Regret matching on [n, A] advantages over the legal actions (masks
        [n, A]), as the traverser does it (float64 [n, A])."""
        return regret_matching(advantages, masks, self.fallback)

    def own_reach(self, sigma):
        """Each info state's reach under its own player's policy `sigma`."""
        reach = np.ones(len(sigma), dtype=np.float64)
        for i in self.order:
            j = self.parent[i]
            if j >= 0:
                reach[i] = reach[j] * sigma[j, self.parent_action[i]]
        return reach

    def add(self, player, net, weight):
        """Add player's policy from advantage net `net` with weight `weight`
        (the iteration, for linear CFR)."""
        rows = self.player == player
        with torch.inference_mode():
            device = next(net.parameters()).device
            adv = net(torch.from_numpy(self.infos[rows]).to(device)).to("cpu", torch.float64).numpy()
        sigma = np.zeros_like(self.num)
        sigma[rows] = self.regret_matching(adv, self.masks[rows])
        reach = self.own_reach(sigma)
        w = np.where(rows, float(weight) * reach, 0.0)
        self.num += w[:, None] * sigma
        self.den += w
        self.iterations_added[player] += 1

    # ---- the average policy
    def policy(self):
        """The average policy over all info states (float64 [n, A]); uniform
        over the legal actions where nothing was added yet."""
        legal = self.masks.astype(np.float64)
        uniform = legal / legal.sum(axis=1, keepdims=True)
        avg = np.divide(self.num, self.den[:, None], out=uniform.copy(), where=self.den[:, None] > 0)
        return avg

    def rows(self, info):
        """Info-state ids of tensor rows [n, T], looked up by their exact
        bytes; a row that is no info state of the game is an error."""
        out = np.empty(len(info), dtype=np.int64)
        for k, t in enumerate(np.asarray(info, dtype=np.float32)):
            i = self.index.get(t.tobytes())
            if i is None:
                raise ValueError(f"info state row {k} is not an info state of this game")
            out[k] = i
        return out

    def probs(self, info, mask):
        """The average policy at the given info-state rows (float64 [n, A])."""
        rows = self.rows(info)
        bad = np.flatnonzero((self.masks[rows] != np.asarray(mask).astype(bool)).any(axis=1))
        if len(bad):
            raise ValueError(f"info state row {bad[0]}: legal mask differs from the game's")
        return self.policy()[rows]

    # ---- checkpoint
    def state_dict(self):
        return {"num": torch.from_numpy(self.num.copy()), "den": torch.from_numpy(self.den.copy()),
                "iterations_added": torch.from_numpy(self.iterations_added.copy()),
                "fallback": self.fallback}

    def load_state_dict(self, state):
        num, den = state["num"].numpy(), state["den"].numpy()
        if num.shape != self.num.shape or den.shape != self.den.shape:
            raise ValueError(f"SD-CFR state has shape {tuple(num.shape)}, this game needs {self.num.shape}")
        self.num, self.den = num.astype(np.float64).copy(), den.astype(np.float64).copy()
        self.iterations_added = state["iterations_added"].numpy().astype(np.int64).copy()
        self.fallback = state.get("fallback", self.fallback)
