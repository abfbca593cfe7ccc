"""Play Lost Cities against the agent in a terminal (plain text, 80 columns).

    python -m agents.play [OPPONENT] [--seat 0|1] [--seed S] [--policy KIND]
                           [--max-turns N] [--replay-dir DIR]

OPPONENT is one of
    heuristic        the rule-based bot (the default)
    random           uniformly random legal moves
    RUN              a run directory or checkpoint file: its trained policy
                     (--policy picks the read-out, default average)
    search:SPEC      agents.searcher's player: SPEC is RUN or heuristic or
                     random, then settings, e.g. search:runs/x,worlds=256
                     (default 640 worlds of heuristic playouts; with a run,
                     its 4 most likely moves as the candidates)

The game is the run's own game (its parameters and turn cap) when the
opponent has a run; otherwise the classic game with the training configs'
cap of 200 turns (--max-turns, 0 for the published rules' no cap). A game
that ends at the cap says so.

At each of your decisions the table is drawn and your legal moves numbered.
Answer with a number or the move as text ("play Y7", "discard Bw", "draw
deck", "draw pile R"); "?" shows the agent's probabilities for your
position, from its point of view (a hint); "q" (or end of input) quits.
A move you cannot make is refused with a one-line reason and nothing
changes. When you have one legal move only (drawing from the deck while
every pile is empty or blocked), it is played for you.

Every game is saved as a replay (agents.replay), move by move, also when
you quit; `python -m agents.replay FILE --html OUT.html` draws it.
"""
import argparse
import os
import sys
from pathlib import Path

import engine
from engine._lost_cities import COLOUR_LETTERS
from agents.replay import ReplayWriter, decision_probs, expedition_scores, replay_path

WIDTH = 78
DEFAULT_MAX_TURNS = 200


class SetupError(Exception):
    """A problem with the command line or the opponent: one line, exit 2."""


# --------------------------------------------------------------------------
# Opponents: one face for all of them

class Agent:
    """The program's side of the table. `decide(state)` -> (action, {action:
    probability} or None); `hint(state)` -> {action: probability} for the
    human's position, from the agent's point of view."""

    def __init__(self, bot, game, name, label, policy=None, checkpoint=None, iteration=None,
                 is_policy=False):
        self.bot = bot
        self.game = game
        self.name = name              # shown at the table
        self.label = label            # for the replay's file name
        self.policy = policy
        self.checkpoint = checkpoint
        self.iteration = iteration
        self.is_policy = is_policy    # an agents.policy.Policy (imported only when one is used)

    def decide(self, state):
        legal = state.legal_actions()
        if len(legal) == 1:
            return legal[0], {legal[0]: 1.0}
        bot = self.bot
        if bot is None:                                   # the heuristic
            a = self.game.heuristic_action(state)
            return a, {a: 1.0}
        if self.is_policy:
            # the same draw as bot.step, with its probabilities kept for the replay
            from agents.policy import sample_actions
            p = state.current_player()
            probs = bot.probs(state.information_state_tensor(p)[None], state.legal_actions_mask()[None], [p])
            a = int(sample_actions(probs, bot.rng, bot.greedy)[0])
            return a, {b: float(probs[0, b]) for b in legal}
        a = int(bot.step(state))
        probs = decision_probs(bot, state, a)
        return a, (self.hint(state) if probs is None else probs)

    def hint(self, state):
        legal = state.legal_actions()
        if self.bot is None:
            return {self.game.heuristic_action(state): 1.0}
        if hasattr(self.bot, "action_probs"):
            return self.bot.action_probs(state)
        return {a: 1.0 / len(legal) for a in legal}       # the random bot


def _run_game(path):
    from agents.checkpoint import game_of, load_checkpoint
    try:
        ckpt = load_checkpoint(path)
        return game_of(ckpt)
    except (FileNotFoundError, ValueError, KeyError, OSError, RuntimeError) as e:
        raise SetupError(f"cannot load the run {path}: {e}") from None


def _check_lost_cities(game, what):
    if game.name != "lost_cities":
        raise SetupError(f"{what} plays {game.name}; agents.play plays lost_cities")


