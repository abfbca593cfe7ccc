"""Value cutoffs (issue 28, part 2): a cutoff node valued by the learned value
the batcher serves next to the advantages (traversal.value_cutoff = w: the
value alone with w = 1, w * value + (1 - w) * playout mean with 0 < w < 1).

The state machines must write the same samples as the recursive reference
(traverser/reference.py) with value cutoffs on, in process and in the wire
layout, and a real worker against a real batcher the same samples as the
in-process run. The nets are real PyTorch modules whose last output column
(the value) depends on the input.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batcher_helpers as H  # noqa: E402
from traverser._traverse import MachineGroup, SampleArrays, _py_set_wire_u8_max  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser.reference import ReferenceTraverser  # noqa: E402
from traverser.worker import run_remote  # noqa: E402
from traverser_helpers import (  # noqa: E402
    ITERATION, LC_SMALL, RUN_SEED, assert_same_samples, game_for, models_for, value_net_for_game,
)

torch.set_num_threads(1)

# name -> (game, game params, config kwargs, number of traversals)
VALUE_CASES = {
    "leduc_external_depth2": ("leduc_poker", {}, dict(max_depth=2), 24),
    "leduc_outcome_depth3_rollouts": ("leduc_poker", {},
                                      dict(algorithm="outcome", epsilon=0.6, max_depth=3, rollouts=2), 40),
    "lc_external_prefix_resampled_game_rollouts": ("lost_cities", LC_SMALL,
                                                   dict(prefix_max=8, max_depth=3, rollouts=2, rollout_policy="game",
                                                        rollout_resample=True, value_scale=0.01), 6),
    # cutoffs by node count land at depths whose query rows a wire machine keeps for its samples
    "lc_external_max_nodes": ("lost_cities", LC_SMALL, dict(max_nodes=60, rollouts=1, value_scale=0.01), 4),
}
WEIGHTS = [1.0, 0.4]
# (groups, machines per group, threads, sample capacity)
COMBOS = [(1, 1, 1, 65536), (2, 7, 2, 3), (3, 64, 1, 65536)]

_value_models, _refs = {}, {}


def value_models(game_name, params):
    key = (game_name, tuple(sorted(params.items())))
    if key not in _value_models:
        g = game_for(game_name, params)
        _value_models[key] = {0: value_net_for_game(g, seed=7), 1: value_net_for_game(g, seed=8)}
    return _value_models[key]


def setup(case, w):
    game_name, params, kw, n = VALUE_CASES[case]
    game = game_for(game_name, params)
    ids = np.arange(n, dtype=np.int64) * 5 + 2
    return game, TraverserConfig(**kw, value_cutoff=w), ids, ids % 2, value_models(game_name, params)


def reference(case, w):
    if (case, w) not in _refs:
        game, cfg, ids, trav, models = setup(case, w)
        ref = ReferenceTraverser(game, cfg, models)
        adv, strat = ref.run(ids, trav, iteration=ITERATION, run_seed=RUN_SEED)
        _refs[case, w] = (sort_samples(adv), sort_samples(strat), dict(ref.counter))
    return _refs[case, w]


def as_float_info(samples):
    out = SampleArrays(samples)
    out["info"] = samples["info"].astype(np.float32)
    return out


def check_counters(stats, counter, w):
    for k in ("nodes", "queries", "terminals", "cutoffs", "value_cutoffs", "fallbacks", "rollout_moves"):
        assert stats[k] == counter[k], (k, stats[k], counter[k])
    assert stats["cutoffs"] > 0 and stats["value_cutoffs"] == stats["cutoffs"]
    if w >= 1.0:
        assert stats["rollout_moves"] == 0              # no playout runs with the value alone


# ---------------------------------------------------------------------------
# in process: the state machines against the reference

@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "g%d_m%d_t%d_cap%d" % c)
@pytest.mark.parametrize("w", WEIGHTS)
@pytest.mark.parametrize("case", list(VALUE_CASES))
def test_value_cutoffs_match_the_reference(case, w, combo):
    ref_adv, ref_strat, counter = reference(case, w)
    game, cfg, ids, trav, models = setup(case, w)
    groups, machines, threads, capacity = combo
    ev = LocalEvaluator(models)
    adv, strat, stats = run_local(game, cfg, ids, trav, iteration=ITERATION, run_seed=RUN_SEED, evaluator=ev,
                                  groups=groups, machines=machines, threads=threads, capacity=capacity)
    exact = machines == 1                               # batch size 1, as in the reference: bitwise equal
    assert len(ref_adv) > 0
    assert_same_samples(sort_samples(adv), ref_adv, exact, f"{case} w={w} advantage")
    assert_same_samples(sort_samples(strat), ref_strat, exact, f"{case} w={w} strategy")
    check_counters(stats, counter, w)
    assert ev.rows == stats["queries"]
    if w < 1.0 and cfg.rollouts > 0:
        assert stats["rollout_moves"] > 0


@pytest.mark.parametrize("case", ["leduc_external_depth2", "lc_external_max_nodes"])
def test_value_rows_survive_the_switch_to_float32_rows(case):
    """The wire group goes from uint8 to float32 rows in the middle of a
    round (rows written before it widened in place, value rows among them):
    the samples are still the reference's."""
    ref_adv, ref_strat, counter = reference(case, 1.0)
    adv, strat, stats = run_wire(case, 1.0, 9, False, lower_at=2)
    assert adv["info"].dtype == np.float32
    assert_same_samples(as_float_info(adv), ref_adv, what=f"{case} switched advantage")
    assert_same_samples(as_float_info(strat), ref_strat, what=f"{case} switched strategy")
    check_counters(stats, counter, 1.0)


