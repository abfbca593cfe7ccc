"""Head to head (agents.head_to_head, agents.evaluate's run:/prior/search:
opponents and --baseline) and the run's warm-start prior (trainer.warmstart.
save_prior, the in-run vs_prior_* metrics)."""
import contextlib
import hashlib
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
from agents.checkpoint import load_checkpoint, prior_checkpoint  # noqa: E402
from agents.evaluate import main as eval_main  # noqa: E402
from agents.head_to_head import (compare, head_to_head, load_side, paired, parse_run, play_sides,  # noqa: E402
                                 split_opponents)
from agents.matches import play_deals  # noqa: E402
from agents.policy import load_policy, policy_from_checkpoint  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from engine.bots import HeuristicBot, RandomBot  # noqa: E402

torch.set_num_threads(1)

LC_SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=60)   # the cap ends discard cycles of untrained nets


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _save_run(run_dir, seed, iteration=1):
    """A small Lost Cities run directory whose checkpoint holds untrained nets."""
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {k: net_for_game(game, hidden=(8,), seed=seed + i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    return save_checkpoint(run_dir, iteration, {
        "config": {"game": {"name": "lost_cities", "params": LC_SMALL}, "traversal": {"fallback": "uniform"}},
        "nets": {k: n.state_dict() for k, n in nets.items()}, "net_spec": nets["strategy"].spec()})


def _play_one(game, deal_seed, players):
    """One game, move by move through .step(state): the final score
    difference from seat 0."""
    state = game.new_initial_state(seed=deal_seed)
    while not state.is_terminal():
        state.apply_action(int(players[state.current_player()].step(state)))
    return state.returns()[0]


def _by_hand(game, agent, make_opponent, deals, seed):
    """The agent's diffs deal by deal, seat 0 then seat 1, each game played
    on its own. make_opponent(d) gives deal d's opponent."""
    out = []
    for d in range(deals):
        out.append(_play_one(game, seed + d, [agent, make_opponent(d)]))
        out.append(-_play_one(game, seed + d, [make_opponent(d), agent]))
    return np.array(out)


# ---------------------------------------------------------------- specs

def test_opponent_lists_and_run_specs():
    assert split_opponents("random, run:a:b:current ,search:worlds=64,topk=4,prior,search:runs/x,worlds=3,heuristic") \
        == ["random", "run:a:b:current", "search:worlds=64,topk=4", "prior", "search:runs/x,worlds=3", "heuristic"]
    assert split_opponents("search:worlds=2,run:/a=b") == ["search:worlds=2", "run:/a=b"]
    # the text after the last ':' is a read-out only if it is a known one
    assert parse_run("run:/a:b@prior:current-greedy") == ("/a:b", True, "current-greedy")
    assert parse_run("run:/a:b") == ("/a:b", False, None)
    assert parse_run("runs/x:average") == ("runs/x", False, "average")
    with pytest.raises(ValueError, match="names no run"):
        parse_run("run::average")


# ---------------------------------------------------------------- pairing

def test_paired_differences_are_the_deal_by_deal_differences_of_two_matches(tmp_path):
    """compare() against each kind of opponent equals two matches played
    separately, game by game with .step(state), on the same deals: the
    paired value of deal d is the mean over its two seats of the agent's
    minus the baseline's."""
    a_path, b_path = _save_run(tmp_path / "a", 1), _save_run(tmp_path / "b", 7)
    game = engine.load_game("lost_cities", **LC_SMALL)
    agent = load_policy(a_path, "average-greedy")
    base = load_policy(b_path, "current-greedy")
    other = load_policy(b_path, "average-greedy")
    seed, games = 11, 10
    deals = games // 2
    opponents = {"heuristic": ("heuristic", lambda d: HeuristicBot(game)),
                 "random": ("random", lambda d: RandomBot(seed * 1000003 + d)),
                 "a policy, batched": (other, lambda d: other)}
    for name, (opp, make) in opponents.items():
        c = compare(game, agent, base, opp, games, seed=seed)
        da, db = _by_hand(game, agent, make, deals, seed), _by_hand(game, base, make, deals, seed)
        np.testing.assert_array_equal(c["paired"]["per_deal_margin_diff"],
                                      da.reshape(-1, 2).mean(axis=1) - db.reshape(-1, 2).mean(axis=1), err_msg=name)

        def wins(d):
            return np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)).reshape(-1, 2).mean(axis=1)

        np.testing.assert_array_equal(c["paired"]["per_deal_win_rate_diff"], wins(da) - wins(db), err_msg=name)
        assert c["agent"]["margin"] == pytest.approx(da.mean()) and c["baseline"]["margin"] == pytest.approx(db.mean())
        assert c["paired"]["margin_diff"] == pytest.approx(da.mean() - db.mean())
        assert c["paired"]["deals"] == deals
        assert c["paired"]["margin_diff_lo"] <= c["paired"]["margin_diff"] <= c["paired"]["margin_diff_hi"]
    # the named-bot matches are agents.matches.play_deals' own
    d_match, _ = play_deals(game, agent, "heuristic", range(deals), seed=seed)
    np.testing.assert_array_equal(d_match, _by_hand(game, agent, opponents["heuristic"][1], deals, seed))
    with pytest.raises(ValueError, match="equal, even lengths"):
        paired([1.0, 2.0], [1.0, 2.0, 3.0, 4.0])


