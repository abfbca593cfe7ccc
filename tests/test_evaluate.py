"""agents.evaluate (exploitability, matches, CLI) and trainer.plot."""
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
from engine.bots import HeuristicBot, play_game  # noqa: E402
from engine.match import run_match  # noqa: E402
from agents.evaluate import (evaluate, exploitability, format_table,  # noqa: E402
                              openspiel_exploitability, policy_probs)
from agents.matches import duplicate_match  # noqa: E402
from agents.players import agent_from_spec, opponent_of  # noqa: E402
from agents.exploiter import LocalBestResponse  # noqa: E402
from agents.policy import (AveragePolicy, CurrentPolicy, load_policy, parse_kind,  # noqa: E402
                            regret_matching)

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


# ---------------------------------------------------------------- duplicate deals

def _check_counts(r, games):
    assert r["games"] == games and r["deals"] == games // 2
    assert r["wins"] + r["losses"] + r["ties"] == games
    assert r["win_rate"] == pytest.approx((r["wins"] + 0.5 * r["ties"]) / games)
    assert 0.0 <= r["win_rate_lo"] <= r["win_rate"] <= r["win_rate_hi"] <= 1.0
    assert r["margin_lo"] <= r["margin"] <= r["margin_hi"]
    assert r["margin"] == pytest.approx(sum(r["margin_by_seat"]) / 2)


def test_duplicate_match_classic_vs_random():
    game = engine.load_game("lost_cities")
    net = net_for_game(game, hidden=(16,), seed=0)
    r = duplicate_match(game, net, "random", 40, seed=5)
    _check_counts(r, 40)
    assert r["capped"] == 0
    assert duplicate_match(game, net, "random", 39, seed=5)["games"] == 40      # rounded up to pairs


def test_duplicate_match_reproducible_and_opponents():
    game = engine.load_game("lost_cities", **LC_SMALL)
    net = net_for_game(game, hidden=(8,), seed=1)
    a = duplicate_match(game, net, "random", 40, seed=7)
    assert a == duplicate_match(game, net, "random", 40, seed=7)
    others = [duplicate_match(game, net, "random", 40, seed=s) for s in (8, 9)]
    assert any(o != a for o in others)
    g1 = duplicate_match(game, AveragePolicy(net, greedy=True), "heuristic", 40, seed=7)
    _check_counts(g1, 40)
    assert g1 == duplicate_match(game, AveragePolicy(net, greedy=True), "heuristic", 40, seed=7)
    c1 = duplicate_match(game, AveragePolicy(net, greedy=True), "cautious", 40, seed=7)   # the unseen bot
    _check_counts(c1, 40)
    assert c1 != g1
    from agents.evaluate import _opponent_list
    assert _opponent_list("all") == ["random", "heuristic", "cautious", "exploiter"]
    assert _opponent_list("cautious,both") == ["cautious", "random", "heuristic"]
    with pytest.raises(ValueError, match="unknown opponent"):
        duplicate_match(game, net, "nobody", 2)
    with pytest.raises(ValueError, match="step"):
        duplicate_match(game, net, object(), 2)


class _Recorder(nn.Module):
    """Wraps a net and records the 'player' one-hot (whose view) of every row."""

    def __init__(self, net):
        super().__init__()
        self.inner = net
        self.views = []

    def forward(self, x):
        self.views.append(x[:, :2].argmax(dim=1).tolist())
        return self.inner(x)


class _DealRecorder:
    """An opponent that plays the heuristic and notes, at its first move in
    each game, its seat and the deck as it stands (next card first)."""

    def __init__(self, game):
        self.game = game
        self.seen = []
        self._games = set()

    def step(self, state):
        if id(state) not in self._games:
            self._games.add(id(state))
            self.seen.append((state.current_player(), tuple(state.deck())))
        return self.game.heuristic_action(state)


def test_duplicate_deals_swap_seats_on_the_same_deal():
    game = engine.load_game("lost_cities", **LC_SMALL)
    rec = _Recorder(net_for_game(game, hidden=(8,), seed=2))
    opp = _DealRecorder(game)
    r = duplicate_match(game, rec, opp, 6, seed=3)
    # the agent sits in seat 0 of games 0, 2, 4 and in seat 1 of games 1, 3, 5;
    # so the recorder opponent opens games 1, 3, 5 from seat 0
    assert {p for v in rec.views for p in v} == {0, 1}
    assert rec.views[0] == [0, 1, 0, 1, 0, 1]
    decks = [game.new_initial_state(seed=3 + d).deck() for d in range(3)]
    assert [(0, tuple(d)) for d in decks] == [s for s in opp.seen if s[0] == 0]
    # seat 1: the agent opened from seat 0 and drew the deck's top card
    assert [(1, tuple(d[1:])) for d in decks] == [s for s in opp.seen if s[0] == 1]
    _check_counts(r, 6)


