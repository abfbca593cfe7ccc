"""The policies a checkpoint can play, and the bot interface they share.

    policy = agents.load_policy("runs/RUN", kind="average")    # or a checkpoint file
    action = policy.step(state)                                  # like engine.bots

Read-outs (`kind`):
    average          the strategy net: softmax of its logits over the legal actions
    current          the advantage nets' regret matching (each seat uses its own net),
                     with the run's fallback when no advantage is positive
    sdcfr            the exact SD-CFR average a train.average=sdcfr checkpoint holds
    symmetric        Lost Cities: the strategy net averaged over every renaming of the
                     colours (rename the position, take the net's probabilities, rename
                     them back): a colour-blind policy, C! forwards' rows a decision
    ...-greedy       any of them, playing its most probable action

An average read-out of a run with a self-play stage also answers
`values(info)`: the kept critic's expected final margin, in points.

Every policy answers `probs(info, masks, players)` for a batch (one forward
per net) and `step(state)` for one state, so engine.match, agents.evaluate
and the exploiter play them all the same way. Any object with `.step(state)`
can stand in as an opponent.
"""
import copy

import numpy as np
import torch

from agents.probs import _check_batch, _forward, policy_probs, regret_matching, sample_actions  # noqa: F401 (re-exported)
from batcher.networks import for_inference

KINDS = ("average", "current", "sdcfr", "symmetric")


class Policy:
    """A playable read-out of trained nets. Subclasses give `_probs`."""

    kind = "policy"

    def __init__(self, greedy=False, seed=0):
        self.greedy = bool(greedy)
        self.rng = np.random.default_rng(seed)

    @property
    def name(self):
        return self.kind + ("-greedy" if self.greedy else "")

    def probs(self, info, masks, players):
        """float64 [n, A] action probabilities of rows info [n, T] (each the
        info state of players[n], the player to act) over masks [n, A]."""
        info, masks = _check_batch(info, masks)
        players = np.broadcast_to(np.asarray(players, dtype=np.int64), (len(info),))
        if len(info) == 0:
            return np.zeros(masks.shape, dtype=np.float64)
        return self._probs(info, masks, players)

    def actions(self, info, masks, players):
        """One action per row, sampled (or greedy) with the policy's own RNG."""
        return sample_actions(self.probs(info, masks, players), self.rng, self.greedy)

    def action_probs(self, state):
        """{action: probability} at `state` for the player to act."""
        p = state.current_player()
        probs = self.probs(state.information_state_tensor(p)[None], state.legal_actions_mask()[None], [p])[0]
        return {a: float(probs[a]) for a in state.legal_actions()}

    def in_bf16(self):
        """A copy of this policy whose nets are cast to bfloat16 once
        (batcher.networks.for_inference), for forwards only: about twice
        the rows a second of float32 on a CPU that multiplies bfloat16 in
        hardware, answers rounded as the batcher's bf16 forwards are. The
        copy's generator starts where this one's is; a tabular policy stays
        as it is."""
        other = copy.copy(self)
        other.rng = copy.deepcopy(self.rng)
        for name in ("net", "critic", "adv_nets"):
            value = getattr(self, name, None)
            if isinstance(value, list):
                setattr(other, name, [_bf16(v) for v in value])
            elif value is not None:
                setattr(other, name, _bf16(value))
        return other

    def step(self, state):
        p = state.current_player()
        return int(self.actions(state.information_state_tensor(p)[None], state.legal_actions_mask()[None], [p])[0])


class AveragePolicy(Policy):
    """The average strategy: a strategy net (softmax over legal actions), or
    a tabular SD-CFR average (kind "sdcfr"). `critic`: the self-play critic
    the checkpoint kept, or None; value_scale: its outputs per point."""

    def __init__(self, net, greedy=False, seed=0, kind="average", critic=None, value_scale=0.01):
        super().__init__(greedy, seed)
        self.net = net
        self.kind = kind
        self.critic = critic
        self.value_scale = float(value_scale)

    def _probs(self, info, masks, players):
        return policy_probs(self.net, info, masks)

    def values(self, info):
        """float64 [n]: the critic's expected final score difference, in
        points, for the player whose info state each row of info [n, T] is.
        ValueError where the checkpoint kept no critic."""
        if self.critic is None:
            raise ValueError("this policy has no critic: its run had no self-play stage, or its checkpoint "
                             "was written before checkpoints kept the critic")
        info = np.asarray(info, dtype=np.float32)
        if info.ndim != 2:
            raise ValueError(f"values needs info states [n, T], got shape {info.shape}")
        return _forward(self.critic, info)[:, 0].astype(np.float64) / self.value_scale