def test_an_agent_against_itself(tmp_path):
    path = _save_run(tmp_path / "a", 3)
    game = engine.load_game("lost_cities", **LC_SMALL)
    greedy = load_policy(path, "average-greedy")
    # head to head against itself: each deal's two games are the same game with the seats swapped
    diffs, _ = play_sides(game, greedy, load_policy(path, "average-greedy"), range(6), seed=2)
    assert (diffs != 0).any()
    np.testing.assert_array_equal(diffs[0::2], -diffs[1::2])
    r = head_to_head(game, greedy, greedy, 12, seed=2)
    assert r["margin"] == 0 and r["win_rate"] == 0.5 and r["margin_lo"] <= 0 <= r["margin_hi"]
    # as its own baseline: a deterministic agent's paired difference is exactly 0
    for opp in ("heuristic", load_policy(path, "current-greedy")):
        p = compare(game, greedy, load_policy(path, "average-greedy"), opp, 12, seed=5)["paired"]
        assert p["per_deal_margin_diff"] == [0.0] * 6 and p["per_deal_win_rate_diff"] == [0.0] * 6
        assert (p["margin_diff_lo"], p["margin_diff"], p["margin_diff_hi"]) == (0, 0, 0)
    # a sampled read-out against itself, on other random streams: the interval holds 0
    sampled = load_policy(path, "average", seed=1)
    p = compare(game, sampled, load_policy(path, "average", seed=2), "heuristic", 40, seed=5)["paired"]
    assert any(x != 0 for x in p["per_deal_margin_diff"])
    assert p["margin_diff_lo"] < 0 < p["margin_diff_hi"] and p["win_rate_diff_lo"] <= 0 <= p["win_rate_diff_hi"]


def test_sides_load_with_their_read_out_and_the_search(tmp_path):
    path = _save_run(tmp_path / "a", 3)
    game = engine.load_game("lost_cities", **LC_SMALL)
    p = load_side(f"run:{tmp_path / 'a'}:current-greedy", game, "average")
    assert p.name == "current-greedy" and p.checkpoint == str(path)
    assert load_side(f"run:{path}", game, "average-greedy").name == "average-greedy"   # the agent's read-out
    assert load_side(f"run:{path}", game, "sdcfr").name == "average"       # no SD-CFR sums: average
    assert load_side(f"run:{path}:symmetric-greedy", game, "average").name == "symmetric-greedy"
    s = load_side("search:worlds=2,topk=0", game)
    assert s.blueprint is None and s.worlds == 2
    s = load_side(f"search:{tmp_path / 'a'},worlds=2,policy=current", game)
    assert s.blueprint.name == "current" and s.topk == 4
    r = head_to_head(game, load_policy(path, "average-greedy"), load_side("search:worlds=2", game), 4, seed=1)
    assert r["games"] == 4 and r["wins"] + r["ties"] + r["losses"] == 4
    # a blueprint search plays in the match's game (its batched playouts hold the match's states)
    s = load_side(f"search:{tmp_path / 'a'},worlds=2,playout=blueprint,depth=1", game)
    assert s.game is game
    r = head_to_head(game, load_policy(path, "average-greedy"), s, 2, seed=1)
    assert r["games"] == 2 and r["wins"] + r["ties"] + r["losses"] == 2
    other = engine.load_game("lost_cities", colours=4, ranks=5, hand_size=4)
    with pytest.raises(ValueError, match="plays lost_cities"):
        load_side(f"run:{path}", other)
    with pytest.raises(ValueError, match="no warm-start prior at"):
        load_side("prior", game, agent_run=path)