def test_win_rate_interval_never_collapses():
    game = engine.load_game("lost_cities", **LC_SMALL)
    r = duplicate_match(game, _uniform_net(game), "heuristic", 20, seed=1)
    assert r["win_rate"] == 0.0 and r["win_rate_hi"] > 0.05       # no wins in 20 games is not certainty


def test_evaluate_lost_cities_keys():
    game = engine.load_game("lost_cities", **LC_SMALL)
    m = evaluate(game, net_for_game(game, hidden=(8,), seed=0), lc_games=6, seed=1)
    for opp in ("random", "heuristic"):
        k = f"vs_{opp}"
        assert m[f"{k}_win_rate_lo"] <= m[f"{k}_win_rate"] <= m[f"{k}_win_rate_hi"]
        assert m[f"{k}_margin_lo"] <= m[f"{k}_margin"] <= m[f"{k}_margin_hi"]
        assert m[f"{k}_games"] == 6 and m[f"{k}_capped"] == 0
    assert "vs_random_win_rate" in format_table(m)
    e = evaluate(game, net_for_game(game, hidden=(8,), seed=0), lc_games=6, seed=1, opponents=("exploiter",),
                 exploiter_games=2, worlds=2)
    assert e["vs_exploiter_games"] == 2
    assert e["exploiter_margin"] == -e["vs_exploiter_margin"]
    assert e["exploiter_margin_lo"] <= e["exploiter_margin"] <= e["exploiter_margin_hi"]


# ---------------------------------------------------------------- policies

def test_current_policy_is_regret_matching_on_each_seats_net():
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = [_random_net(game, 3, 5.0), _random_net(game, 4, 5.0)]
    pol = CurrentPolicy(nets, fallback="argmax")
    states = [game.new_initial_state(seed=s) for s in range(6)]
    for s in states[3:]:
        s.apply_action(s.legal_actions()[0])
        s.apply_action(s.legal_actions()[0])
        s.apply_action(s.legal_actions()[0])               # player 1 to draw
    info = np.stack([s.information_state_tensor() for s in states])
    mask = np.stack([s.legal_actions_mask() for s in states])
    players = np.array([s.current_player() for s in states])
    assert list(players) == [0, 0, 0, 1, 1, 1]
    probs = pol.probs(info, mask, players)
    for i, p in enumerate(players):
        with torch.no_grad():
            adv = nets[p](torch.from_numpy(info[i:i + 1])).double().numpy()[0]
        pos = np.where(mask[i] > 0, np.maximum(adv, 0), 0)
        want = pos / pos.sum() if pos.sum() > 0 else np.eye(len(adv))[np.argmax(np.where(mask[i] > 0, adv, -np.inf))]
        assert np.allclose(probs[i], want)
    assert np.allclose(probs.sum(axis=1), 1.0) and (probs[mask == 0] == 0).all()


def test_regret_matching_fallbacks():
    adv = np.array([[-1.0, -0.5, -2.0], [-1.0, 3.0, 1.0]])
    mask = np.array([[1, 0, 1], [1, 1, 1]])
    am = regret_matching(adv, mask, "argmax")
    assert am[0].tolist() == [1.0, 0.0, 0.0] and np.allclose(am[1], [0, 0.75, 0.25])
    un = regret_matching(adv, mask, "uniform")
    assert un[0].tolist() == [0.5, 0.0, 0.5]
    with pytest.raises(ValueError):
        regret_matching(adv, mask, "softmax")


def test_greedy_and_sampled_read_outs():
    game = engine.load_game("lost_cities", **LC_SMALL)
    net = _random_net(game, 5, 0.5)
    state = game.new_initial_state(seed=2)
    sampled = AveragePolicy(net, seed=1)
    greedy = AveragePolicy(net, greedy=True)
    probs = sampled.action_probs(state)
    assert greedy.step(state) == max(probs, key=probs.get)
    assert len({sampled.step(state) for _ in range(60)}) > 1
    assert greedy.name == "average-greedy" and sampled.name == "average"
    with pytest.raises(ValueError, match="unknown policy"):
        parse_kind("best")
    assert parse_kind("current-greedy") == ("current", True)


