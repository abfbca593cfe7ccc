"""The learned best response (agents.best_response, agents.evaluate's
br:MINUTES) and the critic a checkpoint keeps (agents.checkpoint.build_critic)."""
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from agents.best_response import FrozenNet, parse_br, train_responder  # noqa: E402
from agents.checkpoint import build_critic, build_policy_value, load_checkpoint  # noqa: E402
from agents.evaluate import main as eval_main  # noqa: E402
from agents.matches import duplicate_match  # noqa: E402
from agents.policy import AveragePolicy, load_policy  # noqa: E402
from agents.ppo import SelfPlaySettings  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from lc_helpers import save_small_run  # noqa: E402

torch.set_num_threads(1)

SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=60)
# two colours of the full ranks: an expedition can pay, so a policy that never plays one is beaten
TWO = dict(colours=2, hand_size=5, max_turns=80)


def _state(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _save_run(run_dir, critic=True, seed=1):
    return save_small_run(run_dir, SMALL, critic, seed)


class Discarder:
    """Never plays a card: discards one at random and draws from the deck
    (the actions K..2K-1 and 2K of a game with K card kinds)."""

    def __init__(self, kinds, seed=0):
        self.K = kinds
        self.rng = np.random.default_rng(seed)

    def step(self, state):
        return int(self.rng.choice([a for a in state.legal_actions() if self.K <= a <= 2 * self.K]))


def _kinds(game, colours):
    return (game.num_distinct_actions() - 1 - colours) // 2


# ---------------------------------------------------------------- specs

def test_br_specs():
    assert parse_br("br:20") == 20.0 and parse_br("br:0.5") == 0.5
    for bad, says in (("br:", "needs the minutes"), ("br:abc", "needs the minutes"), ("br:0", "positive"),
                      ("br:-3", "positive"), ("br:inf", "positive"), ("heuristic", "not a learned")):
        with pytest.raises(ValueError, match=says) as e:
            parse_br(bad)
        assert len(str(e.value).splitlines()) == 1


def test_cli_bad_br_specs_are_one_line_errors(tmp_path):
    path, *_ = _save_run(tmp_path / "a")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for spec, named in (("br:abc", "br:abc"), ("heuristic,br:0", "br:0")):
        r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path / "a"), "--games", "2",
                            "--opponent", spec], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1 and named in err and "Traceback" not in err, err
    # a read-out that is not a strategy net's cannot be responded to in C: said, not crashed
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        assert eval_main([str(tmp_path / "a"), "--policy", "current-greedy", "--games", "2",
                          "--opponent", "br:0.01"]) == 2
    assert "strategy net" in buf.getvalue() and len(buf.getvalue().strip().splitlines()) == 1
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        assert eval_main([str(tmp_path / "a"), "--search", "worlds=2", "--games", "2", "--opponent", "br:0.01"]) == 2
    assert "not the search player" in buf.getvalue() and len(buf.getvalue().strip().splitlines()) == 1


# ---------------------------------------------------------------- training

def test_the_frozen_side_never_changes_and_the_responder_learns_from_its_own_seat():
    game = engine.load_game("lost_cities", **SMALL)
    agent = net_for_game(game, hidden=(16,), seed=3)
    before = _state(agent)
    frozen = FrozenNet(agent, greedy=True)
    learner, history = train_responder(game, frozen, agent, budget_s=1e9, seed=0, games=32, waves=3,
                                       settings=SelfPlaySettings(games=32, critic_waves=1, lr=1e-2,
                                                                 critic_hidden=(16,), autocast="none"))
    assert len(history) == 3 and learner.games_played == 96
    assert _same(before, _state(agent)) and _same(before, _state(frozen.net))      # the agent never moved
    assert not _same(before, _state(learner.net))                                  # the responder did
    # it learned from its own decisions only: each wave holds about half of the games' decisions
    assert all(0 < h["wave_decisions"] < learner.decisions for h in history)
    assert all(p.grad is None for p in frozen.net.parameters())


