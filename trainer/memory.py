"""Reservoir memories: preallocated column arrays, filled a chunk at a time.

Reservoir sampling keeps a uniform sample of every row ever offered: row k
(0-based, counting all rows seen) goes in directly while there is room, and
later replaces a uniformly chosen slot with probability capacity / (k + 1).
A chunk is processed in one vectorised step with the memory's own generator,
so the contents depend only on the order of the chunks and the seed.

MergingMemory holds one row per distinct info state instead: the weighted
mean target of every sample of that state, and their summed weight. The
weighted MSE (or cross-entropy) over all samples equals the one over the
merged rows plus a constant, since both losses are linear in the target
weights; so training on merged rows, drawn in proportion to their weight,
has the same expected gradient and none of the noise of drawing single
noisy samples.
It pays off in games whose info states recur (Kuhn, Leduc); in Lost Cities
almost every row is new and it is a plain memory with a lookup per row.
"""
import numpy as np

COLUMNS = ("info", "target", "mask", "weight")


class _Columns:
    """Preallocated info/target/mask/weight columns, `size` rows in use."""
    weight_dtype = np.float32

    def __init__(self, capacity, tensor_size, num_actions, seed=0, info_dtype=np.uint8):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.info_dtype = np.dtype(info_dtype)
        self.info = np.zeros((capacity, tensor_size), self.info_dtype)
        self.target = np.zeros((capacity, num_actions), np.float32)
        self.mask = np.zeros((capacity, num_actions), np.uint8)
        self.weight = np.zeros(capacity, self.weight_dtype)
        self.size = 0           # rows held
        self.seen = 0           # rows ever offered
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return self.size

    def _cast_info(self, info):
        if info.dtype == self.info_dtype:
            return info
        cast = info.astype(self.info_dtype)
        if not np.array_equal(cast.astype(info.dtype), info):
            raise ValueError(f"info-state rows do not fit the memory's {self.info_dtype} exactly")
        return cast


class ReservoirMemory(_Columns):

    def add(self, chunk):
        """Offer a chunk (dict of columns with equal row counts)."""
        n = len(chunk["weight"])
        if n == 0:
            return
        info = self._cast_info(np.asarray(chunk["info"]))
        cols = {"info": info, "target": chunk["target"], "mask": chunk["mask"], "weight": chunk["weight"]}
        room = min(n, self.capacity - self.size)
        if room > 0:
            for k, v in cols.items():
                getattr(self, k)[self.size:self.size + room] = v[:room]
            self.size += room
        rest = n - room
        if rest > 0:
            k = self.seen + room + np.arange(rest, dtype=np.int64)   # global index of each row
            slot = (self.rng.random(rest) * (k + 1)).astype(np.int64)
            keep = slot < self.capacity
            rows = np.flatnonzero(keep) + room
            slots = slot[keep]
            # a later row wins a slot chosen twice in one chunk, as if inserted in turn
            last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]
            rows, slots = rows[last], slots[last]
            for name, v in cols.items():
                getattr(self, name)[slots] = v[rows]
        self.seen += n

    def sample(self, batch_size, rng):
        """A uniform minibatch (with replacement) of the rows held."""
        idx = rng.integers(0, self.size, size=batch_size)
        return {"info": self.info[idx], "target": self.target[idx], "mask": self.mask[idx],
                "weight": self.weight[idx]}

    def state_dict(self, prefix):
        """Arrays for an .npz checkpoint (only the rows held)."""
        return {f"{prefix}.info": self.info[:self.size], f"{prefix}.target": self.target[:self.size],
                f"{prefix}.mask": self.mask[:self.size], f"{prefix}.weight": self.weight[:self.size],
                f"{prefix}.seen": np.array([self.seen], np.int64),
                f"{prefix}.rng": np.frombuffer(repr(self.rng.bit_generator.state).encode(), np.uint8)}

    def load_state_dict(self, arrays, prefix):
        import ast
        if f"{prefix}.sum" in arrays:
            raise ValueError(f"memory {prefix}: the checkpoint holds a merging memory, this run keeps a "
                             "reservoir (train.merge_duplicates)")
        size = len(arrays[f"{prefix}.weight"])
        if size > self.capacity:
            raise ValueError(f"memory {prefix}: checkpoint holds {size} rows, capacity is {self.capacity}")
        for name in COLUMNS:
            getattr(self, name)[:size] = arrays[f"{prefix}.{name}"]
        self.size = size
        self.seen = int(arrays[f"{prefix}.seen"][0])
        self.rng.bit_generator.state = ast.literal_eval(bytes(arrays[f"{prefix}.rng"]).decode())

    def equals(self, other):
        return (self.size == other.size and self.seen == other.seen
                and all(np.array_equal(getattr(self, c)[:self.size], getattr(other, c)[:other.size]) for c in COLUMNS))


