"""Lost Cities replays: written by agents.play and `agents.evaluate
--save-games`, checked move by move through the engine, drawn as HTML.

    python -m agents.replay FILE.jsonl                    # check it, print a summary
    python -m agents.replay FILE.jsonl --html OUT.html    # a page that steps through it

A replay is JSON lines, one object a line, each with a "type":

    header  format (1), game, params, players (a name per seat), agent_seat
            (the seat whose decisions carry probabilities, or null), seed,
            policy, checkpoint, iteration, source, date
    deal    state: the initial state's to_dict() (hands, deck order, ...)
    move    n (0, 1, ...), turn, player, action (engine id), text ("play Y7"),
            and at the agent's decisions probs: [[action, text, probability],
            ...] over its legal moves, most probable first
    end     scores, returns, turns, capped (ended at the turn cap), abandoned
            (the human quit); absent only if the writer was killed

The reader rebuilds the game from the deal and applies every move through
the engine, so a file that does not describe a legal game is rejected with
one line naming the file, the line and the problem. The HTML page embeds
one snapshot per position, computed here in Python; its script only renders
them. It loads nothing from the network.
"""
import argparse
import datetime as _dt
import html
import json
import re
import sys
from pathlib import Path

import engine
from engine._lost_cities import COLOUR_LETTERS, LostCitiesState

FORMAT = 1


class ReplayError(ValueError):
    """A replay file that cannot be read, or that describes no legal game."""


# --------------------------------------------------------------------------
# Scores of single expeditions

def expedition_score(params, cards):
    """Score of one expedition (card strings as in state.expeditions()):
    (sum of numbers - cost) x (1 + wagers), plus the bonus at `bonus_threshold`
    cards; 0 if not started. The expeditions' scores sum to state.scores()."""
    if not cards:
        return 0
    wagers = sum(1 for c in cards if c[1:] == "w")
    total = sum(int(c[1:]) for c in cards if c[1:] != "w")
    score = (total - params["expedition_cost"]) * (1 + wagers)
    if len(cards) >= params["bonus_threshold"]:
        score += params["bonus_amount"]
    return score


def expedition_scores(state):
    """[[score per colour] for each player] of a Lost Cities state."""
    params = state.game.params
    return [[expedition_score(params, e) for e in state.expeditions(p)] for p in (0, 1)]


# --------------------------------------------------------------------------
# Writing

def now_iso():
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _slug(text):
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(text)).strip("-")[:40] or "x"


