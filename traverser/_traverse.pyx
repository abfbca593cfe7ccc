"""Deep CFR traversals as resumable state machines ("recursion without
recursion"): an explicit frame stack per machine, the whole step loop inside
`with nogil:`.

A MachineGroup holds M machines, a request buffer and two sample buffers,
preallocated; the numpy arrays are owned by Python and C writes through
pointers set once. A machine's frame stack starts at `stack_frames` frames
(256) and doubles when a traversal goes deeper, up to the deepest a
traversal can reach (prefix_max + max_depth + 1: 65535 frames for a Lost
Cities game with no turn cap). Memory so follows the traversals the
machines run, not the worst case of every one. One round is:

    n = group.step()      # nogil: advance every runnable machine until it
                          # parks (request row written), blocks, or finishes
    <fill group.advantages[:n] from group.requests[:n]>   # batched forward
    group.resume(n)       # nogil: regret matching on each row; machines runnable

Request rows are compact: row r belongs to machine request_machine[r] and asks
for model request_model[r]. A machine that finds a sample buffer full blocks
without losing its place; after a drain, the next step() retries it.

Wire layout (MachineGroup(..., wire=True), the remote path): a row is written
ready to send. Player 0's rows (model_ids[0]) fill [0, n_front) from the
front, player 1's rows (model_ids[1]) fill [M - n_back, M) from the back, so
each model's rows are one contiguous block and a round goes out as one
message with no gather. Each row is encoded into a small hot scratch row and
stored as uint8 (a quarter of float32 on the wire, and a quarter of the cache
lines written) while every value is an exact uint8; the first value that is
not switches the group to float32 rows for good (rows already written this
round are widened in place). A query row past the root prefix (a node that
will write a sample) is also kept in its machine's info_u8 slot for its depth,
and the node's sample takes its info row from there instead of encoding the
state a second time. Samples keep their info rows as uint8 too, while the
rows are exact uint8 (drained info arrays are then uint8). With
adv_dtype="float16" the answers come back as IEEE half floats into
advantages_f16 (half the bytes of float32 on the wire); resume() reads the
legal actions' entries from there, converting in C. resume(n, answers) reads
them from the caller's arrays instead (where a remote worker received them).

Algorithms (traversal for player p, "the traverser"):
  external sampling: at p's nodes every legal action is expanded; the sample's
    regret targets are v(a) - sum_b sigma(b) v(b). At the opponent's nodes one
    action is sampled from sigma (its regret-matched advantages) and, every
    strategy_interval-th such node, a strategy sample (sigma) is written.
  outcome sampling: at p's nodes one action is sampled from
    q = epsilon * uniform + (1 - epsilon) * sigma; the child's value u is
    importance-corrected, cv = u / q(a*); the node's value is sigma(a*) * cv
    and the targets are ((a == a*) * cv - value) / reach, reach being the
    product of p's own sampling probabilities above the node, clipped to
    +-value_clip.
  cutoffs: at max_depth decisions below the traversal root, or after
    max_nodes nodes in a traversal, a node is valued by returns() as it
    stands (Lost Cities: the score difference) or by the mean of `rollouts`
    playouts, uniformly random or by the game's own playout policy (Lost
    Cities: the heuristic bot) with rollout_policy = "game".
  value cutoffs (value_cutoff = w > 0): a cutoff node parks its machine with
    one request row, the traverser's info state, for model_ids[traverser];
    the answer's column num_actions is the learned value (in value units,
    not scaled again) and the cutoff's value is w * value + (1 - w) * the
    playout mean (computed before parking; none run with w = 1). Every
    answer row then has answer_width = num_actions + 1 columns.
  sampled roots: with prefix_max > 0 a traversal first plays a prefix of
    0..prefix_max decisions (length drawn after the deal) with both players
    sampling on-policy and no samples written; the traversal proper starts
    where the prefix ends. Depth-limited traversals so cover a whole long
    game (Lost Cities), not only its opening.
  a node with one legal action is passed through with no query and no sample.

Determinism: each traversal has its own xorshift state seeded from (run seed,
iteration, traversal id); the deal and every sampled action come from it, so
samples do not depend on group size, stepping order or threads.

Nothing in the nogil functions touches a Python object, and nothing
allocates except a stack's growth (_grow_stack: a doubling, so at most
log2(depth / stack_frames) times per machine over a group's life).
"""
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

import numbers

import numpy as np

