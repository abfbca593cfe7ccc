"""Colour symmetry of Lost Cities: data augmentation (ColourAugment) and
the renamings behind the symmetric read-out (agents.policy.SymmetricPolicy).

Every expedition colour follows the same rules, so renaming the colours
(a permutation of 0..C-1) maps a position to an equally good one: a policy
should play the renamed move in the renamed position. A training row
(info-state tensor, legal mask, target over actions) can therefore stand for
C! rows. `ColourAugment` draws one renaming per row of a batch and applies
it with one scatter per column, once per batch: in numpy for a batch of
numpy arrays, in torch on the tensors' own device for a batch of tensors (a
CUDA training step renames on the GPU instead of waiting on the CPU).

How a renaming acts (docs/engine.md for the layouts):
  - a per-kind segment ("K" in engine._lost_cities.SEGMENTS) is colour-major
    (kind = colour * (ranks + 1) + rank): colour c's block moves to colour
    perm[c]'s place;
  - a per-colour segment ("C"): entry c moves to perm[c];
  - the fixed-size segments (whose view, to move, phase, deck count, turn)
    stay;
  - actions: play and discard of kind k follow the kind, draw from the deck
    stays, draw from pile c becomes draw from pile perm[c].
"""
import numpy as np
import torch


def _block(per, offset, C, R):
    """(colour, base, stride) of one block of entries at `offset`: per kind
    ("K", C * R entries, colour-major), per colour ("C", C entries) or an
    int n of entries no colour owns (stride 0)."""
    if per == "K":
        return np.repeat(np.arange(C), R), offset + np.tile(np.arange(R), C), np.full(C * R, R)
    if per == "C":
        return np.arange(C), np.full(C, offset), np.ones(C, np.int64)
    return np.zeros(per, np.int64), np.arange(offset, offset + per), np.zeros(per, np.int64)


def _join(blocks):
    return tuple(np.concatenate(parts).astype(np.int64) for parts in zip(*blocks))


def _layout(game):
    """Where each info-state entry and each action goes under a renaming:
    entry j of a renamed row is at base[j] + stride[j] * perm[colour[j]]
    (stride 0 for the entries no colour owns). Returns (info (colour, base,
    stride), action (colour, base, stride)), each an int64 array."""
    if game.name != "lost_cities":
        raise ValueError(f"colour symmetry is a lost_cities property, not {game.name}'s")
    from engine._lost_cities import FEATURE_SEGMENTS, SEGMENTS
    layout = dict(SEGMENTS + FEATURE_SEGMENTS)
    C = int(game.params["colours"])
    R = int(game.params["ranks"]) + 1
    K = C * R
    blocks = []
    offset = 0
    for name, size in game.information_state_segments():
        per = layout.get(name)
        if per == "K" and size == K or per == "C" and size == C:
            blocks.append(_block(per, offset, C, R))
        elif per is not None and per.isdigit() and int(per) == size:
            blocks.append(_block(size, offset, C, R))
        else:
            raise ValueError(f"info-state segment {name!r} ({size} entries) is not in the engine's layout "
                             f"as this code knows it (per kind: {K}, per colour: {C})")
        offset += size
    A = game.num_distinct_actions()
    if A != 2 * K + 1 + C:
        raise ValueError(f"unexpected action count {A} for {C} colours and {R} kinds a colour")
    # play kind k, discard kind k, draw from the deck, draw from pile c
    actions = [_block("K", 0, C, R), _block("K", K, C, R), _block(1, 2 * K, C, R), _block("C", 2 * K + 1, C, R)]
    return _join(blocks), _join(actions)


def colour_maps(game, perm):
    """(info_src, action_src) for the renaming colour c -> perm[c]: the
    renamed tensor is info[..., info_src] and a renamed per-action array
    (mask, targets) is x[..., action_src]; a renamed action id a is
    action_map(action_src)[a]."""
    info, act = _layout(game)
    C = int(game.params["colours"])
    perm = np.asarray(perm, dtype=np.int64)
    if sorted(perm.tolist()) != list(range(C)):
        raise ValueError(f"perm must be a permutation of 0..{C - 1}, got {perm.tolist()}")
    out = []
    for colour, base, stride in (info, act):
        dst = base + stride * perm[colour]
        src = np.empty_like(dst)
        src[dst] = np.arange(len(dst))
        out.append(src)
    return out[0], out[1]


def action_map(action_src):
    """action id -> the renamed action id, from colour_maps' action_src."""
    return np.argsort(action_src)


class ColourAugment:
    """Renames the colours of each row of a batch by its own uniformly random
    permutation. `__call__(batch, rng)` takes a dict with "info" [n, T] and
    "mask" [n, A] and, when present, "target" [n, A] (strategy or advantage
    targets), and returns a new dict; other keys (weights) are passed
    through. The columns are all numpy arrays or all torch tensors (renamed
    on their device); either way the permutations come from the numpy `rng`,
    so the same rng state gives the same rows. Nothing is precomputed per
    permutation, so six or more colours cost no more memory than five."""

    def __init__(self, game):
        # int32 index arithmetic: half the memory traffic of int64, the bulk of a call's time
        self.info, self.action = ((c, b.astype(np.int32), s.astype(np.int32)) for c, b, s in _layout(game))
        self.colours = int(game.params["colours"])
        self._on_device = {}       # torch.device -> the layouts as int64 tensors there

    def _perms(self, n, rng):
        return np.argsort(rng.random((n, self.colours)), axis=1)       # a uniform permutation per row

    def __call__(self, batch, rng):
        if isinstance(batch["info"], torch.Tensor):
            return self._tensors(batch, rng)
        n = len(batch["info"])
        perms = self._perms(n, rng)
        if n * len(self.info[1]) >= 2 ** 31:
            raise ValueError(f"a batch of {n} rows is too large to rename in one call")
        perms = perms.astype(np.int32)
        out = dict(batch)
        for keys, (colour, base, stride) in ((("info",), self.info), (("mask", "target"), self.action)):
            # flat destinations: one scatter through ravel() is faster than a 2-d fancy index
            # (docs/benchmarks.md, "Lost Cities training steps")
            dst = base + stride * perms[:, colour]
            dst += (np.arange(n, dtype=np.int32) * len(base))[:, None]
            dst = dst.ravel()
            for key in keys:
                x = batch.get(key)
                if x is not None and x.ndim == 2:
                    y = np.empty_like(x)
                    y.ravel()[dst] = x.ravel()
                    out[key] = y
        return out

    def _tensors(self, batch, rng):
        # torch's scatter wants int64 indices; on the CPU the numpy path above is the faster one
        device = batch["info"].device
        layouts = self._on_device.get(device)
        if layouts is None:
            layouts = tuple(tuple(torch.from_numpy(a.astype(np.int64)).to(device) for a in part)
                            for part in (self.info, self.action))
            self._on_device[device] = layouts
        perms = torch.from_numpy(self._perms(len(batch["info"]), rng)).to(device)
        out = dict(batch)
        for keys, (colour, base, stride) in zip((("info",), ("mask", "target")), layouts):
            dst = base + stride * perms[:, colour]
            for key in keys:
                x = batch.get(key)
                if x is not None and x.dim() == 2:
                    out[key] = torch.empty_like(x).scatter_(1, dst, x)
        return out