# ---------------------------------------------------------------- the command line

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "agents.evaluate", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)


def test_cli_head_to_head_and_baseline(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _save_run(a, 1)
    _save_run(b, 7)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(a), "--greedy", "--games", "4", "--json",
                          "--opponent", f"heuristic,run:{b}:current-greedy,search:worlds=2,topk=0"]) == 0
    d = json.loads(buf.getvalue())
    for o in ("heuristic", f"run:{b}:current-greedy", "search:worlds=2,topk=0"):
        assert d[f"vs_{o}_games"] == 4 and d[f"vs_{o}_margin_lo"] <= d[f"vs_{o}_margin"] <= d[f"vs_{o}_margin_hi"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(a), "--greedy", "--games", "4", "--json", "--opponent", f"heuristic,run:{b}",
                          "--baseline", f"{b}:average-greedy"]) == 0
    d = json.loads(buf.getvalue())
    assert d["baseline"].startswith("average-greedy of ")
    for o in ("heuristic", f"run:{b}"):
        assert d[f"diff_vs_{o}_deals"] == 2
        assert d[f"diff_vs_{o}_margin"] == pytest.approx(d[f"vs_{o}_margin"] - d[f"baseline_vs_{o}_margin"])
        assert d[f"diff_vs_{o}_win_rate"] == pytest.approx(d[f"vs_{o}_win_rate"] - d[f"baseline_vs_{o}_win_rate"])
    # the baseline against itself: 0, and its figures mirror the agent's
    assert d[f"baseline_vs_run:{b}_margin"] == 0 and d[f"baseline_vs_run:{b}_win_rate"] == 0.5


