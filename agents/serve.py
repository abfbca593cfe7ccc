"""Play Lost Cities against the agent in a web browser: one page, served on
localhost by the standard library's http.server.

    python -m agents.serve [OPPONENT] [--port P] [--host H] [--seat 0|1] [--seed S]
                           [--policy KIND] [--max-turns N] [--replay-dir DIR]

OPPONENT, --policy, --max-turns and --replay-dir are agents.play's: heuristic
(the default), random, a run directory or checkpoint, or search:SPEC. The
server prints its address (a free port unless --port) and serves until
Ctrl-C. Each browser tab plays its own game, kept here under a game id.

The JSON API the page uses; every refusal is a 4xx with {"error": reason}:

    POST /api/new             {"seat": 0|1, "seed": S, "abandon": ID}, each optional
    GET  /api/game/ID         the table as the human sees it
    POST /api/game/ID/move    {"move": "play Y7" | "discard Bw" | "draw deck" | "draw pile R"}
    GET  /replay/ID           the game's replay page (agents.replay.render_html)
    GET  /replay/ID.jsonl     the replay file

A move the human cannot make is answered 409 with agents.play.why_illegal's
reason and changes nothing; a legal one is applied and the agent answers in
the same request. A table never holds what the human cannot see: the
agent's hand beyond the cards it took from piles, or the deck's order.

Every game is saved as a replay (agents.replay), move by move. A game left
unfinished (a new game started over it, evicted as the least recently used
of MAX_GAMES, or open when the server stops) ends "abandoned".
"""
import argparse
import json
import os
import re
import secrets
import signal
import sys
import threading
import traceback
from collections import OrderedDict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from engine._lost_cities import COLOUR_LETTERS
from agents.play import agent_from_args, why_illegal
from agents.replay import ReplayError, ReplayWriter, expedition_scores, load_replay, render_html, replay_path

MAX_BODY = 4096          # bytes of a request body; the API's bodies are a few dozen
MAX_GAMES = 256          # open tables kept; past it the least recently used is closed
SEED_LIMIT = 2 ** 32     # seeds 0..SEED_LIMIT-1, as agents.play draws them
GAME_ID = re.compile(r"[0-9a-f]{16}")


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a one-line reason."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# --------------------------------------------------------------------------
# One game