from engine._types cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint64_t
from engine._rng cimport rng_seed, rng_double, rng_below
from engine._game cimport Game, GameDef

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* Zeroed memory for the machines. A large arena is 2 MiB aligned and, on
       Linux, asks for transparent huge pages: a step touches a few lines of
       every machine, and with 4 KiB pages those touches miss the TLB. */
    static void* traverse_arena_alloc(size_t n) {
        void* p = NULL;
        const size_t huge = (size_t)1 << 21;
        if (n >= huge) {
            n = (n + huge - 1) & ~(huge - 1);
            if (posix_memalign(&p, huge, n) != 0) return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
            madvise(p, n, MADV_HUGEPAGE);
    #endif
        } else {
            p = malloc(n);
            if (p == NULL) return NULL;
        }
        memset(p, 0, n);
        return p;
    }
    /* dst = src as uint8; 0 if some value is not an integer in [0, hi] (NaN
       fails too). Branch-free so that it vectorizes: a value is clamped to
       [0, hi], truncated, and must come back unchanged. On x86-64 Linux with
       GCC it is also built for AVX2 and the CPU picks the version at load. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    __attribute__((target_clones("avx2", "default")))
    #endif
    static int traverse_pack_u8(const float* restrict src, unsigned char* restrict dst, int n, float hi) {
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float x = src[i];
            float y = x > 0.0f ? x : 0.0f;
            y = y < hi ? y : hi;
            unsigned char u = (unsigned char)(int)y;
            bad |= (float)u != x;
            dst[i] = u;
        }
        return bad == 0;
    }
    /* dst = src widened to float (exact). restrict: a uint8 pointer may alias
       anything, and without it the loop is not vectorized. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    __attribute__((target_clones("avx2", "default")))
    #endif
    static void traverse_widen_u8(const unsigned char* restrict src, float* restrict dst, int n) {
        for (int i = 0; i < n; i++) dst[i] = (float)src[i];
    }
    /* IEEE half (bits) -> float, exact for every value including subnormals,
       infinities and NaN: the exponent and mantissa shifted into place and
       rebiased by a multiply by 2^112 (F. Giesen's half_to_float_fast2). */
    static inline float traverse_half_to_float(unsigned short h) {
        union { unsigned int u; float f; } o;
        o.u = (unsigned int)(h & 0x7fff) << 13;
        o.f *= 5.192296858534828e+33f;              /* 2^112 */
        if (o.f >= 65536.0f) o.u |= 255u << 23;     /* inf or NaN stays so */
        o.u |= (unsigned int)(h & 0x8000) << 16;
        return o.f;
    }
    """
    void* traverse_arena_alloc(size_t n) nogil
    float traverse_half_to_float(uint16_t h) noexcept nogil
    bint traverse_pack_u8(const float* src, uint8_t* dst, int n, float hi) noexcept nogil
    void traverse_widen_u8(const uint8_t* src, float* dst, int n) noexcept nogil


cdef enum:
    ST_ENTER = 0                # just arrived at this node
    ST_POLICY = 1               # sigma is ready (after a query or uniform)
    ST_WRITE_STRAT = 2          # opponent node: strategy sample to write
    ST_SAMPLE_OPP = 3           # opponent node: sample an action and descend
    ST_EXPAND = 4               # external sampling traverser node: next child
    ST_CHILD_ES = 5             # a child of an expanded node returned
    ST_WRITE_ADV = 6            # external sampling: all children back; write sample
    ST_CHILD_OS = 7             # outcome sampling traverser child returned
    ST_CHILD_PASS = 8           # sampled opponent / forced child returned: pass value up
    ST_CUTOFF_VALUE = 9         # value cutoff: parked for the learned value; on resume m.ret holds it


cdef struct Core:
    GameDef gd                  # the game (cfg points into the Game object)
    Params params
    int tensor_size
    int num_actions
    int max_legal
    int n_machines
    int stack_depth             # deepest frame: prefix_max + max_depth
    int stack_error             # frames a stack growth failed to get (0 = none); step() raises
    Machine* machines
    # request buffer (numpy-owned)
    float* requests             # [n_machines, tensor_size]
    int32_t* request_model      # [n_machines]
    int32_t* request_machine    # [n_machines]
    float* advantages           # [n_machines, answer_width]
    int answer_width            # columns of an answer row: num_actions, + 1 (the value) with value_cutoff > 0
    int n_requests              # rows written since the last resume
    # wire layout (see the module docstring); unused when wire == 0
    int wire                    # 1 = rows by player, front and back, compact dtype
    int wire_u8                 # 1 while every value written fitted uint8 exactly
    float wire_u8_max           # largest value packed as uint8 (255; tests lower it)
    int n_front                 # rows [0, n_front) are player 0's (model_ids[0])
    int n_back                  # rows [n_machines - n_back, n_machines) are player 1's
    uint8_t* requests_u8        # [n_machines, tensor_size] uint8 rows
    int wire_adv_f16            # 1 = answers arrive as float16 in advantages_f16
    uint16_t* advantages_f16    # [n_machines, answer_width] IEEE half bits
    # one rollout scratch for the whole group (a rollout never parks), kept hot in cache
    char* rollout_state         # [state_size]
    char* rollout_undo          # [undo_size]
    int* rollout_legal          # [max_legal]
    float* scratch_row          # [tensor_size]: one row as encoded, before packing
    int info_depths             # wire layout: depths past the prefix whose query rows each machine keeps
    # traversal queue (numpy-owned)
    int64_t* queue_ids
    int8_t* queue_traverser
    int64_t queue_len
    int64_t queue_pos
    uint64_t run_seed
    int64_t iteration
    float weight                # linear CFR weight written with every sample
    SampleBuf adv
    SampleBuf strat
    Stats stats


# ---------------------------------------------------------------------------
# nogil core

cdef inline void _regret_match(const float* adv, const int* legal, int n, double* sigma,
                               bint uniform_fallback, Stats* stats) noexcept nogil:
    cdef int i, best = 0
    cdef double x, total = 0.0
    for i in range(n):
        x = adv[legal[i]]
        if x > 0.0:
            sigma[i] = x
            total += x
        else:
            sigma[i] = 0.0
    if total > 0.0:
        for i in range(n):
            sigma[i] = sigma[i] / total
        return
    stats.fallbacks += 1
    if uniform_fallback:
        for i in range(n):
            sigma[i] = 1.0 / n
        return
    for i in range(1, n):
        if adv[legal[i]] > adv[legal[best]]:
            best = i
    for i in range(n):
        sigma[i] = 1.0 if i == best else 0.0


cdef inline int _sample(const double* p, int n, double u) noexcept nogil:
    """Index i with cumulative probability first exceeding u."""
    cdef int i, last = 0
    cdef double acc = 0.0
    for i in range(n):
        if p[i] > 0.0:
            acc += p[i]
            last = i
            if u < acc:
                return i
    return last


cdef inline int _sample_explore(const double* sigma, int n, double eps, double u, double* q) noexcept nogil:
    """Sample from eps * uniform + (1 - eps) * sigma; q receives the chosen prob."""
    cdef int i
    cdef double acc = 0.0, qi = 0.0
    for i in range(n):
        qi = eps / n + (1.0 - eps) * sigma[i]
        acc += qi
        if u < acc:
            q[0] = qi
            return i
    q[0] = qi
    return n - 1


cdef double _cutoff_value(Core* c, Machine* m) noexcept nogil:
    cdef double out[2]
    cdef double total = 0.0
    cdef int k, n, a
    cdef int* legal = c.rollout_legal
    cdef char* undo = c.rollout_undo
    cdef char* scratch = c.rollout_state
    cdef bint own_policy = c.params.rollout_game_policy and c.gd.rollout_action != NULL
    if c.params.rollouts <= 0:
        c.gd.returns(c.gd.cfg, m.state, out)
        return out[m.traverser] * c.params.value_scale
    for k in range(c.params.rollouts):
        memcpy(scratch, m.state, c.gd.state_size)
        if c.params.rollout_resample:
            # a deal the traverser cannot tell from the true one: k rollouts
            # average the cutoff over k deals of what it has not seen
            c.gd.resample(c.gd.cfg, scratch, m.traverser, &m.rng)
        while not c.gd.is_terminal(c.gd.cfg, scratch):
            if own_policy:
                a = c.gd.rollout_action(c.gd.cfg, scratch, &m.rng)
            else:
                n = c.gd.legal_actions(c.gd.cfg, scratch, legal)
                a = legal[rng_below(&m.rng, n)]
            c.gd.apply_action(c.gd.cfg, scratch, a, undo)
            c.stats.rollout_moves += 1
        c.gd.returns(c.gd.cfg, scratch, out)
        total += out[m.traverser]
    return total / c.params.rollouts * c.params.value_scale


cdef bint _load_next(Core* c, Machine* m) noexcept nogil:
    """Start the next queued traversal on m; False when the queue is empty."""
    if c.queue_pos >= c.queue_len:
        m.status = M_DONE
        return False
    m.traversal_id = c.queue_ids[c.queue_pos]
    m.traverser = c.queue_traverser[c.queue_pos]
    c.queue_pos += 1
    m.rng = rng_seed(c.run_seed, <uint64_t>c.iteration, <uint64_t>m.traversal_id)
    c.gd.deal_seed(c.gd.cfg, m.state, &m.rng)
    m.prefix = <int>rng_below(&m.rng, c.params.prefix_max + 1) if c.params.prefix_max > 0 else 0
    m.depth = 0
    m.seq = 0
    m.nodes = 0
    m.opp_nodes = 0
    m.ret = 0.0
    m.frames[0].stage = ST_ENTER
    m.frames[0].info_cached = 0
    m.frames[0].reach = 1.0
    m.status = M_RUNNABLE
    return True


cdef inline int64_t _reserve(SampleBuf* b) noexcept nogil:
    """Row index for one sample, or -1 when the buffer is full."""
    if b.count >= b.capacity:
        return -1
    b.count += 1
    return b.count - 1


cdef bint _encode_u8(Core* c, Machine* m, int player, uint8_t* dst) noexcept nogil:
    """m's info state for `player` as a uint8 row at dst (a query's or a
    sample's). False if some value is not an exact uint8 up to wire_u8_max;
    the float row is then in c.scratch_row."""
    if c.gd.info_state_u8 != NULL and c.wire_u8_max >= 255:
        # the game writes uint8 rows itself (every entry fits): no float pass, no packing
        c.gd.info_state_u8(c.gd.cfg, m.state, player, dst)
        return True
    c.gd.info_state(c.gd.cfg, m.state, player, c.scratch_row)
    return _pack_u8(c.scratch_row, dst, c.tensor_size, c.wire_u8_max)


cdef void _samples_to_f32(Core* c, SampleBuf* b, int64_t rows) noexcept nogil:
    """b's first `rows` info rows widened from info_u8 into info; from now on
    (until its next drain) b keeps float32 info rows."""
    cdef int64_t r
    for r in range(rows):
        traverse_widen_u8(b.info_u8 + r * c.tensor_size, b.info + r * c.tensor_size, c.tensor_size)
    b.u8 = 0


cdef void _write_info(Core* c, SampleBuf* b, int64_t row, Machine* m, Frame* f) noexcept nogil:
    """The sample's info row: uint8 while b.u8 (the wire layout; a copy of the
    node's query row when kept), else float32."""
    cdef const uint8_t* cached = m.info_u8 + <size_t>(m.depth - m.prefix) * c.tensor_size
    cdef uint8_t* dst8
    if b.u8:
        dst8 = b.info_u8 + row * c.tensor_size
        if f.info_cached:
            memcpy(dst8, cached, c.tensor_size)
            return
        if _encode_u8(c, m, f.player, dst8):
            return
        # a value that is not an exact uint8: this buffer goes float32
        _samples_to_f32(c, b, row)
        memcpy(b.info + row * c.tensor_size, c.scratch_row, c.tensor_size * sizeof(float))
        return
    if f.info_cached:
        # the node's own query row (wire layout, uint8): the same info state, not encoded again
        traverse_widen_u8(cached, b.info + row * c.tensor_size, c.tensor_size)
    else:
        c.gd.info_state(c.gd.cfg, m.state, f.player, b.info + row * c.tensor_size)