def test_the_mix_is_w_times_the_value_plus_the_rest_times_the_playout_value():
    """Leduc, external sampling, cutoffs valued as they stand (rollouts 0, so
    no draws and the same nodes for every w): a target is linear in the
    cutoff values, so the w = 0.4 targets are 0.4 * (w = 1) + 0.6 * (w = 0),
    and the learned value does change them."""
    case = "leduc_external_depth2"
    game, _, ids, trav, models = setup(case, 1.0)
    runs = {w: reference(case, w)[0] for w in (1.0, 0.4)}
    cfg0 = TraverserConfig(**VALUE_CASES[case][2])
    runs[0.0] = sort_samples(ReferenceTraverser(game, cfg0, models).run(ids, trav, ITERATION, RUN_SEED)[0])
    for w in (1.0, 0.4):
        for col in ("info", "mask", "traversal", "seq"):
            np.testing.assert_array_equal(runs[w][col], runs[0.0][col])
    assert np.abs(runs[1.0]["target"] - runs[0.0]["target"]).max() > 1e-3
    np.testing.assert_allclose(runs[0.4]["target"], 0.4 * runs[1.0]["target"] + 0.6 * runs[0.0]["target"],
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# the wire layout: rows by player, answers answer_width wide

def run_wire(case, w, machines, apart, lower_at=None):
    """A wire group stepped to the end; each segment answered by its model's
    forward, into the group's buffers or (apart) as arrays of their own.
    lower_at: from that round on only zeros pack as uint8, so the group
    switches to float32 rows in the middle of a round."""
    game, cfg, ids, trav, models = setup(case, w)
    g = MachineGroup(game, cfg, n_machines=machines, adv_capacity=7, strat_capacity=7, wire=True)
    assert g.answer_width == game.num_distinct_actions() + 1 == g.advantages.shape[1]
    g.start(ids, trav, ITERATION, RUN_SEED, float(ITERATION))
    parts = []
    rounds = 0
    while not g.finished():
        if rounds == lower_at:
            _py_set_wire_u8_max(g, 0.0)
        rounds += 1
        n = g.step()
        if g.blocked() or g.finished():
            parts.append((g.drain_advantage(), g.drain_strategy()))
        if n == 0:
            continue
        answers = []
        for model, rows, adv in g.wire_segments():
            out = H.forward(models[model], rows.astype(np.float32))
            if apart:
                answers.append(np.ascontiguousarray(out))
                adv.fill(np.nan)                      # never read
            else:
                adv[...] = out
        g.resume(n, answers if apart else None)
    parts.append((g.drain_advantage(), g.drain_strategy()))
    out = [sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]}) for i in (0, 1)]
    return out[0], out[1], g.stats()


@pytest.mark.parametrize("apart", [False, True], ids=["own_buffers", "callers_answers"])
@pytest.mark.parametrize("w", WEIGHTS)
@pytest.mark.parametrize("case", list(VALUE_CASES))
def test_value_cutoffs_in_the_wire_layout_match_the_reference(case, w, apart):
    ref_adv, ref_strat, counter = reference(case, w)
    adv, strat, stats = run_wire(case, w, 9, apart)
    assert adv["info"].dtype == np.uint8               # these games' rows stay exact uint8
    assert_same_samples(as_float_info(adv), ref_adv, what=f"{case} w={w} wire advantage")
    assert_same_samples(as_float_info(strat), ref_strat, what=f"{case} w={w} wire strategy")
    check_counters(stats, counter, w)


