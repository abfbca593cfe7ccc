"""Evaluation of a Deep CFR checkpoint's policies.

    python -m agents.evaluate RUN_OR_CHECKPOINT [--policy average|current|sdcfr[-greedy]]
        [--opponent random,heuristic,cautious,exploiter | both | all] [--games 2000]
        [--exploiter-games 400] [--worlds 16] [--seed S] [--json]

Read-outs (agents.policy): the average policy (the strategy net, or the
exact SD-CFR average), the current policy (regret matching on the advantage
nets), and greedy variants of each. Without --policy it plays the read-out
the docs' figures use (`default_read_out`): on Lost Cities the greedy
average policy, on poker the exact SD-CFR average where the run kept one;
the output names it on a line of its own.

Kuhn and Leduc poker: exact exploitability, from our own best response over
the engine (agents.exact), checked against OpenSpiel's
(`openspiel_exploitability`) when pyspiel is installed. Both follow OpenSpiel:
nash_conv = BR_0 + BR_1, exploitability = nash_conv / num_players.

Lost Cities: duplicate deals (agents.matches): every deal is played twice
with the seats swapped, and the win rate (a tie counts half) and the point
margin come with 95% intervals over the deals. Opponents: RandomBot,
HeuristicBot, any object with `.step(state)`, and the exploiter, a local
best response to the policy itself (agents.exploiter), whose margin is a
lower bound on the policy's exploitability. Head to head (agents.head_to_head):
another run (run:PATH[@prior][:POLICY]), the run's own warm-start prior
(prior) or the search player (search:SETTINGS) as opponents, and --baseline,
the same matches played by a second agent and compared with the agent's
deal by deal. A learned best response (br:MINUTES, agents.best_response):
PPO against the frozen agent for that long on every core, then played
greedy on the same duplicate deals; vs_br:M_responder_margin is what it
takes from the agent a game, the strong lower bound on its exploitability.
"""
import argparse
import json
import sys

import numpy as np
import torch

from agents.best_response import PREFIX as BR_PREFIX, name_responders, parse_br, train_responders
from agents.exact import POKER_GAMES, exploitability
from agents.head_to_head import (comparison_metrics, flat, is_side, load_baseline, load_side, paired,
                                 split_opponents, vs_prior)
from agents.matches import _as_policy, duplicate_match, parallel_match
from agents.players import OPPONENTS, agent_from_spec, opponent_of
from agents.policy import AveragePolicy, Policy, policy_from_checkpoint, policy_probs

DEFAULT_OPPONENTS = ("random", "heuristic")
READ_OUTS = {"average": "the average policy (the strategy net), sampled",
             "average-greedy": "the greedy average policy (the strategy net's most likely move)",
             "current": "the current policy (regret matching on the advantage nets), sampled",
             "current-greedy": "the greedy current policy (regret matching on the advantage nets)",
             "sdcfr": "the exact SD-CFR average policy",
             "sdcfr-greedy": "the exact SD-CFR average policy's most likely move",
             "symmetric": "the average policy averaged over every renaming of the colours, sampled",
             "symmetric-greedy": "the most likely move of the average policy averaged over every renaming of the "
                                 "colours"}


def default_read_out(ckpt, game_name):
    """The read-out --policy auto plays, the one the docs' figures use: the
    exact SD-CFR average where the checkpoint holds its sums (poker);
    otherwise, on Lost Cities, the greedy average policy; otherwise (poker
    without SD-CFR sums) the average policy, whose exploitability is the
    net's own."""
    if "sdcfr" in ckpt:
        return "sdcfr"
    return "average-greedy" if game_name == "lost_cities" else "average"


def read_out_line(kind, chosen):
    """The output's line naming the read-out `kind`; `chosen`: by default."""
    how = ("the default, as in the docs' figures; --policy average plays the sampled policy" if chosen
           else "as --policy asked")
    return f"read-out: {kind}, {READ_OUTS.get(kind, kind)} ({how})"


# --------------------------------------------------------------------------
# OpenSpiel's exploitability of the same policy

def _import_pyspiel():
    try:
        import pyspiel  # noqa: F401
        from open_spiel.python import policy as os_policy
        from open_spiel.python.algorithms import exploitability as os_expl
    except ImportError as e:
        raise ImportError("openspiel_exploitability needs OpenSpiel: pip install open-spiel "
                          f"({e})") from e
    return pyspiel, os_policy, os_expl