cdef void _write_common(Core* c, SampleBuf* b, int64_t row, Machine* m, Frame* f,
                        const int* legal, const double* target) noexcept nogil:
    cdef int i
    cdef float* t = b.target + row * c.num_actions
    cdef uint8_t* mk = b.mask + row * c.num_actions
    _write_info(c, b, row, m, f)
    memset(t, 0, c.num_actions * sizeof(float))
    memset(mk, 0, c.num_actions)
    for i in range(f.n_legal):
        t[legal[i]] = <float>target[i]
        mk[legal[i]] = 1
    b.weight[row] = c.weight
    b.player[row] = <int8_t>f.player
    b.traversal[row] = m.traversal_id
    b.seq[row] = m.seq
    m.seq += 1


cdef inline int _block(Core* c, Machine* m) noexcept nogil:
    """A sample buffer is full: park in place until the next drain."""
    c.stats.blocked += 1
    m.status = M_BLOCKED
    return M_BLOCKED


cdef inline bint _pack_u8(const float* src, uint8_t* dst, int n, float hi) noexcept nogil:
    """dst = src as uint8; False if some value is not an integer in [0, hi]."""
    return traverse_pack_u8(src, dst, n, hi)


cdef void _widen_rows(Core* c, int lo, int hi) noexcept nogil:
    """float rows [lo, hi) from their uint8 copies (exact by construction)."""
    cdef int r
    for r in range(lo, hi):
        traverse_widen_u8(c.requests_u8 + <size_t>r * c.tensor_size, c.requests + <size_t>r * c.tensor_size,
                          c.tensor_size)


cdef int _wire_row(Core* c, Machine* m, int player, bint keep) noexcept nogil:
    """Encode m's info state for `player` into its wire slot; returns the row.
    keep: a uint8 row is also kept in m.info_u8 for this node's sample (False
    for a value cutoff's row: that node writes no sample, and its row is the
    traverser's view, not the player to move's, so it must never stand in
    for a sample's info row)."""
    cdef int row, k
    cdef float* dst
    if player == 0:
        row = c.n_front
        c.n_front += 1
    else:
        c.n_back += 1
        row = c.n_machines - c.n_back
    dst = c.requests + <size_t>row * c.tensor_size
    if not c.wire_u8:
        c.gd.info_state(c.gd.cfg, m.state, player, dst)
        return row
    if _encode_u8(c, m, player, c.requests_u8 + <size_t>row * c.tensor_size):
        k = m.depth - m.prefix
        if keep and 0 <= k < c.info_depths:
            # kept for this node's sample (written after the answer, or after its children)
            memcpy(m.info_u8 + <size_t>k * c.tensor_size, c.requests_u8 + <size_t>row * c.tensor_size,
                   c.tensor_size)
            m.frames[m.depth].info_cached = 1
        return row
    # this game's rows are not all uint8: float32 rows from now on
    c.wire_u8 = 0
    _widen_rows(c, 0, c.n_front - (1 if player == 0 else 0))
    _widen_rows(c, c.n_machines - c.n_back + (1 if player == 1 else 0), c.n_machines)
    memcpy(dst, c.scratch_row, c.tensor_size * sizeof(float))
    return row


cdef inline void _descend(Core* c, Machine* m, int action, double reach) noexcept nogil:
    """Apply `action` at the current frame (undo record kept there) and enter the child."""
    cdef Frame* child = &m.frames[m.depth + 1]
    child.stage = ST_ENTER
    child.info_cached = 0
    child.reach = reach
    c.gd.apply_action(c.gd.cfg, m.state, action, m.undo + m.depth * c.gd.undo_size)
    m.depth += 1


cdef size_t _stack_bytes(Core* c, int frames) noexcept nogil:
    """Bytes of a frame stack of `frames` frames (as _carve_stack lays it out)."""
    cdef size_t n = <size_t>frames, rows = n * c.max_legal
    return (_align8(sizeof(Frame) * n) + 2 * _align8(sizeof(double) * rows) + _align8(sizeof(int) * rows)
            + _align8(<size_t>c.gd.undo_size * n))


cdef void _carve_stack(Core* c, Machine* m, char* base, int frames) noexcept nogil:
    """Point m's frames, sigma, values, legal and undo rows into `base`
    (_stack_bytes(c, frames) bytes); every piece starts on an 8-byte boundary."""
    cdef size_t off = 0, n = <size_t>frames, rows = n * c.max_legal
    m.frames = <Frame*>(base + off); off = _align8(off + sizeof(Frame) * n)
    m.sigma = <double*>(base + off); off = _align8(off + sizeof(double) * rows)
    m.values = <double*>(base + off); off = _align8(off + sizeof(double) * rows)
    m.legal = <int*>(base + off); off = _align8(off + sizeof(int) * rows)
    m.undo = base + off
    m.frames_cap = frames


