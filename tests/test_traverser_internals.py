"""The traversal state machines' internals (traverser/_traverse.pyx): sample
buffer semantics when a MachineGroup is driven directly, regret matching and
sampling, and the errors of bad configs, sizes and protocol misuse, with real
PyTorch networks (split from tests/test_traverser.py on 2026-12-02).
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402
from traverser._traverse import MachineGroup, _py_regret_match, _py_sample  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser_helpers import (  # noqa: E402
    COMBOS, ITERATION, RUN_SEED, assert_same_samples, case_setup, game_for, local, reference,
)

torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# 4. sample buffer semantics, driving a MachineGroup directly

def _concat(parts, like):
    return {k: np.concatenate([p[k] for p in parts]) if parts else like[k][:0] for k in like}


def drive(group, evaluator, on_blocked=None, max_rounds=200000):
    adv, strat = [], []
    rounds = 0
    while not group.finished():
        rounds += 1
        assert rounds < max_rounds, "group does not finish"
        n = group.step()
        assert 0 <= n <= group.requests.shape[0]
        assert n == group.n_requests
        if n:
            assert set(np.unique(group.request_machine[:n])) <= set(range(group.requests.shape[0]))
            assert len(np.unique(group.request_machine[:n])) == n     # one row per parked machine
            evaluator(group, n)
            group.resume(n)
            assert group.n_requests == 0
        if group.blocked():
            if on_blocked:
                on_blocked(group)
            adv.append(group.drain_advantage())
            strat.append(group.drain_strategy())
    assert group.blocked() == 0 and group.pending() == 0
    assert group.step() == 0                      # nothing left to do
    adv.append(group.drain_advantage())
    strat.append(group.drain_strategy())
    return adv, strat


@pytest.mark.parametrize("which", ["advantage", "strategy"])
def test_capacity_one_blocks_and_loses_nothing(which):
    case = "lc_outcome_depth_rollout"
    game, cfg, ids, trav, models = case_setup(case)
    ev = LocalEvaluator(models)
    caps = dict(adv_capacity=1, strat_capacity=65536) if which == "advantage" else \
        dict(adv_capacity=65536, strat_capacity=1)
    idx = 0 if which == "advantage" else 1
    group = MachineGroup(game, cfg, n_machines=6, **caps)
    group.start(ids, trav, ITERATION, RUN_SEED, float(ITERATION))
    assert group.pending() == len(ids) and not group.finished()
    events = []

    def on_blocked(g):
        counts = g.sample_counts()
        assert counts[idx] == 1, counts          # the full buffer is the one of capacity 1
        assert g.blocked() > 0
        events.append(g.blocked())

    adv_parts, strat_parts = drive(group, ev, on_blocked)
    parts = adv_parts if which == "advantage" else strat_parts
    # each drain at a block gives exactly the one row the buffer holds
    assert len(parts) - 1 == len(events) > 0
    assert all(len(p) == 1 for p in parts[:-1])
    assert len(parts[-1]) <= 1                     # the final drain after the last traversal
    stats = group.stats()
    assert stats["blocked"] >= len(events) > 0
    assert stats["traversals"] == len(ids)

    big = MachineGroup(game, cfg, n_machines=6)
    big.start(ids, trav, ITERATION, RUN_SEED, float(ITERATION))
    big_adv, big_strat = drive(big, ev)
    assert big.stats()["blocked"] == 0
    ref_adv, ref_strat, _ = reference(case)
    for got, want, ref in ((adv_parts, big_adv, ref_adv), (strat_parts, big_strat, ref_strat)):
        got = sort_samples(_concat(got, ref))
        want = sort_samples(_concat(want, ref))
        assert len(got) == len(want) == len(ref)
        assert_same_samples(got, want, what=f"capacity 1 ({which})")
        assert_same_samples(got, ref, what=f"capacity 1 ({which}) vs reference")
    assert stats["adv_samples"] == big.stats()["adv_samples"] == len(ref_adv)
    assert stats["strat_samples"] == big.stats()["strat_samples"] == len(ref_strat)


def test_group_reuse_and_drain_empties():
    case = "leduc_external"
    game, cfg, ids, trav, models = case_setup(case)
    ev = LocalEvaluator(models)
    group = MachineGroup(game, cfg, n_machines=5)
    assert group.finished() and group.pending() == 0
    for it in (ITERATION, ITERATION + 4):
        group.start(ids, trav, it, RUN_SEED, 0.5)
        adv, strat = drive(group, ev)
        adv = sort_samples(_concat(adv, adv[0]))
        want, _, _ = run_local(game, cfg, ids, trav, iteration=it, run_seed=RUN_SEED, weight=0.5, evaluator=ev)
        assert_same_samples(adv, sort_samples(want), what=f"reused group iteration {it}")
        assert np.all(adv["weight"] == 0.5)
        assert group.sample_counts() == (0, 0)
        assert len(group.drain_advantage()) == 0 and len(group.drain_strategy()) == 0
    stats = group.stats(reset=True)
    assert stats["traversals"] == 2 * len(ids)
    assert group.stats()["traversals"] == 0 and sum(group.stats()["depth_hist"]) == 0


def test_empty_queue_and_more_groups_than_ids():
    game, cfg, ids, trav, models = case_setup("kuhn_external")
    group = MachineGroup(game, cfg, n_machines=3)
    group.start(np.zeros(0, np.int64), 0, 1, 0)
    assert group.step() == 0 and group.finished() and group.pending() == 0
    adv, strat, stats = run_local(game, cfg, ids[:2], trav[:2], iteration=ITERATION, run_seed=RUN_SEED,
                                  evaluator=LocalEvaluator(models), groups=5, machines=2, threads=2)
    assert stats["traversals"] == 2
    assert set(adv["traversal"]) <= set(ids[:2]) and len(adv) > 0


@pytest.mark.parametrize("case", ["kuhn_external", "leduc_external", "leduc_outcome_clip", "lc_outcome_prefix",
                                  "lc_external_prefix_game_rollout", "lc_external_max_nodes_uniform_fallback"])
def test_stacks_grown_from_two_frames_match_reference(case):
    """Every machine's stack starts at 2 frames and doubles as its traversals
    go deeper, parked, blocked and resumed on the way: the samples and
    counters are the reference's."""
    game, cfg, ids, trav, models = case_setup(case)
    ev = LocalEvaluator(models)
    group = MachineGroup(game, cfg, n_machines=5, adv_capacity=7, strat_capacity=7, stack_frames=2)
    assert group.stack_frames().tolist() == [2] * 5
    group.start(ids, trav, ITERATION, RUN_SEED, float(ITERATION))
    adv_parts, strat_parts = drive(group, ev)
    ref_adv, ref_strat, counter = reference(case)
    for got, ref, what in ((adv_parts, ref_adv, "advantage"), (strat_parts, ref_strat, "strategy")):
        assert_same_samples(sort_samples(_concat(got, ref)), ref, what=f"{case} grown stacks {what}")
    stats = group.stats()
    for k in ("nodes", "fallbacks", "queries", "terminals", "cutoffs"):
        assert stats[k] == counter[k], (k, stats[k], counter[k])
    frames = group.stack_frames()
    deepest = cfg.prefix_max + (cfg.max_depth or game.max_game_length()) + 1
    assert frames.max() > 2 and frames.max() <= deepest         # it grew, never past the deepest frame
    assert all(f == deepest or (f & (f - 1)) == 0 for f in frames.tolist())     # doublings of 2