class Table:
    """One browser tab's game: the engine state, its replay as it is written,
    and a lock that serialises the tab's requests."""

    def __init__(self, game_id, agent, seat, seed, replay_dir):
        self.id = game_id
        self.agent = agent
        self.seat = seat
        self.seed = seed
        self.state = agent.game.new_initial_state(seed=seed)
        self.names = ["you", agent.name] if seat == 0 else [agent.name, "you"]
        self.path = replay_path(replay_dir, agent.label, f"seed{seed}")
        self.writer = ReplayWriter(self.path, self.state, self.names, agent_seat=1 - seat, seed=seed,
                                   policy=agent.policy, checkpoint=agent.checkpoint,
                                   iteration=agent.iteration, source="agents.serve")
        self.log = []             # [[player, move text]] of every move so far
        self.reply = []           # the agent's moves since the human's last one
        self.abandoned = False
        self.lock = threading.Lock()

    @property
    def closed(self):
        return self.abandoned or self.state.is_terminal()

    def _apply(self, action, probs=None):
        self.writer.move(self.state, action, probs)
        self.log.append([self.state.current_player(), self.state.game.action_to_string(action)])
        self.state.apply_action(action)
        if self.state.is_terminal():
            self.writer.finish(self.state)

    def agent_moves(self, agent_lock):
        """Let the agent move until the human is to move or the game is over."""
        self.reply = []
        while not self.state.is_terminal() and self.state.current_player() != self.seat:
            with agent_lock:      # a bot keeps state: its generator, a searcher's last search
                action, probs = self.agent.decide(self.state)
            self.reply.append(self.state.game.action_to_string(action))
            self._apply(action, probs)

    def human_move(self, text, agent_lock):
        """Apply the human's move `text` ("play Y7", ...) and the agent's
        answer; RequestError (409) with the reason if the move cannot be made."""
        state, game = self.state, self.state.game
        try:
            action = game.string_to_action(text)
        except ValueError:
            raise RequestError(400, f"cannot read the move {text!r}: write play CARD, discard CARD, "
                                    "draw deck or draw pile COLOUR") from None
        if self.abandoned:
            raise RequestError(409, "this game was abandoned; start a new one")
        if action not in state.legal_actions():
            try:
                reason = why_illegal(state, action)
            except ValueError:    # a variant the action codec does not serve
                reason = "not a legal move now"
            raise RequestError(409, f"{text} is not possible: {reason}")
        self._apply(action)
        self.agent_moves(agent_lock)

    def abandon(self):
        if not self.closed:
            self.abandoned = True
            self.writer.finish(self.state, abandoned=True)
        self.writer.close()

    def outcome(self):
        """The end's lines, as agents.play prints them; None while the game goes on."""
        s = self.state
        if not self.closed:
            return None
        scores = s.scores()
        you, them = scores[self.seat], scores[1 - self.seat]
        name = self.agent.name
        if self.abandoned:
            return [f"Game abandoned at turn {s.turn() + 1}.", f"Scores as they stood: you {you}, {name} {them}."]
        lines = []
        if s.capped():
            lines.append(f"The game ended at the {s.game.params['max_turns']}-turn cap with "
                         f"{s.deck_size()} cards still in the deck.")
        verdict = "You win" if you > them else ("You lose" if you < them else "A tie")
        margin = f" by {abs(you - them)}" if you != them else ""
        lines.append(f"Final scores: you {you}, {name} {them}. {verdict}{margin}.")
        return lines

    def view(self):
        """The table as the human sees it, as JSON: public cards, the
        human's own hand, and counts for what is hidden."""
        s, me, opp = self.state, self.seat, 1 - self.seat
        game = s.game
        mine = not self.closed and s.current_player() == me
        return {
            "game": self.id, "seat": me, "names": self.names, "seed": self.seed,
            "colours": COLOUR_LETTERS[:game.params["colours"]], "max_turns": game.params["max_turns"],
            "turn": s.turn(), "moves": len(self.log), "deck": s.deck_size(),
            "to_move": "you" if mine else None, "phase": s.phase(),
            "blocked_pile": s.blocked_pile(),
            "hand": s.hand(me), "known": s.known_hand(me),
            "opponent_hand": len(s.hand(opp)), "opponent_known": s.known_hand(opp),
            "expeditions": [s.expeditions(0), s.expeditions(1)], "exp_scores": expedition_scores(s),
            "scores": s.scores(), "piles": s.piles(),
            "legal": [game.action_to_string(a) for a in s.legal_actions()] if mine else [],
            "reply": self.reply, "log": self.log,
            "over": self.outcome(), "abandoned": self.abandoned, "replay": f"/replay/{self.id}",
        }


# --------------------------------------------------------------------------
# The server

