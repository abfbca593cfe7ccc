"""Reservoir and merging memories (trainer/memory.py): chunked insertion equal
to row-at-a-time insertion, uniformity, round trips, and the merging memory's
weighted means, gradient and draws (split from tests/test_trainer.py on
2026-12-02).
"""
from pathlib import Path

import numpy as np
import pytest

from trainer.memory import MergingMemory, ReservoirMemory

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------
# reservoir memory

def _chunk(values, cols=3):
    n = len(values)
    return {"info": np.repeat(np.asarray(values, np.float32)[:, None] % 200, cols, 1),
            "target": np.asarray(values, np.float32)[:, None].repeat(2, 1),
            "mask": np.ones((n, 2), np.uint8), "weight": np.asarray(values, np.float32)}


def _sequential_reservoir(capacity, chunks, seed):
    """Row-at-a-time reservoir with the same random draws as ReservoirMemory."""
    rng = np.random.default_rng(seed)
    slots, seen = [], 0
    for values in chunks:
        room = min(len(values), capacity - len(slots))
        slots.extend(values[:room])
        rest = values[room:]
        if rest:
            u = rng.random(len(rest))
            for j, v in enumerate(rest):
                k = seen + room + j
                s = int(u[j] * (k + 1))
                if s < capacity:
                    slots[s] = v
        seen += len(values)
    return slots


def test_chunked_reservoir_equals_row_at_a_time_insertion():
    rng = np.random.default_rng(5)
    chunks, start = [], 0
    for _ in range(40):
        n = int(rng.integers(1, 60))
        chunks.append(list(range(start, start + n)))
        start += n
    mem = ReservoirMemory(100, 3, 2, seed=11)
    for values in chunks:
        mem.add(_chunk(values))
    expected = _sequential_reservoir(100, chunks, 11)
    assert mem.weight[:mem.size].astype(int).tolist() == expected
    assert mem.seen == start and mem.size == 100
    np.testing.assert_array_equal(mem.target[:, 0], mem.weight)


def test_reservoir_is_uniform():
    counts = np.zeros(1000)
    for seed in range(200):
        mem = ReservoirMemory(100, 1, 1, seed=seed)
        for start in range(0, 1000, 50):
            mem.add(_chunk(list(range(start, start + 50)), cols=1) | {"mask": np.ones((50, 1), np.uint8),
                                                                       "target": np.zeros((50, 1), np.float32)})
        counts[mem.weight.astype(int)] += 1
    # each row kept with probability 0.1: 20 expected per row over 200 runs
    early, late = counts[:500].mean(), counts[500:].mean()
    assert abs(early - 20) < 1.5 and abs(late - 20) < 1.5


def test_reservoir_rejects_inexact_info_and_round_trips():
    mem = ReservoirMemory(10, 3, 2, seed=0)
    bad = _chunk([1, 2])
    bad["info"] = bad["info"] + 0.5
    with pytest.raises(ValueError, match="uint8 exactly"):
        mem.add(bad)
    mem.add(_chunk(list(range(25))))
    other = ReservoirMemory(10, 3, 2, seed=99)
    other.load_state_dict(mem.state_dict("m"), "m")
    assert other.equals(mem)
    mem.add(_chunk([100, 101, 102]))
    other.add(_chunk([100, 101, 102]))
    assert other.equals(mem)        # the generator state travelled too


def _noisy_rows(n, states=7, seed=0, cols=4, actions=3):
    """Rows whose info state is one of `states` patterns, with noisy targets,
    iteration weights and one illegal action on odd states."""
    rng = np.random.default_rng(seed)
    sid = rng.integers(0, states, n)
    info = ((sid[:, None] >> np.arange(cols)) & 1).astype(np.float32)
    mask = np.ones((n, actions), np.uint8)
    mask[sid % 2 == 1, -1] = 0
    target = (rng.normal(size=(n, actions)) + sid[:, None]).astype(np.float32) * mask
    return {"info": info, "target": target, "mask": mask,
            "weight": rng.integers(1, 50, n).astype(np.float32)}, sid