def test_frozen_net_plays_its_best_legal_move_when_greedy():
    """C's softmax over the legal moves of the sharpened logits puts all the
    mass on the best legal one, even where the best overall is illegal."""
    from traverser._selfplay import PlayGroup
    game = engine.load_game("lost_cities", **SMALL)
    net = net_for_game(game, hidden=(16,), seed=5)
    frozen = FrozenNet(net, greedy=True)
    g = PlayGroup(game, 8, 64)
    g.start(np.arange(8), np.arange(8) + 100)
    n = g.step()
    rows = g.requests[:n].astype(np.float32)
    logits = net(torch.from_numpy(rows)).detach().numpy()
    answers = np.concatenate([frozen(rows), np.zeros((n, 1), np.float32)], axis=1)
    g.resume(n, np.ascontiguousarray(answers), 0)
    d, _ = g.drain()
    for j in range(n):
        legal = np.flatnonzero(d["mask"][j])
        assert d["action"][j] == legal[np.argmax(logits[j, legal])]
        assert d["logp"][j] == pytest.approx(0.0, abs=1e-6)


def test_the_responder_beats_a_policy_that_never_plays_a_card():
    """Against a fixed, obviously exploitable policy (it discards every card),
    a responder that starts from an untrained net loses at first (an
    untrained net starts expeditions it cannot pay for) and ends far above:
    greedy, on fresh duplicate deals, it wins by points with the interval above 0."""
    game = engine.load_game("lost_cities", **TWO)
    A, K = game.num_distinct_actions(), _kinds(game, TWO["colours"])

    def discarder(rows):
        out = np.zeros((len(rows), A), np.float32)
        out[:, K:2 * K + 1] = 10.0          # every discard and the deck's draw alike
        return out

    start = net_for_game(game, hidden=(64, 64), seed=0)
    learner, history = train_responder(game, discarder, start, budget_s=1e9, seed=0, games=128, waves=120,
                                       settings=SelfPlaySettings(games=128, lr=3e-3, critic_waves=1,
                                                                 critic_hidden=(64, 64), autocast="none"))
    first, last = history[0]["margin"], np.mean([h["margin"] for h in history[-10:]])
    assert first < -10 and last > first + 15, (first, last)
    r = duplicate_match(game, AveragePolicy(learner.net, greedy=True), Discarder(K, seed=1), 400, seed=12345)
    assert r["margin_lo"] > 0 and r["margin"] > 5, r


# ---------------------------------------------------------------- the command and the kept critic

def test_evaluate_br_trains_saves_and_plays_the_responder(tmp_path):
    path, game, nets, critic = _save_run(tmp_path / "a")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert eval_main([str(tmp_path / "a"), "--games", "6", "--json", "--opponent", "heuristic,br:0.002"]) == 0
    d = json.loads(buf.getvalue())
    assert d["vs_heuristic_games"] == 6 and d["vs_br:0.002_games"] == 6
    assert d["vs_br:0.002_responder_margin"] == -d["vs_br:0.002_margin"]
    assert d["vs_br:0.002_responder_margin_lo"] == -d["vs_br:0.002_margin_hi"]
    saved = list((tmp_path / "a" / "responders").glob("br_0.002min_seed0_iter_000001.pt"))
    assert len(saved) == 1
    # CFR's agent of the same run shares the final checkpoint's iteration, not its responder's file
    from agents.best_response import responder_path
    assert responder_path({"path": str(tmp_path / "a" / "checkpoints" / "before_selfplay.pt"), "iteration": 1},
                          0.002, 0) != saved[0]
    ckpt = load_checkpoint(saved[0])
    info = ckpt["best_response"]
    assert info["against"] == str(path) and info["policy"] == "average-greedy" and info["waves"] >= 1
    # it started from the agent's critic, kept in the run's checkpoint; the agent's own files are unchanged
    assert build_critic(ckpt) is not None
    assert _same(load_checkpoint(path)["nets"]["strategy"], nets["strategy"].state_dict())


