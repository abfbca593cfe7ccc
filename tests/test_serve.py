"""agents.serve: the real server process on a free loopback port, driven
over plain HTTP (the JSON API) and by clicks in headless Chromium
(Playwright), every position checked against the test's own engine state."""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from agents.play import why_illegal  # noqa: E402
from agents.replay import expedition_scores, extract_page_data, load_replay  # noqa: E402

COLOURS = "YBWGR"
VIEW_KEYS = {"game", "seat", "names", "seed", "colours", "max_turns", "turn", "moves", "deck", "to_move", "phase",
             "blocked_pile", "hand", "known", "opponent_hand", "opponent_known", "expeditions", "exp_scores",
             "scores", "piles", "legal", "reply", "log", "over", "abandoned", "replay"}


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Server:
    """`python -m agents.serve ARGS` on a free port, replays under tmp_path."""

    def __init__(self, tmp_path, *args):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.replays = tmp_path / "replays"
        self.proc = subprocess.Popen([sys.executable, "-m", "agents.serve", *map(str, args),
                                      "--replay-dir", str(self.replays)],
                                     cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"open (http://127\.0\.0\.1:(\d+)/)$", line.strip())
        if m is None:
            self.proc.kill()
            raise AssertionError(f"no address printed: {line!r} {self.proc.stderr.read()}")
        self.url, self.port = m.group(1), int(m.group(2))

    def request(self, method, path, body=None, raw=None, headers=None):
        """(status, JSON reply) of one request; `raw` sends bytes as they are."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        kind = r.getheader("Content-Type", "")
        return r.status, (json.loads(payload) if kind == "application/json" else payload.decode())

    def move(self, game_id, text):
        return self.request("POST", f"/api/game/{game_id}/move", {"move": text})

    def stop(self):
        """SIGTERM, as a service manager stops it; returns (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode, err


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, "heuristic")
    yield s
    code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err


def _signed(v):
    return f"+{v}" if v > 0 else str(v)


def expected_view(state, seat):
    """What the human in `seat` may see of `state`, from the engine."""
    opp = 1 - seat
    mine = not state.is_terminal() and state.current_player() == seat
    return {"turn": state.turn(), "deck": state.deck_size(), "phase": state.phase(),
            "blocked_pile": state.blocked_pile(), "hand": state.hand(seat), "known": state.known_hand(seat),
            "opponent_hand": len(state.hand(opp)), "opponent_known": state.known_hand(opp),
            "expeditions": [state.expeditions(0), state.expeditions(1)], "exp_scores": expedition_scores(state),
            "scores": state.scores(), "piles": state.piles(), "to_move": "you" if mine else None,
            "legal": [state.game.action_to_string(a) for a in state.legal_actions()] if mine else []}


def agent_answers(state, seat):
    """Apply the heuristic's moves until `seat` is to move; their texts."""
    texts = []
    while not state.is_terminal() and state.current_player() != seat:
        a = state.game.heuristic_action(state)
        texts.append(state.game.action_to_string(a))
        state.apply_action(a)
    return texts


def final_lines(state, seat, name="heuristic"):
    you, them = state.scores()[seat], state.scores()[1 - seat]
    lines = [f"The game ended at the 200-turn cap with {state.deck_size()} cards still in the deck."] \
        if state.capped() else []
    verdict = "You win" if you > them else ("You lose" if you < them else "A tie")
    return lines + [f"Final scores: you {you}, {name} {them}. {verdict}" + (f" by {abs(you - them)}." if you != them
                                                                         else ".")]


def _game():
    return engine.load_game("lost_cities", max_turns=200)


def _replay_file(server, game_id):
    status, text = server.request("GET", f"/replay/{game_id}.jsonl")
    assert status == 200
    header = json.loads(text.splitlines()[0])
    files = [p for p in server.replays.glob("*.jsonl") if p.read_text().splitlines()[0] == text.splitlines()[0]]
    assert len(files) == 1 and header["source"] == "agents.serve"
    return files[0]


# ---------------------------------------------------------------- the JSON API