def replay_path(directory, *parts):
    """A new file in `directory` (created if missing) named from the local
    date and time and `parts` (e.g. the opponent and the seed); never an
    existing file's name."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    stem = "_".join([_dt.datetime.now().strftime("%Y%m%d-%H%M%S")] + [_slug(p) for p in parts])
    path, k = d / f"{stem}.jsonl", 2
    while path.exists():
        path, k = d / f"{stem}-{k}.jsonl", k + 1
    return path


def probs_entries(game, probs, legal):
    """[[action, text, p], ...] over the legal actions, most probable first
    (ties by id). `probs` is {action: p} or an array indexed by action."""
    rows = [(int(a), float(probs.get(a, 0.0) if isinstance(probs, dict) else probs[a])) for a in legal]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return [[a, game.action_to_string(a), round(p, 6)] for a, p in rows]


def decision_probs(player, state, action):
    """The probabilities behind the move `action` that `player` just chose
    at `state` (not yet applied): the search player's last search (the share
    of worlds in which each candidate was best), else the player's
    `action_probs(state)` (a policy's are exact; a searcher's would be a second
    search), else None."""
    legal = state.legal_actions()
    if len(legal) == 1:
        return {legal[0]: 1.0}
    last = getattr(player, "last", None)
    if isinstance(last, tuple) and len(last) == 3 and action in [int(a) for a in last[0]]:
        out = {a: 0.0 for a in legal}
        out.update({int(a): float(p) for a, p in zip(last[0], last[2])})
        return out
    if callable(getattr(player, "action_probs", None)):
        return player.action_probs(state)
    return None


class ReplayWriter:
    """Writes one game as it is played: the header and the deal at once, a
    line per move (flushed, so a killed process leaves the game so far), and
    the end line from `finish`."""

    def __init__(self, path, state, players, *, agent_seat=None, seed=None, policy=None,
                 checkpoint=None, iteration=None, source="agents.play"):
        game = state.game
        if game.name != "lost_cities":
            raise ValueError(f"replays are for lost_cities, not {game.name}")
        if len(players) != 2:
            raise ValueError("a replay needs one player name per seat")
        self.path = Path(path)
        self.game = game
        self.n = 0
        self._file = open(self.path, "x", encoding="utf-8")
        self._write({"type": "header", "format": FORMAT, "game": game.name, "params": dict(game.params),
                     "players": [str(p) for p in players], "agent_seat": agent_seat, "seed": seed,
                     "policy": policy, "checkpoint": None if checkpoint is None else str(checkpoint),
                     "iteration": iteration, "source": source, "date": now_iso()})
        self._write({"type": "deal", "state": state.to_dict()})

    def _write(self, obj):
        self._file.write(json.dumps(obj) + "\n")
        self._file.flush()

    def move(self, state, action, probs=None):
        """Record `action`, about to be applied to `state` (not yet applied);
        `probs` ({action: p} or an array by action id) at the agent's decisions."""
        rec = {"type": "move", "n": self.n, "turn": state.turn(), "player": state.current_player(),
               "action": int(action), "text": self.game.action_to_string(int(action))}
        if probs is not None:
            rec["probs"] = probs_entries(self.game, probs, state.legal_actions())
        self._write(rec)
        self.n += 1

    def finish(self, state, abandoned=False):
        """Write the end line from the final (or, if abandoned, current) state."""
        self._write({"type": "end", "scores": state.scores(), "returns": state.returns(),
                     "turns": state.turn(), "capped": state.capped(), "abandoned": bool(abandoned)})
        self._file.close()
        return self.path

    def close(self):
        if not self._file.closed:
            self._file.close()


def save_match_games(game, records, seed, directory, agent_name, opponent_name, *, policy=None,
                     checkpoint=None, iteration=None):
    """Write the games agents.evaluate.duplicate_match recorded: records[g]
    is game g's list of (player, action, probs or None); game g was dealt
    from seed + g // 2 with the agent in seat g % 2. Every move is checked
    as it is replayed. Returns the paths written."""
    paths = []
    for g, moves in enumerate(records):
        if not moves:
            continue
        deal_seed = seed + g // 2
        seat = g % 2
        state = game.new_initial_state(seed=deal_seed)
        players = [None, None]
        players[seat], players[1 - seat] = agent_name, opponent_name
        path = replay_path(directory, agent_name, "vs", opponent_name, f"game{g:04d}", f"seed{deal_seed}")
        w = ReplayWriter(path, state, players, agent_seat=seat, seed=deal_seed, policy=policy,
                         checkpoint=checkpoint, iteration=iteration, source="agents.evaluate")
        try:
            for player, action, probs in moves:
                if player != state.current_player():
                    raise ValueError(f"game {g}: move {w.n} recorded for player {player}, "
                                     f"but player {state.current_player()} is to move")
                w.move(state, action, probs)
                state.apply_action(action)
            w.finish(state, abandoned=not state.is_terminal())
        finally:
            w.close()
        paths.append(path)
    return paths


# --------------------------------------------------------------------------
# Reading

def _fail(path, line, msg):
    raise ReplayError(f"{path}:{line}: {msg}" if line else f"{path}: {msg}")


def _short(err):
    # the engine's illegal-move message ends with the whole legal list
    return str(err).split("; legal:")[0]


