"""agents.play: whole games driven through stdin of the real process,
against the heuristic, the random bot, a real checkpoint and the search
player; the move parser and the table on their own."""
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from agents.play import WIDTH, parse_move, render_moves, render_table, why_illegal  # noqa: E402
from agents.replay import load_replay  # noqa: E402

torch.set_num_threads(1)

PROMPT = "your move> "


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _play(tmp_path, args, stdin, timeout=120):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "agents.play", *map(str, args),
                           "--replay-dir", str(tmp_path / "replays")],
                          input=stdin, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=timeout)


def _lines(stdout):
    # stdin is not echoed, so a reply lands on the prompt's line: split them apart
    return [x for line in stdout.splitlines() for x in line.split(PROMPT)]


def _replay_of(stdout):
    m = re.search(r"^Replay saved: (.+)$", stdout, re.M)
    assert m, stdout[-2000:]
    return load_replay(m.group(1))


def _reasons(stdout):
    """The one-line replies to bad input, in order."""
    return [x.strip() for line in stdout.splitlines() if PROMPT in line
            for x in line.split(PROMPT)[1:] if x.strip() and not x.startswith("  you:")
            and not x.strip().startswith(("heuristic:", "random:", "the agent's"))]


# ---------------------------------------------------------------- whole games

def test_whole_game_against_the_heuristic_with_bad_input(tmp_path):
    seed = 11
    game = engine.load_game("lost_cities", max_turns=200)
    state = game.new_initial_state(seed=seed)
    legal = state.legal_actions()
    hand = state.hand(0)
    absent = next(f"{c}{v}" for c in "YBWGR" for v in range(2, 11) if f"{c}{v}" not in hand)
    chosen = legal[1]
    bad = ["0", "99", "foo", "play Z9", "", "draw deck", f"play {absent}", "?"]
    stdin = "\n".join(bad + [game.action_to_string(chosen).upper()] + ["1"] * 400) + "\n"
    r = _play(tmp_path, ["heuristic", "--seed", seed], stdin)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    reasons = _reasons(out)[:7]
    assert reasons[0] == "no move numbered 0: choose 1-16"
    assert reasons[1] == "no move numbered 99: choose 1-16"
    assert reasons[2].startswith("unknown move 'foo'")
    assert reasons[3].startswith("cannot read 'play Z9': bad card 'Z9'")
    assert reasons[4].startswith("type a move number 1-16")
    assert reasons[5] == "draw deck is not possible: first play or discard a card, then draw"
    assert reasons[6] == f"play {absent} is not possible: you hold no {absent}"
    # the hint: the heuristic's own move for our seat, numbered as in the list
    h = game.heuristic_action(state)
    assert f"100.0%  {legal.index(h) + 1:>2}) {game.action_to_string(h)}" in out
    # nothing the bad input said changed the game: our first move is the one typed as text
    rep = _replay_of(out)
    assert rep["moves"][0]["action"] == chosen and rep["moves"][0]["player"] == 0
    assert rep["header"]["players"] == ["you", "heuristic"] and rep["header"]["seed"] == seed
    assert rep["header"]["source"] == "agents.play" and rep["header"]["agent_seat"] == 1
    # the game went to its end; the last lines give the scores and the replay
    final = rep["states"][-1]
    assert final.is_terminal() and rep["end"]["abandoned"] is False
    you, them = final.scores()
    assert f"Final scores: you {you}, heuristic {them}." in out
    assert "game over after" in out
    # the agent's moves were printed as it made them, and recorded with its probabilities
    agent_moves = [m for m in rep["moves"] if m["player"] == 1]
    assert [x.strip() for x in _lines(out) if x.strip().startswith("heuristic: ")] == \
        [f"heuristic: {m['text']}" for m in agent_moves]
    assert all(m["probs"][0][:2] == [m["action"], m["text"]] and m["probs"][0][2] == 1.0 for m in agent_moves)
    # every line but the replay's path (a long temporary folder here) fits in 80 columns
    assert max(len(x) for x in _lines(out) if not x.startswith("Replay saved: ")) <= 80
    assert "turn 1 of 200 - deck 44 - you to play or discard" in out