cdef bint _grow_stack(Core* c, Machine* m) noexcept nogil:
    """Double m's frame stack (at most to stack_depth + 1 frames), keeping
    every frame's contents. False, with c.stack_error set, if the memory is
    not there; m is then unchanged."""
    cdef int old = m.frames_cap
    cdef int frames = old * 2 if old * 2 <= c.stack_depth + 1 else c.stack_depth + 1
    cdef size_t n = <size_t>old, rows = n * c.max_legal
    cdef Frame* frames0 = m.frames
    cdef double* sigma0 = m.sigma
    cdef double* values0 = m.values
    cdef int* legal0 = m.legal
    cdef char* undo0 = m.undo
    cdef char* block = <char*>calloc(_stack_bytes(c, frames), 1)
    if block == NULL:
        c.stack_error = frames
        return False
    _carve_stack(c, m, block, frames)
    memcpy(m.frames, frames0, sizeof(Frame) * n)
    memcpy(m.sigma, sigma0, sizeof(double) * rows)
    memcpy(m.values, values0, sizeof(double) * rows)
    memcpy(m.legal, legal0, sizeof(int) * rows)
    memcpy(m.undo, undo0, <size_t>c.gd.undo_size * n)
    free(m.stack_heap)                  # NULL while the stack was in the arena
    m.stack_heap = block
    return True


cdef inline int _park(Core* c, Machine* m, int index, int player, bint keep) noexcept nogil:
    """Write machine `index`'s request row (`player`'s view of its state, for
    model_ids[player]; `keep`: in the wire layout, also kept for the node's
    sample, see _wire_row) and park it until resume()."""
    cdef int row
    if c.wire:
        row = _wire_row(c, m, player, keep)
    else:
        row = c.n_requests
        c.gd.info_state(c.gd.cfg, m.state, player, c.requests + row * c.tensor_size)
    c.n_requests += 1
    c.request_model[row] = c.params.model_ids[player]
    c.request_machine[row] = index
    c.stats.queries += 1
    m.status = M_WAITING
    return M_WAITING


cdef int _step_machine(Core* c, Machine* m, int index) noexcept nogil:
    """Advance m until it parks, blocks or finishes its traversal queue."""
    cdef Frame* f
    cdef int* legal
    cdef double* sigma
    cdef double* values
    cdef double q, v, cv, r, clip = c.params.value_clip
    cdef double tmp[2]
    cdef int i, a, L = c.max_legal
    cdef int64_t row
    cdef bint finished
    cdef double targets_buf[1]
    while True:
        f = &m.frames[m.depth]
        legal = m.legal + m.depth * L
        sigma = m.sigma + m.depth * L
        values = m.values + m.depth * L
        finished = False
        if f.stage == ST_ENTER:
            if m.depth + 1 >= m.frames_cap and m.frames_cap <= c.stack_depth:
                # no room for a child frame: the stack doubles (a deeper traversal than any so far)
                if not _grow_stack(c, m):
                    return M_RUNNABLE       # nothing of this node done yet; step() raises MemoryError
                f = &m.frames[m.depth]
                legal = m.legal + m.depth * L
                sigma = m.sigma + m.depth * L
                values = m.values + m.depth * L
            if m.depth >= m.prefix:
                m.nodes += 1            # max_nodes counts the traversal proper, not its root prefix
            c.stats.nodes += 1
            c.stats.depth_hist[m.depth if m.depth < DEPTH_BINS else DEPTH_BINS - 1] += 1
            if c.gd.is_terminal(c.gd.cfg, m.state):
                c.gd.returns(c.gd.cfg, m.state, tmp)
                m.ret = tmp[m.traverser] * c.params.value_scale
                c.stats.terminals += 1
                finished = True
            elif m.depth - m.prefix >= c.params.max_depth or m.nodes > c.params.max_nodes:
                c.stats.cutoffs += 1
                if c.params.value_cutoff <= 0.0:
                    m.ret = _cutoff_value(c, m)
                    finished = True
                else:
                    # the learned value: the playouts (if mixed in) run now, before the
                    # machine parks with one row, the traverser's view of this node
                    f.cut_playout = _cutoff_value(c, m) if c.params.value_cutoff < 1.0 else 0.0
                    c.stats.value_cutoffs += 1
                    f.stage = ST_CUTOFF_VALUE
                    return _park(c, m, index, m.traverser, False)
            else:
                f.player = c.gd.current_player(c.gd.cfg, m.state)
                f.n_legal = c.gd.legal_actions(c.gd.cfg, m.state, legal)
                if f.n_legal == 1:
                    c.stats.forced += 1
                    f.chosen = 0
                    f.stage = ST_CHILD_PASS
                    _descend(c, m, legal[0], f.reach)
                    continue
                if c.params.uniform_policy:
                    for i in range(f.n_legal):
                        sigma[i] = 1.0 / f.n_legal
                    f.stage = ST_POLICY
                    continue
                f.stage = ST_POLICY
                return _park(c, m, index, f.player, True)
        elif f.stage == ST_POLICY:
            if m.depth < m.prefix:
                f.stage = ST_SAMPLE_OPP         # root prefix: on-policy, no samples
            elif f.player == m.traverser:
                if c.params.algorithm == ALG_EXTERNAL:
                    f.next_child = 0
                    f.stage = ST_EXPAND
                else:
                    f.chosen = _sample_explore(sigma, f.n_legal, c.params.epsilon, rng_double(&m.rng), &q)
                    f.stage = ST_CHILD_OS
                    _descend(c, m, legal[f.chosen], f.reach * q)
            else:
                m.opp_nodes += 1
                if c.params.strategy_interval > 0 and m.opp_nodes % c.params.strategy_interval == 0:
                    f.stage = ST_WRITE_STRAT
                else:
                    f.stage = ST_SAMPLE_OPP
        elif f.stage == ST_WRITE_STRAT:
            row = _reserve(&c.strat)
            if row < 0:
                return _block(c, m)
            _write_common(c, &c.strat, row, m, f, legal, sigma)
            c.stats.strat_samples += 1
            f.stage = ST_SAMPLE_OPP
        elif f.stage == ST_SAMPLE_OPP:
            f.chosen = _sample(sigma, f.n_legal, rng_double(&m.rng))
            f.stage = ST_CHILD_PASS
            _descend(c, m, legal[f.chosen], f.reach)
        elif f.stage == ST_EXPAND:
            if f.next_child < f.n_legal:
                f.stage = ST_CHILD_ES
                _descend(c, m, legal[f.next_child], f.reach)
            else:
                f.stage = ST_WRITE_ADV
        elif f.stage == ST_CHILD_ES:
            values[f.next_child] = m.ret
            f.next_child += 1
            f.stage = ST_EXPAND
        elif f.stage == ST_WRITE_ADV:
            row = _reserve(&c.adv)
            if row < 0:
                return _block(c, m)
            v = 0.0
            for i in range(f.n_legal):
                v += sigma[i] * values[i]
            for i in range(f.n_legal):
                values[i] = values[i] - v
            _write_common(c, &c.adv, row, m, f, legal, values)
            c.stats.adv_samples += 1
            m.ret = v
            finished = True
        elif f.stage == ST_CHILD_OS:
            row = _reserve(&c.adv)
            if row < 0:
                return _block(c, m)
            q = c.params.epsilon / f.n_legal + (1.0 - c.params.epsilon) * sigma[f.chosen]
            cv = m.ret / q
            v = sigma[f.chosen] * cv
            for i in range(f.n_legal):
                r = ((cv if i == f.chosen else 0.0) - v) / f.reach
                if clip > 0.0:
                    if r > clip:
                        r = clip
                    elif r < -clip:
                        r = -clip
                values[i] = r
            _write_common(c, &c.adv, row, m, f, legal, values)
            c.stats.adv_samples += 1
            m.ret = v
            finished = True
        elif f.stage == ST_CHILD_PASS or f.stage == ST_CUTOFF_VALUE:
            finished = True             # m.ret: the child's value, or the cutoff's (set by resume)
        if finished:
            # return m.ret to the parent frame
            if m.depth == 0:
                c.stats.traversals += 1
                if not _load_next(c, m):
                    return M_DONE
                continue
            m.depth -= 1
            c.gd.undo_action(c.gd.cfg, m.state, m.undo + m.depth * c.gd.undo_size)