def make_agent(opponent, policy="average", max_turns=None, seed=0):
    """The Agent for the command line's OPPONENT (see the module docstring)."""
    capped = DEFAULT_MAX_TURNS if max_turns is None else max_turns

    def default_game():
        try:
            return engine.load_game("lost_cities", max_turns=capped)
        except ValueError as e:
            raise SetupError(f"--max-turns: {e}") from None

    def no_cap_option(what):
        if max_turns is not None:
            raise SetupError(f"--max-turns: {what} plays its run's own game (its turn cap included)")

    if opponent == "heuristic":
        game = default_game()
        return Agent(None, game, "heuristic", "heuristic")
    if opponent == "random":
        from engine.bots import RandomBot
        return Agent(RandomBot(seed), default_game(), "random", "random")
    if opponent.startswith("search:"):
        spec = opponent[len("search:"):]
        source = spec.partition(",")[0]
        if source in ("heuristic", "random"):
            game = default_game()
        else:
            no_cap_option("a search player with a run")
            game = _run_game(source)
            _check_lost_cities(game, source)
        try:
            from agents.searcher import make_search_player
        except ImportError as e:
            raise SetupError(f"the search player is not available here (agents.searcher: {e})") from None
        try:
            player = make_search_player(spec, game)
        except (ValueError, FileNotFoundError, KeyError, RuntimeError) as e:
            raise SetupError(f"search:{spec}: {e}") from None
        game = getattr(player, "game", game)
        return Agent(player, game, getattr(player, "name", "search"), "search", policy=opponent,
                     checkpoint=None if source in ("heuristic", "random") else source)
    # a run directory or a checkpoint file
    if not Path(opponent).exists():
        raise SetupError(f"unknown opponent {opponent!r}: not heuristic, random or search:SPEC, "
                         "and no run or checkpoint at that path")
    no_cap_option("a run")
    import torch
    torch.set_num_threads(1)
    from agents.policy import load_policy
    try:
        bot = load_policy(opponent, kind=policy, seed=seed)
    except (FileNotFoundError, ValueError, OSError, RuntimeError) as e:
        raise SetupError(f"cannot load the run {opponent}: {e}") from None
    except KeyError as e:
        raise SetupError(f"cannot load the run {opponent}: the checkpoint lacks {e}") from None
    _check_lost_cities(bot.game, opponent)
    run = Path(opponent).resolve()
    run_name = run.parent.parent.name if run.is_file() else run.name
    return Agent(bot, bot.game, f"{run_name} ({bot.name}, iteration {bot.iteration})", run_name,
                 policy=bot.name, checkpoint=bot.checkpoint, iteration=bot.iteration, is_policy=True)


# --------------------------------------------------------------------------
# The table as text

def _colours(game):
    return COLOUR_LETTERS[:game.params["colours"]]


def _right(left, right, width=WIDTH):
    return left + " " * max(1, width - len(left) - len(right)) + right


def _clip(text, n):
    return text if len(text) <= n else text[:n - 3] + "..."


def _signed(v):
    return f"{v:+d}" if v else "0"


def _wrap(prefix, items, sep=" ", width=WIDTH):
    lines, line = [], prefix
    for it in items:
        if len(line) + len(it) > width and line.strip():
            lines.append(line.rstrip())
            line = " " * len(prefix)
        line += it + sep
    lines.append(line.rstrip())
    return lines


def render_table(state, human, names):
    """The table from the human's side: the opponent's expeditions and what
    is known of its hand, the discard piles and the deck, then the human's
    expeditions and hand. Every line fits in WIDTH columns."""
    game = state.game
    names = [_clip(n, 36) for n in names]
    colours = _colours(game)
    exp_scores = expedition_scores(state)
    scores = state.scores()
    opp = 1 - human
    cap = game.params["max_turns"]
    if state.is_terminal():
        head = f" game over after {state.turn()} turns "
    else:
        who = "you" if state.current_player() == human else _clip(names[opp], 20)
        step = "play or discard" if state.phase() == "play" else "draw"
        turn = f"turn {state.turn() + 1}" + (f" of {cap}" if cap else "")
        head = f" {turn} - deck {state.deck_size()} - {who} to {step} "
    rule = "-" * WIDTH

    def player(p, title):
        out = [_right(title, f"score {_signed(scores[p])}")]
        for c, col in enumerate(colours):
            cards = state.expedition(p, c)
            left = f"  {col}  " + (" ".join(cards) if cards else ".")
            out.append(_right(left, _signed(exp_scores[p][c])) if cards else left)
        return out

    lines = [head.center(WIDTH, "=")]
    lines += player(opp, f"{names[opp]} (seat {opp})")
    lines += _wrap(f"  holds {len(state.hand(opp))} cards; known (taken from piles): ",
                   state.known_hand(opp) or ["none"])
    lines.append(rule)
    mine = not state.is_terminal() and state.current_player() == human
    blocked = state.blocked_pile() if mine else None
    piles = []
    for c, col in enumerate(colours):
        pile = state.piles()[c]
        mark = "*" if c == blocked else ""
        piles.append(f"{col}: {pile[-1]} ({len(pile)}){mark}" if pile else f"{col}: -")
    lines += _wrap("piles  ", piles, sep="   ")
    lines.append(f"deck   {state.deck_size()} cards"
                 + ("   (*: you just discarded there, so you cannot draw it back)"
                    if blocked is not None else ""))
    lines.append(rule)
    lines += player(human, f"you (seat {human})")
    lines += _wrap("  your hand: ", state.hand(human))
    return "\n".join(lines)


