"""Evaluation of a Deep CFR checkpoint's policies.

    python -m trainer.evaluate RUN_OR_CHECKPOINT [--policy average|current|sdcfr[-greedy]]
        [--opponent random,heuristic,cautious,exploiter | both | all] [--games 2000]
        [--exploiter-games 400] [--worlds 16] [--seed S] [--json]

Read-outs (trainer.policy): the average policy (the strategy net, or the
exact SD-CFR average), the current policy (regret matching on the advantage
nets), and greedy variants of each.

Kuhn and Leduc poker: exact exploitability, from our own best response over
the engine (trainer.exact), checked against OpenSpiel's
(`openspiel_exploitability`) when pyspiel is installed. Both follow OpenSpiel:
nash_conv = BR_0 + BR_1, exploitability = nash_conv / num_players.

Lost Cities: duplicate deals (`duplicate_match`): every deal is played twice
with the seats swapped, and the win rate (a tie counts half) and the point
margin come with 95% intervals over the deals. Opponents: RandomBot,
HeuristicBot, any object with `.step(state)`, and the exploiter, a local
best response to the policy itself (trainer.exploiter), whose margin is a
lower bound on the policy's exploitability.
"""
import argparse
import json
import math
import sys

import numpy as np
import torch

from engine.bots import CautiousBot, HeuristicBot, RandomBot
from engine.match import wilson_interval
from trainer.exact import POKER_GAMES, exploitability
from trainer.policy import AveragePolicy, Policy, policy_from_checkpoint, policy_probs

OPPONENTS = ("random", "heuristic", "cautious", "exploiter")
DEFAULT_OPPONENTS = ("random", "heuristic")


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
# Lost Cities: duplicate-deal matches

def _as_policy(agent, seed=0, greedy=False):
    """A trainer.policy.Policy from a Policy, a strategy net or a tabular
    average; a player that needs the state (`.step(state)`, e.g. the search
    player) is kept as it is."""
    if isinstance(agent, Policy) or (callable(getattr(agent, "step", None)) and
                                     not isinstance(agent, torch.nn.Module)):
        return agent
    return AveragePolicy(agent, greedy=greedy, seed=seed)


def make_opponent(kind, game, agent, seed=0, worlds=16):
    """An opponent bot by name: "random", "heuristic", "cautious" (a second
    rule-based bot that training never uses, engine.bots.CautiousBot), or "exploiter" (a local
    best response to `agent`, trainer.exploiter). Any other object with
    `.step(state)` is used as it is."""
    if not isinstance(kind, str):
        if not callable(getattr(kind, "step", None)):
            raise ValueError(f"an opponent needs a .step(state) method, got {kind!r}")
        return kind
    if kind == "exploiter":
        from trainer.exploiter import LocalBestResponse
        if not isinstance(agent, Policy):
            raise ValueError("the exploiter searches against a policy's probabilities; "
                             f"{getattr(agent, 'name', type(agent).__name__)} has none")
        return LocalBestResponse(game, agent, worlds=worlds, seed=seed)
    if kind == "random":
        return RandomBot(seed)
    if kind == "heuristic":
        return HeuristicBot(game)
    if kind == "cautious":
        return CautiousBot(game)
    raise ValueError(f"unknown opponent {kind!r}; known: {', '.join(OPPONENTS)}")


def mean_ci(x, lo=-math.inf, hi=math.inf):
    """(mean, low, high): a 95% normal interval for the mean of the
    independent values x, clipped to [lo, hi]."""
    x = np.asarray(x, dtype=np.float64)
    m = float(x.mean())
    half = 1.96 * float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else math.inf
    return m, max(lo, m - half), min(hi, m + half)


