"""The traversal state machines (traverser/_traverse.pyx) against the
recursive reference (traverser/reference.py), with real PyTorch networks.

Both implement the same algorithms with the same seeding and the same order
of random draws, so after sorting by (traversal, seq) they must produce the
same rows: identical info/mask/player/traversal/seq/weight, and targets equal
up to float noise from batched vs single-row forwards. With one machine per
group every forward has batch size 1, exactly as in the reference, and the
targets must then be bitwise identical.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from traverser._traverse import MachineGroup, STAT_FIELDS  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, merge_stats, run_local, sort_samples  # noqa: E402
from traverser.reference import ReferenceTraverser  # noqa: E402
from traverser_helpers import (  # noqa: E402
    ATOL, CASES, COMBOS, ITERATION, LC_SMALL, RTOL, RUN_SEED, assert_same_samples, case_setup, local, reference,
)

torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# 1. equivalence with the recursive reference

@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "g%d_m%d_t%d_cap%d" % c)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(case, combo):
    ref_adv, ref_strat, counter = reference(case)
    adv, strat, stats, ev = local(case, combo)
    _, machines, _, capacity = combo
    exact = machines == 1          # every forward at batch size 1, as in the reference
    assert len(ref_adv) > 0
    assert_same_samples(adv, ref_adv, exact, f"{case} advantage")
    assert_same_samples(strat, ref_strat, exact, f"{case} strategy")
    n = CASES[case][3]
    for k in ("nodes", "fallbacks", "queries", "terminals", "cutoffs"):
        assert stats[k] == counter[k], (k, stats[k], counter[k])
    assert stats["traversals"] == n
    assert stats["adv_samples"] == len(adv)
    assert stats["strat_samples"] == len(strat)
    assert ev.rows == stats["queries"]
    if len(adv) > capacity or len(strat) > capacity:
        # buffers are only drained when a machine blocks (or at the end)
        assert stats["blocked"] > 0
    if capacity >= 65536:
        assert stats["blocked"] == 0


def test_cases_exercise_their_features():
    """The parametrized cases really reach the code paths they are named for."""
    _, _, c = reference("kuhn_external")
    assert c["fallbacks"] > 0                                   # argmax fallback
    _, _, c = reference("lc_external_max_nodes_uniform_fallback")
    assert c["fallbacks"] > 0 and c["cutoffs"] > 0              # uniform fallback + max_nodes cutoff
    _, _, c = reference("lc_external_depth4")
    assert c["cutoffs"] > 0 and c["terminals"] == 0
    adv, _, stats, _ = local("lc_outcome_depth_rollout", COMBOS[1])
    assert stats["cutoffs"] > 0 and stats["rollout_moves"] > 0
    adv, _, _, _ = local("leduc_outcome_clip", COMBOS[1])
    clip = CASES["leduc_outcome_clip"][2]["value_clip"]
    assert np.abs(adv["target"]).max() == pytest.approx(clip)  # the clip engages
    _, strat, _, _ = local("leduc_external", COMBOS[1])
    assert len(strat) > 0
    # the prefix moves the traversal root below the deal: nodes deeper than max_depth
    for case in ("lc_outcome_prefix", "lc_external_prefix_game_rollout"):
        _, _, stats, _ = local(case, COMBOS[1])
        hist = np.array(stats["depth_hist"])
        assert hist[CASES[case][2]["max_depth"] + 1:].sum() > 0, case
    _, _, stats, _ = local("lc_external_prefix_game_rollout", COMBOS[1])
    assert stats["rollout_moves"] > 0
    # the game's rollout policy is not the uniform one
    game, cfg, ids, trav, models = case_setup("lc_external_prefix_game_rollout", rollout_policy="random")
    adv, _, _ = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED,
                          evaluator=LocalEvaluator(models), machines=4)
    game_adv, _, _, _ = local("lc_external_prefix_game_rollout", COMBOS[1])
    adv = sort_samples(adv)
    assert len(adv) != len(game_adv) or not np.allclose(adv["target"], game_adv["target"])


def test_prefix_changes_the_roots():
    """Sampled roots: the same ids without a prefix give other samples (the prefix
    is drawn and played), yet the cutoff still counts max_depth from the new root."""
    case = "lc_outcome_prefix"
    adv, _, stats, _ = local(case, COMBOS[1])
    game, cfg, ids, trav, models = case_setup(case, prefix_max=0)
    plain, _, plain_stats = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED,
                                      evaluator=LocalEvaluator(models), machines=4)
    rows = {r.tobytes() for r in adv["info"]}
    plain_rows = {r.tobytes() for r in plain["info"]}
    assert rows != plain_rows
    hist, plain_hist = np.array(stats["depth_hist"]), np.array(plain_stats["depth_hist"])
    assert plain_hist[cfg.max_depth + 1:].sum() == 0 and hist[cfg.max_depth + 1:].sum() > 0
    assert stats["cutoffs"] > 0 and plain_stats["cutoffs"] > 0


def test_max_depth_bounds_depth_histogram():
    _, _, stats, _ = local("lc_external_depth4", COMBOS[1])
    hist = np.array(stats["depth_hist"])
    assert hist[5:].sum() == 0 and hist[4] > 0


def test_max_nodes_bounds_nodes_per_traversal():
    game, cfg, ids, trav, models = case_setup("lc_external_max_nodes_uniform_fallback")
    ev = LocalEvaluator(models)
    for tid, p in zip(ids, trav):
        _, _, stats = run_local(game, cfg, [tid], [p], iteration=ITERATION, run_seed=RUN_SEED,
                                evaluator=ev, machines=3)
        # only the first max_nodes nodes of a traversal may be expanded; every later
        # non-terminal node is a cutoff
        interior = stats["nodes"] - stats["cutoffs"] - stats["terminals"]
        assert stats["nodes"] > cfg.max_nodes
        assert 0 < interior <= cfg.max_nodes
        assert stats["cutoffs"] > 0


# ---------------------------------------------------------------------------
# 2. independence of grouping, threads, capacity and id order

@pytest.mark.parametrize("case", ["kuhn_external", "leduc_outcome_clip", "lc_outcome_depth_rollout",
                                  "lc_external_max_nodes_uniform_fallback"])
def test_independent_of_layout(case):
    runs = {combo: local(case, combo) for combo in COMBOS}
    base_adv, base_strat, base_stats, _ = runs[COMBOS[0]]
    for combo, (adv, strat, stats, _) in runs.items():
        exact = combo[1] == 1
        assert_same_samples(adv, base_adv, exact, f"{case} {combo} advantage")
        assert_same_samples(strat, base_strat, exact, f"{case} {combo} strategy")
        for k in STAT_FIELDS:
            if k != "blocked":
                assert stats[k] == base_stats[k], (combo, k)
        assert stats["depth_hist"] == base_stats["depth_hist"]


def test_independent_of_id_order_and_split():
    case = "leduc_outcome_clip"
    game, cfg, ids, trav, models = case_setup(case)
    base_adv, base_strat, _, _ = local(case, COMBOS[0])
    perm = np.random.default_rng(0).permutation(len(ids))
    adv, strat, _ = run_local(game, cfg, ids[perm], trav[perm], iteration=ITERATION, run_seed=RUN_SEED,
                              evaluator=LocalEvaluator(models), groups=3, machines=4, threads=2)
    assert_same_samples(sort_samples(adv), base_adv, what="permuted advantage")
    assert_same_samples(sort_samples(strat), base_strat, what="permuted strategy")
    # two halves run separately give the union
    half = len(ids) // 2
    parts = [run_local(game, cfg, ids[s], trav[s], iteration=ITERATION, run_seed=RUN_SEED,
                       evaluator=LocalEvaluator(models), machines=5)
             for s in (slice(0, half), slice(half, None))]
    adv = sort_samples({k: np.concatenate([p[0][k] for p in parts]) for k in base_adv})
    assert_same_samples(adv, base_adv, what="split advantage")


def test_seed_iteration_and_traverser_matter():
    case = "leduc_external"
    game, cfg, ids, trav, models = case_setup(case)
    base_adv, _, _, _ = local(case, COMBOS[1])
    ev = LocalEvaluator(models)
    other_seed, _, _ = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED + 1, evaluator=ev)
    other_iter, _, _ = run_local(game, cfg, ids, trav, iteration=ITERATION + 1, run_seed=RUN_SEED, evaluator=ev)
    flipped, _, _ = run_local(game, cfg, ids, 1 - trav, iteration=ITERATION, run_seed=RUN_SEED, evaluator=ev)
    for other in (other_seed, other_iter, flipped):
        other = sort_samples(other)
        assert len(other) != len(base_adv) or not np.array_equal(other["info"], base_adv["info"])
    np.testing.assert_array_equal(flipped["player"], 1 - flipped["traversal"] % 2)


# ---------------------------------------------------------------------------
# 3. uniform policy mode

@pytest.mark.parametrize("case", ["kuhn_external", "leduc_outcome_clip", "lc_external_depth4",
                                  "lc_external_max_nodes_uniform_fallback"])
@pytest.mark.parametrize("combo", [(1, 1, 1, 65536), (3, 4, 2, 2)], ids=lambda c: "g%d_m%d_t%d_cap%d" % c)
def test_uniform_policy_matches_reference(case, combo):
    ref_adv, ref_strat, counter = reference(case, uniform=True)
    adv, strat, stats, _ = local(case, combo, uniform=True)
    assert_same_samples(adv, ref_adv, exact_targets=True, what=f"{case} uniform advantage")
    assert_same_samples(strat, ref_strat, exact_targets=True, what=f"{case} uniform strategy")
    assert stats["queries"] == 0 and counter["queries"] == 0
    assert stats["fallbacks"] == 0
    assert stats["nodes"] == counter["nodes"] and stats["cutoffs"] == counter["cutoffs"]
    assert stats["traversals"] == CASES[case][3]
    if len(strat):
        n_legal = strat["mask"].sum(axis=1, keepdims=True)
        np.testing.assert_allclose(strat["target"], strat["mask"] / n_legal, rtol=1e-6)
    # the uniform run is not the network run
    net_adv, _, _, _ = local(case, combo)
    assert len(net_adv) != len(adv) or not np.allclose(net_adv["target"], adv["target"])


# ---------------------------------------------------------------------------
# 7. sanity of the rows; 8. depth histogram

@pytest.mark.parametrize("case", list(CASES))
def test_sample_sanity(case):
    adv, strat, stats, _ = local(case, COMBOS[1])
    ids = case_setup(case)[2]
    assert len(adv) > 0
    for name, s in (("advantage", adv), ("strategy", strat)):
        mask = s["mask"].astype(bool)
        assert set(np.unique(s["mask"])) <= {0, 1}
        assert np.all(s["target"][~mask] == 0.0), name
        assert np.all(mask.sum(axis=1) >= 2), name          # forced nodes write no sample
        assert np.all(s["weight"] == ITERATION), name
        assert set(s["traversal"].tolist()) <= set(ids.tolist()), name
        assert np.all(np.isfinite(s["target"])), name
        assert np.all(np.isfinite(s["info"])), name
    # advantage samples belong to the traverser, strategy samples to the opponent
    np.testing.assert_array_equal(adv["player"], adv["traversal"] % 2)
    np.testing.assert_array_equal(strat["player"], 1 - strat["traversal"] % 2)
    # strategy targets are distributions over the legal actions
    if len(strat):
        assert np.all(strat["target"] >= 0)
        np.testing.assert_allclose(strat["target"].sum(axis=1), 1.0, atol=1e-5)
    # seq numbers the samples of one traversal 0..k-1 across both buffers
    for tid in ids:
        seqs = np.concatenate([adv["seq"][adv["traversal"] == tid], strat["seq"][strat["traversal"] == tid]])
        np.testing.assert_array_equal(np.sort(seqs), np.arange(len(seqs)))
    # every traversal writes at least one advantage sample when the traverser acts
    if CASES[case][2].get("algorithm", "external") == "external" and case.startswith("leduc"):
        assert set(adv["traversal"].tolist()) == set(ids.tolist())
    # external sampling: the node value is a sigma-average of the child values, so it lies
    # between their min and max: no row of regrets is all-positive or all-negative
    if CASES[case][2].get("algorithm", "external") == "external":
        t = np.where(adv["mask"].astype(bool), adv["target"], np.nan)
        assert not np.any(np.nanmin(t, axis=1) > 1e-6)
        assert not np.any(np.nanmax(t, axis=1) < -1e-6)


def test_weight_override():
    game, cfg, ids, trav, models = case_setup("leduc_outcome_clip")
    adv, strat, _ = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED, weight=0.25,
                              evaluator=LocalEvaluator(models), machines=4)
    assert np.all(adv["weight"] == 0.25) and np.all(strat["weight"] == 0.25)
    base, _, _, _ = local("leduc_outcome_clip", COMBOS[0])
    np.testing.assert_allclose(sort_samples(adv)["target"], base["target"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", list(CASES))
def test_depth_histogram_sums_to_nodes(case):
    _, _, stats, _ = local(case, COMBOS[1])
    hist = stats["depth_hist"]
    assert len(hist) == 64
    assert sum(hist) == stats["nodes"] > 0
    assert hist[0] == CASES[case][3]                    # one root per traversal
    assert all(h >= 0 for h in hist)


def test_merge_stats():
    a = {k: i + 1 for i, k in enumerate(STAT_FIELDS)}
    a["depth_hist"] = [1, 2, 3]
    b = {k: 10 * (i + 1) for i, k in enumerate(STAT_FIELDS)}
    b["depth_hist"] = [4, 5, 6]
    out = merge_stats([a, b])
    assert [out[k] for k in STAT_FIELDS] == [11 * (i + 1) for i in range(len(STAT_FIELDS))]
    assert out["depth_hist"] == [5, 7, 9]


def test_max_nodes_counts_only_the_traversal_proper_not_the_root_prefix():
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {0: net_for_game(game, (16, 16), seed=0), 1: net_for_game(game, (16, 16), seed=1)}
    ids = np.arange(20)
    runs = {}
    for max_nodes in (0, 10):
        cfg = TraverserConfig(algorithm="external", max_depth=4, prefix_max=40, max_nodes=max_nodes,
                              value_scale=0.01)
        adv, _, st = run_local(game, cfg, ids, ids % 2, evaluator=LocalEvaluator(nets), machines=8)
        runs[max_nodes] = (set(adv["traversal"].tolist()), st)
        ref = ReferenceTraverser(game, cfg, nets)
        radv, _ = ref.run(ids, ids % 2)
        assert len(radv) == len(adv) and ref.counter["cutoffs"] == st["cutoffs"]
    # a long prefix never uses up the node budget: the same traversals write samples
    assert runs[10][0] == runs[0][0] and len(runs[0][0]) > 10
    assert runs[10][1]["nodes"] < runs[0][1]["nodes"]     # the budget did prune


def test_local_evaluator_bf16_autocast_is_close_and_validated():
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {0: net_for_game(game, (32, 32), seed=0), 1: net_for_game(game, (32, 32), seed=1)}
    cfg = TraverserConfig(algorithm="outcome", value_scale=0.01)
    outs = {}
    for mode in ("none", "bf16"):
        grp = MachineGroup(game, cfg, n_machines=16)
        grp.start(np.arange(16), 0, 1, 5)
        n = grp.step()
        LocalEvaluator(nets, autocast=mode)(grp, n)
        outs[mode] = grp.advantages[:n].copy()
    assert not np.array_equal(outs["none"], outs["bf16"])            # really ran in bf16
    np.testing.assert_allclose(outs["none"], outs["bf16"], rtol=0.1, atol=0.05)
    with pytest.raises(ValueError, match="autocast must be"):
        LocalEvaluator(nets, autocast="int4")