def test_uncapped_lost_cities_stacks_follow_the_depth_reached():
    """Lost Cities with no turn cap can last 65534 decisions; a machine's
    stack holds what its traversals reached (a few hundred frames), not that,
    and the samples do not depend on where it started."""
    game = engine.load_game("lost_cities")
    assert game.max_game_length() > 60000
    cfg = TraverserConfig(algorithm="outcome", epsilon=0.6, value_scale=0.01, value_clip=10.0, uniform_policy=True)
    ids = np.arange(48)
    runs = []
    for frames in (2, 256, 4096):
        group = MachineGroup(game, cfg, n_machines=16, stack_frames=frames)
        group.start(ids, ids % 2, ITERATION, RUN_SEED, 1.0)
        adv, strat = drive(group, None)
        runs.append((sort_samples(_concat(adv, adv[0])), sort_samples(_concat(strat, strat[0])), group))
    for adv, strat, group in runs[:2]:
        assert_same_samples(adv, runs[2][0], exact_targets=True, what="advantage")
        assert_same_samples(strat, runs[2][1], exact_targets=True, what="strategy")
        assert group.stats()["depth_hist"] == runs[2][2].stats()["depth_hist"]
        frames = group.stack_frames()
        assert 256 <= frames.max() <= 2048                      # games of some hundreds of decisions
        # under 1 MB of stack a machine; sized for the whole game it was 24 MB
        assert group.stack_bytes() < 16 * (1 << 20)
    assert runs[0][2].stack_bytes() == runs[1][2].stack_bytes()      # both doubled to the same sizes
    assert runs[2][2].stack_frames().tolist() == [4096] * 16           # room enough: never grew