def test_load_policy_plays_as_a_bot(tmp_path):
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {k: net_for_game(game, hidden=(8,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    save_checkpoint(tmp_path, 3, {"config": {"game": {"name": "lost_cities", "params": LC_SMALL},
                                             "traversal": {"fallback": "uniform"}},
                                  "nets": {k: n.state_dict() for k, n in nets.items()},
                                  "net_spec": nets["strategy"].spec()})
    for kind in ("average", "current", "average-greedy", "current-greedy"):
        bot = load_policy(tmp_path, kind=kind)
        assert bot.iteration == 3 and bot.name == kind
        final = play_game(bot.game, [bot, HeuristicBot(bot.game)], seed=1)
        assert final.is_terminal()
        r = run_match(bot.game, bot, "random", 4, progress=False)
        assert r["games"] == 4
    assert load_policy(tmp_path, kind="current").fallback == "uniform"
    with pytest.raises(ValueError, match="no SD-CFR sums"):
        load_policy(tmp_path, kind="sdcfr")


# ---------------------------------------------------------------- the exploiter

def test_exploiter_values_are_the_mean_over_its_worlds():
    """action_values against an explicit recomputation with the State API:
    the same worlds (StateBatch.resample's row streams), the heuristic to
    finish the exploiter's turn, the agent's greedy turn, heuristic playouts."""
    from engine._batch import StateBatch
    game = engine.load_game("lost_cities", **LC_SMALL)
    agent = AveragePolicy(_random_net(game, 6, 3.0), greedy=True)
    lbr = LocalBestResponse(game, agent, worlds=3, seed=0, halving=False)
    state = game.new_initial_state(seed=9)
    for _ in range(6):
        state.apply_action(game.heuristic_action(state))
    seed = int(lbr.decision_rng(state).integers(1 << 62))
    legal, values = lbr.action_values(state)
    assert legal == state.legal_actions()
    worlds = StateBatch(game, 3)
    worlds.fill(state)
    worlds.resample(state.current_player(), seed)
    me = state.current_player()
    for a, v in zip(legal, values):
        finals = []
        for w in range(3):
            s = worlds.state(w)
            s.apply_action(a)
            while not s.is_terminal() and s.current_player() == me:
                s.apply_action(game.heuristic_action(s))
            while not s.is_terminal() and s.current_player() != me:
                s.apply_action(agent.step(s))
            while not s.is_terminal():
                s.apply_action(game.heuristic_action(s))
            finals.append(s.returns()[me])
        assert v == pytest.approx(np.mean(finals))


def test_exploiter_beats_a_policy_that_ignores_the_game():
    """Against a near-uniform policy the local best response wins big, and
    more than the heuristic does: it searches against the agent it faces."""
    game = engine.load_game("lost_cities", **LC_SMALL)
    agent = AveragePolicy(_uniform_net(game), seed=0)
    expl = duplicate_match(game, agent, opponent_of("exploiter"), 8, seed=2, worlds=6)
    assert expl["margin"] < -10 and expl["win_rate"] < 0.2
    with pytest.raises(ValueError, match="at least one world"):
        LocalBestResponse(game, agent, worlds=0)


# ---------------------------------------------------------------- CLIs

def _lc_metrics(resume_at=None):
    """A Lost Cities metrics file's rows: evaluations every 4th iteration, the
    exploiter at the first and last, constants that say nothing."""
    rows = []
    wall = 0.0
    for i in range(1, 13):
        # a resumed run's clock goes on from its checkpoint's time; the minutes lost to the kill are not in it
        wall = 30.0 * i if resume_at is None or i < resume_at else 30.0 * i - 20.0
        d = {"iteration": i, "wall_s": wall, "adv_loss_0": 1.0 / i, "adv_loss_1": 2.0 / i,
             "queries_per_s": 1e5 + i, "time_traverse_s": 2.0 + i % 3, "time_train_s": 1.0,
             "batcher_mean_batch": 64.0, "restarts": 0}
        if i % 4 == 0 or i == 1:
            for opp, m in (("random", 50 + i), ("heuristic", -60 + 3 * i)):
                d.update({f"vs_{opp}_margin": m, f"vs_{opp}_margin_lo": m - 5, f"vs_{opp}_margin_hi": m + 5,
                          f"vs_{opp}_win_rate": 0.5 + m / 400, f"vs_{opp}_games": 2000,
                          f"current_vs_{opp}_margin": m - 10})
        if i in (1, 12):
            d.update(vs_exploiter_margin=-80 + i, exploiter_margin=80 - i)
        rows.append(d)
    return rows


def test_plot_panels_are_what_a_researcher_reads():
    from trainer.plot import learning_panels, training_panels, wall_minutes
    rows = _lc_metrics()
    panels = learning_panels(rows)
    assert [p[0] for p in panels] == ["point margin per game (from the agent's seat)", "win rate (a tie counts half)"]
    margin_keys = [k for k, _, _ in panels[0][4]]
    assert set(margin_keys) == {"vs_random_margin", "vs_heuristic_margin", "vs_exploiter_margin",
                                "current_vs_random_margin", "current_vs_heuristic_margin"}
    dashed = {k for k, _, d in panels[0][4] if d}
    assert dashed == {"current_vs_random_margin", "current_vs_heuristic_margin"}
    assert any("a floor on exploitability" in label for _, label, _ in panels[0][4])
    shown = {k for p in training_panels(rows) for k, _, _ in p[4]}
    # constants (the mean batch, the restart count, a fixed train time) are left out
    assert shown == {"adv_loss_0", "adv_loss_1", "queries_per_s", "time_traverse_s"}
    assert wall_minutes(rows)[-1] == pytest.approx(6.0)
    # a resumed run's wall_s counts the run's time: the minutes are wall_s / 60 throughout
    resumed = wall_minutes(_lc_metrics(resume_at=7))
    assert resumed[5] == pytest.approx(3.0) and resumed[6] == pytest.approx(190.0 / 60)
    assert all(b > a for a, b in zip(resumed, resumed[1:]))
    poker = [{"iteration": i, "wall_s": i, "exploitability": 1.0 / i, "nash_conv": 2.0 / i} for i in range(1, 5)]
    (title, _, log_y, _, lines), = learning_panels(poker)
    assert title == "exploitability" and log_y and [k for k, _, _ in lines] == ["exploitability"]


def test_plot_cli_writes_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(d) for d in _lc_metrics()) + "\n")
    r = subprocess.run([sys.executable, "-m", "trainer.plot", str(run)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    paths = [Path(p) for p in r.stdout.split()]
    assert {p.name for p in paths} == {"learning.png", "training.png"}
    for p in paths:
        assert p.parent == run / "plots"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from trainer.plot import main as plot_main
    out = tmp_path / "elsewhere"
    # only losses in this file: one figure
    (tmp_path / "m2").mkdir()
    (tmp_path / "m2" / "metrics.jsonl").write_text('{"iteration": 1, "strategy_loss": 0.5}\n'
                                                   '{"iteration": 2, "strategy_loss": 0.4}\n')
    assert plot_main([str(tmp_path / "m2"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["training.png"]


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
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(run)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("exploitability"))
    assert float(line.split()[-1]) == pytest.approx(11 / 24, abs=1e-5)

    from agents.evaluate import main as eval_main
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
        r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(target)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_poker_greedy_read_out_is_judged_as_the_moves_it_plays():
    game = engine.load_game("kuhn_poker")
    net = _random_net(game, 3, 0.5)
    sampled = evaluate(game, AveragePolicy(net), openspiel=False)["exploitability"]
    assert sampled == pytest.approx(evaluate(game, net, openspiel=False)["exploitability"])
    greedy = evaluate(game, AveragePolicy(net, greedy=True), openspiel=pyspiel is not None)
    assert greedy["exploitability"] != pytest.approx(sampled)
    if pyspiel is not None:
        assert greedy["exploitability"] == pytest.approx(greedy["openspiel_exploitability"], abs=1e-9)


class _DiesInAWorker:
    """An opponent that plays the heuristic, and kills the process it runs in
    at its `after`-th move unless that is the test's own process."""

    def __init__(self, after):
        self.after, self.home, self.moves = after, os.getpid(), 0

    def step(self, state):
        self.moves += 1
        if os.getpid() != self.home and self.moves >= self.after:
            os._exit(3)
        return state.game.heuristic_action(state)


def test_parallel_match_plays_each_deal_as_one_process_does():
    """Worker processes rebuild the search player from its spec and play
    whole deals: results, recorded games and the player's counters equal
    those of one process (its worlds depend only on its seed and what it
    sees), whatever the deals' split."""
    from agents.matches import parallel_match
    from agents.searcher import SearchPlayer
    game = engine.load_game("lost_cities", **LC_SMALL)
    spec = {"game": {"name": "lost_cities", **LC_SMALL}, "search": {"worlds": 6, "seed": 4}}
    for opp, jobs in (("heuristic", 2), ("random", 3)):
        one, many = SearchPlayer(game, worlds=6, seed=4), SearchPlayer(game, worlds=6, seed=4)
        rec1, rec2 = [[] for _ in range(5)], [[] for _ in range(5)]
        r1 = duplicate_match(game, one, opp, 10, seed=3, record=rec1)
        r2 = parallel_match(spec, opp, 10, seed=3, jobs=jobs, record=rec2, agent=many, build=agent_from_spec)
        assert r1 == r2 and r2["games"] == 10
        for g1, g2 in zip(rec1, rec2):
            assert len(g1) == len(g2) > 0
            assert [(p, a) for p, a, _ in g1] == [(p, a) for p, a, _ in g2]
            assert all((x is None and y is None) or np.array_equal(x, y) for (_, _, x), (_, _, y) in zip(g1, g2))
        assert many.decisions == one.decisions > 0 and many.worlds_played == one.worlds_played
    # a different seed plays other deals
    assert parallel_match(spec, "heuristic", 10, seed=4, jobs=2, build=agent_from_spec) != r1


def test_parallel_match_fails_loudly_when_a_worker_dies():
    from agents.matches import parallel_match
    spec = {"game": {"name": "lost_cities", **LC_SMALL}, "search": {"worlds": 2}}
    with pytest.raises(RuntimeError, match=r"worker process died before deals \d+\.\.\d+ .*no result is reported"):
        parallel_match(spec, _DiesInAWorker(after=5), 8, jobs=2, build=agent_from_spec)
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        parallel_match(spec, "heuristic", 8, jobs=0, build=agent_from_spec)
    # evaluate() with processes but nothing to rebuild the agent from refuses, rather than run serially
    game = engine.load_game("lost_cities", **LC_SMALL)
    from agents.searcher import SearchPlayer
    with pytest.raises(ValueError, match="jobs=2 needs `spec`"):
        evaluate(game, SearchPlayer(game, worlds=2), lc_games=4, opponents=("heuristic",), jobs=2)
    with pytest.raises(ValueError, match="names a checkpoint, or a game and search settings"):
        agent_from_spec({"game": {"name": "lost_cities"}})


def _small_lc_checkpoint(run_dir):
    """A checkpoint of iteration 1 in `run_dir` with small seeded nets for LC_SMALL; its path."""
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {k: net_for_game(game, hidden=(8,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    return save_checkpoint(run_dir, 1, {"config": {"game": {"name": "lost_cities", "params": LC_SMALL}},
                                        "nets": {k: n.state_dict() for k, n in nets.items()},
                                        "net_spec": nets["strategy"].spec()})


def test_parallel_match_of_a_sampled_read_out_is_reproducible(tmp_path):
    """A sampled policy in worker processes: each chunk of deals draws from
    its own stream (seeded by the match's seed and the chunk), so the match
    does not depend on which process took which chunk."""
    from agents.matches import parallel_match
    path = _small_lc_checkpoint(tmp_path)
    spec = {"checkpoint": str(path), "policy": "average", "seed": 0, "search": None}
    first = parallel_match(spec, "heuristic", 16, seed=2, jobs=2, build=agent_from_spec)
    assert parallel_match(spec, "heuristic", 16, seed=2, jobs=2, build=agent_from_spec) == first
    assert first["games"] == 16


def test_the_exploiter_is_built_in_each_worker_from_its_own_agent(tmp_path):
    """agents.matches knows bots by name only; the exploiter reaches it as
    agents.players' factory, which each worker process calls with the agent
    it rebuilt. A greedy read-out and the exploiter's seeded worlds make the
    match the same in one process and in two."""
    from agents.matches import parallel_match
    from agents.players import exploiter, make_opponent
    game = engine.load_game("lost_cities", **LC_SMALL)
    path = _small_lc_checkpoint(tmp_path)
    spec = {"checkpoint": str(path), "policy": "average-greedy", "seed": 0, "search": None}
    _, _, agent = agent_from_spec(spec)
    assert opponent_of("exploiter") is exploiter and opponent_of("heuristic") == "heuristic"
    with pytest.raises(ValueError, match="unknown opponent 'exploiter'.*agents.players.exploiter"):
        duplicate_match(game, agent, "exploiter", 2)
    assert isinstance(make_opponent("exploiter", game, agent, worlds=3), LocalBestResponse)
    one = duplicate_match(game, agent, exploiter, 8, seed=1, worlds=3)
    assert parallel_match(spec, exploiter, 8, seed=1, worlds=3, jobs=2, build=agent_from_spec) == one
    assert one["games"] == 8
    with pytest.raises(ValueError, match="has none"):       # the exploiter needs a policy's probabilities
        duplicate_match(game, HeuristicBot(game), exploiter, 2)
    with pytest.raises(ValueError, match="no .step"):
        duplicate_match(game, agent, lambda *a: object(), 2)
