# Small per-object PRNGs for nogil code. Nothing global: every caller owns its
# uint64 state and passes a pointer. See engine/_rng.pyx for the Python wrappers.
from libc.stdint cimport uint32_t, uint64_t


cdef inline uint64_t splitmix64(uint64_t* x) noexcept nogil:
    """Advance a splitmix64 state; used to derive well-mixed seeds."""
    x[0] += <uint64_t>0x9E3779B97F4A7C15ULL
    cdef uint64_t z = x[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline uint64_t rng_seed(uint64_t a, uint64_t b, uint64_t c) noexcept nogil:
    """A nonzero xorshift state from up to three integers (run seed, job, id)."""
    cdef uint64_t x = a
    cdef uint64_t s = splitmix64(&x)
    x = s ^ b
    s = splitmix64(&x)
    x = s ^ c
    s = splitmix64(&x)
    if s == 0:
        s = <uint64_t>0x2545F4914F6CDD1DULL
    return s


cdef inline uint64_t rng_next(uint64_t* s) noexcept nogil:
    """xorshift64*: 64 bits of output per call."""
    cdef uint64_t x = s[0]
    x ^= x >> 12
    x ^= x << 25
    x ^= x >> 27
    s[0] = x
    return x * <uint64_t>0x2545F4914F6CDD1DULL


cdef inline uint32_t rng_below(uint64_t* s, uint32_t n) noexcept nogil:
    """Uniform integer in [0, n) (multiply-shift on the high 32 bits)."""
    return <uint32_t>(((rng_next(s) >> 32) * <uint64_t>n) >> 32)


cdef inline double rng_double(uint64_t* s) noexcept nogil:
    """Uniform double in [0, 1)."""
    return <double>(rng_next(s) >> 11) * (1.0 / 9007199254740992.0)


cdef class Rng:
    cdef uint64_t state         # xorshift64* state, never 0