def duplicate_match(game, agent, opponent, games, seed=0, worlds=16, progress=False, record=None):
    """Play `agent` (a Policy, or a strategy net) against `opponent` on
    duplicate deals: deal d (dealt from seed + d) is played twice, with the
    agent in seat 0 and then in seat 1, so most of the luck of the deal
    cancels. `games` is rounded up to an even number. All games advance
    together: the agent's decisions across games are one batched forward per
    step; the opponent moves game by game through `.step(state)`.

    Win rate (a tie counts half) and point margin are from the agent's seat.
    Their 95% intervals treat each deal's pair of games as one independent
    unit. Returns {"games", "deals", "win_rate", "win_rate_lo", "win_rate_hi",
    "margin", "margin_lo", "margin_hi", "wins", "ties", "losses", "capped",
    "margin_by_seat"}; "capped" counts games ended by the turn cap.

    `record`, a list of lists, records the first len(record) games:
    record[g] gets (player, action, probs) for every move of game g, probs
    the agent's probabilities at its decisions (None at the opponent's);
    trainer.replay.save_match_games writes them as replays.
    parallel_match plays the same deals in several processes."""
    if games < 1:
        raise ValueError("a match needs at least one game")
    agent = _as_policy(agent, seed)
    deals = (games + 1) // 2
    bar = _match_bar(progress, 2 * deals, agent, opponent)
    diffs, capped = play_deals(game, agent, opponent, range(deals), seed=seed, worlds=worlds, bar=bar,
                               record=record)
    if bar is not None:
        bar.close()
    return match_summary(diffs, capped)


def _match_bar(progress, total, agent, opponent):
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    name = opponent if isinstance(opponent, str) else type(opponent).__name__
    return tqdm(total=total, desc=f"{getattr(agent, 'name', 'agent')} vs {name}", leave=False)