def test_quit_and_end_of_input_abandon_cleanly(tmp_path):
    for stdin, tag in (("1\n" * 7 + "q\n" + "1\n" * 5, "q"), ("1\n" * 5, "eof")):
        r = _play(tmp_path / tag, ["heuristic", "--seed", 4], stdin)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        assert re.search(r"^Game abandoned at turn \d+\.\nScores as they stood: you -?\d+, heuristic -?\d+\.$",
                         r.stdout, re.M)
        assert "Final scores" not in r.stdout
        rep = _replay_of(r.stdout)
        assert rep["end"]["abandoned"] is True and not rep["states"][-1].is_terminal()
        answered = (7 if tag == "q" else 5)
        prompts = r.stdout.count(PROMPT)
        assert prompts == answered + 1
        # each answer "1" became one recorded move of ours; forced draws were played for us
        forced = r.stdout.count("(your only move)")
        assert sum(1 for m in rep["moves"] if m["player"] == 0) == answered + forced


def test_seat_one_against_the_random_bot(tmp_path):
    r = _play(tmp_path, ["random", "--seat", "1", "--seed", 2, "--max-turns", 0], "1\n" * 400)
    assert r.returncode == 0, r.stderr
    rep = _replay_of(r.stdout)
    assert rep["header"]["players"] == ["random", "you"] and rep["header"]["params"]["max_turns"] == 0
    assert rep["moves"][0]["player"] == 0 and rep["states"][-1].is_terminal()
    for m in rep["moves"]:
        if m["player"] == 0:      # the random bot: uniform over its legal moves
            ps = [p for _, _, p in m["probs"]]
            assert ps == pytest.approx([1 / len(ps)] * len(ps), abs=1e-6)
    assert "no turn cap" in r.stdout