def load_replay(path):
    """Read and check a replay. Returns {"header", "deal", "moves", "end"
    (None if the file stops early), "game", "states"}: states[i] is the
    engine state after i moves (len(moves) + 1 of them). Raises ReplayError
    with one line naming the file, the line and the problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(path, 0, "no such file")
    except (OSError, UnicodeDecodeError) as e:
        _fail(path, 0, f"cannot read it ({e})")
    records = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            _fail(path, i, f"not a JSON line ({e.msg} at column {e.colno})")
        if not isinstance(obj, dict) or "type" not in obj:
            _fail(path, i, "each line must be a JSON object with a \"type\"")
        records.append((i, obj))
    if not records:
        _fail(path, 0, "empty file, not a replay")
    line, header = records[0]
    if header["type"] != "header":
        _fail(path, line, f"the first line must be the header, not {header['type']!r}")
    if header.get("format") != FORMAT:
        _fail(path, line, f"unsupported replay format {header.get('format')!r} (this reader: {FORMAT})")
    if header.get("game") != "lost_cities":
        _fail(path, line, f"replays are of lost_cities, not {header.get('game')!r}")
    players = header.get("players")
    if not (isinstance(players, list) and len(players) == 2 and all(isinstance(p, str) for p in players)):
        _fail(path, line, f"the header's players must be two names, got {players!r}")
    try:
        game = engine.load_game("lost_cities", **dict(header.get("params") or {}))
    except (TypeError, ValueError) as e:
        _fail(path, line, f"bad game parameters: {e}")
    if len(records) < 2 or records[1][1]["type"] != "deal":
        _fail(path, records[1][0] if len(records) > 1 else line, "the second line must be the deal")
    line, deal = records[1]
    try:
        state = LostCitiesState.from_dict(game, deal["state"])
    except (KeyError, TypeError, ValueError) as e:
        _fail(path, line, f"bad deal: {e}")
    if state.turn() != 0 or state.is_terminal():
        _fail(path, line, "the deal must be a game's initial state")
    states, moves, end = [state.clone()], [], None
    for line, rec in records[2:]:
        if end is not None:
            _fail(path, line, "a line after the end line")
        kind = rec["type"]
        if kind == "end":
            end = rec
            continue
        if kind != "move":
            _fail(path, line, f"unknown line type {kind!r}")
        n = len(moves)
        try:
            action = rec["action"]
            if isinstance(action, bool) or not isinstance(action, int):
                raise TypeError(f"action must be an integer id, got {action!r}")
            if rec.get("player", state.current_player()) != state.current_player():
                raise ValueError(f"recorded for player {rec['player']}, but player "
                                 f"{state.current_player()} is to move")
            if "text" in rec and 0 <= action < game.num_distinct_actions() \
                    and rec["text"] != game.action_to_string(action):
                raise ValueError(f"text {rec['text']!r} does not name action {action} "
                                 f"({game.action_to_string(action)})")
            state.apply_action(action)
        except KeyError as e:
            _fail(path, line, f"move {n} lacks field {e.args[0]!r}")
        except (TypeError, ValueError) as e:
            _fail(path, line, f"move {n} is not legal here: {_short(e)}")
        moves.append(rec)
        states.append(state.clone())
    if end is not None:
        if end.get("scores") != state.scores():
            _fail(path, records[-1][0], f"end scores {end.get('scores')} differ from the replayed "
                                        f"game's {state.scores()}")
        if not end.get("abandoned") and not state.is_terminal():
            _fail(path, records[-1][0], f"the game is not over after {len(moves)} moves, "
                                        "and the end line does not say it was abandoned")
    return {"header": header, "deal": deal["state"], "moves": moves, "end": end, "game": game,
            "states": states}


def snapshot(state):
    """What the page shows at one position: the full state (a replay shows
    hidden cards too), each expedition's score and the totals."""
    return {"state": state.to_dict(), "exp_scores": expedition_scores(state), "scores": state.scores(),
            "legal": [state.game.action_to_string(a) for a in state.legal_actions()]}