def test_cli_processes_play_the_same_deals_and_replays_are_saved(tmp_path):
    """--jobs 2 splits every match's deals over two processes, which rebuild
    the agent, the baseline and the sides from their specs: with
    deterministic players, the same figures as one process. Head-to-head
    games are saved as replays like the bots' (each move checked)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _save_run(a, 1)
    _save_run(b, 7)
    args = [str(a), "--greedy", "--games", "8", "--json", "--opponent", f"heuristic,run:{b},search:worlds=2",
            "--baseline", f"{b}:current-greedy"]
    outs = []
    for jobs in ("1", "2"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert eval_main([*args, "--jobs", jobs]) == 0
        outs.append(json.loads(buf.getvalue()))
    assert outs[0] == outs[1] and outs[0]["diff_vs_search:worlds=2_deals"] == 4
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()) as err:
        assert eval_main([str(a), "--games", "4", "--opponent", f"run:{b},search:worlds=2", "--save-games", "3",
                          "--save-dir", str(tmp_path / "replays")]) == 0
    assert "saved 6 replays" in err.getvalue()
    assert len(list((tmp_path / "replays").glob("*.jsonl"))) == 6


def test_search_agent_reports_its_decisions_from_worker_processes(tmp_path):
    """With --search and --jobs 2 the searches run in the worker processes;
    their decision counts and times come back, so the report's
    ms_per_decision is of the decisions played, not 0."""
    a, b = tmp_path / "a", tmp_path / "b"
    _save_run(a, 1)
    _save_run(b, 7)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(a), "--search", "worlds=4,topk=2", "--games", "4", "--json", "--jobs", "2",
                          "--opponent", f"run:{b}"]) == 0
    d = json.loads(buf.getvalue())
    assert d["vs_run:" + str(b) + "_games"] == 4 and d["ms_per_decision"] > 0


def test_cli_bad_specs_are_one_line_errors(tmp_path):
    a = tmp_path / "a"
    _save_run(a, 1)
    cases = [(["--opponent", "run:/no/such"], "run:/no/such"),
             (["--opponent", "search:worlds=abc"], "search:worlds=abc"),
             (["--opponent", f"heuristic,run:{a}:nosuchpolicy"], "nosuchpolicy"),
             (["--opponent", "prior"], "no warm-start prior"),
             (["--baseline", "/no/such"], "--baseline /no/such"),
             (["--opponent", "nosuchbot"], "nosuchbot")]
    for extra, named in cases:
        r = _cli(str(a), "--games", "2", *extra)
        assert r.returncode == 2, (extra, r.stderr)
        err = r.stderr.strip()
        assert len(err.splitlines()) == 1 and named in err and "Traceback" not in err, (extra, err)


def test_cli_plays_the_figures_read_out_unless_told_and_names_it(tmp_path):
    """Without --policy a Lost Cities run plays the greedy average policy,
    as every figure in the docs does, and its head-to-head opponents the
    same read-out; --greedy is harmless, --policy average plays the sampled
    policy. The output names the read-out on a line of its own."""
    a, b = tmp_path / "a", tmp_path / "b"
    _save_run(a, 1)
    _save_run(b, 7)
    for extra, kind, default in (([], "average-greedy", True), (["--greedy"], "average-greedy", True),
                                 (["--policy", "average"], "average", False)):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert eval_main([str(a), "--games", "2", "--json", "--opponent", f"heuristic,run:{b}", *extra]) == 0
        d = json.loads(out.getvalue())
        assert d["policy"] == kind and f"vs_run:{b}_games" in d
        named = [line for line in err.getvalue().splitlines() if line.startswith("read-out: ")]
        assert len(named) == 1 and named[0].startswith(f"read-out: {kind}, ")
        assert ("the default, as in the docs' figures" in named[0]) == default
    r = _cli(str(a), "--games", "2", "--opponent", "random")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "policy average-greedy" in lines[0] and lines[1].startswith("read-out: average-greedy, the greedy average")


# ---------------------------------------------------------------- the prior

def test_warm_start_writes_the_prior_as_it_ends(tmp_path):
    """The prior is the nets as the warm start leaves them, readable as a
    checkpoint of iteration 0; `latest` is not moved to it."""
    from trainer.config import load_config
    from trainer.loop import Trainer
    cfg = load_config(ROOT / "configs" / "smoke.yaml",
                      ["network.hidden=[16]", "train.warm_start_games=2", "train.warm_start_steps=2",
                       "train.batch_size=32", "run.progress=false"])
    tr = Trainer(cfg, tmp_path, log=lambda *a: None)
    tr._warm_start()
    path = prior_checkpoint(tmp_path)
    ckpt = load_checkpoint(path)
    assert ckpt["iteration"] == 0 and ckpt["prior"] is True
    for name, net in tr.nets.items():
        for k, v in net.state_dict().items():
            assert torch.equal(ckpt["nets"][name][k], v.cpu())
    assert not (tmp_path / "checkpoints" / "latest").exists()
    policy = policy_from_checkpoint(ckpt, "average-greedy")
    state = tr.game.new_initial_state(seed=0)
    assert policy.step(state) in state.legal_actions()


def test_prior_survives_resume_and_is_played_in_run(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--set", "run.progress=false", "--set", "eval.lc_games=2", "--set", "eval.every=1"]
    r = subprocess.run([sys.executable, "-m", "trainer", "--config", "configs/smoke.yaml", "--run-dir", str(run_dir),
                        "--set", "train.iterations=1", "--set", "train.traversals=30", "--set", "train.adv_steps=3",
                        "--set", "train.strategy_steps=3", "--set", "network.hidden=[16]",
                        "--set", "train.warm_start_games=2", "--set", "train.warm_start_steps=2", *common],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    prior = prior_checkpoint(run_dir)
    digest = hashlib.sha256(prior.read_bytes()).hexdigest()
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "iter_000001.pt"
    r = subprocess.run([sys.executable, "-m", "trainer", "--resume", str(run_dir), "--set", "train.iterations=2",
                        *common], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert hashlib.sha256(prior.read_bytes()).hexdigest() == digest
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in lines] == [1, 2]
    for m in lines:
        assert m["vs_prior_games"] == 2 and m["vs_prior_margin_lo"] <= m["vs_prior_margin"] <= m["vs_prior_margin_hi"]
        assert 0 <= m["vs_prior_win_rate_lo"] <= m["vs_prior_win_rate"] <= m["vs_prior_win_rate_hi"] <= 1
    # "what did training add after the warm start": one command each way
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert eval_main([str(run_dir), "--games", "2", "--json", "--opponent", "prior,heuristic,search:prior,worlds=4",
                          "--baseline", "prior"]) == 0
    d = json.loads(buf.getvalue())
    assert d["iteration"] == 2 and "prior.pt" in d["baseline"]
    assert d["diff_vs_heuristic_deals"] == 1 and "diff_vs_prior_margin" in d
    assert d["vs_search:prior,worlds=4_games"] == 2
    from trainer.plot import learning_panels
    keys = [k for panel in learning_panels(lines) for k, _, _ in panel[4]]
    assert "vs_prior_margin" in keys and "vs_prior_win_rate" in keys