def _save_lc_checkpoint(run_dir, params):
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **params)
    nets = {k: net_for_game(game, hidden=(16,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    with torch.no_grad():          # sharper than a fresh net, so the hint's order means something
        nets["strategy"].net[-1].weight.mul_(20.0)
    save_checkpoint(run_dir, 7, {"config": {"game": {"name": "lost_cities", "params": params}},
                                 "nets": {k: n.state_dict() for k, n in nets.items()},
                                 "net_spec": nets["strategy"].spec()})


def test_against_a_trained_run_with_the_hint(tmp_path):
    from agents.policy import load_policy
    params = dict(max_turns=60)
    run = tmp_path / "myrun"
    _save_lc_checkpoint(run, params)
    seed = 3
    r = _play(tmp_path, [run, "--seed", seed], "?\n" + "1\n" * 400)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    rep = _replay_of(out)
    h = rep["header"]
    assert h["policy"] == "average" and h["iteration"] == 7 and h["params"]["max_turns"] == 60
    assert h["players"][1] == "myrun (average, iteration 7)"
    assert "the game stops after 60 turns" in out
    # the hint is the policy's probabilities at our first position, top first
    policy = load_policy(run)
    state = policy.game.new_initial_state(seed=seed)
    probs = policy.action_probs(state)
    legal = state.legal_actions()
    top = sorted(probs, key=lambda a: (-probs[a], a))
    hint = [x.strip() for x in out.split("the agent's probabilities for your position")[1].splitlines()[1:9]]
    assert hint == [f"{100 * probs[a]:.1f}%  {legal.index(a) + 1:>2}) {policy.game.action_to_string(a)}"
                    for a in top[:8]]
    # the agent's recorded probabilities are its policy's at each of its decisions
    for i, m in enumerate(rep["moves"]):
        if m["player"] != 1:
            continue
        s = rep["states"][i]
        got = {a: p for a, _, p in m["probs"]}
        assert got == pytest.approx(policy.action_probs(s), abs=2e-6)     # written to 6 decimals
        assert got[m["action"]] > 0
    assert rep["states"][-1].is_terminal()
    if rep["end"]["capped"]:
        assert "turn cap" in out
    # a run plays its own game: no --max-turns with it
    bad = _play(tmp_path, [run, "--max-turns", 10], "")
    assert bad.returncode == 2 and "--max-turns" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_capped_game_says_so(tmp_path):
    r = _play(tmp_path, ["heuristic", "--seed", 1, "--max-turns", 6], "1\n" * 50)
    assert r.returncode == 0, r.stderr
    rep = _replay_of(r.stdout)
    assert rep["end"]["capped"] and rep["states"][-1].turn() == 6
    assert re.search(r"^The game ended at the 6-turn cap with \d+ cards still in the deck\.$", r.stdout, re.M)


def test_search_player(tmp_path):
    """The search player as the opponent, or a one-line error where
    agents.searcher cannot be imported."""
    r = _play(tmp_path, ["search:heuristic,worlds=4", "--seed", 5], "?\n" + "1\n" * 6 + "q\n")
    assert r.returncode == 0, r.stderr
    rep = _replay_of(r.stdout)
    assert rep["header"]["policy"] == "search:heuristic,worlds=4"
    agent = [m for m in rep["moves"] if m["player"] == 1]
    assert agent and all(sum(p for _, _, p in m["probs"]) == pytest.approx(1.0, abs=1e-5) for m in agent)
    assert "the agent's probabilities for your position" in r.stdout
    assert max(len(x) for x in _lines(r.stdout) if not x.startswith("Replay saved: ")) <= 80
    blocked = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['agents.searcher'] = None; "
         "from agents.play import main; sys.exit(main(['search:heuristic']))"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert blocked.returncode == 2 and "Traceback" not in blocked.stderr
    assert blocked.stderr.strip().splitlines() == [blocked.stderr.strip()]
    assert blocked.stderr.startswith("error: the search player is not available here")


def test_setup_errors_are_one_line(tmp_path):
    cases = [(["nobody"], "unknown opponent 'nobody'"),
             ([tmp_path], "cannot load the run"),                 # a directory without checkpoints
             (["search:heuristic,wolds=3"], "bad search setting"),
             (["heuristic", "--max-turns", "-1"], "--max-turns")]
    for args, fragment in cases:
        r = _play(tmp_path, args, "")
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and fragment in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")


# ---------------------------------------------------------------- parts

def _random_positions(game, n_games, seed=0):
    rng = random.Random(seed)
    for g in range(n_games):
        s = game.new_initial_state(seed=g)
        while not s.is_terminal():
            yield s
            s.apply_action(rng.choice(s.legal_actions()))


def test_every_legal_move_parses_and_every_other_gets_a_reason():
    game = engine.load_game("lost_cities", max_turns=200)
    seen = set()
    for s in _random_positions(game, 2):
        legal = s.legal_actions()
        for i, a in enumerate(legal, 1):
            text = game.action_to_string(a)
            assert parse_move(s, text) == (a, None)
            assert parse_move(s, f"  {text.lower()} ") == (a, None)
            assert parse_move(s, str(i)) == (a, None)
        for a in range(game.num_distinct_actions()):
            if a in legal:
                continue
            action, reason = parse_move(s, game.action_to_string(a))
            assert action is None and reason.endswith(why_illegal(s, a))
            assert why_illegal(s, a) != "not a legal move now", (str(s), game.action_to_string(a))
            seen.add(why_illegal(s, a).split(":")[0].split(" ")[0])
    assert len(seen) >= 5        # the reasons differ: hold no, cannot follow, wager, empty pile, ...
    s = game.new_initial_state(seed=0)
    assert parse_move(s, "draw b")[1] == "draw pile B is not possible: first play or discard a card, then draw"
    assert parse_move(s, "17") == (None, "no move numbered 17: choose 1-16")


@pytest.mark.parametrize("params", [dict(max_turns=200), dict(variant="six_colours"), dict(colours=3, ranks=5)])
def test_the_table_fits_80_columns(params):
    game = engine.load_game("lost_cities", **params)
    names = ["you", "a-rather-long-run-name (average-greedy, iteration 12345)"]
    n = 0
    for s in _random_positions(game, 3, seed=2):
        for seat in (0, 1):
            text = render_table(s, seat, names if seat == 0 else names[::-1])
            assert max(len(x) for x in text.splitlines()) <= WIDTH
            assert " ".join(s.hand(seat)) in text.replace("\n    ", " ")
            n += 1
        assert max(len(x) for x in render_moves(game, s.legal_actions()).splitlines()) <= 80
    assert n > 100