def openspiel_exploitability(game_name, net):
    """OpenSpiel's nash_conv and exploitability of the strategy net's policy:
    a pyspiel TabularPolicy filled from the net applied to every information
    state tensor (identical to our engine's). `game_name` may also be an
    engine game."""
    pyspiel, os_policy, os_expl = _import_pyspiel()
    name = getattr(game_name, "name", game_name)
    game = pyspiel.load_game(name)
    tab = os_policy.TabularPolicy(game)
    infos = np.asarray(tab.state_in, dtype=np.float32)
    tab.action_probability_array = policy_probs(net, infos, tab.legal_actions_mask)
    return {"nash_conv": float(os_expl.nash_conv(game, tab)),
            "exploitability": float(os_expl.exploitability(game, tab))}


# --------------------------------------------------------------------------
# Dispatch, table, CLI

def _pyspiel_available():
    try:
        _import_pyspiel()
        return True
    except ImportError:
        return False


def evaluate(game, agent, lc_games=2000, opponents=DEFAULT_OPPONENTS, seed=0, openspiel=True,
             exploiter_games=None, worlds=16, progress=False, record=None, jobs=1, spec=None, prior_of=None):
    """All metrics of a policy on its game, as a flat dict. `agent` is a
    agents.policy.Policy, a strategy net, or a tabular average.

    Poker: "exploitability", "nash_conv" (our best response) and, if
    `openspiel` and pyspiel imports, "openspiel_exploitability" and
    "openspiel_nash_conv". Lost Cities, per opponent X, on duplicate deals
    (`duplicate_match`): "vs_X_win_rate" and "vs_X_margin", each with "_lo"
    and "_hi" (95%), "vs_X_games", "vs_X_capped". Against "exploiter" (its
    games: `exploiter_games`, default lc_games) also "exploiter_margin" with
    "_lo"/"_hi": the exploiter's margin, a lower bound on exploitability.
    `record` ({opponent: list of lists}) records games as duplicate_match does.
    With `jobs` > 1 and `spec` (agents.players.agent_from_spec's
    description of `agent`), the Lost Cities matches run in that many
    processes (parallel_match).
    `prior_of`, a run directory: the policy also plays that run's warm-start
    prior (the same read-out) head to head, "vs_prior_*" (agents.head_to_head.
    vs_prior), if the run has one."""
    if game.name in POKER_GAMES:
        policy = agent
        if isinstance(agent, Policy):
            # a plain average is its net (or tabular sums); other read-outs answer per row
            policy = agent.net if isinstance(agent, AveragePolicy) and not agent.greedy else _TabularView(agent)
        own = exploitability(game, policy)
        out = {"exploitability": own["exploitability"], "nash_conv": own["nash_conv"]}
        if openspiel and _pyspiel_available():
            ref = openspiel_exploitability(game.name, policy)
            out["openspiel_exploitability"] = ref["exploitability"]
            out["openspiel_nash_conv"] = ref["nash_conv"]
        return out
    if game.name == "lost_cities":
        if isinstance(opponents, str):
            opponents = (opponents,)
        if jobs > 1 and spec is None:
            raise ValueError(f"jobs={jobs} needs `spec`, the description each worker process rebuilds "
                             "the agent from (agent_from_spec)")
        agent = _as_policy(agent, seed)
        out = {}
        for opp in opponents:
            n = exploiter_games if (opp == "exploiter" and exploiter_games) else lc_games
            if jobs > 1:
                r = parallel_match(spec, opponent_of(opp), n, seed=seed, worlds=worlds, jobs=jobs,
                                   progress=progress, record=(record or {}).get(opp), agent=agent,
                                   build=agent_from_spec)
            else:
                r = duplicate_match(game, agent, opponent_of(opp), n, seed=seed, worlds=worlds, progress=progress,
                                    record=(record or {}).get(opp))
            k = f"vs_{opp}"
            for field in ("win_rate", "win_rate_lo", "win_rate_hi", "margin", "margin_lo", "margin_hi",
                          "games", "capped"):
                out[f"{k}_{field}"] = r[field]
            if opp == "exploiter":
                out["exploiter_margin"] = -r["margin"]
                out["exploiter_margin_lo"], out["exploiter_margin_hi"] = -r["margin_hi"], -r["margin_lo"]
        if prior_of is not None and isinstance(agent, Policy):
            out.update(vs_prior(prior_of, game, agent, lc_games, seed=seed))
        return out
    raise ValueError(f"no evaluation for game {game.name!r}")