class MergingMemory(_Columns):
    """One row per distinct (info state, legal mask): `target` is the
    weighted mean of the targets offered for it and `weight` their summed
    weight. Minibatches are drawn in proportion to the weight and carry unit
    weights. Once `capacity` distinct states are held, a new one replaces a
    held one by reservoir sampling over the distinct states seen (the
    replaced state's merged samples go with it)."""

    weight_dtype = np.float64     # summed weights outgrow float32's exact integers

    def __init__(self, capacity, tensor_size, num_actions, seed=0, info_dtype=np.uint8):
        super().__init__(capacity, tensor_size, num_actions, seed, info_dtype)
        self._sum = np.zeros((capacity, num_actions), np.float64)   # weight * target, summed
        self.states_seen = 0    # distinct states ever offered (the reservoir's count)
        self._slot = {}         # key bytes -> slot
        self._cum = None        # cumulative weights for sampling, rebuilt after an add

    def _keys(self, info, mask):
        both = np.ascontiguousarray(np.concatenate([info.view(np.uint8).reshape(len(info), -1), mask], axis=1))
        return both.view(np.dtype((np.void, both.shape[1]))).ravel()

    def add(self, chunk):
        """Offer a chunk (dict of columns with equal row counts)."""
        n = len(chunk["weight"])
        if n == 0:
            return
        info = self._cast_info(np.asarray(chunk["info"]))
        mask = np.asarray(chunk["mask"]).astype(np.uint8, copy=False)
        w = np.asarray(chunk["weight"], np.float64)
        keys, first, inv = np.unique(self._keys(info, mask), return_index=True, return_inverse=True)
        inv = inv.ravel()
        wsum = np.bincount(inv, weights=w, minlength=len(keys))
        tsum = np.zeros((len(keys), self._sum.shape[1]))
        np.add.at(tsum, inv, w[:, None] * np.asarray(chunk["target"], np.float64))
        # first the states already held
        slots = np.array([self._slot.get(k.tobytes(), -1) for k in keys], np.int64)
        held = slots >= 0
        self._merge(slots[held], wsum[held], tsum[held])
        # then the new states, in order of first appearance in the chunk; once
        # full, each may replace a held state (and what it just merged)
        for j in sorted(np.flatnonzero(~held), key=lambda j: first[j]):
            slot = self._place(keys[j].tobytes())
            if slot >= 0:
                self.info[slot] = info[first[j]]
                self.mask[slot] = mask[first[j]]
                self._sum[slot] = 0.0
                self.weight[slot] = 0.0
                self._merge(slot, wsum[j], tsum[j])
        self.seen += n
        self._cum = None

    def _merge(self, slots, wsum, tsum):
        self._sum[slots] += tsum
        self.weight[slots] += wsum
        self.target[slots] = self._sum[slots] / np.maximum(self.weight[slots], 1e-300)[..., None]

    def _place(self, key):
        """A slot for a new state (-1: the reservoir turned it away)."""
        k = self.states_seen
        self.states_seen += 1
        if self.size < self.capacity:
            slot = self.size
            self.size += 1
        else:
            slot = int(self.rng.integers(0, k + 1))
            if slot >= self.capacity:
                return -1
            old = self._keys(self.info[slot:slot + 1], self.mask[slot:slot + 1])[0].tobytes()
            del self._slot[old]
        self._slot[key] = slot
        return slot

    def sample(self, batch_size, rng):
        """A minibatch (with replacement) drawn in proportion to the merged
        weights, with unit weights."""
        if self._cum is None:
            self._cum = np.cumsum(self.weight[:self.size])
        idx = np.searchsorted(self._cum, rng.random(batch_size) * self._cum[-1], side="right")
        idx = np.minimum(idx, self.size - 1)
        return {"info": self.info[idx], "target": self.target[idx], "mask": self.mask[idx],
                "weight": np.ones(batch_size, np.float32)}

    def state_dict(self, prefix):
        n = self.size
        return {f"{prefix}.info": self.info[:n], f"{prefix}.mask": self.mask[:n],
                f"{prefix}.weight": self.weight[:n], f"{prefix}.sum": self._sum[:n],
                f"{prefix}.seen": np.array([self.seen, self.states_seen], np.int64),
                f"{prefix}.rng": np.frombuffer(repr(self.rng.bit_generator.state).encode(), np.uint8)}

    def load_state_dict(self, arrays, prefix):
        import ast
        if f"{prefix}.sum" not in arrays:
            raise ValueError(f"memory {prefix}: the checkpoint holds a reservoir memory, this run merges "
                             "duplicates (train.merge_duplicates)")
        n = len(arrays[f"{prefix}.weight"])
        if n > self.capacity:
            raise ValueError(f"memory {prefix}: checkpoint holds {n} rows, capacity is {self.capacity}")
        self.info[:n], self.mask[:n] = arrays[f"{prefix}.info"], arrays[f"{prefix}.mask"]
        self.weight[:n], self._sum[:n] = arrays[f"{prefix}.weight"], arrays[f"{prefix}.sum"]
        self.target[:n] = self._sum[:n] / np.maximum(self.weight[:n], 1e-300)[:, None]
        self.size = n
        self.seen, self.states_seen = (int(v) for v in arrays[f"{prefix}.seen"])
        self._slot = {k.tobytes(): i for i, k in enumerate(self._keys(self.info[:n], self.mask[:n]))}
        self._cum = None
        self.rng.bit_generator.state = ast.literal_eval(bytes(arrays[f"{prefix}.rng"]).decode())

    def equals(self, other):
        n = self.size
        return (type(other) is MergingMemory and n == other.size and self.seen == other.seen
                and self.states_seen == other.states_seen
                and np.array_equal(self._sum[:n], other._sum[:n])
                and all(np.array_equal(getattr(self, c)[:n], getattr(other, c)[:n]) for c in COLUMNS))