def test_the_checkpoint_keeps_the_critic_and_the_policy_answers_its_value(tmp_path):
    path, game, nets, critic = _save_run(tmp_path / "a")
    ckpt = load_checkpoint(path)
    loaded = build_critic(ckpt)
    assert _same(_state(loaded), _state(critic))
    policy = load_policy(tmp_path / "a", kind="average-greedy")
    state = game.new_initial_state(seed=4)
    info = state.information_state_tensor(state.current_player())[None].astype(np.float32)
    want = critic(torch.from_numpy(info)).detach().numpy()[0, 0] / 0.01
    assert policy.values(info)[0] == pytest.approx(want, rel=1e-5)
    # the batcher's module: the logits and the value in one forward
    both = build_policy_value(ckpt)(torch.from_numpy(info)).detach().numpy()[0]
    assert both[:-1] == pytest.approx(nets["strategy"](torch.from_numpy(info)).detach().numpy()[0], rel=1e-5)
    assert both[-1] == pytest.approx(want * 0.01, rel=1e-5)
    # a run without a self-play stage has no critic, and says so
    _save_run(tmp_path / "b", critic=False)
    assert build_critic(load_checkpoint(tmp_path / "b")) is None
    assert build_policy_value(load_checkpoint(tmp_path / "b")) is None
    with pytest.raises(ValueError, match="no critic"):
        load_policy(tmp_path / "b").values(info)


# ---------------------------------------------------------------- the search valued by the critic

def _play_phase_state(game, seed, plies):
    """A state after `plies` random moves, moved on to a play (not a draw) decision."""
    rng = np.random.default_rng(seed)
    state = game.new_initial_state(seed=seed)
    for _ in range(plies):
        state.apply_action(int(rng.choice(state.legal_actions())))
    draws = 2 * _kinds(game, SMALL["colours"])          # the draw actions: the deck, then each pile
    while any(a >= draws for a in state.legal_actions()):
        state.apply_action(int(rng.choice(state.legal_actions())))
    return state


def test_search_valued_by_the_critic_picks_the_move_the_critic_values_most(tmp_path):
    """depth 0: after a play or a discard the searcher draws next, so the
    leaf is its own info state, the same in every world: each candidate's
    value is the critic's on the position after it, as computed here by hand."""
    from agents.searcher import SearchPlayer
    _save_run(tmp_path / "a")
    policy = load_policy(tmp_path / "a", kind="average-greedy")
    game = policy.game
    for seed in range(4):
        state = _play_phase_state(game, seed, 6 + 2 * seed)
        me = state.current_player()
        by_hand = {}
        for a in state.legal_actions():
            after = state.clone()
            after.apply_action(a)
            assert after.current_player() == me
            by_hand[a] = policy.values(np.asarray(after.information_state_tensor(me), np.float32)[None])[0]
        plain = SearchPlayer(game, blueprint=policy, worlds=4, playout="critic", depth=0, halving=False)
        plain.search(state)
        cands, means, counts = plain.last_values
        assert list(cands) == sorted(by_hand) and np.all(counts == 4)
        assert np.allclose(means, [by_hand[a] for a in cands], rtol=1e-5)
        best = max(by_hand, key=lambda a: (by_hand[a], -a))
        assert SearchPlayer(game, blueprint=policy, worlds=8, playout="critic", depth=0).step(state) == best


def test_search_valued_by_the_critic_scores_finished_games_by_their_result(tmp_path):
    """With a depth past every game's end, no leaf reaches the critic: the
    values are the final score differences of the blueprint's playouts,
    as the blueprint playouts find them."""
    from agents.searcher import SearchPlayer
    _save_run(tmp_path / "a")
    policy = load_policy(tmp_path / "a", kind="average-greedy")
    state = _play_phase_state(policy.game, 3, 10)
    values = []
    for playout in ("critic", "blueprint"):
        p = SearchPlayer(policy.game, blueprint=policy, worlds=6, playout=playout, depth=400, halving=False)
        p.search(state)
        values.append(p.last_values[1])
    assert np.array_equal(values[0], values[1])
    _save_run(tmp_path / "b", critic=False)
    with pytest.raises(ValueError, match="kept none"):
        SearchPlayer(policy.game, blueprint=load_policy(tmp_path / "b"), playout="critic")
