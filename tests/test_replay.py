"""agents.replay (writer, reader, HTML page) and agents.evaluate's
--save-games hook. Real engine games, real subprocesses, a real page."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from batcher.networks import net_for_game  # noqa: E402
from engine._lost_cities import LostCitiesState  # noqa: E402
from agents.matches import duplicate_match  # noqa: E402
from agents.policy import AveragePolicy  # noqa: E402
from agents.replay import (ReplayError, ReplayWriter, expedition_scores, extract_page_data,  # noqa: E402
                            load_replay, render_html, replay_path, save_match_games)

torch.set_num_threads(1)

LC_SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=200)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _play_and_write(tmp_path, seed=5, params=None):
    """A heuristic (seat 0, the agent, probabilities recorded) against a
    random bot, written as a replay. Returns (path, final state, move list)."""
    game = engine.load_game("lost_cities", **(params or {"max_turns": 200}))
    state = game.new_initial_state(seed=seed)
    w = ReplayWriter(replay_path(tmp_path, "heuristic", f"seed{seed}"), state, ["heuristic", "random"],
                     agent_seat=0, seed=seed, policy="heuristic", source="test")
    rng = random.Random(seed)
    moves = []
    while not state.is_terminal():
        legal = state.legal_actions()
        if state.current_player() == 0:
            a = game.heuristic_action(state)
            probs = {b: (0.7 if b == a else 0.3 / (len(legal) - 1)) for b in legal} if len(legal) > 1 else {a: 1.0}
        else:
            a, probs = rng.choice(legal), None
        w.move(state, a, probs)
        moves.append((state.current_player(), a, probs))
        state.apply_action(a)
    return w.finish(state), state, moves


# ---------------------------------------------------------------- scores

@pytest.mark.parametrize("params", [{}, {"variant": "six_colours"}, dict(wagers=0, bonus_threshold=3),
                                    dict(LC_SMALL, expedition_cost=5, bonus_amount=7)])
def test_expedition_scores_sum_to_the_engines_scores(params):
    game = engine.load_game("lost_cities", **params)
    rng = random.Random(1)
    checked = 0
    for seed in range(6):
        s = game.new_initial_state(seed=seed)
        while not s.is_terminal() and s.turn() < 150:
            s.apply_action(rng.choice(s.legal_actions()))
            per = expedition_scores(s)
            assert [sum(per[0]), sum(per[1])] == s.scores()
            for p in (0, 1):
                for c, cards in enumerate(s.expeditions(p)):
                    if not cards:
                        assert per[p][c] == 0
            checked += 1
    assert checked > 100


# ---------------------------------------------------------------- file round trip

def test_written_replay_reads_back_as_the_same_game(tmp_path):
    path, final, moves = _play_and_write(tmp_path)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["type"] for x in lines[:2]] == ["header", "deal"] and lines[-1]["type"] == "end"
    assert lines[0]["players"] == ["heuristic", "random"] and lines[0]["seed"] == 5
    r = load_replay(path)
    # (its own game object: states compare byte for byte)
    assert r["states"][-1].state_bytes() == final.state_bytes() and r["end"]["scores"] == final.scores()
    assert len(r["moves"]) == len(moves) == len(r["states"]) - 1
    for rec, (p, a, probs) in zip(r["moves"], moves):
        assert (rec["player"], rec["action"], rec["text"]) == (p, a, final.game.action_to_string(a))
        if probs is None:
            assert "probs" not in rec
        else:      # every legal move, most probable first, as recorded
            got = {x[0]: x[2] for x in rec["probs"]}
            assert got == pytest.approx(probs, abs=1e-6)
            assert [x[2] for x in rec["probs"]] == sorted((x[2] for x in rec["probs"]), reverse=True)


def test_html_page_round_trips_to_the_same_game(tmp_path):
    path, final, moves = _play_and_write(tmp_path, seed=9, params=dict(variant="six_colours"))
    page = render_html(load_replay(path))
    # self-contained: nothing fetched from anywhere
    for banned in ("http://", "https://", "src=", "<link", "@import", "url("):
        assert banned not in page
    data = extract_page_data(page)
    game = engine.load_game(data["header"]["game"], **data["header"]["params"])
    assert game.params["colours"] == 6 and data["colours"] == "YBWGRP"
    # replay the embedded moves through the engine from the embedded deal and
    # compare every embedded snapshot with the engine's state
    state = LostCitiesState.from_dict(game, data["snapshots"][0]["state"])
    assert len(data["snapshots"]) == len(data["moves"]) + 1 == len(moves) + 1
    for i, snap in enumerate(data["snapshots"]):
        assert LostCitiesState.from_dict(game, snap["state"]) == state, f"position {i}"
        assert snap["state"] == state.to_dict()
        assert snap["scores"] == state.scores()
        assert [sum(x) for x in snap["exp_scores"]] == state.scores()
        assert snap["legal"] == [game.action_to_string(a) for a in state.legal_actions()]
        if i < len(data["moves"]):
            m = data["moves"][i]
            assert m["player"] == state.current_player() == moves[i][0]
            state.apply_action(m["action"])
    assert state.state_bytes() == final.state_bytes() and state.is_terminal()
    assert data["end"]["scores"] == final.scores() and data["end"]["abandoned"] is False
    assert [m["action"] for m in data["moves"]] == [a for _, a, _ in moves]


def test_page_buttons_draw_without_any_font_glyphs(tmp_path):
    # symbol glyphs such as U+23EE are missing from many default fonts (an
    # empty box in headless Chromium on Debian): each button is an inline SVG
    # drawing with an ASCII label, so it shows whatever fonts are installed
    path, _, _ = _play_and_write(tmp_path, seed=3)
    page = render_html(load_replay(path))
    buttons = re.findall(r"<button ([^>]*)>(.*?)</button>", page, flags=re.S)
    assert [re.search(r'id="(\w+)"', attrs).group(1) for attrs, _ in buttons] == \
        ["first", "prev", "next", "last"]
    for attrs, inner in buttons:
        assert (attrs + inner).isascii() and "&#" not in attrs + inner
        assert re.search(r'aria-label="\w+"', attrs)
        assert re.fullmatch(r'<svg viewBox="[\d ]+"><path d="[MmHhVvLlZz\d .-]+"/></svg>', inner), inner


def test_page_survives_names_that_look_like_markup(tmp_path):
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = game.new_initial_state(seed=1)
    evil = "</script><script>alert(1)</script><!--"
    w = ReplayWriter(tmp_path / "evil.jsonl", state, [evil, "b & <c>"], seed=1)
    for _ in range(4):
        a = state.legal_actions()[0]
        w.move(state, a)
        state.apply_action(a)
    w.finish(state, abandoned=True)
    page = render_html(load_replay(tmp_path / "evil.jsonl"))
    assert evil not in page and page.count("</script>") == 2
    assert extract_page_data(page)["header"]["players"] == [evil, "b & <c>"]


_NODE_DOM = r"""
const fs = require("fs"), vm = require("vm");
const page = fs.readFileSync(process.argv[2], "utf8");
class El {
  constructor(tag) { this.tagName = tag.toUpperCase(); this.children = []; this.style = {};
                     this.className = ""; this._text = ""; this.listeners = {}; this.parentNode = null; }
  appendChild(c) {
    if (c.parentNode) c.parentNode.children.splice(c.parentNode.children.indexOf(c), 1);
    c.parentNode = this; this.children.push(c); return c;
  }
  get firstChild() { return this.children[0] || null; }
  set innerHTML(v) { this.children = []; this._text = ""; }
  set textContent(v) { this.children = []; this._text = String(v); }
  get textContent() { return [this._text].concat(this.children.map(c => c.textContent)).join(" "); }
  addEventListener(t, f) { this.listeners[t] = f; }
}
const byId = {}, docListeners = {};
for (const m of page.matchAll(/ id="([^"]+)"/g)) byId[m[1]] = new El("div");
const scripts = [...page.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)];
byId["replay-data"]._text = scripts[0][2];
const document = { getElementById: id => byId[id], createElement: t => new El(t),
                   addEventListener: (t, f) => { docListeners[t] = f; } };
