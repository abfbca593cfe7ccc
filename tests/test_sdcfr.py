"""agents.sdcfr: SD-CFR's exact average policy for Kuhn and Leduc."""
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import engine
from batcher.networks import net_for_game
from trainer import checkpoint as ck
from trainer.config import ConfigError, load_config
from agents.evaluate import exploitability, main as eval_main, openspiel_exploitability
from agents.sdcfr import TabularAverage
from traverser._traverse import _py_regret_match

ROOT = Path(__file__).resolve().parent.parent
torch.set_num_threads(1)

try:
    import pyspiel  # noqa: F401
except ImportError:  # pragma: no cover
    pyspiel = None


def _sharp_net(game, seed, sharpness=4.0):
    """An untrained advantage net whose outputs have both signs and a spread."""
    net = net_for_game(game, hidden=(16, 16), seed=seed)
    with torch.no_grad():
        net.net[-1].weight.mul_(sharpness)
        net.net[-1].bias.mul_(sharpness)
    return net


def _sigma(avg, net, player):
    """One net's regret-matching policy on `player`'s info states (zeros elsewhere)."""
    rows = avg.player == player
    with torch.inference_mode():
        adv = net(torch.from_numpy(avg.infos[rows])).double().numpy()
    sigma = np.zeros(avg.num.shape)
    sigma[rows] = avg.regret_matching(adv, avg.masks[rows])
    return sigma


@pytest.mark.parametrize("fallback", ["argmax", "uniform"])
def test_regret_matching_equals_the_traversers(fallback):
    game = engine.load_game("leduc_poker")
    avg = TabularAverage(game, fallback)
    rng = np.random.default_rng(7)
    n, A = 400, game.num_distinct_actions()
    adv = rng.normal(size=(n, A)).astype(np.float32)
    adv[::3] = -np.abs(adv[::3])                 # no positive advantage: the fallback
    adv[1::7] = 0.0                              # all zero: ties, lowest id wins
    masks = np.ones((n, A), bool)
    masks[::2, 2] = False                        # raise illegal on half the rows
    ours = avg.regret_matching(adv, masks)
    for k in range(n):
        legal = np.flatnonzero(masks[k])
        theirs, _ = _py_regret_match(adv[k], legal, fallback == "uniform")
        np.testing.assert_allclose(ours[k, legal], theirs, rtol=1e-6, atol=1e-12)
        assert (ours[k, ~masks[k]] == 0).all()


def _own_reach_by_play(game, index, sigma, player):
    """Reach of each of `player`'s info states under `sigma`, by walking every
    deal with the engine (independent of TabularAverage's parent table)."""
    import itertools
    cards = {"kuhn_poker": 3, "leduc_poker": 6}[game.name]
    reach = {}

    def walk(state, r):
        if state.is_terminal():
            return
        p = state.current_player()
        i = index[state.information_state_tensor(p).tobytes()]
        if p == player:
            assert reach.setdefault(i, r) == pytest.approx(r, abs=1e-12)   # perfect recall
        for a in state.legal_actions():
            state.apply_action(a)
            walk(state, r * sigma[i, a] if p == player else r)
            state.undo_action()

    for deal in itertools.permutations(range(cards), game.deal_length()):
        walk(game.new_initial_state(deal=list(deal)), 1.0)
    return reach


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_average_is_realization_equivalent_to_the_weighted_mixture(name):
    """The defining property: the average policy reaches every info state with
    the weighted mean of the iterations' own reach probabilities, and at each
    info state it plays the reach-weighted mean of their actions."""
    game = engine.load_game(name)
    avg = TabularAverage(game)
    weights = [1.0, 2.0, 3.0]
    nets = [[_sharp_net(game, 10 * t + p) for p in (0, 1)] for t in range(3)]
    for w, pair in zip(weights, nets):
        for p in (0, 1):
            avg.add(p, pair[p], w)
    policy = avg.policy()
    for p in (0, 1):
        rows = avg.player == p
        sig = [_sigma(avg, pair[p], p) for pair in nets]
        reaches = []
        for s in sig + [policy]:
            by_play = _own_reach_by_play(game, avg.index, s, p)
            r = np.zeros(len(avg.player))
            r[list(by_play)] = list(by_play.values())
            np.testing.assert_allclose(avg.own_reach(s)[rows], r[rows], rtol=1e-12, atol=1e-15)
            reaches.append(r)
        reach_avg = reaches.pop()
        mix_reach = sum(w * r for w, r in zip(weights, reaches)) / sum(weights)
        np.testing.assert_allclose(reach_avg[rows], mix_reach[rows], rtol=1e-9, atol=1e-12)
        # the reach of the next action's info state: mean over iterations of reach * sigma
        num = sum(w * r[:, None] * s for w, r, s in zip(weights, reaches, sig))
        den = sum(w * r for w, r in zip(weights, reaches))
        seen = rows & (den > 0)
        np.testing.assert_allclose(policy[seen], num[seen] / den[seen][:, None], rtol=1e-9, atol=1e-12)
        # not all the same policy, or the test would prove nothing
        assert not np.allclose(sig[0][rows], sig[1][rows])
    assert avg.iterations_added.tolist() == [3, 3]


def test_single_iteration_average_is_that_policy_and_judges_agree():
    game = engine.load_game("leduc_poker")
    avg = TabularAverage(game)
    nets = [_sharp_net(game, 1), _sharp_net(game, 2)]
    for p in (0, 1):
        avg.add(p, nets[p], 5.0)
    policy = avg.policy()
    for p in (0, 1):
        sig = _sigma(avg, nets[p], p)
        rows = (avg.player == p) & (avg.own_reach(sig) > 0)
        np.testing.assert_allclose(policy[rows], sig[rows], atol=1e-12)
    ours = exploitability(game, avg)["exploitability"]
    assert ours > 0.05   # a random policy pair is far from equilibrium
    if pyspiel is not None:
        assert abs(openspiel_exploitability(game.name, avg)["exploitability"] - ours) < 1e-9