def test_a_whole_game_over_http_matches_the_engine(server):
    seed, seat = 7, 1
    state = _game().new_initial_state(seed=seed)
    first = agent_answers(state, seat)
    status, view = server.request("POST", "/api/new", {"seed": seed, "seat": seat})
    assert status == 200 and set(view) == VIEW_KEYS      # nothing more: no hands, no deck order
    assert view["names"] == ["heuristic", "you"] and view["reply"] == first and len(first) == 2
    rng = random.Random(0)
    moves = 0
    while not state.is_terminal():
        assert {k: view[k] for k in expected_view(state, seat)} == expected_view(state, seat)
        a = rng.choice(state.legal_actions())
        text = state.game.action_to_string(a)
        state.apply_action(a)
        replies = agent_answers(state, seat)
        status, view = server.move(view["game"], text)
        assert status == 200, view
        assert view["reply"] == replies and view["log"][-1 - len(replies)] == [seat, text]
        moves += 1
    assert {k: view[k] for k in expected_view(state, seat)} == expected_view(state, seat)
    assert view["over"] == final_lines(state, seat) and view["moves"] == len(view["log"]) > moves
    # the replay: the file, its JSONL over HTTP and its page all describe this game
    path = _replay_file(server, view["game"])
    rep = load_replay(path)
    assert [[m["player"], m["text"]] for m in rep["moves"]] == view["log"]
    assert rep["end"]["scores"] == state.scores() and rep["end"]["abandoned"] is False
    assert rep["header"]["players"] == ["heuristic", "you"] and rep["header"]["agent_seat"] == 0
    assert all(m["probs"] for m in rep["moves"] if m["player"] == 0)
    status, page = server.request("GET", view["replay"])
    assert status == 200 and "Lost Cities replay" in page
    assert len(extract_page_data(page)["snapshots"]) == len(view["log"]) + 1
    status, again = server.request("POST", f"/api/game/{view['game']}/move", {"move": "draw deck"})
    assert status == 409 and again["error"] == "draw deck is not possible: the game is over"


def test_an_illegal_move_gets_its_reason_and_changes_nothing(server):
    game = _game()
    state = game.new_initial_state(seed=3)
    status, view = server.request("POST", "/api/new", {"seed": 3})
    gid = view["game"]
    path = _replay_file(server, gid)

    def refused(text):
        before, saved = server.request("GET", f"/api/game/{gid}")[1], path.read_bytes()
        status, reply = server.move(gid, text)
        assert status == 409, reply
        assert reply == {"error": f"{text} is not possible: {why_illegal(state, game.string_to_action(text))}"}
        assert server.request("GET", f"/api/game/{gid}")[1] == before and path.read_bytes() == saved
        return reply["error"]

    absent = next(f"{c}{v}" for c in COLOURS for v in range(2, 11) if f"{c}{v}" not in state.hand(0))
    reasons = [refused("draw deck"), refused(f"play {absent}"), refused("draw pile Y")]
    discard = next(a for a in state.legal_actions() if game.action_to_string(a).startswith("discard"))
    text = game.action_to_string(discard)
    server.move(gid, text)
    state.apply_action(discard)
    colour = text.split()[1][0]
    reasons += [refused(f"draw pile {colour}"), refused(f"play {state.hand(0)[0]}")]
    assert reasons[1:] == [f"play {absent} is not possible: you hold no {absent}",
                           "draw pile Y is not possible: first play or discard a card, then draw",
                           f"draw pile {colour} is not possible: you just discarded onto the {colour} pile; "
                           "you cannot draw that card back",
                           f"play {state.hand(0)[0]} is not possible: you have played or discarded this turn: "
                           "now draw (the deck or a pile)"]