def render_moves(game, legal):
    items = [f"{i:>2}) {game.action_to_string(a):<13}" for i, a in enumerate(legal, 1)]
    return "\n".join("  " + " ".join(items[i:i + 4]).rstrip() for i in range(0, len(items), 4))


# --------------------------------------------------------------------------
# Reading a move

def normalise_action_text(text):
    """"PLAY y7" -> "play Y7", "draw r" -> "draw pile R", "deck" -> "draw deck"."""
    words = text.strip().split()
    if not words:
        return ""
    verb = words[0].lower()
    rest = words[1:]
    if verb in ("deck", "d") and not rest:
        return "draw deck"
    if verb == "draw":
        if [w.lower() for w in rest] == ["deck"]:
            return "draw deck"
        if rest and rest[0].lower() == "pile":
            rest = rest[1:]
        if len(rest) == 1:
            return "draw pile " + rest[0].upper()
        return "draw " + " ".join(rest)
    if len(rest) == 1 and rest[0]:
        card = rest[0]
        card = card[:1].upper() + card[1:].lower()
        return f"{verb} {card}"
    return " ".join([verb] + rest)


def why_illegal(state, action):
    """A short reason why `action` (a valid id) is not legal in `state`."""
    game = state.game
    v = game.decode_action(action)
    colour = COLOUR_LETTERS[v.colour] if v.colour is not None else None
    if state.is_terminal():
        return "the game is over"
    if v.verb == "draw":
        if state.phase() == "play":
            return "first play or discard a card, then draw"
        if colour is None:
            return "not a legal move now"
        pile = state.piles()[v.colour]
        if not pile:
            return f"the {colour} pile is empty"
        if state.blocked_pile() == v.colour:
            return f"you just discarded onto the {colour} pile; you cannot draw that card back"
        return "not a legal move now"
    if state.phase() == "draw":
        return "you have played or discarded this turn: now draw (the deck or a pile)"
    card = game.action_to_string(action).split()[1]
    hand = state.hand(state.current_player())
    if card not in hand:
        return f"you hold no {card}"
    if v.verb == "play":
        mine = state.expedition(state.current_player(), v.colour)
        numbers = [c for c in mine if c[1:] != "w"]
        if v.value == 0 and numbers:
            return f"a wager must come before the numbers: your {colour} expedition has {numbers[-1]}"
        if numbers:
            return f"{card} cannot follow {numbers[-1]}: an expedition only goes up"
    return "not a legal move now"


def parse_move(state, text):
    """(action, None) for a move the human may make, or (None, reason)."""
    game = state.game
    legal = state.legal_actions()
    t = text.strip()
    if not t:
        return None, f"type a move number 1-{len(legal)}, a move like '{game.action_to_string(legal[0])}', ? or q"
    if t.lstrip("+-").isdigit():
        n = int(t)
        if 1 <= n <= len(legal):
            return legal[n - 1], None
        return None, f"no move numbered {n}: choose 1-{len(legal)}"
    norm = normalise_action_text(t)
    if norm.split()[0] not in ("play", "discard", "draw"):
        return None, f"unknown move {t!r}: type 1-{len(legal)}, play CARD, discard CARD or draw ..."
    try:
        action = game.string_to_action(norm)
    except ValueError as e:
        return None, f"cannot read {t!r}: {e}"
    if action not in legal:
        return None, f"{norm} is not possible: {why_illegal(state, action)}"
    return action, None


# --------------------------------------------------------------------------
# The game

def _read(prompt, inp, out):
    """A line of input, or None at end of input."""
    out.write(prompt)
    out.flush()
    line = inp.readline()
    if not line:
        out.write("\n")
        return None
    return line


def format_hint(state, probs, top=8):
    legal = state.legal_actions()
    number = {a: i for i, a in enumerate(legal, 1)}
    rows = sorted(((float(p), a) for a, p in probs.items() if a in number), key=lambda r: (-r[0], r[1]))
    shown = [r for r in rows if r[0] > 0][:top] or rows[:top]
    lines = ["  the agent's probabilities for your position (its view of it):"]
    lines += [f"    {100 * p:5.1f}%  {number[a]:>2}) {state.game.action_to_string(a)}" for p, a in shown]
    if len(rows) > len(shown):
        lines.append(f"    ... {len(rows) - len(shown)} more moves at "
                     f"{100 * sum(p for p, _ in rows[len(shown):]):.1f}% together")
    return "\n".join(lines)