def test_empty_average_is_uniform_and_lookup_errors():
    game = engine.load_game("kuhn_poker")
    avg = TabularAverage(game)
    legal = avg.masks.astype(float)
    np.testing.assert_allclose(avg.policy(), legal / legal.sum(1, keepdims=True))
    bad = avg.infos[:1].copy()
    bad[0, 0] = 7.0
    with pytest.raises(ValueError, match="row 0 is not an info state"):
        avg.probs(bad, avg.masks[:1])
    wrong_mask = avg.masks[:1].copy()
    wrong_mask[0, 0] = not wrong_mask[0, 0]
    with pytest.raises(ValueError, match="legal mask differs"):
        avg.probs(avg.infos[:1], wrong_mask)
    with pytest.raises(ValueError, match="fallback must be"):
        TabularAverage(game, "softmax")
    with pytest.raises(ValueError, match="exact exploitability covers"):
        TabularAverage(engine.load_game("lost_cities"))


def test_state_dict_round_trip_and_shape_check():
    game = engine.load_game("kuhn_poker")
    avg = TabularAverage(game)
    avg.add(0, _sharp_net(game, 3), 2.0)
    avg.add(1, _sharp_net(game, 4), 2.0)
    again = TabularAverage(game)
    again.load_state_dict(avg.state_dict())
    np.testing.assert_array_equal(again.policy(), avg.policy())
    assert again.iterations_added.tolist() == [1, 1]
    with pytest.raises(ValueError, match="SD-CFR state has shape"):
        TabularAverage(engine.load_game("leduc_poker")).load_state_dict(avg.state_dict())


def test_config_rejects_sdcfr_for_lost_cities():
    with pytest.raises(ConfigError, match="train.average: sdcfr needs a game"):
        load_config(ROOT / "configs" / "smoke.yaml", ["train.average=sdcfr"])
    with pytest.raises(ConfigError, match="config train.average: bad value"):
        load_config(ROOT / "configs" / "kuhn.yaml", ["train.average=tabular"])


TINY = ["network.hidden=[16, 16]", "train.traversals=60", "train.adv_steps=10", "train.strategy_steps=20",
        "train.batch_size=64", "service.machines=16", "service.groups=2", "run.progress=false",
        "run.tensorboard=false", "eval.openspiel=true", "train.time_limit_s=0"]


def test_kuhn_sdcfr_run_checkpoint_and_evaluate_cli(tmp_path):
    run_dir = tmp_path / "run"
    args = ["--config", "configs/kuhn.yaml", "--run-dir", str(run_dir), "--set", "train.average=sdcfr",
            "--set", "train.iterations=3", "--set", "eval.every=1", "--set", "run.checkpoint_every=1"]
    r = subprocess.run([sys.executable, "-m", "trainer", *args, *sum([["--set", s] for s in TINY], [])],
                       cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2, 3]
    for m in lines:
        assert "strategy_net_exploitability" in m        # strategy_steps > 0: both are reported
        if pyspiel is not None:
            assert abs(m["exploitability"] - m["openspiel_exploitability"]) < 1e-9
    ckpt = ck.load_checkpoint(run_dir)
    # two additions per iteration: each player once, before the other's traversals
    assert ckpt["sdcfr"]["iterations_added"].tolist() == [3, 3]
    avg = TabularAverage(engine.load_game("kuhn_poker"))
    avg.load_state_dict(ckpt["sdcfr"])
    assert exploitability(engine.load_game("kuhn_poker"), avg)["exploitability"] == pytest.approx(
        lines[-1]["exploitability"], abs=1e-12)

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(run_dir), "--json", "--no-openspiel"]) == 0
    d = json.loads(buf.getvalue())
    assert d["policy"] == "sdcfr" and d["exploitability"] == pytest.approx(lines[-1]["exploitability"], abs=1e-12)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(run_dir), "--json", "--no-openspiel", "--policy", "network"]) == 0
    d = json.loads(buf.getvalue())
    assert d["policy"] == "average"         # "network" is the earlier name of the average read-out
    assert d["exploitability"] == pytest.approx(lines[-1]["strategy_net_exploitability"], abs=1e-12)


def test_evaluate_cli_sdcfr_needs_the_sums(tmp_path):
    game = engine.load_game("kuhn_poker")
    net = net_for_game(game, hidden=(8,), seed=0)
    ck.save_checkpoint(tmp_path, 1, {"config": {"game": {"name": "kuhn_poker", "params": {}}},
                                     "nets": {"strategy": net.state_dict()}, "net_spec": net.spec()})
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--policy", "sdcfr"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no SD-CFR sums" in r.stderr


@pytest.mark.parametrize("name,iterations,traversals,bound", [("kuhn_poker", 200, 100, 0.02),
                                                              ("leduc_poker", 200, 300, 0.15)])
def test_traversal_samples_with_exact_regret_tables_converge(name, iterations, traversals, bound):
    """The traverser's regret samples and LCFR weights, stored exactly per info
    state (no network), drive the SD-CFR average towards equilibrium: a check of
    the samples' targets and weights that no approximation error can hide."""
    from benchmarks.tabular_oracle import run
    curve = run(name, iterations, traversals, eval_every=50)
    assert [t for t, _ in curve] == list(range(50, iterations + 1, 50))
    values = [e for _, e in curve]
    assert values[-1] < bound, curve
    assert values[-1] < values[0] * 0.75, curve
