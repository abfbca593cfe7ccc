"""agents.symmetry: renaming Lost Cities' colours in an encoded row is the
same as encoding the renamed position (checked against the engine)."""
import itertools

import numpy as np
import pytest
import torch

import engine
from engine._lost_cities import LostCitiesState
from agents.symmetry import ColourAugment, action_map, colour_maps

LETTERS = "YBWGRP"


def _renamed(d, perm):
    """A snapshot (to_dict) with colour c renamed perm[c]: cards, expeditions, piles, the blocked pile."""
    C = d["params"]["colours"]
    card = lambda x: LETTERS[perm[LETTERS.index(x[0])]] + x[1:]      # noqa: E731
    e = dict(d)
    e["hands"] = [[card(x) for x in h] for h in d["hands"]]
    e["known_hands"] = [[card(x) for x in h] for h in d["known_hands"]]
    e["deck"] = [card(x) for x in d["deck"]]
    e["expeditions"] = [[None] * C for _ in range(2)]
    e["piles"] = [None] * C
    for c in range(C):
        for p in range(2):
            e["expeditions"][p][perm[c]] = [card(x) for x in d["expeditions"][p][c]]
        e["piles"][perm[c]] = [card(x) for x in d["piles"][c]]
    if d["blocked_pile"] is not None:
        e["blocked_pile"] = int(perm[d["blocked_pile"]])
    return e


def _positions(game, n, seed):
    """Positions reached by mixed heuristic and random play, draw phases with a blocked pile among them."""
    rng = np.random.default_rng(seed)
    out = []
    g = 0
    while len(out) < n:
        s = game.new_initial_state(seed=seed * 1000 + g)
        g += 1
        for _ in range(int(rng.integers(0, 70))):
            if s.is_terminal():
                break
            legal = s.legal_actions()
            s.apply_action(game.heuristic_action(s) if rng.random() < 0.6 else int(rng.choice(legal)))
        if not s.is_terminal():
            out.append(s)
    return out


@pytest.mark.parametrize("params", [dict(features=1, max_turns=200), dict(), dict(colours=6, features=1),
                                    dict(colours=3, ranks=5, hand_size=4, features=1)])
def test_renamed_rows_are_the_renamed_positions_rows(params):
    game = engine.load_game("lost_cities", **params)
    C = game.params["colours"]
    rng = np.random.default_rng(1)
    blocked = 0
    for s in _positions(game, 40, seed=C):
        d = s.to_dict()
        blocked += d["blocked_pile"] is not None
        perm = rng.permutation(C)
        t = LostCitiesState.from_dict(game, _renamed(d, perm))
        info_src, action_src = colour_maps(game, perm)
        for p in (0, 1):
            np.testing.assert_array_equal(np.asarray(s.information_state_tensor(p))[info_src],
                                          t.information_state_tensor(p))
        np.testing.assert_array_equal(np.asarray(s.legal_actions_mask())[action_src], t.legal_actions_mask())
        # each legal action, renamed, is the renamed position's action with the same meaning
        amap = action_map(action_src)
        for a in s.legal_actions():
            x, y = game.decode_action(a), game.decode_action(int(amap[a]))
            assert (x.verb, x.value) == (y.verb, y.value)
            assert y.colour == (None if x.colour is None else perm[x.colour])
    assert blocked > 0          # the blocked pile's segment was exercised