def test_merging_memory_holds_weighted_means():
    mem = MergingMemory(100, 4, 3, seed=0)
    chunks = [_noisy_rows(n, seed=k)[0] for k, n in enumerate((40, 1, 73, 12))]
    for c in chunks:
        mem.add(c)
    allrows = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    assert mem.seen == len(allrows["weight"]) and mem.size == len(np.unique(allrows["info"], axis=0))
    for i in range(mem.size):
        same = (allrows["info"] == mem.info[i]).all(1)
        w = allrows["weight"][same].astype(np.float64)
        assert mem.weight[i] == w.sum()
        np.testing.assert_allclose(mem.target[i], (w[:, None] * allrows["target"][same]).sum(0) / w.sum(),
                                   rtol=1e-6)
        assert (allrows["mask"][same] == mem.mask[i]).all()


def test_merging_memory_keeps_the_advantage_loss_gradient():
    """The weighted MSE over every sample and over the merged rows differ by a
    constant: equal gradients, which is what makes merging exact."""
    import torch
    from trainer.learn import _batch_tensors, advantage_loss
    rows, _ = _noisy_rows(500, seed=3)
    mem = MergingMemory(100, 4, 3)
    mem.add(rows)
    n = mem.size

    def grad(batch):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        info, target, mask, weight = _batch_tensors(batch, "cpu")
        advantage_loss(net, info, target, mask, weight).backward()
        return torch.cat([p.grad.flatten() for p in net.parameters()])

    merged = {"info": mem.info[:n], "target": mem.target[:n], "mask": mem.mask[:n],
              "weight": mem.weight[:n].astype(np.float32)}
    full = grad(rows) * rows["weight"].mean() * len(rows["weight"])
    part = grad(merged) * merged["weight"].mean() * n
    torch.testing.assert_close(full, part, rtol=1e-4, atol=1e-5)


def test_merging_memory_draws_in_proportion_to_weight():
    rows, _ = _noisy_rows(300, seed=1)
    mem = MergingMemory(100, 4, 3)
    mem.add(rows)
    batch = mem.sample(200_000, np.random.default_rng(0))
    assert (batch["weight"] == 1).all()
    for i in range(mem.size):
        freq = (batch["info"] == mem.info[i]).all(1).mean()
        share = mem.weight[i] / mem.weight[:mem.size].sum()
        assert abs(freq - share) < 0.01, (i, freq, share)
        hit = (batch["info"] == mem.info[i]).all(1)
        np.testing.assert_array_equal(batch["target"][hit][0], mem.target[i])


def test_merging_memory_when_full_keeps_each_state_to_itself():
    """Once full, a held state's row holds exactly the samples offered for it
    since it was (last) placed: never another state's, even when a state
    merged in a chunk is replaced by a new one of the same chunk."""
    mem = MergingMemory(6, 4, 3, seed=4)
    offered = []                                   # per chunk: state id -> summed weight
    for k in range(40):
        rows, sid = _noisy_rows(int(np.random.default_rng(k).integers(1, 40)), states=16, seed=100 + k)
        mem.add(rows)
        offered.append(np.bincount(sid, weights=rows["weight"].astype(np.float64), minlength=16))
        assert mem.size == 6 and len(mem._slot) == 6
        for i in range(mem.size):
            key = mem._keys(mem.info[i:i + 1], mem.mask[i:i + 1])[0].tobytes()
            assert mem._slot[key] == i
            state = int((mem.info[i] * (1 << np.arange(4))).sum())
            suffixes = np.cumsum([o[state] for o in offered[::-1]])
            assert np.isclose(suffixes, mem.weight[i]).any(), (k, i, state)


def test_merging_memory_reservoir_over_states_and_round_trip():
    mem = MergingMemory(5, 4, 3, seed=2)
    for k in range(6):
        mem.add(_noisy_rows(30, states=16, seed=k)[0])
    assert mem.size == 5 and mem.states_seen > 5 and len(mem._slot) == 5
    held = {mem.info[i].tobytes() for i in range(5)}
    assert len(held) == 5                     # no state twice, evicted ones left the index
    other = MergingMemory(5, 4, 3, seed=99)
    other.load_state_dict(mem.state_dict("m"), "m")
    assert other.equals(mem)
    nxt = _noisy_rows(30, states=16, seed=50)[0]
    mem.add(nxt)
    other.add(nxt)
    assert other.equals(mem)                  # index and generator travelled too
    plain = ReservoirMemory(5, 4, 3)
    with pytest.raises(ValueError, match="merging memory"):
        plain.load_state_dict(mem.state_dict("m"), "m")
    plain.add(nxt)
    with pytest.raises(ValueError, match="reservoir memory"):
        other.load_state_dict(plain.state_dict("m"), "m")