def test_stack_frames_below_two_raise():
    with pytest.raises(ValueError, match="stack_frames"):
        MachineGroup(game_for("kuhn_poker", {}), TraverserConfig(), n_machines=2, stack_frames=1)


# ---------------------------------------------------------------------------
# 5. regret matching and sampling internals

def test_regret_match_positive_over_legal_only():
    adv = np.array([1.0, 100.0, 3.0, -2.0, 50.0], np.float32)
    sigma, fb = _py_regret_match(adv, [0, 2, 3], False)
    np.testing.assert_allclose(sigma, [0.25, 0.75, 0.0])
    assert fb is False
    sigma, fb = _py_regret_match(adv, [3, 0], True)
    np.testing.assert_allclose(sigma, [0.0, 1.0])
    assert fb is False


def test_regret_match_argmax_fallback():
    adv = np.array([-1.0, 100.0, -0.5, -3.0], np.float32)
    sigma, fb = _py_regret_match(adv, [0, 2, 3], False)       # illegal 100 ignored
    np.testing.assert_array_equal(sigma, [0.0, 1.0, 0.0])
    assert fb is True
    # ties: the first maximum wins
    sigma, fb = _py_regret_match(np.array([0.0, -1.0, 0.0, 0.0], np.float32), [1, 2, 3, 0], False)
    np.testing.assert_array_equal(sigma, [0.0, 1.0, 0.0, 0.0])
    assert fb is True
    sigma, fb = _py_regret_match(np.array([-2.0, -2.0], np.float32), [1, 0], False)
    np.testing.assert_array_equal(sigma, [1.0, 0.0])


def test_regret_match_uniform_fallback():
    adv = np.array([-1.0, 100.0, 0.0, -3.0], np.float32)
    sigma, fb = _py_regret_match(adv, [0, 2, 3], True)
    np.testing.assert_allclose(sigma, [1 / 3] * 3)
    assert fb is True


def test_regret_match_agrees_with_reference_function():
    from traverser.reference import regret_match
    rng = np.random.default_rng(5)
    for _ in range(200):
        adv = rng.normal(size=8).astype(np.float32)
        if rng.random() < 0.3:
            adv = -np.abs(adv)
        legal = sorted(rng.choice(8, size=rng.integers(2, 9), replace=False).tolist())
        for uf in (False, True):
            counter = {"fallbacks": 0}
            want = regret_match(adv, legal, uf, counter)
            got, fb = _py_regret_match(adv, legal, uf)
            np.testing.assert_allclose(got, want, rtol=1e-12)
            assert fb == bool(counter["fallbacks"])
            assert got.sum() == pytest.approx(1.0)


def test_sample_boundaries():
    p = [0.25, 0.5, 0.25]
    assert _py_sample(p, 0.0) == 0
    assert _py_sample(p, 0.2499) == 0
    assert _py_sample(p, 0.25) == 1
    assert _py_sample(p, 0.7499) == 1
    assert _py_sample(p, 0.75) == 2
    assert _py_sample(p, 0.999999) == 2
    assert _py_sample(p, 1.0) == 2                 # past the total: the last positive entry
    q = [0.0, 0.5, 0.5, 0.0]
    assert _py_sample(q, 0.0) == 1                 # zero-probability entries are never chosen
    assert _py_sample(q, 0.5) == 2
    assert _py_sample(q, 1.0) == 2
    assert _py_sample([0.0, 0.0, 1.0], 0.0) == 2
    assert _py_sample([1.0, 0.0, 0.0], 0.999) == 0
    assert _py_sample([0.0, 0.0, 0.0], 0.3) == 0


# ---------------------------------------------------------------------------
# 6. errors

@pytest.mark.parametrize("kw,field", [
    (dict(algorithm="foo"), "algorithm"),
    (dict(epsilon=1.5), "epsilon"),
    (dict(epsilon=-0.1), "epsilon"),
    (dict(algorithm="outcome", epsilon=0.0), "epsilon"),
    (dict(fallback="x"), "fallback"),
    (dict(rollouts=-1), "rollouts"),
    (dict(rollouts=2, rollout_resample=True), "no hidden cards to redeal"),
    (dict(strategy_interval=-1), "strategy_interval"),
    (dict(value_clip=-1.0), "value_clip"),
    (dict(max_depth=200000), "max_depth"),
    (dict(rollout_policy="x"), "rollout_policy"),
    (dict(prefix_max=-1), "prefix_max"),
])
def test_bad_config_raises(kw, field):
    game = game_for("kuhn_poker", {})
    with pytest.raises(ValueError, match=field):
        MachineGroup(game, TraverserConfig(**kw), n_machines=2)
    with pytest.raises(ValueError, match=field):
        run_local(game, TraverserConfig(**kw, uniform_policy=True), [0, 1], 0)


