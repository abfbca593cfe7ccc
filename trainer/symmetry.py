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
import itertools

import numpy as np


def colour_maps(game, perm):
    """(info_src, action_src) for the renaming colour c -> perm[c]: the
    renamed tensor is info[..., info_src] and a renamed per-action array
    (mask, targets) is x[..., action_src]; a renamed action id a is
    action_src.argsort()[a] (see action_map)."""
    if game.name != "lost_cities":
        raise ValueError(f"colour symmetry is a lost_cities property, not {game.name}'s")
    C = int(game.params["colours"])
    R = int(game.params["ranks"]) + 1
    K = C * R
    perm = np.asarray(perm, dtype=np.int64)
    if sorted(perm.tolist()) != list(range(C)):
        raise ValueError(f"perm must be a permutation of 0..{C - 1}, got {perm.tolist()}")
    from engine._lost_cities import FEATURE_SEGMENTS, SEGMENTS
    layout = dict(SEGMENTS + FEATURE_SEGMENTS)
    kind_dst = (perm[:, None] * R + np.arange(R)[None, :]).reshape(-1)     # kind c*R+r -> perm[c]*R+r
    src = []
    offset = 0
    for name, size in game.information_state_segments():
        idx = np.arange(offset, offset + size)
        per = layout.get(name)
        if per == "K" and size == K:
            seg = np.empty(K, np.int64)
            seg[kind_dst] = idx
        elif per == "C" and size == C:
            seg = np.empty(C, np.int64)
            seg[perm] = idx
        elif per is not None and per.isdigit() and int(per) == size:
            seg = idx
        else:
            raise ValueError(f"info-state segment {name!r} ({size} entries) is not in the engine's layout "
                             f"as this code knows it (per kind: {K}, per colour: {C})")
        src.append(seg)
        offset += size
    info_src = np.concatenate(src)
    A = game.num_distinct_actions()
    if A != 2 * K + 1 + C:
        raise ValueError(f"unexpected action count {A} for {C} colours and {R} kinds a colour")
    action_dst = np.concatenate([kind_dst, K + kind_dst, [2 * K], 2 * K + 1 + perm])
    action_src = np.empty(A, np.int64)
    action_src[action_dst] = np.arange(A)
    return info_src, action_src


def action_map(action_src):
    """action id -> the renamed action id, from colour_maps' action_src."""
    return np.argsort(action_src)


class ColourAugment:
    """Renames the colours of each row of a batch by a random permutation
    (all C! of them, the identity included). `__call__(batch, rng)` takes a
    dict with "info" [n, T] and "mask" [n, A] and, when present, "target"
    [n, A] (strategy or advantage targets), and returns a new dict; other
    keys (weights) are passed through."""

    def __init__(self, game):
        C = int(game.params["colours"])
        maps = [colour_maps(game, p) for p in itertools.permutations(range(C))]
        self.info_src = np.stack([m[0] for m in maps])
        self.action_src = np.stack([m[1] for m in maps])

    def __call__(self, batch, rng):
        n = len(batch["info"])
        pick = rng.integers(0, len(self.info_src), size=n)
        rows = np.arange(n)[:, None]
        out = dict(batch)
        out["info"] = batch["info"][rows, self.info_src[pick]]
        for key in ("mask", "target"):
            if key in batch and batch[key].ndim == 2:
                out[key] = batch[key][rows, self.action_src[pick]]
        return out