class PlayServer(ThreadingHTTPServer):
    """The page, the API and the replays, for one agent and any number of tabs."""

    daemon_threads = True

    def __init__(self, address, agent, replay_dir, *, seat=0, seed=None, max_games=MAX_GAMES):
        super().__init__(address, Handler)
        self.agent = agent
        self.replay_dir = Path(replay_dir)
        self.seat = seat                   # the human's seat when a request names none
        self.next_seed = seed              # None: a fresh seed per game
        self.max_games = max_games
        self.tables = OrderedDict()        # game id -> Table, least recently used first
        self.lock = threading.Lock()       # guards tables and next_seed
        self.agent_lock = threading.Lock()
        self.page = resources.files("agents").joinpath("static/play.html").read_bytes()

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def _seed(self, seed):
        if seed is not None:
            return seed
        with self.lock:
            if self.next_seed is None:
                return int.from_bytes(os.urandom(4), "little")
            seed, self.next_seed = self.next_seed, (self.next_seed + 1) % SEED_LIMIT
            return seed

    def new_table(self, seat=None, seed=None, abandon=None):
        seat = self.seat if seat is None else seat
        table = Table(secrets.token_hex(8), self.agent, seat, self._seed(seed), self.replay_dir)
        table.agent_moves(self.agent_lock)      # the agent opens when the human sits in seat 1
        with self.lock:
            self.tables[table.id] = table
            old = [self.tables.pop(abandon)] if abandon in self.tables else []
            while len(self.tables) > self.max_games:
                old.append(self.tables.popitem(last=False)[1])
        for t in old:
            with t.lock:
                t.abandon()
        return table

    def table(self, game_id):
        with self.lock:
            table = self.tables.get(game_id)
            if table is None:
                raise RequestError(404, f"no game {game_id}: it ended with the server or was replaced; "
                                        "start a new one")
            self.tables.move_to_end(game_id)
            return table

    def close_tables(self):
        """Mark every unfinished game abandoned in its replay."""
        with self.lock:
            tables, self.tables = list(self.tables.values()), OrderedDict()
        for t in tables:
            with t.lock:
                t.abandon()


def _fields(body, allowed, required=()):
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise RequestError(400, f"unknown field {unknown[0]!r}; this request takes {', '.join(allowed)}")
    for name in required:
        if name not in body:
            raise RequestError(400, f"the field {name!r} is missing")


def _int_field(body, name, lo, hi):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestError(400, f"{name} must be a whole number {lo}..{hi}, got {value!r}")
    return value