# ---------------------------------------------------------------------------
# bad settings and bad answers

@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.5", True])
def test_a_bad_value_cutoff_is_refused_naming_it(bad):
    game = game_for("leduc_poker", {})
    with pytest.raises(ValueError, match="value_cutoff must be a number in \\[0, 1\\]"):
        MachineGroup(game, TraverserConfig(max_depth=2, value_cutoff=bad), n_machines=2)


def test_the_worker_command_line_takes_value_cutoff():
    import argparse

    from traverser.__main__ import add_traverser_args, traverser_config_from_args
    ap = add_traverser_args(argparse.ArgumentParser())
    assert traverser_config_from_args(ap.parse_args([])).value_cutoff == 0.0
    assert traverser_config_from_args(ap.parse_args(["--value-cutoff", "0.25"])).value_cutoff == 0.25


def test_value_cutoffs_need_a_network():
    game = game_for("leduc_poker", {})
    with pytest.raises(ValueError, match="value_cutoff > 0 needs a network"):
        MachineGroup(game, TraverserConfig(max_depth=2, value_cutoff=1.0, uniform_policy=True), n_machines=2)


def test_answer_width_is_num_actions_without_value_cutoffs():
    game = game_for("leduc_poker", {})
    A = game.num_distinct_actions()
    for w, width in ((0.0, A), (0.3, A + 1), (1.0, A + 1)):
        g = MachineGroup(game, TraverserConfig(max_depth=2, value_cutoff=w), n_machines=3, wire=True,
                         adv_dtype="float16")
        assert g.answer_width == width
        assert g.advantages.shape == (3, width) and g.advantages_f16.shape == (3, width)


def test_answers_of_the_wrong_width_are_refused_naming_answer_width():
    game, cfg, ids, trav, models = setup("leduc_external_depth2", 1.0)
    A = game.num_distinct_actions()
    g = MachineGroup(game, cfg, n_machines=4, wire=True)
    g.start(ids[:4], trav[:4], ITERATION, RUN_SEED, 1.0)
    n = g.step()
    narrow = [np.ones((len(rows), A), np.float32) for _, rows, _ in g.wire_segments()]
    with pytest.raises(ValueError, match=f"answer_width: {A} actions \\+ the value"):
        g.resume(n, narrow)
    assert g.n_requests == n                             # nothing resumed
    # the local evaluator: a plain advantage net answers num_actions columns only
    plain = models_for("leduc_poker", {})
    with pytest.raises(ValueError, match=f"answer_width is {A + 1}"):
        run_local(game, cfg, ids, trav, evaluator=LocalEvaluator(plain), machines=4)
    # and a value net's A + 1 columns do not fit a group without value cutoffs
    cfg0 = TraverserConfig(**VALUE_CASES["leduc_external_depth2"][2])
    with pytest.raises(ValueError, match=f"answer_width is {A}"):
        run_local(game, cfg0, ids, trav, evaluator=LocalEvaluator(models), machines=4)


