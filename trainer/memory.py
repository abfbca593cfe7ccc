"""Reservoir memories: preallocated column arrays, filled a chunk at a time.

Reservoir sampling keeps a uniform sample of every row ever offered: row k
(0-based, counting all rows seen) goes in directly while there is room, and
later replaces a uniformly chosen slot with probability capacity / (k + 1).
A chunk is processed in one vectorised step with the memory's own generator,
so the contents depend only on the order of the chunks and the seed.
"""
import numpy as np

COLUMNS = ("info", "target", "mask", "weight")


class ReservoirMemory:
    def __init__(self, capacity, tensor_size, num_actions, seed=0, info_dtype=np.uint8):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.info_dtype = np.dtype(info_dtype)
        self.info = np.zeros((capacity, tensor_size), self.info_dtype)
        self.target = np.zeros((capacity, num_actions), np.float32)
        self.mask = np.zeros((capacity, num_actions), np.uint8)
        self.weight = np.zeros(capacity, np.float32)
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