def test_malformed_requests_get_a_4xx_with_a_reason(server):
    gid = server.request("POST", "/api/new", {})[1]["game"]
    move = f"/api/game/{gid}/move"
    cases = [
        ("POST", move, b"{bad", None, 400, "not JSON"),
        ("POST", move, b"[1, 2]", None, 400, "must be a JSON object"),
        ("POST", move, b"\xff\xfe", None, 400, "not JSON"),
        ("POST", move, b"{}", None, 400, "'move' is missing"),
        ("POST", move, b'{"move": 7}', None, 400, "move must be text"),
        ("POST", move, b'{"move": "fly Y7"}', None, 400, "cannot read the move 'fly Y7'"),
        ("POST", move, b'{"move": "play Z9"}', None, 400, "cannot read the move"),
        ("POST", move, b'{"move": "draw deck", "x": 1}', None, 400, "unknown field 'x'"),
        ("POST", move, b"x" * 5000, None, 413, "at most 4096"),
        ("POST", move, b"{}", {"Content-Length": "-3"}, 400, "bad Content-Length"),
        ("POST", move, b"{}", {"Content-Length": "\u00b2"}, 400, "bad Content-Length"),
        ("GET", "/api/new", None, None, 405, "takes POST"),
        ("POST", "/api/new", b'{"seat": 2}', None, 400, "seat must be a whole number 0..1"),
        ("POST", "/api/new", b'{"seat": true}', None, 400, "seat must be"),
        ("POST", "/api/new", b'{"seed": -1}', None, 400, "seed must be a whole number"),
        ("POST", "/api/new", b'{"abandon": 5}', None, 400, "abandon must be a game id"),
        ("GET", move, None, None, 405, "takes POST"),
        ("POST", f"/api/game/{gid}", b"{}", None, 405, "takes GET"),
        ("PUT", move, b"{}", None, 405, "PUT is not served"),
        ("GET", "/api/game/0123456789abcdef", None, None, 404, "no game 0123456789abcdef"),
        ("GET", "/api/game/../../etc/passwd", None, None, 404, "no such page"),
        ("GET", "/replay/zz", None, None, 404, "16 hex digits"),
        ("GET", "/nothing", None, None, 404, "no such page"),
    ]
    for method, path, raw, headers, code, fragment in cases:
        status, reply = server.request(method, path, raw=raw, headers=headers)
        assert status == code and fragment in reply["error"], (method, path, raw, status, reply)
    # http.server's own refusals come in the same shape
    for line in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"BREW / HTTP/1.0\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(line)
            answer = b"".join(iter(lambda: sock.recv(4096), b""))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert re.match(rb"HTTP/1\.[01] 4\d\d ", head) and "error" in json.loads(body), answer
    # none of it changed the game or stopped the server
    status, view = server.request("GET", f"/api/game/{gid}")
    assert status == 200 and view["moves"] == 0 and server.proc.poll() is None


def test_two_games_at_once_stay_independent(server):
    games = {seat: server.request("POST", "/api/new", {"seed": 20 + seat, "seat": seat})[1] for seat in (0, 1)}
    played, errors = {}, []

    def play(seat):
        try:
            view, rng = games[seat], random.Random(seat)
            mine = []
            while not view["over"]:
                text = rng.choice(view["legal"])
                status, view = server.move(view["game"], text)
                assert status == 200, view
                mine.append(text)
            played[seat] = (view, mine)
        except Exception as e:      # surfaced below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=play, args=(seat,)) for seat in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for seat in (0, 1):
        view, mine = played[seat]
        rep = load_replay(_replay_file(server, view["game"]))
        assert rep["header"]["seed"] == 20 + seat and rep["header"]["agent_seat"] == 1 - seat
        assert [m["text"] for m in rep["moves"] if m["player"] == seat] == mine
        # the engine alone, from the same seed and the same human moves, gives the same game
        state, moves = _game().new_initial_state(seed=20 + seat), iter(mine)
        while not state.is_terminal():
            agent_answers(state, seat)
            if not state.is_terminal():
                state.apply_action(state.game.string_to_action(next(moves)))
        assert rep["states"][-1].to_dict() == state.to_dict() and rep["end"]["abandoned"] is False


def test_abandoned_games_are_saved_as_such(tmp_path):
    s = Server(tmp_path, "random", "--seed", 40)
    try:
        a = s.request("POST", "/api/new", {})[1]
        assert a["seed"] == 40 and a["names"] == ["you", "random"]
        s.move(a["game"], a["legal"][0])
        b = s.request("POST", "/api/new", {"abandon": a["game"]})[1]
        assert b["seed"] == 41
        assert s.request("GET", f"/api/game/{a['game']}")[0] == 404
        s.move(b["game"], b["legal"][0])
        files = sorted(s.replays.glob("*.jsonl"))
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    ends = [load_replay(p)["end"] for p in files]
    assert [e["abandoned"] for e in ends] == [True, True]
    assert [len(load_replay(p)["moves"]) for p in files] == [1, 1]


