"""The plain recursive traversal, written the way the predecessor did it:
Python recursion over the engine's Python API and one PyTorch forward per node
at batch size 1. It implements the same algorithms, the same seeding and the
same order of random draws as the state machines (_traverse.pyx), so both must
produce the same samples. It is the oracle in tests and the "before" baseline
in benchmarks; never use it for training.
"""
import numpy as np
import torch

from engine._rng import Rng
from traverser._traverse import SampleArrays


def regret_match(adv, legal, uniform_fallback, counter):
    sigma, total = [], 0.0
    for a in legal:
        x = float(adv[a])
        if x > 0.0:
            sigma.append(x)
            total += x
        else:
            sigma.append(0.0)
    if total > 0.0:
        return [s / total for s in sigma]
    counter["fallbacks"] += 1
    n = len(legal)
    if uniform_fallback:
        return [1.0 / n] * n
    best = 0
    for i in range(1, n):
        if adv[legal[i]] > adv[legal[best]]:
            best = i
    return [1.0 if i == best else 0.0 for i in range(n)]


def sample(p, u):
    acc, last = 0.0, 0
    for i, pi in enumerate(p):
        if pi > 0.0:
            acc += pi
            last = i
            if u < acc:
                return i
    return last


def sample_explore(sigma, eps, u):
    n = len(sigma)
    acc, qi = 0.0, 0.0
    for i in range(n):
        qi = eps / n + (1.0 - eps) * sigma[i]
        acc += qi
        if u < acc:
            return i, qi
    return n - 1, qi