def test_colour_augment_renames_each_row_consistently():
    game = engine.load_game("lost_cities", features=1, max_turns=200)
    s = _positions(game, 1, seed=3)[0]
    n, A = 4000, game.num_distinct_actions()
    info = np.tile(np.asarray(s.information_state_tensor(s.current_player()), np.uint8), (n, 1))
    mask = np.tile(np.asarray(s.legal_actions_mask(), np.uint8), (n, 1))
    target = np.zeros((n, A), np.float32)
    first = s.legal_actions()[0]
    target[:, first] = 1.0
    weight = np.arange(n, dtype=np.float32)
    out = ColourAugment(game)({"info": info, "mask": mask, "target": target, "weight": weight},
                              np.random.default_rng(0))
    assert out["weight"] is weight and out["info"].dtype == np.uint8 and out["info"].shape == info.shape
    maps = [colour_maps(game, p) for p in itertools.permutations(range(5))]
    seen = set()
    for i in range(0, n, 97):
        # row i is the position renamed by one permutation, the same for its tensor, mask and target
        k = next(j for j, (isrc, asrc) in enumerate(maps)
                 if np.array_equal(info[i][isrc], out["info"][i]) and np.array_equal(mask[i][asrc], out["mask"][i])
                 and np.array_equal(target[i][asrc], out["target"][i]))
        seen.add(k)
        assert out["mask"][i][np.argmax(out["target"][i])] == 1     # the target stays on a legal move
    assert len(seen) > 10


def test_colour_maps_refuses_what_it_cannot_rename():
    game = engine.load_game("lost_cities")
    with pytest.raises(ValueError, match="permutation of 0..4"):
        colour_maps(game, [0, 1, 2, 3, 3])
    with pytest.raises(ValueError, match="lost_cities property"):
        colour_maps(engine.load_game("kuhn_poker"), [0, 1])


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_batches_are_renamed_as_the_numpy_ones(device):
    """A batch of tensors is renamed on its device, exactly as the same batch
    of numpy arrays under the same rng state (so a CUDA step and a CPU step
    see the same renamed rows)."""
    game = engine.load_game("lost_cities", features=1, max_turns=200)
    states = _positions(game, 64, seed=5)
    info = np.array([s.information_state_tensor(s.current_player()) for s in states], np.uint8)
    mask = np.array([s.legal_actions_mask() for s in states], np.uint8)
    target = np.random.default_rng(2).random(mask.shape).astype(np.float32) * mask
    weight = np.ones(len(states), np.float32)
    batch = {"info": info, "mask": mask, "target": target, "weight": weight}
    augment = ColourAugment(game)
    want = augment(batch, np.random.default_rng(9))
    got = augment({k: torch.from_numpy(v).to(device) for k, v in batch.items()}, np.random.default_rng(9))
    for key in ("info", "mask", "target"):
        assert got[key].device.type == device and got[key].dtype == torch.from_numpy(batch[key]).dtype
        np.testing.assert_array_equal(got[key].cpu().numpy(), want[key])
    assert not np.array_equal(want["info"], info)          # the rows did move
    assert got["weight"].device.type == device


def test_batch_tensors_renames_numpy_rows_on_the_cpu():
    """On the CPU the numpy renaming (the faster one there) runs before the
    rows become tensors; the result is the same rows either way."""
    from trainer.learn import _batch_tensors
    game = engine.load_game("lost_cities", features=1, max_turns=200)
    states = _positions(game, 16, seed=6)
    batch = {"info": np.array([s.information_state_tensor(s.current_player()) for s in states], np.uint8),
             "mask": np.array([s.legal_actions_mask() for s in states], np.uint8),
             "target": np.zeros((16, game.num_distinct_actions()), np.float32),
             "weight": np.full(16, 3.0, np.float32)}
    calls = []

    class Spy(ColourAugment):
        def __call__(self, b, rng):
            calls.append(type(b["info"]))
            return super().__call__(b, rng)

    info, target, mask, weight = _batch_tensors(batch, "cpu", Spy(game), np.random.default_rng(4))
    assert calls == [np.ndarray]
    want = ColourAugment(game)(batch, np.random.default_rng(4))
    np.testing.assert_array_equal(info.numpy(), want["info"].astype(np.float32))
    np.testing.assert_array_equal(mask.numpy(), want["mask"].astype(bool))
    assert info.dtype == torch.float32 and mask.dtype == torch.bool
    np.testing.assert_allclose(weight.numpy(), 1.0)
