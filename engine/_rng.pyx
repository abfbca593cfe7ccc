"""Python access to the nogil PRNGs in _rng.pxd, so that Python code (the
recursive reference traversal, tests) can draw exactly the numbers C draws."""
from engine._types cimport uint64_t


cdef class Rng:
    """xorshift64* stream seeded like the traverser's: Rng(run_seed, job, id)."""

    def __cinit__(self, a=0, b=0, c=0):
        self.state = rng_seed(<uint64_t>(int(a) & 0xFFFFFFFFFFFFFFFF),
                              <uint64_t>(int(b) & 0xFFFFFFFFFFFFFFFF),
                              <uint64_t>(int(c) & 0xFFFFFFFFFFFFFFFF))

    def next(self):
        return rng_next(&self.state)

    def below(self, n):
        """Uniform integer in [0, n)."""
        if not 0 < n < 2 ** 32:
            raise ValueError(f"below({n}): n must be in [1, 2**32)")
        return rng_below(&self.state, <unsigned int>n)

    def double(self):
        """Uniform float in [0, 1)."""
        return rng_double(&self.state)

    def get_state(self):
        return self.state