class _TabularView:
    """A Policy as the `probs(info, mask)` object exploitability() takes, for
    poker games, where the acting player is read off the info-state tensor."""

    def __init__(self, policy):
        self.policy = policy

    def probs(self, info, mask):
        players = np.asarray(info)[:, 1].astype(np.int64)   # poker tensors start with the player one-hot
        probs = self.policy.probs(info, mask, players)
        if self.policy.greedy:                               # the move it plays, with certainty
            probs = np.eye(probs.shape[1])[probs.argmax(axis=1)]
        return probs


def _fmt(v):
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def format_table(metrics):
    """A two-column text table of a metrics dict (keys in the dict's order)."""
    if not metrics:
        return "(no metrics)"
    rows = [(str(k), _fmt(v)) for k, v in metrics.items()]
    wk = max(len("metric"), max(len(k) for k, _ in rows))
    wv = max(len("value"), max(len(v) for _, v in rows))
    lines = [f"{'metric':<{wk}}  {'value':>{wv}}", f"{'-' * wk}  {'-' * wv}"]
    lines += [f"{k:<{wk}}  {v:>{wv}}" for k, v in rows]
    return "\n".join(lines)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def build_parser():
    ap = argparse.ArgumentParser(
        prog="python -m agents.evaluate",
        description="Evaluate a read-out of a Deep CFR checkpoint: exact exploitability for poker; "
                    "duplicate-deal matches with 95% intervals for Lost Cities.")
    ap.add_argument("checkpoint", nargs="?", help="checkpoint file or run directory (its latest checkpoint)")
    ap.add_argument("--policy", default="auto",
                    help="read-out: average (the strategy net, sampled), current (the advantage nets' regret "
                         "matching), sdcfr (the exact SD-CFR average), each optionally -greedy; "
                         "default auto, the docs' figures' read-out: sdcfr if the checkpoint holds it, else "
                         "average-greedy on Lost Cities and average on poker")
    ap.add_argument("--opponent", default="random,heuristic",
                    help="Lost Cities opponents, comma-separated, of: random, heuristic, cautious (a "
                         "second rule-based bot, never used in training), exploiter (a local best "
                         "response to the policy); 'both' = random,heuristic, 'all' = all four "
                         "(default random,heuristic); and head to head: run:PATH[@prior][:POLICY] (another "
                         "run or checkpoint; @prior: its warm-start prior; POLICY a read-out, default the "
                         "agent's; the text after the last ':' is a read-out only if it is a known one, so "
                         "a path may hold ':' but not ','), prior (this run's warm-start prior, "
                         "checkpoints/prior.pt), search:SETTINGS (the search player with agents.search's "
                         "settings, e.g. search:worlds=64,topk=4: no net, heuristic playouts; a first item "
                         "without '=' is a blueprint run or prior: search:RUN,worlds=64,topk=4), br:MINUTES (a "
                         "learned best response: PPO against the frozen agent for MINUTES on every core, "
                         "saved in RUN_DIR/responders/, then played greedy). In the list, an item "
                         "key=value continues the search: before it")
    ap.add_argument("--baseline", default=None, metavar="OTHER[:POLICY]",
                    help="Lost Cities: a second agent (a run or checkpoint, prior, run:..., search:...) that "
                         "plays the same deals against each opponent; the report adds its figures "
                         "(baseline_vs_*) and the paired difference, agent minus baseline, per deal "
                         "(diff_vs_*_win_rate and diff_vs_*_margin with 95%% intervals)")
    ap.add_argument("--games", type=int, default=2000,
                    help="Lost Cities games per opponent, as pairs of games on the same deal "
                         "with seats swapped (default 2000)")
    ap.add_argument("--exploiter-games", type=int, default=400,
                    help="games against the exploiter, which searches at every move (default 400)")
    ap.add_argument("--worlds", type=int, default=16,
                    help="the exploiter's sampled deals of the hidden cards per decision (default 16)")
    ap.add_argument("--search", nargs="?", const="", default=None, metavar="SETTINGS",
                    help="Lost Cities: evaluate the search player with this checkpoint's policy as its "
                         "blueprint; SETTINGS (optional) as worlds=640,topk=4,playout=heuristic (the defaults), "
                         "playout=blueprint|mixed,depth=4, time=1000 (ms per decision); agents/search.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1,
                    help="Lost Cities: play the matches in this many processes, one thread each "
                         "(the deals are split between them; default 1)")
    ap.add_argument("--greedy", action="store_true", help="same as appending -greedy to --policy")
    ap.add_argument("--no-openspiel", action="store_true", help="poker: skip OpenSpiel's cross-check")
    ap.add_argument("--progress", action="store_true", help="progress bars for Lost Cities matches")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--save-games", type=int, default=0, metavar="N",
                    help="Lost Cities: save the first N games against each opponent as replays "
                         "(agents/replay.py; default 0)")
    ap.add_argument("--save-dir", default="replays", help="where --save-games writes (default ./replays)")
    return ap