def play(agent, human_seat, seed, replay_dir, inp=sys.stdin, out=sys.stdout):
    """Play one game on the terminal. Returns (final state, replay path,
    abandoned)."""
    game = agent.game
    state = game.new_initial_state(seed=seed)
    names = [None, None]
    names[human_seat], names[1 - human_seat] = "you", agent.name
    path = replay_path(replay_dir, agent.label, f"seed{seed}")
    writer = ReplayWriter(path, state, names, agent_seat=1 - human_seat, seed=seed, policy=agent.policy,
                          checkpoint=agent.checkpoint, iteration=agent.iteration, source="agents.play")
    say = lambda text="": print(text, file=out, flush=True)   # noqa: E731
    short = _clip(agent.name, 28)
    cap = game.params["max_turns"]
    say(f"Lost Cities: you (seat {human_seat}) against {_clip(agent.name, 34)} (seat {1 - human_seat})")
    say(f"deal seed {seed}; " + (f"the game stops after {cap} turns" if cap else "no turn cap")
        + "; seat 0 moves first")
    say("Answer with a move number or the move as text; ? for a hint, q to quit.")
    abandoned = False
    try:
        while not state.is_terminal():
            legal = state.legal_actions()
            if state.current_player() != human_seat:
                action, probs = agent.decide(state)
                say(f"  {short}: {game.action_to_string(action)}")
                writer.move(state, action, probs)
                state.apply_action(action)
                continue
            if len(legal) == 1:
                say(f"  you: {game.action_to_string(legal[0])} (your only move)")
                writer.move(state, legal[0])
                state.apply_action(legal[0])
                continue
            say()
            say(render_table(state, human_seat, names))
            say("your moves:")
            say(render_moves(game, legal))
            while True:
                line = _read("your move> ", inp, out)
                if line is None or line.strip().lower() in ("q", "quit", "exit"):
                    abandoned = True
                    break
                text = line.strip()
                if text == "?":
                    say(format_hint(state, agent.hint(state)))
                    continue
                if text.lower() in ("h", "help"):
                    say("  a number from the list, or a move as text: play Y7, discard Bw, draw deck, "
                        "draw pile R; ? hint; q quit")
                    continue
                action, reason = parse_move(state, text)
                if action is None:
                    say(f"  {reason}")
                    continue
                break
            if abandoned:
                break
            writer.move(state, action)
            state.apply_action(action)
    except KeyboardInterrupt:
        abandoned = True
        say()
    finally:
        writer.finish(state, abandoned=abandoned)
        writer.close()
    say()
    say(render_table(state, human_seat, names))
    s = state.scores()
    you, them = s[human_seat], s[1 - human_seat]
    if abandoned:
        say(f"Game abandoned at turn {state.turn() + 1}.")
        say(f"Scores as they stood: you {you}, {short} {them}.")
    else:
        if state.capped():
            say(f"The game ended at the {cap}-turn cap with {state.deck_size()} cards still in the deck.")
        verdict = "You win" if you > them else ("You lose" if you < them else "A tie")
        margin = f" by {abs(you - them)}" if you != them else ""
        say(f"Final scores: you {you}, {short} {them}. {verdict}{margin}.")
    say(f"Replay saved: {path}")
    say("  (draw it: python -m agents.replay FILE --html OUT.html)")
    return state, path, abandoned


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m agents.play", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("opponent", nargs="?", default="heuristic",
                    help="heuristic (default), random, a run directory or checkpoint, or search:SPEC")
    ap.add_argument("--seat", type=int, choices=(0, 1), default=0, help="your seat; seat 0 moves first (default 0)")
    ap.add_argument("--seed", type=int, default=None, help="the deal's seed (default: a fresh one, printed)")
    ap.add_argument("--policy", default="average",
                    help="a run's read-out: average, current, symmetric, each optionally -greedy (default average)")
    ap.add_argument("--max-turns", type=int, default=None,
                    help=f"turn cap without a run (default {DEFAULT_MAX_TURNS}; 0: none, the published rules)")
    ap.add_argument("--replay-dir", default="replays", help="where replays are saved (default ./replays)")
    return ap


def agent_from_args(args):
    """(agent, seed) of a command line's OPPONENT, --policy, --max-turns and
    --seed (drawn when not given), its --replay-dir made; None after a
    one-line error on stderr (agents.play and agents.serve exit 2 then)."""
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    try:
        agent = make_agent(args.opponent, policy=args.policy, max_turns=args.max_turns, seed=seed)
        Path(args.replay_dir).mkdir(parents=True, exist_ok=True)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    except OSError as e:
        print(f"error: --replay-dir {args.replay_dir}: {e.strerror or e}", file=sys.stderr)
        return None
    return agent, seed


def main(argv=None):
    args = build_parser().parse_args(argv)
    made = agent_from_args(args)
    if made is None:
        return 2
    play(made[0], args.seat, made[1], args.replay_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