def test_a_trained_run_and_the_search_player_answer_too(tmp_path):
    """The other opponents of agents.play's make_agent: a run's policy (its
    probabilities in the replay) and the search player, opening as seat 0."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_play import _save_lc_checkpoint
    _save_lc_checkpoint(tmp_path / "myrun", dict(max_turns=60))
    for i, (spec, name) in enumerate(((tmp_path / "myrun", "myrun (average, iteration 7)"),
                                      ("search:heuristic,worlds=4", None))):
        s = Server(tmp_path / f"server{i}", spec)
        try:
            status, view = s.request("POST", "/api/new", {"seat": 1, "seed": 9})
            assert status == 200 and len(view["reply"]) == 2 and view["to_move"] == "you"
            assert name is None or view["names"] == [name, "you"]
            status, view = s.move(view["game"], view["legal"][0])
            assert status == 200 and len(view["reply"]) in (0, 2)
            path = _replay_file(s, view["game"])
        finally:
            code, err = s.stop()
        assert code == 0 and "Traceback" not in err, err
        rep = load_replay(path)          # its end line written as the server stopped
        agent = [m for m in rep["moves"] if m["player"] == 0]
        assert agent and all(sum(p for _, _, p in m["probs"]) == pytest.approx(1.0, abs=1e-5) for m in agent)
        assert rep["end"]["abandoned"] is True


def test_past_max_games_the_least_recently_used_is_closed(tmp_path):
    from agents.play import make_agent
    from agents.serve import PlayServer
    server = PlayServer(("127.0.0.1", 0), make_agent("heuristic"), tmp_path, max_games=2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        def call(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
            c.request(method, path, body=None if body is None else json.dumps(body))
            r = c.getresponse()
            out = r.status, json.loads(r.read())
            c.close()
            return out

        a, b = (call("POST", "/api/new", {"seed": k})[1]["game"] for k in (1, 2))
        assert call("GET", f"/api/game/{a}")[0] == 200          # a is now used more recently than b
        call("POST", "/api/new", {"seed": 3})
        assert call("GET", f"/api/game/{b}")[0] == 404 and call("GET", f"/api/game/{a}")[0] == 200
        ends = {load_replay(p)["header"]["seed"]: load_replay(p)["end"] for p in tmp_path.glob("*.jsonl")}
        assert ends[2]["abandoned"] is True and ends[1] is None and ends[3] is None
    finally:
        server.shutdown()
        server.server_close()
        server.close_tables()


@pytest.mark.parametrize("args, fragment", [
    (["nobody"], "unknown opponent 'nobody'"),
    (["search:heuristic,wolds=3"], "bad search setting"),
    (["--port", "70000"], "70000 is not a port 0..65535"),
    (["--port", "http"], "not a port number: 'http'"),
    (["--seed", "-1"], "-1 is not a seed"),
    (["--max-turns", "-1"], "--max-turns"),
    (["--port", "BUSY"], "cannot listen on 127.0.0.1 port"),
])
def test_command_line_errors_are_one_line(tmp_path, args, fragment):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        args = [str(busy.getsockname()[1]) if a == "BUSY" else a for a in args]
        r = subprocess.run([sys.executable, "-m", "agents.serve", *args, "--replay-dir", str(tmp_path / "r")],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and fragment in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 or r.stderr.startswith("usage:"), r.stderr


# ---------------------------------------------------------------- in a real browser

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

READ_PAGE = """() => {
  const cards = sel => [...document.querySelectorAll(sel)].map(e => e.dataset.card);
  const text = id => document.getElementById(id).textContent;
  const out = {hand: cards("#hand .card"), known: cards("#hand .card.known"),
               opponent_hand: document.querySelectorAll("#opp-hand .card").length,
               opponent_known: cards("#opp-hand .card.known"), deck: +document.querySelector("#deck span").textContent,
               scores: [text("score-you"), text("score-opp")], status: text("status"), message: text("message"),
               reply: text("reply"), over: document.getElementById("over").hidden ? null : text("result"),
               exp: {}, pts: {}, chips: {}, piles: {}, blocked: cards("#piles .blocked"),
               selected: cards("#hand .card.selected")};
  for (const side of ["you", "opp"]) for (const c of "YBWGR") {
    const cell = document.getElementById("exp-" + side + "-" + c), chips = [...cell.querySelectorAll(".chip")];
    if (side === "opp") chips.reverse();
    out.exp[side + c] = chips.map(e => e.dataset.card);
    out.chips[side + c] = chips.map(e => e.textContent);
    out.pts[side + c] = cell.querySelector(".pts").textContent;
  }
  for (const c of "YBWGR") {
    const p = document.getElementById("pile-" + c), chip = p.querySelector(".chip");
    out.piles[c] = [+p.dataset.count, chip ? chip.textContent : null];
  }
  return out;
}"""


def _browser_or_skip():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no playwright package: pip install playwright (in the test extras), "
                    "and apt-get update && apt-get install -y chromium")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get update && apt-get install -y chromium "
                    "(or set CHROMIUM=/path/to/chromium); nothing is downloaded at test time")
    return sync_playwright


def _face(card):
    return card[0] + ("\u00d7" if card[1:] == "w" else card[1:])


def check_page(page, state, seat):
    """Everything the page shows equals the engine's `state` from `seat`."""
    got, opp = page.evaluate(READ_PAGE), 1 - seat
    assert got["hand"] == state.hand(seat) and got["known"] == state.known_hand(seat)
    assert got["opponent_hand"] == len(state.hand(opp)) and got["opponent_known"] == state.known_hand(opp)
    assert got["deck"] == state.deck_size()
    assert got["scores"] == [_signed(state.scores()[seat]), _signed(state.scores()[opp])]
    scores = expedition_scores(state)
    for side, p in (("you", seat), ("opp", opp)):
        for c, col in enumerate(COLOURS):
            cards = state.expedition(p, c)
            assert got["exp"][side + col] == cards and got["chips"][side + col] == [_face(x) for x in cards]
            assert got["pts"][side + col] == (_signed(scores[p][c]) if cards else "")
    for c, col in enumerate(COLOURS):
        pile = state.piles()[c]
        assert got["piles"][col] == [len(pile), _face(pile[-1]) if pile else None]
    cap = state.game.params["max_turns"]
    if state.is_terminal():
        assert got["status"].startswith(f"Turn {state.turn()} of {cap} \u00b7 deck {state.deck_size()}")
        assert got["over"] == "".join(final_lines(state, seat))
    else:
        assert got["status"].startswith(f"Turn {state.turn() + 1} of {cap} \u00b7 deck {state.deck_size()}")
        assert got["over"] is None
    return got