def _opponent_list(text):
    named = {"both": ["random", "heuristic"], "all": list(OPPONENTS)}
    out = []
    for part in split_opponents(text):
        for o in named.get(part, [part]):
            if o.startswith(BR_PREFIX):
                parse_br(o)
            elif o not in OPPONENTS and not is_side(o):
                raise ValueError(f"unknown opponent {o!r}; known: {', '.join(OPPONENTS)}, both, all, "
                                 "prior, run:PATH[@prior][:POLICY], search:SETTINGS, br:MINUTES")
            if o not in out:
                out.append(o)
    return out


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.checkpoint is None:
        if args.search and "=" not in args.search:       # a bare --search took the checkpoint as its settings
            ap.error(f"no checkpoint: --search took {args.search!r} as its settings; "
                     "put the checkpoint before --search")
        ap.error("the following arguments are required: checkpoint")
    torch.set_num_threads(1)        # small batches: one thread is fastest, and never stalls on a busy machine
    if args.games < 1 or args.exploiter_games < 1:
        ap.error("--games and --exploiter-games must be at least 1")
    if args.worlds < 1:
        ap.error("--worlds must be at least 1")
    if args.save_games < 0:
        ap.error("--save-games must be at least 0")
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    try:
        opponents = _opponent_list(args.opponent)
    except ValueError as e:
        print(f"error: --opponent: {e}", file=sys.stderr)
        return 2

    from agents.checkpoint import game_of, load_checkpoint
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    kind = "average" if args.policy == "network" else args.policy     # "network": the earlier name of "average"
    by_default = False
    try:
        game = game_of(ckpt)
        if kind == "auto":
            kind = default_read_out(ckpt, game.name)
            by_default = not (args.greedy and not kind.endswith("-greedy"))
        if args.greedy and not kind.endswith("-greedy"):
            kind += "-greedy"
        policy = policy_from_checkpoint(ckpt, kind, seed=args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, RuntimeError) as e:
        print(f"error: {ckpt['path']}: cannot rebuild the game or the {kind} policy: {e!r}", file=sys.stderr)
        return 2
    agent = policy
    settings = None
    if args.search is not None:
        from agents.searcher import SearchPlayer, parse_search_spec, with_blueprint_defaults
        try:
            settings = parse_search_spec(args.search)
            settings.pop("policy", None)
            settings = with_blueprint_defaults(settings)
            agent = SearchPlayer(game, blueprint=policy, **settings)
        except ValueError as e:
            print(f"error: --search: {e}", file=sys.stderr)
            return 2
    spec = {"checkpoint": ckpt["path"], "policy": kind, "seed": args.seed, "search": settings}
    try:        # br:MINUTES: a responder trained against the agent now, then played as a run: side
        opponents, responders = train_responders(opponents, game, ckpt, policy, seed=args.seed,
                                                 log=lambda line: print(line, file=sys.stderr),
                                                 searching=agent is not policy)
    except (ValueError, OSError) as e:
        print(f"error: --opponent: {_first_line(e)}", file=sys.stderr)
        return 2
    if args.save_games and game.name != "lost_cities":
        print(f"error: --save-games: replays are of lost_cities games, not {game.name}", file=sys.stderr)
        return 2
    sides = [o for o in opponents if is_side(o)]
    try:
        players, baseline = _load_sides(args, game, kind, ckpt["path"], sides)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record = {o: [[] for _ in range(args.save_games)] for o in opponents} if args.save_games else None
    if players or baseline is not None:
        metrics = _head_to_head_metrics(args, game, agent, opponents, players, baseline, record, spec)
    else:
        metrics = evaluate(game, agent, lc_games=args.games, opponents=opponents, seed=args.seed,
                           openspiel=not args.no_openspiel, exploiter_games=args.exploiter_games,
                           worlds=args.worlds, progress=args.progress, record=record, jobs=args.jobs, spec=spec)
    metrics = name_responders(metrics, responders)
    if record:
        from agents.replay import save_match_games
        try:
            saved = [p for o, games in record.items() for p in save_match_games(
                game, games, args.seed, args.save_dir, agent.name, o, policy=policy.name,
                checkpoint=ckpt["path"], iteration=ckpt.get("iteration"))]
        except OSError as e:
            print(f"error: --save-dir {args.save_dir}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"saved {len(saved)} replays in {args.save_dir}", file=sys.stderr)
    named = read_out_line(kind, by_default)
    if args.json:
        print(named, file=sys.stderr)                 # stdout stays one JSON object
        print(json.dumps(_jsonable({"checkpoint": ckpt["path"], "iteration": ckpt.get("iteration"),
                                    "game": game.name, "policy": policy.name,
                                    **({"baseline": _side_name(baseline)} if baseline is not None else {}),
                                    **({"search": agent.name, "ms_per_decision": agent.ms_per_decision()}
                                       if agent is not policy else {}), **metrics})))
    else:
        print(f"{ckpt['path']}  (game {game.name}, iteration {ckpt.get('iteration')}, policy {policy.name}"
              + (f", {agent.name} at {agent.ms_per_decision():.1f} ms per decision" if agent is not policy else "")
              + ")")
        print(named)
        if baseline is not None:
            print(f"baseline {_side_name(baseline)}; diff_vs_*: agent minus baseline, per deal")
        print(format_table(metrics))
    return 0


def _load_sides(args, game, kind, path, sides):
    """({spec: player} of the head-to-head opponents, the baseline or None);
    ValueError naming the flag and the spec when one cannot be built."""
    if (sides or args.baseline) and game.name != "lost_cities":
        raise ValueError(f"head-to-head opponents and --baseline are for lost_cities, not {game.name}")
    if args.baseline and args.save_games:
        raise ValueError("--save-games: replays are saved without --baseline only")
    if sides and args.save_games and args.jobs > 1:
        raise ValueError("--save-games: head-to-head replays are saved with --jobs 1 only")
    players = {}
    for o in sides:
        try:
            players[o] = load_side(o, game, kind, path, seed=args.seed + 1)
        except (ValueError, FileNotFoundError, RuntimeError, KeyError) as e:
            raise ValueError(f"--opponent {o}: {_first_line(e)}") from None
    baseline = None
    if args.baseline:
        try:
            baseline = load_baseline(args.baseline, game, kind, path, seed=args.seed + 1)
        except (ValueError, FileNotFoundError, RuntimeError, KeyError) as e:
            raise ValueError(f"--baseline {args.baseline}: {_first_line(e)}") from None
    return players, baseline


def _first_line(e):
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _side_name(player):
    if player is None:
        return None
    ckpt = getattr(player, "checkpoint", None) or getattr(getattr(player, "blueprint", None), "checkpoint", None)
    return player.name + (f" of {ckpt}" if ckpt else "")


def _head_to_head_metrics(args, game, agent, opponents, players, baseline, record, spec):
    """evaluate()'s Lost Cities metrics for opponents that include run:/prior/
    search: players or with a baseline (agents.head_to_head), opponent by
    opponent in the list's order. Without a baseline the bots' matches are
    evaluate()'s own."""
    from agents.matches import match_summary
    from agents.head_to_head import run_matches
    sides = [o for o in opponents if o in players]
    games = {o: args.exploiter_games if o == "exploiter" else args.games for o in opponents}
    tasks = [("agent", o, games[o]) for o in (opponents if baseline is not None else sides)]
    tasks += [("baseline", o, games[o]) for o in opponents] if baseline is not None else []
    everyone = {"agent": agent, "baseline": baseline, **players}
    init = (spec, sides, args.baseline, spec["policy"], spec["checkpoint"], args.seed)
    if record and sides:                 # replays: one process, as --save-games needs
        res = {("agent", o): _head_to_head_record(game, agent, players[o], games[o], args.seed, record[o])
               for o in sides}
    else:
        res = run_matches(game, everyone, tasks, seed=args.seed, worlds=args.worlds, jobs=args.jobs, init=init,
                          progress=args.progress)
    out = {}
    for o in opponents:
        if baseline is not None:
            (da, ca), (db, cb) = res["agent", o], res["baseline", o]
            out.update(comparison_metrics(o, {"agent": match_summary(da, ca), "baseline": match_summary(db, cb),
                                              "paired": paired(da, db)}))
        elif o in players:
            out.update(flat(o, match_summary(*res["agent", o])))
        else:
            out.update(evaluate(game, agent, lc_games=args.games, opponents=(o,), seed=args.seed,
                                exploiter_games=args.exploiter_games, worlds=args.worlds, progress=args.progress,
                                record=record, jobs=args.jobs, spec=spec))
    return out


def _head_to_head_record(game, agent, opponent, games, seed, record):
    """(diffs, capped) of a head-to-head match whose first games are recorded."""
    from agents.head_to_head import play_sides
    return play_sides(game, agent, opponent, range((games + 1) // 2), seed=seed, record=record)

if __name__ == "__main__":
    sys.exit(main())