def test_float16_answers_carry_the_value_column():
    """With adv_dtype float16 the value is read from the half-float answer's
    last column: the samples equal a float32 run on the same rounded values."""
    case, w = "lc_external_prefix_resampled_game_rollouts", 0.4
    game, cfg, ids, trav, models = setup(case, w)
    out = {}
    for dtype in ("float32", "float16"):
        g = MachineGroup(game, cfg, n_machines=5, wire=True, adv_dtype=dtype)
        g.start(ids, trav, ITERATION, RUN_SEED, 1.0)
        parts = []
        while not g.finished():
            n = g.step()
            if g.blocked() or g.finished():
                parts.append(g.drain_advantage())
            if n == 0:
                continue
            for model, rows, adv in g.wire_segments():
                # rows answered one at a time: a row's answer does not depend on its batch
                ans = np.concatenate([H.forward(models[model], rows[i:i + 1].astype(np.float32))
                                      for i in range(len(rows))])
                adv[...] = ans.astype(np.float16).astype(adv.dtype)
            g.resume(n)
        parts.append(g.drain_advantage())
        out[dtype] = sort_samples({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    assert len(out["float32"]) > 0
    for col in out["float32"]:
        np.testing.assert_array_equal(out["float16"][col], out["float32"][col], err_msg=col)


# ---------------------------------------------------------------------------
# the remote path: a real batcher serving the (A + 1)-column nets, a real worker

@pytest.mark.parametrize("transport", ["socket", "shm"])
def test_a_worker_against_a_batcher_with_value_nets_makes_the_local_samples(transport, tmp_path):
    """A real batcher serving the (A + 1)-column nets as models 0 and 1, a real
    worker (run_remote) with value_cutoff 1 on Lost Cities, the rows and
    answers through the socket or a shared-memory slot: the samples of the
    in-process run with the same nets."""
    game = H.LC
    cfg = TraverserConfig(**H.LC_CFG, value_cutoff=1.0)
    nets = {0: value_net_for_game(game, H.HIDDEN, seed=3), 1: value_net_for_game(game, H.HIDDEN, seed=4)}
    ids = np.arange(30)
    shm = {"shm_dir": str(tmp_path)} if transport == "shm" else {}
    with H.InProcessBatcher(H.served(nets), **shm) as srv:
        parts = []
        stats = run_remote(game, cfg, srv.endpoint, ids, ids % 2, 3, 11, 3.0,
                           lambda a, s: parts.append((a, s)), groups_per_thread=2, machines=7,
                           context=srv.ctx, timeout_s=30, **shm)
        assert srv.serving()
        if shm:
            assert stats["shm_fallback"] is None and srv.client().stats()["shm_requests"] > 0
    ref_adv, ref_strat, ref = run_local(game, cfg, ids, ids % 2, iteration=3, run_seed=11, weight=3.0,
                                        evaluator=LocalEvaluator(nets), machines=9)
    for k in ("nodes", "terminals", "cutoffs", "value_cutoffs", "queries", "adv_samples", "strat_samples",
              "traversals"):
        assert stats[k] == ref[k], k
    assert stats["value_cutoffs"] == stats["cutoffs"] > 0 and stats["rollout_moves"] == 0
    for i, ref_s in ((0, ref_adv), (1, ref_strat)):
        got = sort_samples({k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]})
        assert len(got["weight"]) > 0
        assert_same_samples(as_float_info(got), sort_samples(ref_s), what=f"remote vs local {i}")


def test_a_worker_refuses_a_batcher_whose_nets_answer_no_value():
    """value_cutoff 1 against plain advantage nets (num_actions columns): the
    worker stops with the error naming answer_width."""
    game = H.LC
    cfg = TraverserConfig(**H.LC_CFG, value_cutoff=1.0)
    ids = np.arange(6)
    with H.InProcessBatcher(H.served(H.nets_for(game))) as srv:
        with pytest.raises(ValueError, match="answer_width"):
            run_remote(game, cfg, srv.endpoint, ids, ids % 2, 1, 0, 1.0, lambda a, s: None,
                       groups_per_thread=1, machines=3, context=srv.ctx, timeout_s=10)


def test_the_cutoffs_benchmark_runs_both_modes_on_the_same_roots():
    """traverser.bench --cutoffs, small: both modes visit nodes, the value
    mode values every cutoff by the net and plays no playout, the playout
    mode the reverse, and the device is recorded."""
    from traverser.bench import bench_cutoffs
    r = bench_cutoffs(rounds=1, traversals=16, machines=8, hidden=(16,), device="cpu")
    assert r["device"] == "cpu" and len(r["runs"]["playout"]) == len(r["runs"]["value"]) == 1
    play, val = r["runs"]["playout"][0], r["runs"]["value"][0]
    assert play["cutoffs"] > 0 and play["value_cutoffs"] == 0 and play["rollout_moves"] > 0
    assert val["cutoffs"] == val["value_cutoffs"] > 0 and val["rollout_moves"] == 0
    assert val["request_rows"] > play["request_rows"]          # a row for every cutoff on top of the queries
    assert r["value_over_playout_nodes_per_s"] > 0


@pytest.mark.parametrize("argv,match", [
    (["--cutoffs", "--device", "cuda"], "--device cuda: CUDA is not available"),
    (["--cutoffs", "--device", "tpu"], "--device tpu: unknown device"),
    (["--device", "cuda:0"], "--device goes with --cutoffs"),
])
def test_the_cutoffs_benchmark_refuses_a_device_it_cannot_use_by_name(argv, match, capsys):
    from traverser import bench
    if "cuda" in argv[-1] and "--cutoffs" in argv and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert match in capsys.readouterr().err