class SymmetricPolicy(AveragePolicy):
    """The average strategy made colour-blind: its probabilities at a
    decision are the mean, over every renaming of Lost Cities' colours
    (agents.symmetry), of the strategy net's probabilities at the renamed
    decision, renamed back. Playing it is playing the net on a renaming of
    the position drawn at random each move. The critic is the net's own."""

    kind = "symmetric"
    ROWS = 1 << 16          # rows of one forward: n decisions x C! renamings, split

    def __init__(self, net, game, greedy=False, seed=0, critic=None, value_scale=0.01):
        import itertools
        from agents.symmetry import action_map, colour_maps
        super().__init__(net, greedy, seed, kind="symmetric", critic=critic, value_scale=value_scale)
        C = int(game.params.get("colours", 0)) if game.name == "lost_cities" else 0
        if not C:
            raise ValueError(f"the symmetric read-out renames Lost Cities' colours; {game.name} has none")
        maps = [colour_maps(game, perm) for perm in itertools.permutations(range(C))]
        self.info_src = np.stack([m[0] for m in maps])                   # [P, T]
        self.action_src = np.stack([m[1] for m in maps])                 # [P, A]
        self.back = np.stack([action_map(m[1]) for m in maps])           # [P, A]: action -> renamed action

    def _probs(self, info, masks, players):
        n, P = len(info), len(self.info_src)
        out = np.zeros(masks.shape, dtype=np.float64)
        step = max(1, self.ROWS // P)
        for i in range(0, n, step):
            x = info[i:i + step][:, self.info_src].reshape(-1, info.shape[1])       # [m * P, T]
            m = masks[i:i + step][:, self.action_src].reshape(-1, masks.shape[1])
            p = policy_probs(self.net, x, m).reshape(-1, P, masks.shape[1])
            back = np.take_along_axis(p, np.broadcast_to(self.back, p.shape), axis=2)
            out[i:i + step] = back.mean(axis=1)
        return out


class CurrentPolicy(Policy):
    """The current policy: regret matching on the advantage net of the seat
    to act (adv_nets[0] for player 0, adv_nets[1] for player 1)."""

    kind = "current"

    def __init__(self, adv_nets, fallback="argmax", greedy=False, seed=0):
        super().__init__(greedy, seed)
        if len(adv_nets) != 2:
            raise ValueError("the current policy needs one advantage net per player")
        self.adv_nets = list(adv_nets)
        self.fallback = fallback
        regret_matching(np.zeros((1, 1)), np.ones((1, 1)), fallback)   # validates fallback

    def _probs(self, info, masks, players):
        out = np.zeros(masks.shape, dtype=np.float64)
        for p in (0, 1):
            rows = np.flatnonzero(players == p)
            if len(rows):
                out[rows] = regret_matching(_forward(self.adv_nets[p], info[rows]), masks[rows], self.fallback)
        return out


def _bf16(net):
    if not isinstance(net, torch.nn.Module):
        return net
    return for_inference(copy.deepcopy(net), torch.bfloat16)


def parse_kind(kind):
    """'current-greedy' -> ('current', True). Unknown kinds raise ValueError."""
    base, greedy = (kind[:-len("-greedy")], True) if kind.endswith("-greedy") else (kind, False)
    if base not in KINDS:
        choices = ", ".join(k + s for k in KINDS for s in ("", "-greedy"))
        raise ValueError(f"unknown policy {kind!r}; choose one of {choices}")
    return base, greedy


def policy_from_checkpoint(ckpt, kind="average", seed=0):
    """A Policy of a loaded checkpoint (agents.checkpoint.load_checkpoint)."""
    from agents.checkpoint import build_net, game_of
    base, greedy = parse_kind(kind)
    if base == "sdcfr":
        if "sdcfr" not in ckpt:
            raise ValueError(f"{ckpt.get('path')}: policy sdcfr, but the run was trained with "
                             "train.average=network (no SD-CFR sums in the checkpoint)")
        from agents.sdcfr import TabularAverage
        tab = TabularAverage(game_of(ckpt), fallback=_fallback(ckpt))
        tab.load_state_dict(ckpt["sdcfr"])
        return AveragePolicy(tab, greedy, seed, kind="sdcfr")
    if base in ("average", "symmetric"):
        from agents.checkpoint import build_critic
        net, kept = build_net(ckpt, "strategy"), dict(critic=build_critic(ckpt),
                                                     value_scale=ckpt.get("critic_value_scale", 0.01))
        if base == "symmetric":
            return SymmetricPolicy(net, game_of(ckpt), greedy, seed, **kept)
        return AveragePolicy(net, greedy, seed, **kept)
    return CurrentPolicy([build_net(ckpt, "adv0"), build_net(ckpt, "adv1")], _fallback(ckpt), greedy, seed)


def _fallback(ckpt):
    return ckpt.get("config", {}).get("traversal", {}).get("fallback", "argmax")


def load_policy(run_or_checkpoint, kind="average", seed=0):
    """A bot with `.step(state)` that plays a trained read-out: `kind` is one
    of average, current, sdcfr, each optionally with -greedy (see the module
    docstring). `run_or_checkpoint` is a run directory (its latest
    checkpoint) or a checkpoint file. The bot's game is `policy.game`."""
    from agents.checkpoint import game_of, load_checkpoint
    ckpt = load_checkpoint(run_or_checkpoint)
    policy = policy_from_checkpoint(ckpt, kind, seed)
    policy.game = game_of(ckpt)
    policy.checkpoint = ckpt["path"]
    policy.iteration = ckpt.get("iteration")
    return policy