cdef int _step_all(Core* c) noexcept nogil:
    cdef int i
    cdef Machine* m
    for i in range(c.n_machines):
        m = &c.machines[i]
        if m.status == M_IDLE:
            if not _load_next(c, m):
                continue
        if m.status == M_RUNNABLE or m.status == M_BLOCKED:
            m.status = M_RUNNABLE
            m.status = _step_machine(c, m, i)
    return c.n_requests


cdef void _resume_rows(Core* c, int lo, int hi, const void* answers) noexcept nogil:
    """Regret matching for request rows [lo, hi), whose answers start at
    `answers`, one row of answer_width after another (float32, or IEEE half
    bits with adv_dtype float16): the group's own buffer or the caller's.
    A value cutoff's row gives its machine the cutoff value instead (column
    num_actions, mixed with the playout mean when 0 < value_cutoff < 1)."""
    cdef int r, i, a
    cdef Machine* m
    cdef Frame* f
    cdef int* legal
    cdef const uint16_t* half
    cdef const float* adv
    cdef float* widened
    cdef double value, w = c.params.value_cutoff
    for r in range(lo, hi):
        m = &c.machines[c.request_machine[r]]
        f = &m.frames[m.depth]
        if f.stage == ST_CUTOFF_VALUE:
            if c.wire_adv_f16:
                value = traverse_half_to_float((<const uint16_t*>answers)[<size_t>(r - lo) * c.answer_width
                                                                         + c.num_actions])
            else:
                value = (<const float*>answers)[<size_t>(r - lo) * c.answer_width + c.num_actions]
            m.ret = value if w >= 1.0 else w * value + (1.0 - w) * f.cut_playout
            m.status = M_RUNNABLE
            continue
        legal = m.legal + m.depth * c.max_legal
        if c.wire_adv_f16:
            # only the legal actions' entries are read: convert just those
            half = <const uint16_t*>answers + <size_t>(r - lo) * c.answer_width
            widened = c.advantages + <size_t>r * c.answer_width
            for i in range(f.n_legal):
                a = legal[i]
                widened[a] = traverse_half_to_float(half[a])
            adv = widened
        else:
            adv = <const float*>answers + <size_t>(r - lo) * c.answer_width
        _regret_match(adv, legal, f.n_legal, m.sigma + m.depth * c.max_legal, c.params.fallback_uniform != 0,
                      &c.stats)
        m.status = M_RUNNABLE


cdef void _resume(Core* c, int n, const void** answers) noexcept nogil:
    """answers: one pointer per wire segment (front, then back, as
    wire_segments() lists them) to its first answer row; NULL for the group's
    own buffers."""
    cdef const void* own[2]
    cdef int k = 0, lo = c.n_machines - c.n_back
    cdef size_t row_bytes = c.answer_width * (sizeof(uint16_t) if c.wire_adv_f16 else sizeof(float))
    cdef const char* base = <const char*>c.advantages_f16 if c.wire_adv_f16 else <const char*>c.advantages
    if not c.wire:
        _resume_rows(c, 0, n, c.advantages)
    else:
        if answers == NULL:
            if c.n_front:
                own[k] = base
                k += 1
            if c.n_back:
                own[k] = base + <size_t>lo * row_bytes
            answers = own
            k = 0
        if c.n_front:
            _resume_rows(c, 0, c.n_front, answers[k])
            k += 1
        if c.n_back:
            _resume_rows(c, lo, c.n_machines, answers[k])
    c.n_requests = 0
    c.n_front = 0
    c.n_back = 0


cdef inline size_t _align8(size_t off) noexcept nogil:
    return (off + 7) & ~(<size_t>7)


# ---------------------------------------------------------------------------
# Python face

STAT_FIELDS = ("nodes", "terminals", "cutoffs", "value_cutoffs", "queries", "forced", "fallbacks", "adv_samples",
               "strat_samples", "traversals", "blocked", "rollout_moves")


class SampleArrays(dict):
    """Columns of drained samples: info, target, mask, weight, player, traversal, seq."""

    def __len__(self):
        return len(self["weight"])


def _alloc_samples(int capacity, int tensor_size, int num_actions, bint wire):
    return {
        "info": np.zeros((capacity, tensor_size), np.float32),
        "info_u8": np.zeros((capacity if wire else 0, tensor_size), np.uint8),
        "target": np.zeros((capacity, num_actions), np.float32),
        "mask": np.zeros((capacity, num_actions), np.uint8),
        "weight": np.zeros(capacity, np.float32),
        "player": np.zeros(capacity, np.int8),
        "traversal": np.zeros(capacity, np.int64),
        "seq": np.zeros(capacity, np.int32),
    }


cdef void _bind_samples(SampleBuf* b, dict arrays):
    cdef float[:, ::1] info = arrays["info"]
    cdef uint8_t[:, ::1] info_u8 = arrays["info_u8"]
    cdef float[:, ::1] target = arrays["target"]
    cdef uint8_t[:, ::1] mask = arrays["mask"]
    cdef float[::1] weight = arrays["weight"]
    cdef int8_t[::1] player = arrays["player"]
    cdef int64_t[::1] traversal = arrays["traversal"]
    cdef int32_t[::1] seq = arrays["seq"]
    b.capacity = weight.shape[0]
    b.count = 0
    b.info = &info[0, 0]
    b.info_u8 = &info_u8[0, 0] if info_u8.shape[0] else NULL
    b.u8 = b.info_u8 != NULL
    b.target = &target[0, 0]
    b.mask = &mask[0, 0]
    b.weight = &weight[0]
    b.player = &player[0]
    b.traversal = &traversal[0]
    b.seq = &seq[0]


