"""Colour symmetry of Lost Cities, for data augmentation.

Every expedition colour follows the same rules, so renaming the colours
(a permutation of 0..C-1) maps a position to an equally good one: a policy
should play the renamed move in the renamed position. A training row
(info-state tensor, legal mask, target over actions) can therefore stand for
C! rows. `ColourAugment` draws one renaming per row of a batch and applies
it with two gathers, once per batch in numpy.

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
    colour, base, stride = [], [], []
    offset = 0
    for name, size in game.information_state_segments():
        per = layout.get(name)
        if per == "K" and size == K:
            colour.append(np.repeat(np.arange(C), R))
            base.append(offset + np.tile(np.arange(R), C))
            stride.append(np.full(K, R))
        elif per == "C" and size == C:
            colour.append(np.arange(C))
            base.append(np.full(C, offset))
            stride.append(np.ones(C, np.int64))
        elif per is not None and per.isdigit() and int(per) == size:
            colour.append(np.zeros(size, np.int64))
            base.append(np.arange(offset, offset + size))
            stride.append(np.zeros(size, np.int64))
        else:
            raise ValueError(f"info-state segment {name!r} ({size} entries) is not in the engine's layout "
                             f"as this code knows it (per kind: {K}, per colour: {C})")
        offset += size
    A = game.num_distinct_actions()
    if A != 2 * K + 1 + C:
        raise ValueError(f"unexpected action count {A} for {C} colours and {R} kinds a colour")
    kind_c, kind_r = np.repeat(np.arange(C), R), np.tile(np.arange(R), C)
    a_colour = np.concatenate([kind_c, kind_c, [0], np.arange(C)])
    a_base = np.concatenate([kind_r, K + kind_r, [2 * K], np.full(C, 2 * K + 1)])
    a_stride = np.concatenate([np.full(K, R), np.full(K, R), [0], np.ones(C, np.int64)])
    as_int = lambda parts: np.concatenate(parts).astype(np.int64)       # noqa: E731
    return ((as_int(colour), as_int(base), as_int(stride)),
            (a_colour.astype(np.int64), a_base.astype(np.int64), a_stride.astype(np.int64)))


def colour_maps(game, perm):
    """(info_src, action_src) for the renaming colour c -> perm[c]: the
    renamed tensor is info[..., info_src] and a renamed per-action array
    (mask, targets) is x[..., action_src]; a renamed action id a is
    action_map(action_src)[a]."""
    C = int(game.params["colours"]) if game.name == "lost_cities" else 0
    perm = np.asarray(perm, dtype=np.int64)
    info, act = _layout(game)
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
    through. Nothing is precomputed per permutation, so six or more colours
    cost no more memory than five."""

    def __init__(self, game):
        self.colours = int(game.params["colours"]) if game.name == "lost_cities" else 0
        self.info, self.action = _layout(game)

    def __call__(self, batch, rng):
        n = len(batch["info"])
        perms = np.argsort(rng.random((n, self.colours)), axis=1)      # a uniform permutation per row
        rows = np.arange(n)[:, None]
        out = dict(batch)
        for keys, (colour, base, stride) in ((("info",), self.info), (("mask", "target"), self.action)):
            dst = base + stride * perms[:, colour]
            for key in keys:
                x = batch.get(key)
                if x is not None and x.ndim == 2:
                    y = np.empty_like(x)
                    y[rows, dst] = x
                    out[key] = y
        return out