def click_move(page, text):
    verb, arg = text.split(" ", 1)
    if verb in ("play", "discard"):
        page.click(f'#hand .card[data-card="{arg}"]')
        page.click(f"#{verb}")
    elif arg == "deck":
        page.click("#deck")
    else:
        page.click(f"#pile-{arg.split()[-1]}")


def play_by_clicks(page, state, seat, rng, illegal_tries):
    """Play the game on the page to its end by clicks, checking every
    position; once, where a card in hand cannot be played, click it and
    Play and check the reason. Returns the moves played."""
    n_moves = page.evaluate("view.moves")
    while not state.is_terminal():
        check_page(page, state, seat)
        legal = state.legal_actions()
        if illegal_tries and state.phase() == "play":
            bad = [c for c in state.hand(seat) if state.game.string_to_action(f"play {c}") not in legal]
            if bad:
                before = page.evaluate(READ_PAGE)
                click_move(page, f"play {bad[0]}")
                page.wait_for_function("() => document.getElementById('message').textContent !== ''")
                reason = why_illegal(state, state.game.string_to_action(f"play {bad[0]}"))
                after = page.evaluate(READ_PAGE)
                assert after["message"] == f"play {bad[0]} is not possible: {reason}"
                assert {k: v for k, v in after.items() if k not in ("message", "selected", "status")} == \
                    {k: v for k, v in before.items() if k not in ("message", "selected", "status")}
                illegal_tries.pop()
                page.click(f'#hand .card[data-card="{bad[0]}"]')      # unpick it
        a = rng.choice(legal)
        text = state.game.action_to_string(a)
        click_move(page, text)
        state.apply_action(a)
        replies = agent_answers(state, seat)
        page.wait_for_function("n => view && view.moves > n", arg=n_moves)
        n_moves = page.evaluate("view.moves")
        got = page.evaluate(READ_PAGE)
        assert got["message"] == "" and got["reply"] == ("heuristic: " + ", ".join(replies) if replies else "")
    return check_page(page, state, seat)


