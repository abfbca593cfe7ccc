"""trainer.evaluate (exploitability, matches, CLI) and trainer.plot."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from trainer.evaluate import (evaluate, exploitability, format_table, head_to_head,  # noqa: E402
                              openspiel_exploitability, policy_probs)

torch.set_num_threads(1)

LC_SMALL = dict(colours=3, ranks=5, hand_size=4)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _uniform_net(game):
    net = net_for_game(game, hidden=(8,), seed=0)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    return net


def _random_net(game, seed, sharpness):
    """An untrained net; `sharpness` scales the logits so policies range from
    near uniform to near deterministic."""
    net = net_for_game(game, hidden=(16, 16), seed=seed)
    with torch.no_grad():
        last = net.net[-1]
        last.weight.mul_(sharpness)
        last.bias.mul_(sharpness)
    return net


# ---------------------------------------------------------------- policy

def test_policy_probs_masks_and_normalises():
    game = engine.load_game("leduc_poker")
    net = _random_net(game, 3, 5.0)
    state = game.new_initial_state(deal=[0, 3, 5])
    rows, masks = [], []
    for actions in ([], [2], [2, 2]):  # open, after a raise, after two raises (no raise legal)
        s = game.new_initial_state(deal=[0, 3, 5])
        for a in actions:
            s.apply_action(a)
        rows.append(s.information_state_tensor())
        masks.append(s.legal_actions_mask())
    probs = policy_probs(net, np.stack(rows), np.stack(masks))
    assert probs.dtype == np.float64 and probs.shape == (3, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    assert (probs[np.stack(masks) == 0] == 0).all()
    assert (probs[np.stack(masks) != 0] > 0).all()
    assert policy_probs(net, np.zeros((0, 30), np.float32), np.zeros((0, 3), bool)).shape == (0, 3)
    with pytest.raises(ValueError):
        policy_probs(net, state.information_state_tensor()[None], np.zeros((1, 3), bool))


# ---------------------------------------------------------------- exploitability

try:
    import pyspiel
except ImportError:
    pyspiel = None
needs_pyspiel = pytest.mark.skipif(pyspiel is None, reason="open-spiel not installed")


@needs_pyspiel
@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
@pytest.mark.parametrize("seed,sharpness", [(0, 1.0), (1, 4.0), (2, 20.0)])
def test_own_exploitability_matches_openspiel(name, seed, sharpness):
    game = engine.load_game(name)
    net = _random_net(game, seed, sharpness)
    ours = exploitability(game, net)
    ref = openspiel_exploitability(name, net)
    assert abs(ours["nash_conv"] - ref["nash_conv"]) < 1e-6
    assert abs(ours["exploitability"] - ref["exploitability"]) < 1e-6
    assert ours["exploitability"] == pytest.approx(ours["nash_conv"] / 2)
    assert ours["exploitability"] > 0


@needs_pyspiel
@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_uniform_policy_matches_openspiel_uniform_random(name):
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import exploitability as os_expl
    game = engine.load_game(name)
    net = _uniform_net(game)
    sgame = pyspiel.load_game(name)
    uniform = os_policy.UniformRandomPolicy(sgame)
    want_expl = os_expl.exploitability(sgame, uniform)
    want_nc = os_expl.nash_conv(sgame, uniform)
    ours = exploitability(game, net)
    assert abs(ours["exploitability"] - want_expl) < 1e-9
    assert abs(ours["nash_conv"] - want_nc) < 1e-9
    if name == "kuhn_poker":  # the textbook value: nash_conv 11/12
        assert ours["nash_conv"] == pytest.approx(11 / 12, abs=1e-12)
        assert ours["exploitability"] == pytest.approx(11 / 24, abs=1e-12)


@needs_pyspiel
def test_evaluate_poker_dict_and_table():
    game = engine.load_game("kuhn_poker")
    m = evaluate(game, _uniform_net(game))
    assert set(m) >= {"exploitability", "nash_conv", "openspiel_exploitability", "openspiel_nash_conv"}
    assert abs(m["exploitability"] - m["openspiel_exploitability"]) < 1e-9
    table = format_table(m)
    assert "exploitability" in table and "0.458333" in table
    assert set(evaluate(game, _uniform_net(game), openspiel=False)) == {"exploitability", "nash_conv"}


def test_exploitability_rejects_lost_cities():
    game = engine.load_game("lost_cities", **LC_SMALL)
    with pytest.raises(ValueError):
        exploitability(game, net_for_game(game, hidden=(4,), seed=0))


# ---------------------------------------------------------------- head to head

def _check_counts(r, games):
    assert r["games"] == games
    assert r["wins"] + r["losses"] + r["ties"] == games
    assert 0 <= r["wins"] <= games and 0 <= r["ties"] <= games
    assert r["win_rate"] == r["wins"] / games
    lo, hi = r["win_rate_ci95"]
    assert 0.0 <= lo <= r["win_rate"] <= hi <= 1.0
    dlo, dhi = r["score_diff_ci95"]
    assert dlo <= r["mean_score_diff"] <= dhi
    assert r["games_by_seat"] == [(games + 1) // 2, games // 2]
    assert sum(r["wins_by_seat"]) == r["wins"]


def test_head_to_head_classic_vs_random():
    game = engine.load_game("lost_cities")
    net = net_for_game(game, hidden=(16,), seed=0)
    _check_counts(head_to_head(game, net, "random", 40, seed=5), 40)


def test_head_to_head_reproducible_and_opponents():
    game = engine.load_game("lost_cities", **LC_SMALL)
    net = net_for_game(game, hidden=(8,), seed=1)
    a = head_to_head(game, net, "random", 40, seed=7)
    b = head_to_head(game, net, "random", 40, seed=7)
    assert a == b
    _check_counts(a, 40)
    others = [head_to_head(game, net, "random", 40, seed=s) for s in (8, 9)]
    assert any(o != a for o in others)
    g1 = head_to_head(game, net, "heuristic", 41, seed=7, greedy=True)
    _check_counts(g1, 41)
    assert g1 == head_to_head(game, net, "heuristic", 41, seed=7, greedy=True)
    with pytest.raises(ValueError):
        head_to_head(game, net, "nobody", 2)


class _Recorder(nn.Module):
    """Wraps a net and records the 'player' one-hot (whose view) of every row."""

    def __init__(self, net):
        super().__init__()
        self.inner = net
        self.views = []

    def forward(self, x):
        self.views.append(x[:, :2].argmax(dim=1).tolist())
        return self.inner(x)


def test_head_to_head_alternates_seats():
    game = engine.load_game("lost_cities", **LC_SMALL)
    assert game.information_state_segments()[0] == ("player", 2)
    rec = _Recorder(net_for_game(game, hidden=(8,), seed=2))
    head_to_head(game, rec, "random", 1, seed=3)
    assert rec.views and all(v == [0] for v in rec.views)      # game 0: the net is seat 0
    rec.views.clear()
    head_to_head(game, rec, "heuristic", 2, seed=3)
    # Player 0 moves first, so game 1's opponent (seat 0) plays at once and
    # the first forward serves both games: seat 0 in game 0, seat 1 in game 1.
    assert rec.views[0] == [0, 1]
    assert {p for v in rec.views for p in v} == {0, 1}


def test_evaluate_lost_cities_keys():
    game = engine.load_game("lost_cities", **LC_SMALL)
    m = evaluate(game, net_for_game(game, hidden=(8,), seed=0), lc_games=6, seed=1)
    for opp in ("random", "heuristic"):
        k = f"vs_{opp}"
        assert m[f"{k}_win_rate_lo"] <= m[f"{k}_win_rate"] <= m[f"{k}_win_rate_hi"]
        assert m[f"{k}_score_diff_lo"] <= m[f"{k}_score_diff"] <= m[f"{k}_score_diff_hi"]
        assert m[f"{k}_games"] == 6
    assert "vs_random_win_rate" in format_table(m)


# ---------------------------------------------------------------- CLIs

def test_plot_cli_writes_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for i in range(1, 13):
        d = {"iteration": i, "adv_loss_0": 1.0 / i, "adv_loss_1": 2.0 / i, "strategy_loss": 0.3 / i,
             "nodes_per_s": 1e5 + i, "samples_adv": 100 * i, "time_traverse_s": 2.0, "time_train_s": 1.0}
        if i % 4 == 0:
            d.update(exploitability=1.0 / i, vs_random_win_rate=0.5 + i / 40,
                     vs_random_win_rate_lo=0.4, vs_random_win_rate_hi=0.9)
        lines.append(json.dumps(d))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    r = subprocess.run([sys.executable, "-m", "trainer.plot", str(run)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    paths = [Path(p) for p in r.stdout.split()]
    assert {p.name for p in paths} == {"evaluation.png", "losses.png", "throughput.png", "timings.png"}
    for p in paths:
        assert p.parent == run / "plots"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from trainer.plot import main as plot_main
    out = tmp_path / "elsewhere"
    # Only losses present in this file: one figure.
    (tmp_path / "m2").mkdir()
    (tmp_path / "m2" / "metrics.jsonl").write_text('{"iteration": 1, "strategy_loss": 0.5}\n'
                                                   '{"iteration": 2}\n')
    assert plot_main([str(tmp_path / "m2"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["losses.png"]


def test_plot_cli_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trainer.plot", str(tmp_path / "nothing")], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "metrics" in r.stderr and "Traceback" not in r.stderr
    from trainer.plot import main as plot_main
    (tmp_path / "metrics.jsonl").write_text("\n")
    assert plot_main([str(tmp_path)]) == 2


def _save_kuhn_checkpoint(run_dir, uniform=True):
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("kuhn_poker")
    net = _uniform_net(game) if uniform else net_for_game(game, hidden=(8,), seed=0)
    adv = net_for_game(game, hidden=(8,), seed=1)
    payload = {"config": {"game": {"name": "kuhn_poker", "params": {}}},
               "nets": {"strategy": net.state_dict(), "adv0": adv.state_dict(), "adv1": adv.state_dict()},
               "net_spec": net.spec()}
    return save_checkpoint(run_dir, 1, payload)


def test_evaluate_cli(tmp_path):
    run = tmp_path / "run"
    _save_kuhn_checkpoint(run)
    r = subprocess.run([sys.executable, "-m", "trainer.evaluate", str(run)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("exploitability"))
    assert float(line.split()[-1]) == pytest.approx(11 / 24, abs=1e-5)

    from trainer.evaluate import main as eval_main
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(run / "checkpoints" / "iter_000001.pt"), "--json"]) == 0
    d = json.loads(buf.getvalue())
    assert d["game"] == "kuhn_poker" and d["iteration"] == 1
    assert abs(d["exploitability"] - 11 / 24) < 1e-9
    if pyspiel is not None:
        assert abs(d["openspiel_exploitability"] - 11 / 24) < 1e-9


def test_evaluate_cli_missing_checkpoint(tmp_path):
    for target in (tmp_path / "nope.pt", tmp_path):  # missing file; run dir without checkpoints
        r = subprocess.run([sys.executable, "-m", "trainer.evaluate", str(target)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1
