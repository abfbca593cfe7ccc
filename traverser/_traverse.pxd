# See traverser/_traverse.pyx for details.
from engine._types cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from engine._game cimport GameDef

cdef enum:
    DEPTH_BINS = 64             # depth histogram bins; deeper nodes land in the last

# algorithms
cdef enum:
    ALG_EXTERNAL = 0
    ALG_OUTCOME = 1

# machine status
cdef enum:
    M_IDLE = 0                  # no traversal loaded
    M_RUNNABLE = 1
    M_WAITING = 2               # parked with a request row written
    M_BLOCKED = 3               # a sample buffer is full; retries after a drain
    M_DONE = 4                  # no traversal left for it

cdef struct Params:
    int algorithm               # ALG_EXTERNAL or ALG_OUTCOME
    double epsilon              # outcome sampling: exploration of the traverser's sampling
    double value_clip           # outcome sampling: |regret target| clip (0 = none)
    double value_scale          # multiplies every utility (terminal and cutoff)
    int max_depth               # decisions from the traversal root before a cutoff
    int prefix_max              # the root is reached by 0..prefix_max on-policy decisions from the deal
    int rollout_game_policy     # cutoff rollouts: 1 = the game's own playout policy, 0 = uniform random
    int64_t max_nodes           # nodes per traversal before every further node is a cutoff
    int rollouts                # cutoff value: 0 = value as it stands, k = mean of k random rollouts
    int rollout_resample        # 1 = each rollout first redeals what the traverser cannot see
    int fallback_uniform        # all regrets <= 0: 1 = uniform, 0 = argmax
    int strategy_interval       # record a strategy sample at every n-th opponent node (0 = never)
    int uniform_policy          # 1 = no network: uniform policy everywhere (engine-side limit)
    int model_ids[2]            # request model id for each player's advantage net
    double value_cutoff         # cutoff value: 0 = playouts only, 1 = learned value only, w = mix

cdef struct Stats:
    int64_t nodes               # nodes entered
    int64_t terminals           # terminal nodes reached
    int64_t cutoffs             # nodes valued by the cutoff estimate
    int64_t value_cutoffs       # cutoffs that asked the learned value (a request row each)
    int64_t queries             # network requests written
    int64_t forced              # nodes with a single legal action (no query)
    int64_t fallbacks           # regret matching found no positive regret
    int64_t adv_samples         # advantage samples written
    int64_t strat_samples       # strategy samples written
    int64_t traversals          # traversals completed
    int64_t blocked             # times a machine found a sample buffer full
    int64_t rollout_moves       # moves made by cutoff rollouts
    int64_t depth_hist[DEPTH_BINS]  # nodes entered per depth

cdef struct SampleBuf:
    float* info                 # [capacity, tensor_size]
    uint8_t* info_u8            # wire layout: [capacity, tensor_size], the rows while u8 is set
    int u8                      # 1: rows [0, count) keep their info in info_u8 (exact uint8)
    float* target               # [capacity, num_actions]: regrets or policy
    uint8_t* mask               # [capacity, num_actions]: legal actions
    float* weight               # [capacity]: linear CFR iteration weight
    int8_t* player              # [capacity]: player whose sample it is
    int64_t* traversal          # [capacity]: traversal id
    int32_t* seq                # [capacity]: position within the traversal
    int64_t capacity
    int64_t count               # rows filled; [count, capacity) free

cdef struct Frame:
    int stage                   # what the machine does next at this depth
    int player                  # player to act at this node
    int n_legal                 # legal actions at this node
    int next_child              # external sampling, traverser node: next child to expand
    int chosen                  # index into legal of the sampled action
    double reach                # outcome sampling: product of the traverser's sampling probs above
    int info_cached             # wire layout: this node's query row is kept in its machine's info_u8
    double cut_playout          # value cutoff with 0 < w < 1: the playout mean computed before parking

cdef struct Machine:
    int status                  # M_* above
    int depth                   # current frame
    int traverser               # player whose regrets this traversal learns
    int32_t seq                 # samples written in this traversal
    int64_t traversal_id        # id of the traversal loaded
    int64_t nodes               # nodes entered in this traversal
    int64_t opp_nodes           # opponent decision nodes seen (strategy interval)
    int prefix                  # decisions sampled on-policy before the traversal root
    uint64_t rng                # own xorshift state
    double ret                  # value returned by the last finished child
    char* state                 # game state
    # the frame stack: frames_cap frames, in the group's arena until the first
    # growth, then in stack_heap (see _grow_stack)
    Frame* frames               # [frames_cap]
    int* legal                  # [frames_cap, max_legal]
    double* sigma               # [frames_cap, max_legal]: current policy at each frame
    double* values              # [frames_cap, max_legal]: child values (external sampling)
    char* undo                  # [frames_cap, undo_size]
    int frames_cap              # frames the stack holds now (2 .. stack_depth + 1)
    char* stack_heap            # the stack's own block once grown out of the arena, else NULL
    uint8_t* info_u8            # wire layout: [info_depths, tensor_size] uint8 query rows of the nodes
                                # prefix .. prefix + info_depths - 1, reused by their samples