def test_whole_games_by_clicks_in_chromium(tmp_path):
    sync_playwright = _browser_or_skip()
    s = Server(tmp_path, "heuristic")
    requested = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            context.on("request", lambda r: requested.append(r.url))
            page = context.new_page()
            page.goto(s.url + "?seed=11&seat=0")
            page.wait_for_selector("#hand .card")
            state, seat = _game().new_initial_state(seed=11), 0
            # illegal clicks: drawing before playing (the server's reason), Play with no card picked
            before = check_page(page, state, seat)
            page.click("#deck")
            page.wait_for_function("() => document.getElementById('message').textContent !== ''")
            assert page.text_content("#message") == "draw deck is not possible: first play or discard a card, then draw"
            page.click("#play")
            assert page.text_content("#message").startswith("Pick a card in your hand first")
            assert {k: v for k, v in page.evaluate(READ_PAGE).items() if k != "message"} == \
                {k: v for k, v in before.items() if k != "message"}
            # a second tab plays its own game; a reload keeps this tab's game
            other = context.new_page()
            other.goto(s.url)
            other.wait_for_selector("#hand .card")
            assert other.evaluate("view.game") != page.evaluate("view.game")
            other.click("#hand .card")
            other.click("#discard")
            other.wait_for_function("() => view.moves > 0")
            first_id = page.evaluate("view.game")
            page.bring_to_front()       # a background tab's timers and frames are throttled
            page.reload()
            page.wait_for_selector("#hand .card")
            assert page.evaluate("view.game") == first_id
            tries = [1]
            play_by_clicks(page, state, seat, random.Random(5), tries)
            assert tries == []
            # the replay link opens the game's replay page
            with context.expect_page() as opened:
                page.click("#replay-link")
            replay_page = opened.value
            replay_page.wait_for_load_state()
            data = extract_page_data(replay_page.content())
            assert len(data["snapshots"]) == page.evaluate("view.moves") + 1 and data["end"]["abandoned"] is False
            replay_page.close()
            # a new game in seat 1, at a phone's width: the agent opens; nothing spills sideways
            page.set_viewport_size({"width": 390, "height": 844})
            page.select_option("#seat", "1")
            page.click("#new")
            page.wait_for_function("id => view.game !== id", arg=first_id)
            state, seat = _game().new_initial_state(seed=page.evaluate("view.seed")), 1
            assert page.text_content("#reply") == "heuristic: " + ", ".join(agent_answers(state, seat))
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            for box in (page.locator(sel).bounding_box() for sel in ("#play", "#discard", "#deck", "#pile-R")):
                assert box["x"] >= 0 and box["x"] + box["width"] <= 390
            play_by_clicks(page, state, seat, random.Random(6), [])
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            browser.close()
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    # the page fetched nothing but this server
    assert requested and all(u.startswith(s.url) for u in requested), [u for u in requested if not u.startswith(s.url)]
    # three games: two ended, the other tab's abandoned when the server stopped; each replay checks
    reps = [load_replay(p) for p in sorted(s.replays.glob("*.jsonl"))]
    assert sorted((r["end"]["abandoned"], r["states"][-1].is_terminal()) for r in reps) == \
        [(False, True), (False, True), (True, False)]
    assert {r["header"]["seed"] for r in reps} >= {11}