const ctx = vm.createContext({ document, JSON, Math, console });
vm.runInContext(scripts[1][2], ctx);
const out = [], n = JSON.parse(scripts[0][2]).snapshots.length;
const grab = () => out.push({ status: byId.status.textContent, board: byId.board.textContent,
                              move: byId.move.textContent });
for (let i = 0; i < n; i++) { ctx.go(i); grab(); }
// the controls: keys and buttons
const key = k => docListeners.keydown({ key: k, target: { tagName: "BODY" }, preventDefault() {} });
key("Home"); key("ArrowRight"); key("ArrowRight"); key("ArrowLeft"); grab();
byId.last.onclick(); grab(); byId.prev.onclick(); grab(); byId.first.onclick(); byId.next.onclick(); grab();
process.stdout.write(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_page_script_renders_every_position(tmp_path):
    """The page's own script, run by node over a minimal DOM: every position
    renders without error and shows that position's cards and the policy."""
    path, final, moves = _play_and_write(tmp_path, seed=3)
    replay = load_replay(path)
    html_path = tmp_path / "page.html"
    html_path.write_text(render_html(replay))
    js = tmp_path / "dom.js"
    js.write_text(_NODE_DOM)
    r = subprocess.run(["node", str(js), str(html_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    views = json.loads(r.stdout)
    n = len(replay["moves"])
    assert len(views) == n + 1 + 4
    for i, (view, state) in enumerate(zip(views, replay["states"])):
        assert f"position {i} / {n}" in view["status"]
        cards = re.findall(r"\b[A-Z](?:w|\d+)\b", view["board"])
        for p in (0, 1):
            for c in state.hand(p):
                assert c in cards
            for e in state.expeditions(p):
                for c in e:
                    assert c in cards
        for pile in state.piles():
            if pile:
                assert pile[-1] in cards
        if i < n:
            m = replay["moves"][i]
            assert f"next move: seat {m['player']}" in view["move"] and m["text"] in view["move"]
            if "probs" in m:
                a, text, p = m["probs"][0]
                assert f"{text} {100 * p:.1f}%" in view["move"]
        else:
            assert f"final scores: heuristic {final.scores()[0]}, random {final.scores()[1]}" in view["move"]
    assert "game over" in views[n]["status"]
    # Home, right, right, left -> 1; last -> n; prev -> n - 1; first, next -> 1
    assert [f"position {k} / {n}" in v["status"] for k, v in zip([1, n, n - 1, 1], views[n + 1:])] == [True] * 4


# ---------------------------------------------------------------- bad files

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "agents.replay", *map(str, args)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=60)


def test_cli_writes_the_page(tmp_path):
    path, final, _ = _play_and_write(tmp_path)
    out = tmp_path / "game.html"
    r = _cli(path, "--html", out)
    assert r.returncode == 0, r.stderr
    assert f"scores {final.scores()}" in r.stdout and f"wrote {out}" in r.stdout
    assert extract_page_data(out.read_text())["end"]["scores"] == final.scores()


def _one_line_error(r, *fragments):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_cli_rejects_bad_files_in_one_line(tmp_path):
    path, final, _ = _play_and_write(tmp_path)
    lines = path.read_text().splitlines()
    game = final.game

    _one_line_error(_cli(tmp_path / "nope.jsonl"), "nope.jsonl", "no such file")

    bad = tmp_path / "notjson.jsonl"
    bad.write_text(lines[0] + "\nthis is not json\n")
    _one_line_error(_cli(bad), "notjson.jsonl:2:", "not a JSON line")

    html_file = tmp_path / "page.jsonl"
    html_file.write_text("<html></html>\n")
    _one_line_error(_cli(html_file), ":1:", "not a JSON line")

    # move 6 replaced by a move that is illegal there (text consistent with it)
    state = game.new_initial_state(seed=5)
    for rec in map(json.loads, lines[2:8]):
        state.apply_action(rec["action"])
    illegal = next(a for a in range(game.num_distinct_actions()) if a not in state.legal_actions())
    rec = json.loads(lines[8])
    assert rec["n"] == 6
    rec["action"], rec["text"] = illegal, game.action_to_string(illegal)
    bad = tmp_path / "illegal.jsonl"
    bad.write_text("\n".join(lines[:8] + [json.dumps(rec)] + lines[9:]) + "\n")
    _one_line_error(_cli(bad), "illegal.jsonl:9:", "move 6 is not legal here", game.action_to_string(illegal))

    # the text disagrees with the id
    rec = json.loads(lines[8])
    rec["text"] = "play Y9" if rec["text"] != "play Y9" else "play Y8"
    bad.write_text("\n".join(lines[:8] + [json.dumps(rec)] + lines[9:]) + "\n")
    _one_line_error(_cli(bad), ":9:", "does not name action")

    # a move by the wrong player
    rec = json.loads(lines[8])
    rec["player"] = 1 - rec["player"]
    bad.write_text("\n".join(lines[:8] + [json.dumps(rec)] + lines[9:]) + "\n")
    _one_line_error(_cli(bad), ":9:", "is to move")

    # end scores that are not the game's
    end = json.loads(lines[-1])
    end["scores"] = [end["scores"][0] + 1, end["scores"][1]]
    bad.write_text("\n".join(lines[:-1] + [json.dumps(end)]) + "\n")
    _one_line_error(_cli(bad), f":{len(lines)}:", "end scores")

    # no header; a deal that breaks the rules
    bad.write_text("\n".join(lines[1:]) + "\n")
    _one_line_error(_cli(bad), ":1:", "header")
    deal = json.loads(lines[1])
    deal["state"]["hands"][0] = deal["state"]["hands"][0][:-1]
    bad.write_text("\n".join([lines[0], json.dumps(deal)] + lines[2:]) + "\n")
    _one_line_error(_cli(bad), ":2:", "bad deal")

    # a game cut short, its end line not saying it was abandoned
    state = game.new_initial_state(seed=5)
    for rec in map(json.loads, lines[2:20]):
        state.apply_action(rec["action"])
    end = dict(json.loads(lines[-1]), scores=state.scores())
    bad.write_text("\n".join(lines[:20] + [json.dumps(end)]) + "\n")
    _one_line_error(_cli(bad), ":21:", "not over after 18 moves")
    end["abandoned"] = True
    bad.write_text("\n".join(lines[:20] + [json.dumps(end)]) + "\n")
    assert _cli(bad).returncode == 0


def test_a_file_cut_short_still_reads(tmp_path):
    """A writer killed mid-game leaves header, deal and moves: readable."""
    path, final, moves = _play_and_write(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:30]) + "\n")
    r = load_replay(path)
    assert r["end"] is None and len(r["moves"]) == 28 and not r["states"][-1].is_terminal()
    with pytest.raises(ReplayError, match="empty file"):
        (tmp_path / "empty.jsonl").write_text("")
        load_replay(tmp_path / "empty.jsonl")


# ---------------------------------------------------------------- agents.evaluate --save-games

def test_duplicate_match_records_the_games_it_plays(tmp_path):
    game = engine.load_game("lost_cities", **LC_SMALL)
    net = net_for_game(game, hidden=(8,), seed=4)
    plain = duplicate_match(game, AveragePolicy(net, seed=2), "random", 8, seed=3)
    record = [[] for _ in range(8)]
    got = duplicate_match(game, AveragePolicy(net, seed=2), "random", 8, seed=3, record=record)
    assert got == plain                      # recording changes nothing
    policy = AveragePolicy(net)
    diffs = []
    for g, moves in enumerate(record):
        seat = g % 2
        state = game.new_initial_state(seed=3 + g // 2)
        for player, action, probs in moves:
            assert player == state.current_player()
            if player == seat:               # the agent: its exact probabilities
                expect = policy.action_probs(state)
                assert probs.sum() == pytest.approx(1.0)
                assert {a: probs[a] for a in expect} == pytest.approx(expect, abs=1e-6)   # batch vs one row: float32
                assert probs[action] > 0
            else:
                assert probs is None
            state.apply_action(action)
        assert state.is_terminal()
        diffs.append(state.returns()[seat])
    diffs = np.array(diffs)
    assert got["wins"] == int((diffs > 0).sum()) and got["losses"] == int((diffs < 0).sum())
    assert got["margin_by_seat"] == pytest.approx([diffs[0::2].mean(), diffs[1::2].mean()])
    # only the first len(record) games are recorded
    short = [[] for _ in range(3)]
    duplicate_match(game, AveragePolicy(net, seed=2), "heuristic", 8, seed=3, record=short)
    assert all(short) and len(short) == 3

    paths = save_match_games(game, record[:2], 3, tmp_path, "average", "random", policy="average")
    assert len(paths) == 2
    for g, p in enumerate(paths):
        r = load_replay(p)
        assert r["header"]["agent_seat"] == g % 2 and r["header"]["seed"] == 3
        assert r["header"]["players"][g % 2] == "average" and r["header"]["players"][1 - g % 2] == "random"
        assert r["header"]["source"] == "agents.evaluate"
        assert r["end"]["returns"][g % 2] == diffs[g]
        agent_moves = [m for m in r["moves"] if m["player"] == g % 2]
        assert agent_moves and all("probs" in m for m in agent_moves)
        assert all("probs" not in m for m in r["moves"] if m["player"] != g % 2)


def _save_lc_checkpoint(run_dir, params):
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **params)
    nets = {k: net_for_game(game, hidden=(8,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    save_checkpoint(run_dir, 4, {"config": {"game": {"name": "lost_cities", "params": params}},
                                 "nets": {k: n.state_dict() for k, n in nets.items()},
                                 "net_spec": nets["strategy"].spec()})


def test_evaluate_cli_save_games(tmp_path):
    run = tmp_path / "run"
    _save_lc_checkpoint(run, LC_SMALL)
    out = tmp_path / "saved"
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(run), "--games", "4", "--save-games", "3",
                        "--save-dir", str(out), "--json"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)                     # stdout stays one JSON object
    assert "saved 6 replays" in r.stderr
    files = sorted(out.glob("*.jsonl"))
    assert len(files) == 6
    for opp in ("random", "heuristic"):
        mine = [f for f in files if f"_vs_{opp}_" in f.name]
        assert len(mine) == 3
        for f in mine:
            rep = load_replay(f)
            assert rep["header"]["iteration"] == 4 and rep["header"]["policy"] == "average-greedy"   # the default
            assert rep["end"] is not None and not rep["end"]["abandoned"]
    assert metrics["vs_random_games"] == 4
    bad = subprocess.run([sys.executable, "-m", "agents.evaluate", str(run), "--games", "2", "--save-games", "-1"],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--save-games" in bad.stderr