class ReferenceTraverser:
    """Recursive Deep CFR traversals (external or outcome sampling, cutoffs)."""

    def __init__(self, game, config, models=None):
        self.game = game
        self.cfg = config
        self.models = models or {}
        self.max_depth = config.max_depth if config.max_depth > 0 else game.max_game_length()
        self.max_nodes = config.max_nodes if config.max_nodes > 0 else 1 << 62
        self.counter = {"nodes": 0, "queries": 0, "fallbacks": 0, "terminals": 0, "cutoffs": 0,
                        "value_cutoffs": 0, "rollout_moves": 0}

    def run(self, traversal_ids, traversers, iteration=1, run_seed=0, weight=None):
        """Returns (advantage samples, strategy samples) as column arrays."""
        self.weight = float(iteration if weight is None else weight)
        self.adv, self.strat = [], []
        trav = np.broadcast_to(np.asarray(traversers), np.shape(traversal_ids))
        for tid, p in zip(traversal_ids, trav):
            self.rng = Rng(run_seed, iteration, int(tid))
            self.tid, self.p = int(tid), int(p)
            self.seq = self.nodes = self.opp_nodes = 0
            state = self.game.new_initial_state_from_rng(self.rng)
            self.prefix = self.rng.below(self.cfg.prefix_max + 1) if self.cfg.prefix_max > 0 else 0
            self._traverse(state, 0, 1.0)
        return self._arrays(self.adv), self._arrays(self.strat)

    def _arrays(self, rows):
        T, A = self.game.information_state_tensor_size(), self.game.num_distinct_actions()
        out = SampleArrays(info=np.zeros((len(rows), T), np.float32), target=np.zeros((len(rows), A), np.float32),
                           mask=np.zeros((len(rows), A), np.uint8), weight=np.zeros(len(rows), np.float32),
                           player=np.zeros(len(rows), np.int8), traversal=np.zeros(len(rows), np.int64),
                           seq=np.zeros(len(rows), np.int32))
        for i, (info, legal, target, player, tid, seq) in enumerate(rows):
            out["info"][i] = info
            out["target"][i, legal] = target
            out["mask"][i, legal] = 1
            out["weight"][i] = self.weight
            out["player"][i] = player
            out["traversal"][i] = tid
            out["seq"][i] = seq
        return out

    def _write(self, rows, state, player, legal, target):
        rows.append((state.information_state_tensor(player), list(legal), list(target), player, self.tid, self.seq))
        self.seq += 1

    def _policy(self, state, player, legal):
        n = len(legal)
        if self.cfg.uniform_policy:
            return [1.0 / n] * n
        x = torch.from_numpy(state.information_state_tensor(player)).unsqueeze(0)
        with torch.inference_mode():
            adv = self.models[self.cfg.model_ids[player]](x)[0].numpy()
        self.counter["queries"] += 1
        return regret_match(adv, legal, self.cfg.fallback == "uniform", self.counter)

    def _cutoff(self, state):
        w = self.cfg.value_cutoff
        if w <= 0.0:
            return self._playout_value(state)
        playout = self._playout_value(state) if w < 1.0 else 0.0
        # the learned value: the last column of the traverser's model's answer to its own view
        x = torch.from_numpy(state.information_state_tensor(self.p)).unsqueeze(0)
        with torch.inference_mode():
            out = self.models[self.cfg.model_ids[self.p]](x)[0].numpy()
        self.counter["queries"] += 1
        self.counter["value_cutoffs"] += 1
        value = float(out[self.game.num_distinct_actions()])
        return value if w >= 1.0 else w * value + (1.0 - w) * playout

    def _playout_value(self, state):
        scale = self.cfg.value_scale
        if self.cfg.rollouts <= 0:
            return state.returns()[self.p] * scale
        total = 0.0
        own = self.cfg.rollout_policy == "game" and hasattr(self.game, "heuristic_action")
        for _ in range(self.cfg.rollouts):
            s = state.resample_from_rng(self.p, self.rng) if self.cfg.rollout_resample else state.clone()
            while not s.is_terminal():
                if own:
                    s.apply_action(self.game.heuristic_action(s))
                else:
                    legal = s.legal_actions()
                    s.apply_action(legal[self.rng.below(len(legal))])
                self.counter["rollout_moves"] += 1
            total += s.returns()[self.p]
        return total / self.cfg.rollouts * scale

    def _traverse(self, state, depth, reach):
        if depth >= self.prefix:
            self.nodes += 1          # max_nodes counts the traversal proper, not its root prefix
        self.counter["nodes"] += 1
        if state.is_terminal():
            self.counter["terminals"] += 1
            return state.returns()[self.p] * self.cfg.value_scale
        if depth - self.prefix >= self.max_depth or self.nodes > self.max_nodes:
            self.counter["cutoffs"] += 1
            return self._cutoff(state)
        player = state.current_player()
        legal = state.legal_actions()
        if len(legal) == 1:
            state.apply_action(legal[0])
            v = self._traverse(state, depth + 1, reach)
            state.undo_action()
            return v
        sigma = self._policy(state, player, legal)
        if depth < self.prefix:          # root prefix: on-policy, no samples
            chosen = sample(sigma, self.rng.double())
            state.apply_action(legal[chosen])
            v = self._traverse(state, depth + 1, reach)
            state.undo_action()
            return v
        if player == self.p:
            if self.cfg.algorithm == "external":
                values = []
                for a in legal:
                    state.apply_action(a)
                    values.append(self._traverse(state, depth + 1, reach))
                    state.undo_action()
                v = 0.0
                for s, val in zip(sigma, values):
                    v += s * val
                self._write(self.adv, state, player, legal, [val - v for val in values])
                return v
            eps = self.cfg.epsilon
            chosen, q = sample_explore(sigma, eps, self.rng.double())
            state.apply_action(legal[chosen])
            ret = self._traverse(state, depth + 1, reach * q)
            state.undo_action()
            q = eps / len(legal) + (1.0 - eps) * sigma[chosen]
            cv = ret / q
            v = sigma[chosen] * cv
            clip = self.cfg.value_clip
            targets = []
            for i in range(len(legal)):
                r = ((cv if i == chosen else 0.0) - v) / reach
                if clip > 0.0:
                    r = min(max(r, -clip), clip)
                targets.append(r)
            self._write(self.adv, state, player, legal, targets)
            return v
        self.opp_nodes += 1
        if self.cfg.strategy_interval > 0 and self.opp_nodes % self.cfg.strategy_interval == 0:
            self._write(self.strat, state, player, legal, sigma)
        chosen = sample(sigma, self.rng.double())
        state.apply_action(legal[chosen])
        v = self._traverse(state, depth + 1, reach)
        state.undo_action()
        return v