def test_external_sampling_accepts_epsilon_zero():
    game = game_for("kuhn_poker", {})
    MachineGroup(game, TraverserConfig(epsilon=0.0), n_machines=1)      # only outcome sampling needs it


@pytest.mark.parametrize("kw", [dict(n_machines=0), dict(n_machines=-3), dict(adv_capacity=0),
                                dict(strat_capacity=0)])
def test_machine_group_bad_sizes(kw):
    with pytest.raises(ValueError):
        MachineGroup(game_for("kuhn_poker", {}), TraverserConfig(), **kw)


def test_protocol_errors():
    game, cfg, ids, trav, models = case_setup("leduc_external")
    ev = LocalEvaluator(models)
    group = MachineGroup(game, cfg, n_machines=4)
    group.start(ids, trav, ITERATION, RUN_SEED, float(ITERATION))
    with pytest.raises(RuntimeError):
        group.start(ids, trav, ITERATION, RUN_SEED)        # queue not finished
    n = group.step()
    assert n > 0
    with pytest.raises(RuntimeError):
        group.step()                                     # requests not resumed
    with pytest.raises(ValueError):
        group.resume(n + 1)
    with pytest.raises(ValueError):
        group.resume(n - 1)
    assert group.n_requests == n                         # the failed calls changed nothing
    ev(group, n)
    group.resume(n)
    with pytest.raises(ValueError):
        group.resume(1)                                  # nothing waiting now
    with pytest.raises(RuntimeError):
        group.start(ids, trav, ITERATION, RUN_SEED)
    adv, _ = drive(group, ev)
    got = sort_samples(_concat(adv, adv[0]))
    want, _, _, _ = local("leduc_external", COMBOS[0])
    assert_same_samples(got, want, what="after protocol errors")


def test_start_argument_errors():
    game = game_for("kuhn_poker", {})
    group = MachineGroup(game, TraverserConfig(), n_machines=2)
    with pytest.raises(ValueError, match="traversers"):
        group.start([0, 1], [0, 2], 1, 0)
    with pytest.raises(ValueError, match="traversers"):
        group.start([0, 1], -1, 1, 0)
    with pytest.raises(ValueError):
        group.start([[0, 1]], 0, 1, 0)


def test_run_local_argument_errors():
    game, cfg, ids, trav, models = case_setup("kuhn_external")
    with pytest.raises(ValueError, match="evaluator"):
        run_local(game, cfg, ids, trav)
    with pytest.raises(ValueError, match="threads"):
        run_local(game, cfg, ids, trav, evaluator=LocalEvaluator(models), groups=1, threads=2)
    with pytest.raises(ValueError, match="threads"):
        run_local(game, cfg, ids, trav, evaluator=LocalEvaluator(models), groups=2, threads=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_missing_model_id_raises_key_error(threads):
    game, _, ids, trav, models = case_setup("kuhn_external")
    cfg = TraverserConfig(model_ids=(0, 7))
    with pytest.raises(KeyError, match="no model 7"):
        run_local(game, cfg, ids, trav, evaluator=LocalEvaluator(models), groups=2, machines=3, threads=threads)
    # with both ids present the same config runs, and player 1's rows go to model 7
    ev = LocalEvaluator({0: models[0], 7: models[1]})
    adv, strat, stats = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED, evaluator=ev)
    want_adv, want_strat, _, _ = local("kuhn_external", COMBOS[0])
    assert_same_samples(sort_samples(adv), want_adv, what="model id 7")
    assert_same_samples(sort_samples(strat), want_strat, what="model id 7")


def test_request_rows_name_the_players_model():
    game, _, ids, trav, models = case_setup("leduc_external")
    cfg = TraverserConfig(model_ids=(4, 9))
    group = MachineGroup(game, cfg, n_machines=8)
    group.start(ids, trav, ITERATION, RUN_SEED)
    seen = set()
    ev = LocalEvaluator({4: models[0], 9: models[1]})
    while not group.finished():
        n = group.step()
        if n:
            seen |= set(group.request_model[:n].tolist())
            ev(group, n)
            group.resume(n)
    assert seen == {4, 9}
