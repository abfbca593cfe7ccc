"""Shared setup for tests/test_traverser.py and tests/test_traverser_internals.py:
the game cases and thread/capacity combinations, cached games, real PyTorch
networks, reference and state-machine runs, and the sample comparison.

Caches are module-level, so both test files share one set of games, nets and
runs when collected in one process.
"""
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from batcher.networks import MLP, AdvantageValue, net_for_game  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser.reference import ReferenceTraverser  # noqa: E402

HIDDEN = (32, 32)
LC_SMALL = dict(colours=3, ranks=5, hand_size=4)
ITERATION = 3
RUN_SEED = 11
RTOL = ATOL = 1e-5
EXACT_COLUMNS = ("info", "mask", "player", "traversal", "seq", "weight")

# name -> (game, game params, config kwargs, number of traversals)
CASES = {
    "kuhn_external": ("kuhn_poker", {}, dict(), 40),
    "leduc_external": ("leduc_poker", {}, dict(), 24),
    "leduc_outcome_clip": ("leduc_poker", {},
                           dict(algorithm="outcome", epsilon=0.6, value_clip=5.0, strategy_interval=2), 60),
    "lc_outcome_depth_rollout": ("lost_cities", LC_SMALL,
                                 dict(algorithm="outcome", max_depth=12, rollouts=1, value_scale=0.01), 20),
    "lc_external_depth4": ("lost_cities", LC_SMALL, dict(max_depth=4, value_scale=0.01), 6),
    "lc_external_max_nodes_uniform_fallback": ("lost_cities", LC_SMALL,
                                               dict(max_nodes=60, value_scale=0.01, fallback="uniform"), 4),
    # sampled roots (on-policy prefix without samples) and the game's own rollout policy
    "lc_outcome_prefix": ("lost_cities", LC_SMALL,
                          dict(algorithm="outcome", prefix_max=12, max_depth=6, value_scale=0.01), 16),
    "lc_external_prefix_game_rollout": ("lost_cities", LC_SMALL,
                                        dict(prefix_max=8, max_depth=3, rollouts=2, rollout_policy="game",
                                             value_scale=0.01), 6),
    # rollouts over redealt hidden cards (the traverser's view kept)
    "lc_external_resampled_game_rollouts": ("lost_cities", LC_SMALL,
                                            dict(prefix_max=8, max_depth=3, rollouts=3, rollout_policy="game",
                                                 rollout_resample=True, value_scale=0.01), 6),
    "lc_outcome_resampled_random_rollouts": ("lost_cities", LC_SMALL,
                                             dict(algorithm="outcome", max_depth=8, rollouts=2,
                                                  rollout_resample=True, value_scale=0.01), 12),
}

# (groups, machines per group, threads, sample capacity)
COMBOS = [
    (1, 1, 1, 65536),
    (2, 7, 2, 65536),
    (3, 64, 1, 65536),
    (4, 5, 2, 65536),
    (1, 1, 1, 3),
    (2, 7, 2, 3),
    (4, 5, 2, 1),
]

_games, _models, _refs, _runs = {}, {}, {}, {}


def game_for(name, params):
    key = (name, tuple(sorted(params.items())))
    if key not in _games:
        _games[key] = engine.load_game(name, **params)
    return _games[key]


def models_for(game_name, params):
    key = (game_name, tuple(sorted(params.items())))
    if key not in _models:
        g = game_for(game_name, params)
        _models[key] = {0: net_for_game(g, HIDDEN, seed=101), 1: net_for_game(g, HIDDEN, seed=202)}
    return _models[key]


def case_setup(case, **overrides):
    game_name, params, kw, n = CASES[case]
    game = game_for(game_name, params)
    cfg = TraverserConfig(**{**kw, **overrides})
    ids = np.arange(n, dtype=np.int64) * 3 + 1          # not 0..n-1: ids are labels, not positions
    return game, cfg, ids, ids % 2, models_for(game_name, params)


def reference(case, uniform=False):
    key = (case, uniform)
    if key not in _refs:
        game, cfg, ids, trav, models = case_setup(case, uniform_policy=uniform)
        ref = ReferenceTraverser(game, cfg, None if uniform else models)
        adv, strat = ref.run(ids, trav, iteration=ITERATION, run_seed=RUN_SEED)
        _refs[key] = (sort_samples(adv), sort_samples(strat), dict(ref.counter))
    return _refs[key]


def local(case, combo, uniform=False, **kw):
    key = (case, combo, uniform, tuple(sorted(kw.items())))
    if key not in _runs:
        groups, machines, threads, capacity = combo
        game, cfg, ids, trav, models = case_setup(case, uniform_policy=uniform)
        ev = None if uniform else LocalEvaluator(models)
        adv, strat, stats = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED, evaluator=ev,
                                      groups=groups, machines=machines, threads=threads, capacity=capacity, **kw)
        _runs[key] = (sort_samples(adv), sort_samples(strat), stats, ev)
    return _runs[key]


def assert_same_samples(a, b, exact_targets=False, what=""):
    assert len(a) == len(b), f"{what}: {len(a)} rows vs {len(b)}"
    assert set(a) == set(b)
    for col in EXACT_COLUMNS:
        np.testing.assert_array_equal(a[col], b[col], err_msg=f"{what}: column {col}")
        assert a[col].dtype == b[col].dtype, (what, col)
    if exact_targets:
        np.testing.assert_array_equal(a["target"], b["target"], err_msg=f"{what}: target")
    else:
        np.testing.assert_allclose(a["target"], b["target"], rtol=RTOL, atol=ATOL, err_msg=f"{what}: target")


def value_net_for_game(game, hidden=HIDDEN, seed=0):
    """A seeded batcher.networks.AdvantageValue for `game`: its value depends on the input."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    adv = MLP(game.information_state_tensor_size(), game.num_distinct_actions(), hidden,
              input_scale=game.input_scale())
    value = MLP(game.information_state_tensor_size(), 1, hidden, input_scale=game.input_scale())
    torch.random.set_rng_state(gen_state)
    return AdvantageValue(adv, value)