class Handler(BaseHTTPRequestHandler):
    """One request: route, read the JSON body, answer JSON (or the page)."""

    server_version = "lost-cities-serve"
    timeout = 30              # seconds a client may take to send its request

    # ---- answers
    def _send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status, obj):
        self._send(status, json.dumps(obj).encode(), "application/json")

    def send_error(self, code, message=None, explain=None):
        # http.server's own refusals (a bad request line, long headers, an
        # unknown method, an HTTP version past 1.x) as the API's 4xx
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code, message = 405, f"{self.command} is not served; the API takes GET and POST"
        elif code >= 500:
            code = 400
        if self.request_version == "HTTP/0.9":     # a line too broken to name a version: answer in 1.0
            self.request_version = "HTTP/1.0"
        self.close_connection = True
        self._json(code, {"error": message or HTTPStatus(code).phrase})

    def log_request(self, code="-", size="-"):
        pass                      # the terminal shows the address and errors only

    # ---- requests
    def _body(self):
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "send the body with a Content-Length, not chunked")
        length = self.headers.get("Content-Length", "0")
        if not (length.isascii() and length.isdigit()):
            raise RequestError(400, f"bad Content-Length {length!r}")
        if int(length) > MAX_BODY:
            self.close_connection = True
            raise RequestError(413, f"the body is {length} bytes; at most {MAX_BODY}")
        try:
            raw = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, f"the body did not arrive within {self.timeout} s") from None
        if len(raw) < int(length):
            raise RequestError(400, "the body ended before its Content-Length")
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RequestError(400, f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        return body

    def _route(self, method):
        path = urlsplit(self.path).path
        server = self.server
        if method == "GET" and path in ("/", "/index.html"):
            return self._send(200, server.page, "text/html; charset=utf-8")
        if method == "POST" and path == "/api/new":
            body = self._body()
            _fields(body, ("seat", "seed", "abandon"))
            abandon = body.get("abandon")
            if abandon is not None and not isinstance(abandon, str):
                raise RequestError(400, f"abandon must be a game id, got {abandon!r}")
            table = server.new_table(_int_field(body, "seat", 0, 1), _int_field(body, "seed", 0, SEED_LIMIT - 1),
                                     abandon)
            with table.lock:
                return self._json(200, table.view())
        if path == "/api/new":
            raise RequestError(405, f"/api/new takes POST, not {method}")
        m = re.fullmatch(r"/api/game/([^/]+)(/move)?", path) or re.fullmatch(r"/replay/([^/]+?)(\.jsonl)?", path)
        if m is None:
            raise RequestError(404, f"no such page {path!r}")
        if GAME_ID.fullmatch(m.group(1)) is None:
            raise RequestError(404, f"no game {m.group(1)!r}: a game id is 16 hex digits")
        want = "POST" if path.endswith("/move") else "GET"
        if method != want:
            raise RequestError(405, f"{path} takes {want}, not {method}")
        table = server.table(m.group(1))
        with table.lock:
            if path.startswith("/replay/"):
                return self._replay(table, as_jsonl=bool(m.group(2)))
            if method == "POST":
                body = self._body()
                _fields(body, ("move",), required=("move",))
                if not isinstance(body["move"], str):
                    raise RequestError(400, f"move must be text like \"play Y7\", got {body['move']!r}")
                table.human_move(body["move"].strip(), server.agent_lock)
            return self._json(200, table.view())

    def _replay(self, table, as_jsonl):
        try:
            if as_jsonl:
                return self._send(200, table.path.read_bytes(), "application/x-ndjson")
            page = render_html(load_replay(table.path))
        except FileNotFoundError:
            raise RequestError(404, f"the replay file {table.path} is gone") from None
        except (OSError, ReplayError) as e:
            raise RequestError(409, f"cannot read the replay {table.path}: {e}") from None
        return self._send(200, page.encode(), "text/html; charset=utf-8")

    def _handle(self, method):
        try:
            self._route(method)
        except RequestError as e:
            self._json(e.status, {"error": e.reason})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:    # a bug: answer it, log it, keep serving
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            self._json(500, {"error": f"internal error: {type(e).__name__}: {e}"})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")



# --------------------------------------------------------------------------
# Command line

def _port(text):
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port 0..65535")
    return port


def _seed(text):
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= seed < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"{seed} is not a seed 0..{SEED_LIMIT - 1}")
    return seed


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m agents.serve", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("opponent", nargs="?", default="heuristic",
                    help="heuristic (default), random, a run directory or checkpoint, or search:SPEC")
    ap.add_argument("--port", type=_port, default=0, help="the port to listen on (default: a free one)")
    ap.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (default 127.0.0.1, this machine only; the server "
                         "has no login, so another address lets anyone who reaches it play)")
    ap.add_argument("--seat", type=int, choices=(0, 1), default=0,
                    help="your seat in a new tab's game; seat 0 moves first (default 0)")
    ap.add_argument("--seed", type=_seed, default=None,
                    help="deal the games from S, S+1, ... in the order they start (default: fresh seeds)")
    ap.add_argument("--policy", default="average",
                    help="a run's read-out: average, current, symmetric, each optionally -greedy (default average)")
    ap.add_argument("--max-turns", type=int, default=None,
                    help="turn cap without a run (default 200; 0: none, the published rules)")
    ap.add_argument("--replay-dir", default="replays", help="where replays are saved (default ./replays)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    made = agent_from_args(args)
    if made is None:
        return 2
    agent = made[0]
    try:
        server = PlayServer((args.host, args.port), agent, args.replay_dir, seat=args.seat, seed=args.seed)
    except OSError as e:
        print(f"error: cannot listen on {args.host} port {args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    # SIGTERM ends the server as Ctrl-C does, so open games are saved as abandoned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"Lost Cities against {agent.name}: open {server.url}", flush=True)
    print(f"replays go to {Path(args.replay_dir).resolve()}; Ctrl-C stops the server", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.close_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