def page_data(replay):
    """The JSON the HTML page embeds: header, moves, end, one snapshot per position."""
    return {"header": replay["header"], "moves": replay["moves"], "end": replay["end"],
            "colours": COLOUR_LETTERS[:replay["game"].params["colours"]],
            "snapshots": [snapshot(s) for s in replay["states"]]}


def summary(replay):
    """A few lines of text about a checked replay."""
    h, end = replay["header"], replay["end"]
    final = replay["states"][-1]
    lines = [f"{h.get('players')[0]} (seat 0) vs {h.get('players')[1]} (seat 1), seed {h.get('seed')}, "
             f"{h.get('source')} {h.get('date')}",
             f"{len(replay['moves'])} moves, {final.turn()} turns, scores {final.scores()}"]
    if end is None:
        lines.append("the file stops before the end line (the writer was stopped)")
    elif end.get("abandoned"):
        lines.append("abandoned before the end")
    elif end.get("capped"):
        lines.append(f"ended at the turn cap ({h['params'].get('max_turns')}) with cards left in the deck")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# HTML

def _script_json(obj):
    # inside <script>, "</script" or "<!--" would end the element early: escape every "<"
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


def render_html(replay):
    """One self-contained page (inline CSS and JS, nothing fetched) that
    steps through the replay."""
    h = replay["header"]
    title = f"Lost Cities replay: {h['players'][0]} vs {h['players'][1]}, seed {h.get('seed')}"
    return (_PAGE.replace("__TITLE__", html.escape(title))
                 .replace("__DATA__", _script_json(page_data(replay))))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #f6f4ef; }