def play_deals(game, agent, opponent, deal_ids, seed=0, worlds=16, bar=None, record=None):
    """Play deals `deal_ids` (deal d dealt from seed + d) twice each, the
    agent in seat 0 then in seat 1. Returns (diffs, capped): diffs[2i + s] is
    the agent's final score difference in deal_ids[i] from seat s, capped the
    number of games the turn cap ended. `agent` is a Policy or a player with
    `.step(state)`; `record` as in duplicate_match, over these games."""
    agent = _as_policy(agent, seed)
    deal_ids = [int(d) for d in deal_ids]
    n = 2 * len(deal_ids)
    states = [game.new_initial_state(seed=seed + deal_ids[g // 2]) for g in range(n)]
    seats = np.array([g % 2 for g in range(n)])
    if isinstance(opponent, str) and opponent == "random":
        # both games of a deal face the same random stream
        bots = [RandomBot(seed * 1000003 + deal_ids[g // 2]) for g in range(n)]
    else:
        bot = make_opponent(opponent, game, agent, seed=seed, worlds=worlds)
        bots = [bot] * n
    active = list(range(n))
    while active:
        # opponents move until each game waits on the agent (or ends)
        waiting = []
        for g in active:
            s = states[g]
            while not s.is_terminal() and s.current_player() != seats[g]:
                a = int(bots[g].step(s))
                if record is not None and g < len(record):
                    record[g].append((int(seats[g]) ^ 1, a, None))
                s.apply_action(a)
            if not s.is_terminal():
                waiting.append(g)
        if bar is not None:
            bar.update(len(active) - len(waiting))
        active = waiting
        if not active:
            break
        if not isinstance(agent, Policy):             # a player that searches from the state
            for g in active:
                a = int(agent.step(states[g]))
                if record is not None and g < len(record):
                    from trainer.replay import decision_probs
                    record[g].append((int(seats[g]), a, decision_probs(agent, states[g], a)))
                states[g].apply_action(a)
            continue
        info = np.stack([states[g].information_state_tensor(seats[g]) for g in active])
        mask = np.stack([states[g].legal_actions_mask() for g in active])
        actions = agent.actions(info, mask, seats[active])
        rows = [i for i, g in enumerate(active) if record is not None and g < len(record)]
        if rows:     # the probabilities behind the recorded games' moves (no RNG is used)
            for i, p in zip(rows, agent.probs(info[rows], mask[rows], seats[active][rows])):
                record[active[i]].append((int(seats[active[i]]), int(actions[i]), p))
        for g, a in zip(active, actions):
            states[g].apply_action(int(a))
    diffs = np.array([states[g].returns()[seats[g]] for g in range(n)], dtype=np.float64)
    capped = sum(bool(getattr(s, "capped", lambda: False)()) for s in states)
    return diffs, int(capped)


def match_summary(diffs, capped=0):
    """duplicate_match's statistics of diffs (the agent's final score
    differences, deal by deal, seat 0 then seat 1)."""
    diffs = np.asarray(diffs, dtype=np.float64)
    n = len(diffs)
    if n < 2 or n % 2:
        raise ValueError(f"a duplicate match has an even number of games, at least 2, got {n}")
    deals = n // 2
    seats = np.arange(n) % 2
    points = np.where(diffs > 0, 1.0, np.where(diffs == 0, 0.5, 0.0))
    win, win_lo, win_hi = mean_ci(points.reshape(deals, 2).mean(axis=1), 0.0, 1.0)
    # the pairs' interval collapses when every game ends alike (0 or 100%):
    # never report one narrower than the games' Wilson interval
    w_lo, w_hi = wilson_interval(float(points.sum()), n)
    win_lo, win_hi = max(0.0, min(win_lo, w_lo)), min(1.0, max(win_hi, w_hi))
    margin, margin_lo, margin_hi = mean_ci(diffs.reshape(deals, 2).mean(axis=1))
    return {"games": n, "deals": deals, "win_rate": win, "win_rate_lo": win_lo, "win_rate_hi": win_hi,
            "margin": margin, "margin_lo": margin_lo, "margin_hi": margin_hi,
            "wins": int((diffs > 0).sum()), "ties": int((diffs == 0).sum()), "losses": int((diffs < 0).sum()),
            "capped": int(capped), "margin_by_seat": [float(diffs[seats == p].mean()) for p in (0, 1)]}


# --------------------------------------------------------------------------
# The same matches in several processes

SEARCH_STATS = ("decisions", "seconds", "cpu_seconds", "worlds_played")


def agent_from_spec(spec):
    """(game, policy or None, agent) from a picklable description, so that
    worker processes can rebuild the agent:
        {"checkpoint": PATH, "policy": KIND, "seed": S, "search": SETTINGS or None}
            a checkpoint's read-out (trainer.policy), or the search player
            with it as its blueprint (SETTINGS: SearchPlayer's keywords);
        {"game": {"name": ..., **load_game keywords}, "search": SETTINGS}
            the search player without a net."""
    settings = spec.get("search")
    if "checkpoint" in spec:
        from trainer.checkpoint import game_of, load_checkpoint
        ckpt = load_checkpoint(spec["checkpoint"])
        game = game_of(ckpt)
        policy = policy_from_checkpoint(ckpt, spec["policy"], seed=spec.get("seed", 0))
        if settings is None:
            return game, policy, policy
        from trainer.search import SearchPlayer
        return game, policy, SearchPlayer(game, blueprint=policy, **settings)
    if "game" in spec and settings is not None:
        import engine
        from trainer.search import SearchPlayer
        kwargs = dict(spec["game"])
        game = engine.load_game(kwargs.pop("name"), **kwargs)
        return game, None, SearchPlayer(game, **settings)
    raise ValueError(f"an agent spec names a checkpoint, or a game and search settings; got {spec!r}")


_WORKER = {}


def _match_worker_init(spec):
    torch.set_num_threads(1)
    _WORKER["game"], _, _WORKER["agent"] = agent_from_spec(spec)


def _match_worker_play(opponent, lo, hi, seed, worlds, n_record):
    game, agent = _WORKER["game"], _WORKER["agent"]
    if isinstance(agent, Policy):      # a sampled read-out: each chunk its own stream, not each process the same
        agent.rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, lo, 0xC4A2])
    before = {k: getattr(agent, k, 0) for k in SEARCH_STATS}
    record = [[] for _ in range(n_record)]
    diffs, capped = play_deals(game, agent, opponent, range(lo, hi), seed=seed, worlds=worlds, record=record)
    stats = {k: getattr(agent, k, 0) - before[k] for k in SEARCH_STATS}
    return diffs, capped, record, stats


def parallel_match(spec, opponent, games, seed=0, worlds=16, jobs=2, progress=False, record=None, agent=None):
    """duplicate_match over `jobs` worker processes: the deals are split into
    chunks, and each process rebuilds the agent from `spec` (agent_from_spec)
    and plays whole chunks, so each deal is played exactly as duplicate_match
    would play it. The statistics are computed over all deals at the end.
    With a deterministic agent and opponent (a search player's worlds
    depend only on its seed and what it sees) the result equals
    duplicate_match's. `opponent` is a name or a picklable bot. `agent`, a
    local copy of the search player, gets the workers' decision counts and
    times (for ms_per_decision). A worker process that dies fails the match
    with an error that names the deals; no partial result is returned."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    if games < 1:
        raise ValueError("a match needs at least one game")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    deals = (games + 1) // 2
    size = max(1, math.ceil(deals / (4 * jobs)))
    chunks = [(lo, min(deals, lo + size)) for lo in range(0, deals, size)]
    diffs = np.zeros(2 * deals)
    bar = _match_bar(progress, 2 * deals, agent, opponent)
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(min(jobs, len(chunks)), mp_context=ctx, initializer=_match_worker_init,
                                 initargs=(spec,)) as ex:
            futures = {}
            for lo, hi in chunks:
                n_record = max(0, min(len(record or ()) - 2 * lo, 2 * (hi - lo)))
                futures[ex.submit(_match_worker_play, opponent, lo, hi, seed, worlds, n_record)] = (lo, hi)
            try:
                capped = _collect(futures, diffs, record, agent, bar, seed, opponent)
            except BaseException:
                ex.shutdown(wait=False, cancel_futures=True)    # no new chunks; the running ones end
                raise
    finally:
        if bar is not None:
            bar.close()
    return match_summary(diffs, capped)


def _collect(futures, diffs, record, agent, bar, seed, opponent):
    """Fill diffs (and record, agent's search counters, bar) from the chunks
    as they finish; returns the number of capped games."""
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool
    capped = 0
    for f in as_completed(futures):
        lo, hi = futures[f]
        try:
            d, c, rec, stats = f.result()
        except BrokenProcessPool as e:
            raise RuntimeError(f"an evaluation worker process died before deals {seed + lo}..{seed + hi - 1} "
                               f"against {opponent} were finished: {e}; no result is reported") from None
        diffs[2 * lo:2 * hi] = d
        capped += c
        for i, moves in enumerate(rec):
            record[2 * lo + i].extend(moves)
        if agent is not None:
            for k, v in stats.items():
                if hasattr(agent, k):
                    setattr(agent, k, getattr(agent, k) + v)
        if bar is not None:
            bar.update(2 * (hi - lo))
    return capped


# --------------------------------------------------------------------------
# Dispatch, table, CLI

def _pyspiel_available():
    try:
        _import_pyspiel()
        return True
    except ImportError:
        return False


def evaluate(game, agent, lc_games=2000, opponents=DEFAULT_OPPONENTS, seed=0, openspiel=True,
             exploiter_games=None, worlds=16, progress=False, record=None, jobs=1, spec=None):
    """All metrics of a policy on its game, as a flat dict. `agent` is a
    trainer.policy.Policy, a strategy net, or a tabular average.

    Poker: "exploitability", "nash_conv" (our best response) and, if
    `openspiel` and pyspiel imports, "openspiel_exploitability" and
    "openspiel_nash_conv". Lost Cities, per opponent X, on duplicate deals
    (`duplicate_match`): "vs_X_win_rate" and "vs_X_margin", each with "_lo"
    and "_hi" (95%), "vs_X_games", "vs_X_capped". Against "exploiter" (its
    games: `exploiter_games`, default lc_games) also "exploiter_margin" with
    "_lo"/"_hi": the exploiter's margin, a lower bound on exploitability.
    `record` ({opponent: list of lists}) records games as duplicate_match does.
    With `jobs` > 1 and `spec` (agent_from_spec's description of `agent`),
    the Lost Cities matches run in that many processes (parallel_match)."""
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
                r = parallel_match(spec, opp, n, seed=seed, worlds=worlds, jobs=jobs, progress=progress,
                                   record=(record or {}).get(opp), agent=agent)
            else:
                r = duplicate_match(game, agent, opp, n, seed=seed, worlds=worlds, progress=progress,
                                    record=(record or {}).get(opp))
            k = f"vs_{opp}"
            for field in ("win_rate", "win_rate_lo", "win_rate_hi", "margin", "margin_lo", "margin_hi",
                          "games", "capped"):
                out[f"{k}_{field}"] = r[field]
            if opp == "exploiter":
                out["exploiter_margin"] = -r["margin"]
                out["exploiter_margin_lo"], out["exploiter_margin_hi"] = -r["margin_hi"], -r["margin_lo"]
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
        prog="python -m trainer.evaluate",
        description="Evaluate a read-out of a Deep CFR checkpoint: exact exploitability for poker; "
                    "duplicate-deal matches with 95% intervals for Lost Cities.")
    ap.add_argument("checkpoint", nargs="?", help="checkpoint file or run directory (its latest checkpoint)")
    ap.add_argument("--policy", default="auto",
                    help="read-out: average (the strategy net), current (the advantage nets' regret "
                         "matching), sdcfr (the exact SD-CFR average), each optionally -greedy; "
                         "default auto: sdcfr if the checkpoint holds it, else average")
    ap.add_argument("--opponent", default="random,heuristic",
                    help="Lost Cities opponents, comma-separated, of: random, heuristic, cautious (a "
                         "second rule-based bot, never used in training), exploiter (a local best "
                         "response to the policy); 'both' = random,heuristic, 'all' = all four "
                         "(default random,heuristic)")
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
                         "playout=blueprint|mixed,depth=4, time=1000 (ms per decision); trainer/search.py")
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
                         "(trainer/replay.py; default 0)")
    ap.add_argument("--save-dir", default="replays", help="where --save-games writes (default ./replays)")
    return ap


def _opponent_list(text):
    named = {"both": ["random", "heuristic"], "all": list(OPPONENTS)}
    out = []
    for part in text.split(","):
        part = part.strip()
        for o in named.get(part, [part]):
            if o not in OPPONENTS:
                raise ValueError(f"unknown opponent {o!r}; known: {', '.join(OPPONENTS)}, both, all")
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
        ap.error(str(e))

    from trainer.checkpoint import game_of, load_checkpoint
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    kind = args.policy
    if kind in ("auto", "network"):          # "network": the earlier name of "average"
        kind = "sdcfr" if (kind == "auto" and "sdcfr" in ckpt) else "average"
    if args.greedy and not kind.endswith("-greedy"):
        kind += "-greedy"
    try:
        game = game_of(ckpt)
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
        from trainer.search import SearchPlayer, parse_search_spec, with_blueprint_defaults
        try:
            settings = parse_search_spec(args.search)
            settings.pop("policy", None)
            settings = with_blueprint_defaults(settings)
            agent = SearchPlayer(game, blueprint=policy, **settings)
        except ValueError as e:
            print(f"error: --search: {e}", file=sys.stderr)
            return 2
    spec = {"checkpoint": ckpt["path"], "policy": kind, "seed": args.seed, "search": settings}
    if args.save_games and game.name != "lost_cities":
        print(f"error: --save-games: replays are of lost_cities games, not {game.name}", file=sys.stderr)
        return 2
    record = {o: [[] for _ in range(args.save_games)] for o in opponents} if args.save_games else None
    metrics = evaluate(game, agent, lc_games=args.games, opponents=opponents, seed=args.seed,
                       openspiel=not args.no_openspiel, exploiter_games=args.exploiter_games,
                       worlds=args.worlds, progress=args.progress, record=record, jobs=args.jobs, spec=spec)
    if record:
        from trainer.replay import save_match_games
        try:
            saved = [p for o, games in record.items() for p in save_match_games(
                game, games, args.seed, args.save_dir, agent.name, o, policy=policy.name,
                checkpoint=ckpt["path"], iteration=ckpt.get("iteration"))]
        except OSError as e:
            print(f"error: --save-dir {args.save_dir}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"saved {len(saved)} replays in {args.save_dir}", file=sys.stderr)
    if args.json:
        print(json.dumps(_jsonable({"checkpoint": ckpt["path"], "iteration": ckpt.get("iteration"),
                                    "game": game.name, "policy": policy.name,
                                    **({"search": agent.name, "ms_per_decision": agent.ms_per_decision()}
                                       if agent is not policy else {}), **metrics})))
    else:
        print(f"{ckpt['path']}  (game {game.name}, iteration {ckpt.get('iteration')}, policy {policy.name}"
              + (f", {agent.name} at {agent.ms_per_decision():.1f} ms per decision" if agent is not policy else "")
              + ")")
        print(format_table(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