cdef class MachineGroup:
    """M traversal state machines over one game, with their buffers.

    Python owns every buffer (numpy); C keeps pointers set once here.
    """
    cdef Core core
    cdef readonly object game
    cdef readonly object requests           # float32 [M, tensor_size]
    cdef readonly object request_model      # int32 [M]
    cdef readonly object request_machine    # int32 [M]
    cdef readonly object advantages         # float32 [M, answer_width]
    cdef readonly object requests_u8        # uint8 [M, tensor_size] (wire layout only)
    cdef readonly object advantages_f16     # float16 [M, answer_width] (wire layout, adv_dtype float16)
    cdef object _scratch_row
    cdef dict _adv
    cdef dict _strat
    cdef object _queue_ids
    cdef object _queue_traverser
    cdef char* _arena

    def __cinit__(self):
        memset(&self.core, 0, sizeof(Core))
        self._arena = NULL

    def __init__(self, Game game, config, int n_machines=256, int adv_capacity=4096,
                 int strat_capacity=4096, bint wire=False, adv_dtype="float32", int stack_frames=256):
        """stack_frames: frames each machine's stack holds at the start (at
        least 2); a traversal that goes deeper doubles its machine's stack, up
        to prefix_max + max_depth + 1 frames. Every traversal's result is the
        same whatever it is."""
        cdef Core* c = &self.core
        cdef int i, D, L, F
        cdef Machine* m
        cdef size_t per_machine, off, shared, stack
        if n_machines < 1:
            raise ValueError(f"n_machines must be >= 1, got {n_machines}")
        if stack_frames < 2:
            raise ValueError(f"stack_frames must be >= 2 (the root and a child), got {stack_frames}")
        if adv_capacity < 1 or strat_capacity < 1:
            raise ValueError("sample buffer capacities must be >= 1")
        if adv_dtype not in ("float32", "float16"):
            raise ValueError(f"adv_dtype must be 'float32' or 'float16', got {adv_dtype!r}")
        if adv_dtype == "float16" and not wire:
            raise ValueError("adv_dtype='float16' needs the wire layout (wire=True)")
        self.game = game
        c.gd = game.gd
        c.tensor_size = game.gd.tensor_size
        c.num_actions = game.gd.num_actions
        c.max_legal = game.gd.max_legal if game.gd.max_legal > 0 else game.gd.num_actions
        c.n_machines = n_machines
        self._set_params(config)
        c.answer_width = c.num_actions + (1 if c.params.value_cutoff > 0.0 else 0)
        c.stack_depth = c.params.prefix_max + c.params.max_depth
        D = c.stack_depth + 1
        # query rows kept for the samples: the depths below the traversal root that write them
        # (all of a depth-limited traversal's; the first 16 otherwise, deeper nodes encode again)
        c.info_depths = (min(c.params.max_depth, 16) if c.params.max_depth > 0 else 16) if wire else 0
        L = c.max_legal
        # every stack starts at F frames (not D: a Lost Cities game with no turn cap has
        # D = 65535, 24 MB of stack a machine, when its traversals reach a few hundred)
        F = min(D, stack_frames)
        stack = _stack_bytes(c, F)
        # one arena for every machine: structs, frame stacks (frames, sigma/values/legal rows,
        # undo), states, kept query rows
        per_machine = stack + <size_t>c.gd.state_size + <size_t>c.info_depths * c.tensor_size
        per_machine = (per_machine + 7 * 8 + 63) & ~(<size_t>63)      # room for the 8-byte alignment
        # the group's rollout scratch (state, undo record, legal row) follows the Machine structs
        shared = _align8(c.gd.state_size) + _align8(c.gd.undo_size) + sizeof(int) * L
        self._arena = <char*>traverse_arena_alloc(sizeof(Machine) * n_machines + shared + per_machine * n_machines
                                                  + 128)
        if self._arena == NULL:
            raise MemoryError(f"cannot allocate {n_machines} machines with stacks of {F} frames")
        c.machines = <Machine*>self._arena
        off = (sizeof(Machine) * n_machines + 63) & ~(<size_t>63)
        c.rollout_state = self._arena + off; off = _align8(off + c.gd.state_size)
        c.rollout_undo = self._arena + off; off = _align8(off + c.gd.undo_size)
        c.rollout_legal = <int*>(self._arena + off); off += sizeof(int) * L
        off = (off + 63) & ~(<size_t>63)
        for i in range(n_machines):
            m = &c.machines[i]
            # every piece starts on an 8-byte boundary (states hold uint64 fields)
            _carve_stack(c, m, self._arena + off, F); off = _align8(off + stack)
            m.stack_heap = NULL
            m.state = self._arena + off; off = _align8(off + c.gd.state_size)
            m.info_u8 = <uint8_t*>(self._arena + off); off += <size_t>c.info_depths * c.tensor_size
            off = (off + 63) & ~(<size_t>63)
            m.status = M_DONE
        self.requests = np.zeros((n_machines, c.tensor_size), np.float32)
        self.request_model = np.zeros(n_machines, np.int32)
        self.request_machine = np.zeros(n_machines, np.int32)
        self.advantages = np.zeros((n_machines, c.answer_width), np.float32)
        cdef float[:, ::1] req = self.requests
        cdef int32_t[::1] rm = self.request_model
        cdef int32_t[::1] rmach = self.request_machine
        cdef float[:, ::1] adv = self.advantages
        c.requests = &req[0, 0]
        c.request_model = &rm[0]
        c.request_machine = &rmach[0]
        c.advantages = &adv[0, 0]
        self.requests_u8 = np.zeros((n_machines if wire else 0, c.tensor_size), np.uint8)
        self._scratch_row = np.zeros(c.tensor_size, np.float32)
        cdef float[::1] scratch = self._scratch_row
        c.scratch_row = &scratch[0]
        cdef uint8_t[:, ::1] req8
        if wire:
            req8 = self.requests_u8
            c.requests_u8 = &req8[0, 0]
        half16 = adv_dtype == "float16"
        self.advantages_f16 = np.zeros((n_machines if half16 else 0, c.answer_width), np.float16)
        cdef uint16_t[:, ::1] adv16
        if half16:
            adv16 = self.advantages_f16.view(np.uint16)
            c.advantages_f16 = &adv16[0, 0]
        c.wire_adv_f16 = half16
        c.wire = wire
        c.wire_u8 = wire
        c.wire_u8_max = 255.0
        self._adv = _alloc_samples(adv_capacity, c.tensor_size, c.num_actions, wire)
        self._strat = _alloc_samples(strat_capacity, c.tensor_size, c.num_actions, wire)
        _bind_samples(&c.adv, self._adv)
        _bind_samples(&c.strat, self._strat)
        self._queue_ids = np.zeros(0, np.int64)
        self._queue_traverser = np.zeros(0, np.int8)

    def __dealloc__(self):
        cdef int i
        if self._arena != NULL:
            for i in range(self.core.n_machines):
                free(self.core.machines[i].stack_heap)
        free(self._arena)

    def _set_params(self, config):
        cdef Params* p = &self.core.params
        alg = config.algorithm
        if alg not in ("external", "outcome"):
            raise ValueError(f"algorithm must be 'external' or 'outcome', got {alg!r}")
        p.algorithm = ALG_EXTERNAL if alg == "external" else ALG_OUTCOME
        if not 0.0 <= config.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {config.epsilon}")
        if p.algorithm == ALG_OUTCOME and config.epsilon <= 0.0:
            raise ValueError("outcome sampling needs epsilon > 0")
        p.epsilon = config.epsilon
        if config.value_clip < 0:
            raise ValueError(f"value_clip must be >= 0, got {config.value_clip}")
        p.value_clip = config.value_clip
        p.value_scale = config.value_scale
        max_depth = config.max_depth if config.max_depth > 0 else self.game.max_game_length()
        if max_depth < 1 or max_depth > 100000:
            raise ValueError(f"max_depth must be in [1, 100000], got {max_depth}")
        p.max_depth = max_depth
        p.max_nodes = config.max_nodes if config.max_nodes > 0 else (1 << 62)
        if config.rollouts < 0:
            raise ValueError(f"rollouts must be >= 0, got {config.rollouts}")
        p.rollouts = config.rollouts
        if config.rollout_policy not in ("random", "game"):
            raise ValueError(f"rollout_policy must be 'random' or 'game', got {config.rollout_policy!r}")
        p.rollout_game_policy = config.rollout_policy == "game"
        if config.rollout_resample and self.core.gd.resample == NULL:
            raise ValueError(f"rollout_resample: {self.game.name} has no hidden cards to redeal")
        p.rollout_resample = 1 if config.rollout_resample else 0
        if not 0 <= config.prefix_max <= 100000:
            raise ValueError(f"prefix_max must be in [0, 100000], got {config.prefix_max}")
        p.prefix_max = config.prefix_max
        if config.fallback not in ("argmax", "uniform"):
            raise ValueError(f"fallback must be 'argmax' or 'uniform', got {config.fallback!r}")
        p.fallback_uniform = config.fallback == "uniform"
        if config.strategy_interval < 0:
            raise ValueError(f"strategy_interval must be >= 0, got {config.strategy_interval}")
        p.strategy_interval = config.strategy_interval
        p.uniform_policy = 1 if config.uniform_policy else 0
        p.model_ids[0] = config.model_ids[0]
        p.model_ids[1] = config.model_ids[1]
        w = getattr(config, "value_cutoff", 0.0)
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0.0 <= w <= 1.0:
            raise ValueError(f"value_cutoff must be a number in [0, 1], got {w!r}")
        if w > 0 and config.uniform_policy:
            raise ValueError("value_cutoff > 0 needs a network to answer the value; uniform_policy has none")
        p.value_cutoff = w

    # ---- jobs
    def start(self, traversal_ids, traversers, int64_t iteration, uint64_t run_seed, float weight=1.0):
        """Queue traversals: ids (int64) with their traverser players. The
        machines take them in order; any earlier queue must be finished."""
        cdef Core* c = &self.core
        cdef int i
        if not self.finished():
            raise RuntimeError("start(): the previous traversals have not finished")
        ids = np.array(traversal_ids, dtype=np.int64, copy=True, order="C")
        trav = np.array(np.broadcast_to(traversers, ids.shape), dtype=np.int8, copy=True, order="C")
        if ids.ndim != 1:
            raise ValueError("traversal_ids must be one-dimensional")
        if len(trav) and (trav.min() < 0 or trav.max() > 1):
            raise ValueError("traversers must be 0 or 1")
        self._queue_ids = ids
        self._queue_traverser = trav
        cdef int64_t[::1] qi = self._queue_ids
        cdef int8_t[::1] qt = self._queue_traverser
        c.queue_ids = &qi[0] if len(ids) else NULL
        c.queue_traverser = &qt[0] if len(ids) else NULL
        c.queue_len = len(ids)
        c.queue_pos = 0
        c.iteration = iteration
        c.run_seed = run_seed
        c.weight = weight
        for i in range(c.n_machines):
            c.machines[i].status = M_IDLE

    def extend(self, traversal_ids, traversers):
        """Append traversals to the queue (same iteration, seed and weight as
        start()); machines that had run out of work take them at the next step."""
        cdef Core* c = &self.core
        cdef int i
        ids = np.asarray(traversal_ids, dtype=np.int64)
        if ids.ndim != 1:
            raise ValueError("traversal_ids must be one-dimensional")
        trav = np.broadcast_to(np.asarray(traversers, dtype=np.int8), ids.shape)
        if len(trav) and (trav.min() < 0 or trav.max() > 1):
            raise ValueError("traversers must be 0 or 1")
        pos = int(c.queue_pos)
        self._queue_ids = np.ascontiguousarray(np.concatenate([self._queue_ids[pos:], ids]))
        self._queue_traverser = np.ascontiguousarray(np.concatenate([self._queue_traverser[pos:], trav]))
        cdef int64_t[::1] qi = self._queue_ids
        cdef int8_t[::1] qt = self._queue_traverser
        c.queue_ids = &qi[0] if len(self._queue_ids) else NULL
        c.queue_traverser = &qt[0] if len(self._queue_ids) else NULL
        c.queue_len = len(self._queue_ids)
        c.queue_pos = 0
        for i in range(c.n_machines):
            if c.machines[i].status == M_DONE:
                c.machines[i].status = M_IDLE

    def queued(self):
        """Traversals queued and not yet taken by a machine."""
        return int(self.core.queue_len - self.core.queue_pos)

    def step(self):
        """Advance every runnable machine (GIL released); returns the number of
        request rows now waiting in requests/request_model/request_machine
        (rows [0, n); with wire=True see wire_segments())."""
        cdef int n
        if self.core.n_requests:
            raise RuntimeError("step(): resume() the waiting requests first")
        with nogil:
            n = _step_all(&self.core)
        if self.core.stack_error:
            frames = self.core.stack_error
            self.core.stack_error = 0
            raise MemoryError(f"cannot grow a traversal stack to {frames} frames "
                              f"({_stack_bytes(&self.core, frames)} bytes)")
        return n

    def resume(self, int n, answers=None):
        """Continue the machines of request rows [0, n) from advantages[:n],
        or, in the wire layout, from `answers`: one array per segment of
        wire_segments() (same order and rows, answer_width columns, C order,
        float32, or float16 with adv_dtype="float16"), read in place, with
        no copy into this group's buffers."""
        cdef Core* c = &self.core
        cdef const void* ptr[2]
        cdef const float[:, ::1] mv
        cdef const uint16_t[:, ::1] mv16
        cdef int k
        if n != c.n_requests:
            raise ValueError(f"resume({n}): {c.n_requests} requests are waiting")
        if answers is None:
            with nogil:
                _resume(c, n, NULL)
            return
        if not c.wire:
            raise RuntimeError("resume(n, answers) needs MachineGroup(..., wire=True)")
        rows = [r for r in (c.n_front, c.n_back) if r]
        if len(answers) != len(rows):
            raise ValueError(f"resume: {len(answers)} answer arrays for {len(rows)} segments")
        dtype = np.dtype(np.float16 if c.wire_adv_f16 else np.float32)
        keep = []                       # contiguous arrays, referenced while C reads them
        for k in range(len(rows)):
            a = answers[k]
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (rows[k], c.answer_width):
                raise ValueError(f"resume: answers for segment {k} must be {dtype} of shape "
                                 f"({rows[k]}, {c.answer_width}) (answer_width: {c.num_actions} actions"
                                 f"{' + the value' if c.answer_width > c.num_actions else ''}), got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
            keep.append(np.ascontiguousarray(a))
            if c.wire_adv_f16:
                mv16 = keep[k].view(np.uint16)
                ptr[k] = &mv16[0, 0]
            else:
                mv = keep[k]
                ptr[k] = &mv[0, 0]
        with nogil:
            _resume(c, n, ptr)

    @property
    def n_requests(self):
        return self.core.n_requests

    @property
    def n_machines(self):
        return self.core.n_machines

    @property
    def answer_width(self):
        """Columns of an answer row (advantages, advantages_f16, resume's
        answers): num_actions, and one more, the learned value, with
        value_cutoff > 0."""
        return self.core.answer_width

    @property
    def wire(self):
        """True for the wire layout (MachineGroup(..., wire=True))."""
        return bool(self.core.wire)

    @property
    def wire_dtype(self):
        """Wire layout: 'uint8' while every row fitted uint8 exactly, else 'float32'."""
        return "uint8" if self.core.wire_u8 else "float32"

    @property
    def wire_adv_dtype(self):
        """Wire layout: the dtype answers come back in ('float32' or 'float16')."""
        return "float16" if self.core.wire_adv_f16 else "float32"

    def wire_counts(self):
        """Wire layout: (rows at the front for model_ids[0], rows at the back for model_ids[1])."""
        return int(self.core.n_front), int(self.core.n_back)

    def wire_segments(self):
        """Wire layout: [(model id, rows, advantages)] for each player with rows
        waiting, rows and advantages being views of this group's buffers (the
        answer for `rows` goes into `advantages`, then resume()); advantages
        are float16 views of advantages_f16 with adv_dtype="float16"."""
        cdef Core* c = &self.core
        if not c.wire:
            raise RuntimeError("wire_segments() needs MachineGroup(..., wire=True)")
        rows = self.requests_u8 if c.wire_u8 else self.requests
        adv = self.advantages_f16 if c.wire_adv_f16 else self.advantages
        out = []
        if c.n_front:
            out.append((c.params.model_ids[0], rows[:c.n_front], adv[:c.n_front]))
        if c.n_back:
            lo = c.n_machines - c.n_back
            out.append((c.params.model_ids[1], rows[lo:], adv[lo:]))
        return out

    def finished(self):
        """True when every queued traversal has completed."""
        cdef int i
        for i in range(self.core.n_machines):
            if self.core.machines[i].status != M_DONE:
                return False
        return True

    def blocked(self):
        """Machines waiting for a sample buffer drain."""
        cdef int i, n = 0
        for i in range(self.core.n_machines):
            n += self.core.machines[i].status == M_BLOCKED
        return n

    def pending(self):
        """Traversals queued or running (not yet completed)."""
        cdef int i, n = self.core.queue_len - self.core.queue_pos
        for i in range(self.core.n_machines):
            n += self.core.machines[i].status in (M_RUNNABLE, M_WAITING, M_BLOCKED)
        return n

    # ---- samples
    cdef object _drain(self, SampleBuf* b, dict arrays):
        n = b.count
        out = SampleArrays(info=(arrays["info_u8"] if b.u8 else arrays["info"])[:n].copy())
        out.update({k: v[:n].copy() for k, v in arrays.items() if k not in ("info", "info_u8")})
        b.count = 0
        # the wire layout keeps uint8 rows while its requests do
        b.u8 = b.info_u8 != NULL and self.core.wire_u8
        return out

    def drain_advantage(self):
        """Filled advantage rows (copied out as column arrays); the buffer is
        emptied. info is uint8 in the wire layout while every row is an exact
        uint8 (a quarter of the bytes), else float32."""
        return self._drain(&self.core.adv, self._adv)

    def drain_strategy(self):
        return self._drain(&self.core.strat, self._strat)

    def sample_counts(self):
        return int(self.core.adv.count), int(self.core.strat.count)

    def stack_frames(self):
        """Frames each machine's stack holds now (int32 [M]): the initial
        stack_frames, doubled for each traversal that went deeper."""
        out = np.zeros(self.core.n_machines, np.int32)
        cdef int32_t[::1] o = out
        cdef int i
        for i in range(self.core.n_machines):
            o[i] = self.core.machines[i].frames_cap
        return out

    def stack_bytes(self):
        """Bytes the machines' frame stacks take now (the arena's first
        stacks count until a machine grows out of its own)."""
        cdef size_t total = 0
        cdef int i
        for i in range(self.core.n_machines):
            total += _stack_bytes(&self.core, self.core.machines[i].frames_cap)
        return int(total)

    # ---- stats
    def stats(self, reset=False):
        """Counters summed in C since the last reset, as a dict."""
        cdef Stats* s = &self.core.stats
        out = {name: getattr_stat(s, i) for i, name in enumerate(STAT_FIELDS)}
        out["depth_hist"] = [s.depth_hist[i] for i in range(DEPTH_BINS)]
        if reset:
            memset(s, 0, sizeof(Stats))
        return out


cdef int64_t getattr_stat(Stats* s, int i):
    cdef int64_t* fields = <int64_t*>s
    return fields[i]


# ---------------------------------------------------------------------------
# tiny wrappers so tests reach the nogil internals

def _py_regret_match(adv, legal, bint uniform_fallback):
    """(sigma, fallback fired) from the C regret matching."""
    cdef float[::1] a = np.ascontiguousarray(adv, dtype=np.float32)
    cdef int[::1] l = np.ascontiguousarray(legal, dtype=np.intc)
    cdef double[::1] sigma = np.zeros(len(legal), np.float64)
    cdef Stats stats
    memset(&stats, 0, sizeof(Stats))
    _regret_match(&a[0], &l[0], len(legal), &sigma[0], uniform_fallback, &stats)
    return np.asarray(sigma), bool(stats.fallbacks)


def _py_half_to_float(h):
    """float32 values of float16 array h, converted by the C routine resume() uses."""
    cdef uint16_t[::1] src = np.ascontiguousarray(h, dtype=np.float16).view(np.uint16)
    out = np.zeros(len(src), np.float32)
    cdef float[::1] dst = out
    cdef Py_ssize_t i
    for i in range(len(src)):
        dst[i] = traverse_half_to_float(src[i])
    return out


def _py_sample(p, double u):
    cdef double[::1] pp = np.ascontiguousarray(p, dtype=np.float64)
    return _sample(&pp[0], len(p), u)


def _py_pack_u8(x, float hi=255.0):
    """(exact, packed) from the C uint8 packing of float32 row x."""
    cdef float[::1] src = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(len(src), np.uint8)
    cdef uint8_t[::1] dst = out
    if len(src) == 0:
        return True, out
    return bool(_pack_u8(&src[0], &dst[0], len(src), hi)), out


def _py_set_wire_u8_max(MachineGroup group, float hi):
    """Tests: pack only values <= hi as uint8, so the float32 switch happens mid-round."""
    group.core.wire_u8_max = hi