h1 { font-size: 17px; margin: 0 0 4px; }
.meta { color: #555; margin-bottom: 8px; }
.nav { margin: 8px 0; display: flex; gap: 6px; align-items: center; flex-wrap: wrap; }
.nav button { font-size: 15px; min-width: 44px; padding: 3px 8px; }
.nav button svg { width: 16px; height: 16px; vertical-align: middle; fill: currentColor; }
.nav input[type=range] { width: 260px; }
.status { font-weight: 600; }
.board { display: grid; gap: 4px 6px; margin: 10px 0; align-items: start; }
.lbl { font-weight: 600; color: #444; align-self: center; white-space: nowrap; }
.cell { min-height: 26px; }
.stack { display: flex; flex-direction: column; gap: 2px; align-items: flex-start; }
.hand { display: flex; flex-wrap: wrap; gap: 3px; }
.card { display: inline-block; min-width: 30px; padding: 1px 4px; border: 1px solid #888; border-radius: 4px;
        text-align: center; font-weight: 600; font-family: ui-monospace, monospace; }
.card.hidden { border-style: dashed; opacity: .75; }
.card.known { box-shadow: 0 0 0 2px #222 inset; }
.pts { font-family: ui-monospace, monospace; color: #333; }
.pts.neg { color: #b00; }
.pile .count { color: #666; font-size: 12px; margin-left: 3px; }
.blocked { outline: 2px dotted #b00; }
.c-Y { background: #f4d03f; } .c-B { background: #7fb3e6; } .c-W { background: #ffffff; }
.c-G { background: #82c785; } .c-R { background: #e67e73; } .c-P { background: #c39bd3; }
.move { margin: 8px 0; padding: 6px 8px; background: #fff; border: 1px solid #ccc; border-radius: 6px; max-width: 720px; }
.probs { border-collapse: collapse; margin-top: 4px; }
.probs td { padding: 1px 6px; font-family: ui-monospace, monospace; }
.bar { height: 10px; background: #5577aa; display: inline-block; vertical-align: middle; }
tr.chosen td { font-weight: 700; background: #eef3ff; }
.legend { color: #666; font-size: 12px; margin-top: 10px; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div class="meta" id="meta"></div>
<div class="nav">
  <button id="first" title="first (Home)" aria-label="first"><svg viewBox="0 0 16 16"><path d="M3 3h2v10H3zM13 3v10L6 8z"/></svg></button>
  <button id="prev" title="previous (&larr;)" aria-label="previous"><svg viewBox="0 0 16 16"><path d="M11 3v10L4 8z"/></svg></button>
  <button id="next" title="next (&rarr;)" aria-label="next"><svg viewBox="0 0 16 16"><path d="M5 3v10l7-5z"/></svg></button>
  <button id="last" title="last (End)" aria-label="last"><svg viewBox="0 0 16 16"><path d="M3 3v10l7-5zM11 3h2v10h-2z"/></svg></button>
  <input type="range" id="slider" min="0" value="0">
  <span class="status" id="status"></span>
</div>
<div class="board" id="board"></div>
<div class="move" id="move"></div>
<div class="legend">Dashed cards are hidden from the other player; a card with a dark inner
frame was taken from a discard pile, so the other player knows it. The dotted pile is the one
just discarded onto, which the mover may not draw from. Keys: &larr; &rarr; Home End.</div>
<script type="application/json" id="replay-data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("replay-data").textContent);
const H = D.header, S = D.snapshots, M = D.moves, C = D.colours;
let pos = 0;
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function card(name, extra) {
  return el("span", "card c-" + name[0] + (extra ? " " + extra : ""), name);
}
function pts(v) { return el("span", "pts" + (v < 0 ? " neg" : ""), (v > 0 ? "+" : "") + v); }
function who(p) { return "seat " + p + " (" + H.players[p] + ")"; }
function handRow(st, p) {
  const box = el("div", "hand");
  const known = st.known_hands[p].slice();
  for (const c of st.hands[p]) {
    const k = known.indexOf(c);
    if (k >= 0) { known.splice(k, 1); box.appendChild(card(c, "known")); }
    else box.appendChild(card(c, "hidden"));
  }
  return box;
}
function expRow(board, st, sc, p) {
  board.appendChild(el("div", "lbl", "expeditions"));
  C.split("").forEach((col, c) => {
    const cell = el("div", "cell stack");
    const cards = st.expeditions[p][c];
    const list = p === 1 ? cards.slice().reverse() : cards;
    if (cards.length) cell.appendChild(pts(sc.exp_scores[p][c]));
    for (const x of list) cell.appendChild(card(x));
    if (p === 1 && cards.length) cell.appendChild(cell.firstChild);  // score next to the piles, as for seat 0
    board.appendChild(cell);
  });
}
function render() {
  const sc = S[pos], st = sc.state, n = M.length;
  document.getElementById("slider").value = pos;
  let status = "position " + pos + " / " + n + " \\u00b7 turn " + st.turn + " \\u00b7 deck " + st.deck.length;
  if (st.terminal) status += " \\u00b7 game over" + (D.end && D.end.capped ? " (turn cap)" : "");
  else status += " \\u00b7 " + who(st.player) + " to " + (st.phase === "play" ? "play or discard" : "draw");
  document.getElementById("status").textContent = status;
  const board = document.getElementById("board");
  board.innerHTML = "";
  board.style.gridTemplateColumns = "max-content repeat(" + C.length + ", minmax(52px, max-content))";
  for (const p of [1, 0]) {
    if (p === 0) {
      board.appendChild(el("div", "lbl", "discard piles"));
      C.split("").forEach((col, c) => {
        const pile = st.piles[c], cell = el("div", "cell pile");
        if (pile.length) {
          cell.appendChild(card(pile[pile.length - 1], st.blocked_pile === c ? "blocked" : ""));
          cell.appendChild(el("span", "count", "(" + pile.length + ")"));
        } else cell.appendChild(el("span", "count", col + ": empty"));
        board.appendChild(cell);
      });
    }
    if (p === 1) {
      const l = el("div", "lbl", who(1) + "  score ");
      l.appendChild(pts(sc.scores[1]));
      l.style.gridColumn = "1 / -1";
      board.appendChild(l);
      board.appendChild(el("div", "lbl", "hand"));
      const h = handRow(st, 1); h.style.gridColumn = "2 / -1"; board.appendChild(h);
      expRow(board, st, sc, 1);
    } else {
      expRow(board, st, sc, 0);
      board.appendChild(el("div", "lbl", "hand"));
      const h = handRow(st, 0); h.style.gridColumn = "2 / -1"; board.appendChild(h);
      const l = el("div", "lbl", who(0) + "  score ");
      l.appendChild(pts(sc.scores[0]));
      l.style.gridColumn = "1 / -1";
      board.appendChild(l);
    }
  }
  const mv = document.getElementById("move");
  mv.innerHTML = "";
  if (pos > 0) mv.appendChild(el("div", "", "last move: " + who(M[pos - 1].player) + " " + M[pos - 1].text));
  if (pos < n) {
    const m = M[pos];
    mv.appendChild(el("div", "", "next move: " + who(m.player) + " " + m.text));
    if (m.probs) {
      mv.appendChild(el("div", "", H.players[m.player] + "'s policy here (top moves):"));
      const t = el("table", "probs");
      for (const [a, text, p] of m.probs.slice(0, 6)) {
        const tr = el("tr", a === m.action ? "chosen" : "");
        tr.appendChild(el("td", "", text));
        tr.appendChild(el("td", "", (100 * p).toFixed(1) + "%"));
        const bar = el("span", "bar"); bar.style.width = Math.round(200 * p) + "px";
        const td = el("td"); td.appendChild(bar); tr.appendChild(td);
        t.appendChild(tr);
      }
      mv.appendChild(t);
      if (m.probs.length > 6) mv.appendChild(el("div", "legend", (m.probs.length - 6) + " more legal moves"));
    }
  } else if (D.end) {
    const e = D.end, s = e.scores;
    let text = "final scores: " + H.players[0] + " " + s[0] + ", " + H.players[1] + " " + s[1];
    if (e.abandoned) text += " (abandoned before the end)";
    else if (e.capped) text += " (ended at the turn cap)";
    mv.appendChild(el("div", "", text));
  }
}
function go(p) { pos = Math.max(0, Math.min(S.length - 1, p)); render(); }
document.getElementById("title").textContent = "Lost Cities: " + H.players[0] + " (seat 0) vs " + H.players[1] + " (seat 1)";
document.getElementById("meta").textContent = "seed " + H.seed + (H.policy ? " \\u00b7 policy " + H.policy : "") +
  (H.iteration != null ? " \\u00b7 iteration " + H.iteration : "") + " \\u00b7 " + H.source + " \\u00b7 " + H.date;
document.getElementById("slider").max = S.length - 1;
document.getElementById("slider").addEventListener("input", e => go(+e.target.value));
document.getElementById("first").onclick = () => go(0);
document.getElementById("prev").onclick = () => go(pos - 1);
document.getElementById("next").onclick = () => go(pos + 1);
document.getElementById("last").onclick = () => go(S.length - 1);
document.addEventListener("keydown", e => {
  const k = {ArrowLeft: pos - 1, ArrowRight: pos + 1, Home: 0, End: S.length - 1}[e.key];
  if (k !== undefined && e.target.tagName !== "INPUT") { e.preventDefault(); go(k); }
});
go(0);
</script>
</body>
</html>
"""


def extract_page_data(page):
    """The JSON a page from render_html embeds (for tests and tools)."""
    m = re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', page, re.S)
    if m is None:
        raise ValueError("no embedded replay data in this page")
    return json.loads(m.group(1))


# --------------------------------------------------------------------------
# CLI

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m agents.replay",
                                 description="Check a Lost Cities replay (JSON lines) and draw it as HTML.")
    ap.add_argument("replay", help="a .jsonl replay from agents.play or agents.evaluate --save-games")
    ap.add_argument("--html", metavar="OUT.html", help="write a self-contained page that steps through the game")
    args = ap.parse_args(argv)
    try:
        replay = load_replay(args.replay)
    except ReplayError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(replay))
    if args.html:
        try:
            Path(args.html).write_text(render_html(replay), encoding="utf-8")
        except OSError as e:
            print(f"error: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"wrote {args.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
