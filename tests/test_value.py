"""The learned value (issue 28, part 2): the value net served beside the
advantages by the batcher (batcher.networks.AdvantageValue), its targets
from the warm start's games (trainer.warmstart, trainer.value), the
hold-out by whole games, its training in a run, its checkpoints and the
config check. Real parts throughout: a real Batcher on loopback, real
self-play games of the engine, a real training run of configs/smoke.yaml."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batcher_helpers as H  # noqa: E402
from batcher_helpers import ATOL, COLS, HIDDEN, LEDUC, forward, leduc_nets, rows_of  # noqa: E402
from batcher.client import infer_blocking  # noqa: E402
from batcher.networks import MLP, AdvantageValue, build_mlp  # noqa: E402
from batcher.weights import net_from_bytes, net_to_bytes, spec_params  # noqa: E402

torch.set_num_threads(1)


def _advantage_value(seed=0, value_hidden=(8, 4)):
    torch.manual_seed(seed)
    adv = MLP(COLS, LEDUC.num_distinct_actions(), HIDDEN, input_scale=LEDUC.input_scale())
    value = MLP(COLS, 1, value_hidden, input_scale=LEDUC.input_scale())
    return AdvantageValue(adv, value)


# ---------------------------------------------------------------------------
# 1. the network and its weights
def test_advantage_value_spec_params_and_bytes_round_trip():
    net = _advantage_value()
    A = LEDUC.num_distinct_actions()
    spec = net.spec()
    assert spec == {"input_size": COLS, "num_actions": A + 1, "hidden": list(HIDDEN), "value_hidden": [8, 4]}
    assert spec_params(spec) == sum(p.numel() for p in net.parameters())
    assert isinstance(build_mlp(spec), AdvantageValue)
    assert isinstance(build_mlp(net.adv.spec()), MLP)
    rows = rows_of("float32", 9, seed=1)
    out = forward(net, rows)
    assert out.shape == (9, A + 1)
    np.testing.assert_array_equal(out[:, :A], forward(net.adv, rows))
    np.testing.assert_array_equal(out[:, A:], forward(net.value, rows))
    again = net_from_bytes(*net_to_bytes(net))
    assert isinstance(again, AdvantageValue) and again.spec() == spec
    np.testing.assert_array_equal(forward(again, rows), out)
    with pytest.raises(ValueError, match="one output"):
        AdvantageValue(net.adv, MLP(COLS, 2, (4,)))
    with pytest.raises(ValueError, match="num_actions"):
        spec_params({**spec, "num_actions": 1})
    with pytest.raises(ValueError, match="bad network spec"):
        spec_params({**spec, "value_hidden": [0]})


def test_batcher_answers_advantages_and_value_in_one_forward():
    nets = leduc_nets()
    A = LEDUC.num_distinct_actions()
    with H.InProcessBatcher({0: (nets[0], 1), 1: (nets[1], 1)}, max_wait_us=0) as srv:
        c = srv.client()
        net = _advantage_value(seed=3)
        assert c.push_weights(0, net, 2)["version"] == 2
        rows = rows_of("uint8", 13, seed=4)
        before = c.stats()
        head, answer = infer_blocking(c, 0, rows)
        after = c.stats()
        assert head["version"] == 2
        assert answer.shape == (13, A + 1)
        np.testing.assert_allclose(answer[:, :A], forward(net.adv, rows), atol=ATOL, rtol=0)
        np.testing.assert_allclose(answer[:, A], forward(net.value, rows)[:, 0], atol=ATOL, rtol=0)
        assert after["forwards"] - before["forwards"] == 1           # both nets in one forward
        assert after["per_model"]["0"]["forwards"] - before["per_model"].get("0", {}).get("forwards", 0) == 1
        head, answer = infer_blocking(c, 1, rows)                     # model 1: a plain MLP, A columns
        assert answer.shape == (13, A)
    assert not srv.errors


# ---------------------------------------------------------------------------
# 2. targets: each row's game's outcome for its player, scored by hand
SMALL = dict(max_turns=200)      # the full game, capped: the heuristic scores in it


def _hand_score(expedition, params):
    """An expedition's score from the rules (docs/engine.md), not the engine's scoring."""
    if not expedition:
        return 0
    numbers = [int(c[1:]) for c in expedition if c[1:] != "w"]
    wagers = len(expedition) - len(numbers)
    score = (sum(numbers) - params["expedition_cost"]) * (1 + wagers)
    return score + (params["bonus_amount"] if len(expedition) >= params["bonus_threshold"] else 0)


def test_value_targets_are_each_games_outcome_for_the_row_player():
    import engine
    from trainer.value import MOVER, OBSERVER, value_rows
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", **SMALL)
    deals, scale = [21, 22, 23, 24], 0.01
    adv, _ = heuristic_rows(game, len(deals), seed=deals[0], advantage=0.05)
    want = {0: [], 1: []}            # (info, outcome, deal) of each player's decisions, in order
    watch = {0: [], 1: []}           # the same of each player's view at the other's decisions
    outcomes = []
    for deal in deals:
        state = game.new_initial_state(seed=deal)
        seen = []
        while not state.is_terminal():
            p = state.current_player()
            seen.append((p, state.information_state_tensor(p), state.information_state_tensor(1 - p)))
            state.apply_action(game.heuristic_action(state))
        d = state.to_dict()
        score = [sum(_hand_score(e, game.params) for e in d["expeditions"][p]) for p in (0, 1)]
        outcome = {0: score[0] - score[1], 1: score[1] - score[0]}
        outcomes.append(outcome[0])
        for p, info, other in seen:
            want[p].append((info, outcome[p], deal))
            watch[1 - p].append((other, outcome[1 - p], deal))
    assert len(set(outcomes)) > 1           # the games differ: a row's target is its own game's
    for p in (0, 1):
        rows = adv[p]
        assert len(rows["outcome"]) == len(want[p])
        np.testing.assert_array_equal(rows["info"], np.asarray([w[0] for w in want[p]], np.float32))
        np.testing.assert_array_equal(rows["outcome"], np.asarray([w[1] for w in want[p]], np.float32))
        np.testing.assert_array_equal(rows["game"], [w[2] for w in want[p]])
    v = value_rows(adv, scale)
    # per player: its decisions (MOVER), then its views at the other's decisions (OBSERVER)
    order = [(w, MOVER) for w in want[0]] + [(w, OBSERVER) for w in watch[0]] + \
            [(w, MOVER) for w in want[1]] + [(w, OBSERVER) for w in watch[1]]
    n = len(order)
    assert n == 2 * (len(want[0]) + len(want[1]))
    assert v["target"].shape == (n, 1) and v["target"].dtype == np.float32 and v["mask"].shape == (n, 1)
    np.testing.assert_allclose(v["target"][:, 0], np.asarray([w[1] * scale for w, _ in order], np.float32),
                               rtol=1e-6)
    np.testing.assert_array_equal(v["game"], [w[2] for w, _ in order])
    np.testing.assert_array_equal(v["kind"], [k for _, k in order])
    np.testing.assert_array_equal(v["info"], np.asarray([w[0] for w, _ in order], np.float32))
    with pytest.raises(ValueError, match="outcome and game"):
        value_rows({k: v for k, v in adv[0].items() if k != "outcome"}, scale)


def test_search_value_rows_are_the_lookaheads_values_of_the_move_and_two_others():
    import engine
    from agents.searcher import SearchPlayer
    from trainer.value import MOVER, OBSERVER, SEARCH, value_rows
    from trainer.warmstart import SEARCH_OTHERS, heuristic_rows
    game = engine.load_game("lost_cities", **SMALL)
    scale, worlds = 0.01, 4
    adv, _ = heuristic_rows(game, 1, seed=31, advantage=0.05, worlds=worlds)
    teacher = SearchPlayer(game, worlds=worlds)
    deck = game.num_distinct_actions() - game.params["colours"] - 1
    state = game.new_initial_state(seed=31)
    want = {0: [], 1: []}          # per player: {info after a candidate (bytes): the search's mean}
    chosen = {0: [], 1: []}
    while not state.is_terminal():
        p = state.current_player()
        teacher.last_values = None
        a = teacher.step(state)
        if teacher.last_values is None:         # a forced move: not searched
            state.apply_action(a)
            continue
        cands, means, seen = teacher.last_values
        options = {}
        for c, m, k in zip(cands, means, seen):
            if k > 0 and c != deck:
                state.apply_action(c)
                options[state.information_state_tensor(p).astype(np.uint8).tobytes()] = m
                if c == a:
                    chosen[p].append(state.information_state_tensor(p).astype(np.uint8).tobytes())
                state.undo_action()
        want[p].append(options)
        state.apply_action(a)           # the teacher's moves, no exploration: the same game as the warm start's
    v = value_rows(adv, scale)
    assert set(np.unique(v["kind"])) == {MOVER, OBSERVER, SEARCH}
    for p in (0, 1):
        rows = adv[p]
        mine = rows["value_kind"] == 1                      # trainer.warmstart.SEARCH
        info, points = rows["value_info"][mine], rows["value_points"][mine]
        # every row is a candidate the search weighed, valued by its mean; each decision adds its choice
        # and at most SEARCH_OTHERS others
        pool = {}
        for options in want[p]:
            pool.update(options)
        for i, x in zip(info, points):
            assert x == pytest.approx(pool[i.tobytes()], abs=1e-4)
        got = {i.tobytes() for i in info}
        assert all(c in got for c in chosen[p])
        assert len(info) <= sum(min(len(o), 1 + SEARCH_OTHERS) for o in want[p])
        assert len(info) > len(chosen[p])                   # others too, not only the moves played


def test_the_warm_start_cache_keeps_outcomes_and_games_and_ignores_older_formats(tmp_path):
    import json
    import engine
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", **SMALL)
    cache = tmp_path / "rows.npz"
    first, again = {}, {}
    a, _ = heuristic_rows(game, 2, seed=5, advantage=0.05, cache=cache, stats=first)
    b, _ = heuristic_rows(game, 2, seed=5, advantage=0.05, cache=cache, stats=again)
    assert not first["cached"] and again["cached"]
    for p in (0, 1):
        for key in ("outcome", "game", "info"):
            np.testing.assert_array_equal(a[p][key], b[p][key])
    with np.load(cache) as z:
        meta = json.loads(str(z["meta"]))
        arrays = {k: z[k] for k in z.files}
    assert meta["format"] == 4
    old = {k: v for k, v in arrays.items() if not k.startswith(("outcome", "game", "v"))}
    old["meta"] = np.array(json.dumps({**meta, "format": 2}))
    np.savez(cache, **old)
    stats = {}
    heuristic_rows(game, 2, seed=5, advantage=0.05, cache=cache, stats=stats)
    assert not stats["cached"]             # a format-2 cache (no outcomes) is played again


# ---------------------------------------------------------------------------
# 3. the hold-out is by whole games
def test_split_by_game_holds_out_whole_games_deterministically():
    from trainer.value import split_by_game
    rng = np.random.default_rng(0)
    games = np.repeat(np.arange(100, 140), rng.integers(1, 30, size=40))
    rows = {"info": np.arange(len(games))[:, None].astype(np.uint8), "target": rng.random((len(games), 1)),
            "weight": np.ones(len(games), np.float32), "game": games}
    train, held = split_by_game(rows, 0.25, seed=3)
    assert len(train["game"]) + len(held["game"]) == len(games)
    assert not set(train["game"]) & set(held["game"])          # no deal on both sides
    assert len(set(held["game"])) == 10 and len(set(train["game"])) == 30
    for g in set(held["game"]):                                  # every row of a held-out game is out
        assert (held["game"] == g).sum() == (games == g).sum()
    again, other = split_by_game(rows, 0.25, seed=3), split_by_game(rows, 0.25, seed=4)
    assert set(again[1]["game"]) == set(held["game"])
    assert set(other[1]["game"]) != set(held["game"])
    # the columns stay together
    np.testing.assert_array_equal(held["target"], rows["target"][np.isin(games, held["game"])])
    # two games: one each side, whatever the share; one game, or share 0: nothing held out
    two = {k: v[np.isin(games, [100, 101])] for k, v in rows.items()}
    for share in (0.01, 0.5, 0.99):
        t, h = split_by_game(two, share, seed=1)
        assert len(set(t["game"])) == 1 and len(set(h["game"])) == 1
    one = {k: v[games == 100] for k, v in rows.items()}
    assert len(split_by_game(one, 0.5, seed=1)[1]["game"]) == 0
    assert len(split_by_game(rows, 0.0, seed=1)[1]["game"]) == 0
    with pytest.raises(ValueError, match="share"):
        split_by_game(rows, 1.0, seed=1)


def test_colour_augmentation_renames_the_info_rows_but_not_the_value_target():
    import engine
    from agents.symmetry import ColourAugment
    from trainer.value import info_only
    game = engine.load_game("lost_cities", **SMALL)
    augment = ColourAugment(game)
    state = game.new_initial_state(seed=2)
    info = np.asarray([state.information_state_tensor(0)] * 8, np.uint8)
    batch = {"info": info, "target": np.arange(8, dtype=np.float32)[:, None], "mask": np.ones((8, 1), np.uint8),
             "weight": np.ones(8, np.float32)}
    out = info_only(augment)(batch, np.random.default_rng(7))
    np.testing.assert_array_equal(out["target"], batch["target"])
    np.testing.assert_array_equal(out["mask"], batch["mask"])
    np.testing.assert_array_equal(out["info"], augment({"info": info}, np.random.default_rng(7))["info"])
    assert not np.array_equal(out["info"], info)                 # some row was renamed
    t = info_only(augment)({k: torch.from_numpy(v) for k, v in batch.items()}, np.random.default_rng(7))
    np.testing.assert_array_equal(t["info"].numpy(), out["info"])
    np.testing.assert_array_equal(t["target"].numpy(), batch["target"])


# ---------------------------------------------------------------------------
# 4. the config
def test_value_cutoffs_need_a_value_net_and_games_to_train_it_on():
    from trainer.config import ConfigError, load_config, validate
    root = Path(__file__).resolve().parents[1]
    with pytest.raises(ConfigError, match=r"train.value_labels: search .*train.warm_start_worlds > 0"):
        load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5"])
    searched = load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                             "train.warm_start_worlds=4"])
    assert searched.train.value_labels == "search"
    cfg = load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                        "train.value_labels=both"])
    assert cfg.train.value_steps == 5 and cfg.network.value_hidden == [256, 256]
    cfg.traversal.value_cutoff = 0.5
    validate(cfg)
    for change in ({"value_steps": 0}, {"warm_start_games": 0}):
        bad = load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                            "train.value_labels=both"])
        for k, v in change.items():
            setattr(bad.train, k, v)
        bad.traversal.value_cutoff = 1.0
        with pytest.raises(ConfigError, match=r"traversal.value_cutoff.*train.value_steps.*train.warm_start_games"):
            validate(bad)
    with pytest.raises(ConfigError, match="train.value_steps: the value net trains on the warm start's games"):
        load_config(root / "configs" / "smoke.yaml", ["train.value_steps=5", "train.value_labels=both"])
    with pytest.raises(ConfigError, match="network.value_hidden"):
        load_config(root / "configs" / "smoke.yaml", ["network.value_hidden=[0]"])
    with pytest.raises(ConfigError, match="train.value_budget_s"):
        load_config(root / "configs" / "smoke.yaml", ["train.value_budget_s=-1"])
    with pytest.raises(ConfigError, match="train.value_labels"):
        load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                      "train.value_labels=outcomes", "train.warm_start_worlds=4"])
    for bad in ("1.5", "-0.1"):
        with pytest.raises(ConfigError, match=r"traversal.value_cutoff: must be a number in \[0, 1\]"):
            load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                          "train.value_labels=both", f"traversal.value_cutoff={bad}"])
    ok = load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                       "train.value_labels=both", "traversal.value_cutoff=1"])
    assert ok.traversal.value_cutoff == 1.0


# ---------------------------------------------------------------------------
# 5. a run: metrics, the prior and the checkpoints hold the value net, a resume restores it
def _small_run(run_dir, settings):
    """`python -m trainer` on configs/smoke.yaml made tiny (one iteration) with `settings` on top, as a real
    subprocess: (the finished process, the first metrics line)."""
    import json
    import subprocess
    root = Path(__file__).resolve().parents[1]
    small = ["train.traversals=40", "train.adv_steps=5", "train.strategy_steps=5", "network.hidden=[16]",
             "eval.lc_games=2", "run.progress=false", "train.warm_start_steps=3", "train.iterations=1",
             "train.value_labels=both", *settings]
    r = subprocess.run([sys.executable, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                        *sum([["--set", s] for s in small], [])], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads((Path(run_dir) / "metrics.jsonl").read_text().splitlines()[0])


def test_a_run_trains_the_value_net_keeps_it_in_its_checkpoints_and_a_resume_restores_it(tmp_path):
    import subprocess
    from agents.checkpoint import load_checkpoint, prior_checkpoint
    root = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    r, m = _small_run(run_dir, ["train.warm_start_games=6", "train.value_steps=40", "network.value_hidden=[32, 16]",
                                "train.augment_colours=true"])
    for key in ("value_heldout_mse", "value_heldout_mean_mse", "value_heldout_zero_mse"):
        assert m[key] >= 0
    assert m["value_steps"] == 40 and m["value_best_step"] == 40 and m["value_train_s"] > 0
    # 6 games: one held out, one for validation, the other four's decisions trained on, each twice (the
    # mover's view and the other player's); the heuristic teacher gives no search values
    assert m["value_heldout_games"] == 1 and m["value_val_games"] == 1 and m["value_val_mse"] >= 0
    assert 0 < m["value_train_rows"] < 2 * m["warm_start_decisions"] and m["value_train_rows"] % 2 == 0
    assert m["value_search_rows"] == 0 and m.get("value_heldout_search_mse") is None
    assert "value net: 40 steps on " in r.stdout and "held-out MSE " in r.stdout and "mean predictor " in r.stdout
    assert f"value held-out MSE {m['value_heldout_mse']:.4g} (mean " in r.stdout      # and in iteration 1's line
    prior = torch.load(prior_checkpoint(run_dir), weights_only=True)
    ckpt = load_checkpoint(run_dir)
    assert ckpt["value_spec"] == {"input_size": ckpt["net_spec"]["input_size"], "num_actions": 1, "hidden": [32, 16]}
    assert prior["value_spec"] == ckpt["value_spec"] and "value" in ckpt["optimizers"]
    for k, v in ckpt["value_net"].items():              # trained in the warm start only: the prior's
        assert torch.equal(prior["value_net"][k], v)
    build_mlp(ckpt["value_spec"]).load_state_dict(ckpt["value_net"])
    r = subprocess.run([sys.executable, "-m", "trainer", "--resume", str(run_dir), "--set", "train.iterations=2",
                        "--set", "run.progress=false"], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = load_checkpoint(run_dir)
    assert resumed["iteration"] == 2 and "value net: " not in r.stdout      # restored, not trained again
    for k, v in ckpt["value_net"].items():
        assert torch.equal(resumed["value_net"][k], v)


def test_the_push_serves_advantages_and_value_with_value_cutoffs_and_the_advantages_alone_without():
    """Supervisor._push_one on a real batcher: with traversal.value_cutoff > 0
    model p answers adv_p and the value net in A + 1 columns, else adv_p
    alone, as before."""
    from types import SimpleNamespace
    from trainer.config import load_config
    from trainer.supervise import Supervisor
    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "configs" / "smoke.yaml", ["train.warm_start_games=10", "train.value_steps=5",
                                                        "train.value_labels=both"])
    nets = leduc_nets()
    A = LEDUC.num_distinct_actions()
    value = MLP(COLS, 1, (8,), input_scale=LEDUC.input_scale())
    rows = rows_of("float32", 7, seed=5)
    with H.InProcessBatcher({0: (nets[0], 0), 1: (nets[1], 0)}) as srv:
        sup = Supervisor.__new__(Supervisor)          # only its push: no services started
        sup.client = srv.client()
        sup.trainer = SimpleNamespace(cfg=cfg, nets={"adv0": nets[0], "adv1": nets[1]}, value_net=value,
                                      versions={0: 0, 1: 0}, device="cpu")
        for cutoff in (0.0, 0.5):
            cfg.traversal.value_cutoff = cutoff
            sup._push_one(1)
            head, answer = infer_blocking(sup.client, 1, rows)
            assert head["version"] == sup.trainer.versions[1]
            np.testing.assert_allclose(answer[:, :A], forward(nets[1], rows), atol=ATOL, rtol=0)
            if cutoff == 0:
                assert answer.shape == (7, A)
            else:
                assert answer.shape == (7, A + 1)
                np.testing.assert_allclose(answer[:, A], forward(value, rows)[:, 0], atol=ATOL, rtol=0)
    assert not srv.errors


def test_train_value_keeps_the_weights_of_its_best_validation_check_and_reports_the_predictors():
    import engine
    from trainer.value import split_by_game, train_value, value_errors, value_rows
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", **SMALL)
    adv, _ = heuristic_rows(game, 12, seed=40, advantage=0.05)
    torch.manual_seed(0)
    net = MLP(game.information_state_tensor_size(), 1, (64, 64), input_scale=game.input_scale())
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    m = train_value(net, opt, adv, 0.01, 5000, 256, "cpu", np.random.default_rng(0), seed=9, held_out_share=0.25)
    # a dozen games are memorised long before 5000 steps: the validation games stopped it
    assert m["value_best_step"] < m["value_steps"] < 5000
    rest, held = split_by_game(value_rows(adv, 0.01), 0.25, 9)
    train, val = split_by_game(rest, 0.1, 10)
    assert m["value_heldout_games"] == 3 and m["value_val_games"] == 1 and m["value_train_rows"] == len(train["game"])
    mean = float(train["target"].mean())
    # the net returned is the one of the best check, not the last
    assert value_errors(net, val, mean)["mse"] == pytest.approx(m["value_val_mse"], rel=1e-9)
    target = held["target"][:, 0].astype(np.float64)
    assert m["value_heldout_zero_mse"] == pytest.approx(float((target ** 2).mean()), rel=1e-9)
    assert m["value_heldout_mean_mse"] == pytest.approx(float(((target - mean) ** 2).mean()), rel=1e-6)
    with torch.inference_mode():
        pred = net(torch.from_numpy(held["info"].astype(np.float32))).double().numpy()[:, 0]
    assert m["value_heldout_mse"] == pytest.approx(float(((pred - target) ** 2).mean()), rel=1e-6)


def test_train_value_learns_the_labels_it_is_given_and_reports_both_kinds():
    import engine
    from trainer.value import MOVER, OBSERVER, SEARCH, split_by_game, train_value, value_rows
    from trainer.warmstart import heuristic_rows
    game = engine.load_game("lost_cities", **SMALL)
    adv, _ = heuristic_rows(game, 6, seed=50, advantage=0.05, worlds=4)
    rest, _ = split_by_game(value_rows(adv, 0.01), 0.2, 3)
    every, _ = split_by_game(rest, 0.1, 4)
    count = {kind: int(np.isin(every["kind"], kinds).sum())
             for kind, kinds in (("outcome", (MOVER, OBSERVER)), ("search", (SEARCH,)))}
    assert count["outcome"] > 0 and count["search"] > 0
    for labels, rows in (("outcome", count["outcome"]), ("search", count["search"]),
                         ("both", count["outcome"] + count["search"])):
        torch.manual_seed(0)
        net = MLP(game.information_state_tensor_size(), 1, (16,), input_scale=game.input_scale())
        m = train_value(net, torch.optim.Adam(net.parameters()), adv, 0.01, 30, 64, "cpu", np.random.default_rng(0),
                        seed=3, held_out_share=0.2, labels=labels)
        assert m["value_train_rows"] == rows, labels
        assert m["value_search_rows"] == (0 if labels == "outcome" else count["search"])
        assert m["value_heldout_mse"] >= 0 and m["value_heldout_search_mse"] >= 0, labels
    with pytest.raises(ValueError, match="value labels must be one of"):
        train_value(net, torch.optim.Adam(net.parameters()), adv, 0.01, 1, 8, "cpu", np.random.default_rng(0), seed=3,
                    labels="all")


def test_a_run_with_value_cutoffs_traverses_through_the_batchers_value_column(tmp_path):
    """The whole service with traversal.value_cutoff 1: the trainer pushes
    AdvantageValue, the batcher answers A + 1 columns, the worker's cutoffs
    read the last one, and the phase's samples come back."""
    _, m = _small_run(tmp_path / "run", ["train.warm_start_games=4", "train.value_steps=20",
                                         "network.value_hidden=[16]", "traversal.value_cutoff=1.0"])
    assert m["samples_adv_0"] > 0 and m["samples_adv_1"] > 0 and m["samples_strat_0"] > 0
    assert m["dropped_rows"] == 0 and m["requeued_jobs"] == 0 and m["restarts"] == 0
