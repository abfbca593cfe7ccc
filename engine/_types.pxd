# See engine/_game.pyx for how these types are used.
# One place for the integer and float types shared by every Cython module.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

ctypedef float float32_t
ctypedef double float64_t
