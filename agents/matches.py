"""Lost Cities matches on duplicate deals, in one process or several.

Every deal is played twice with the seats swapped, so most of the luck of
the deal cancels; win rate (a tie counts half) and margin come with 95%
intervals over the deals. Used by agents.evaluate, agents.head_to_head and
the search's command line (agents.search).

An opponent is a bot's name (engine.bots: "random", "heuristic",
"cautious"), a player with `.step(state)`, or a picklable factory
`f(game, agent, seed, worlds) -> bot` that builds the bot from the agent it
faces (agents.players.exploiter, the local best response). A parallel match
rebuilds the agent in each worker process with the picklable builder it is
given (agents.players.agent_from_spec). So this module builds nothing above
the policies: the exploiter, the search player and checkpoints are
agents.players' business.
"""
import math

import numpy as np
import torch

from engine.bots import CautiousBot, HeuristicBot, RandomBot
from engine.match import wilson_interval
from agents.policy import AveragePolicy, Policy

BOTS = ("random", "heuristic", "cautious")


# --------------------------------------------------------------------------
# Lost Cities: duplicate-deal matches

def _as_policy(agent, seed=0, greedy=False):
    """A agents.policy.Policy from a Policy, a strategy net or a tabular
    average; a player that needs the state (`.step(state)`, e.g. the search
    player) is kept as it is."""
    if isinstance(agent, Policy) or (callable(getattr(agent, "step", None)) and
                                     not isinstance(agent, torch.nn.Module)):
        return agent
    return AveragePolicy(agent, greedy=greedy, seed=seed)


def _is_player(opponent):
    return callable(getattr(opponent, "step", None))


def make_bot(opponent, game, agent, seed=0, worlds=16):
    """The bot that plays `opponent`: a bot by name ("random", "heuristic",
    "cautious", a second rule-based bot that training never uses,
    engine.bots.CautiousBot); an object with `.step(state)` as it is; a
    factory's bot, factory(game, agent, seed, worlds)."""
    if isinstance(opponent, str):
        if opponent == "random":
            return RandomBot(seed)
        if opponent == "heuristic":
            return HeuristicBot(game)
        if opponent == "cautious":
            return CautiousBot(game)
        raise ValueError(f"unknown opponent {opponent!r}; known: {', '.join(BOTS)}, "
                         "or a factory f(game, agent, seed, worlds) such as agents.players.exploiter")
    if _is_player(opponent):
        return opponent
    if not callable(opponent):
        raise ValueError("an opponent is a bot's name, a player with a .step(state) method or a factory "
                         f"f(game, agent, seed, worlds); got {opponent!r}")
    bot = opponent(game, agent, seed, worlds)
    if not _is_player(bot):
        raise ValueError(f"the opponent factory {_opponent_name(opponent)} gave {bot!r}, "
                         "which has no .step(state) method")
    return bot


def _opponent_name(opponent):
    """How progress and errors name an opponent: a bot's name, a factory's
    own name ("exploiter"), or a player's class."""
    if isinstance(opponent, str):
        return opponent
    if not _is_player(opponent) and callable(opponent):
        return getattr(opponent, "__name__", type(opponent).__name__)
    return type(opponent).__name__


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
    agents.replay.save_match_games writes them as replays.
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


def _match_bar(show, total, agent, opponent):
    """A match's progress (agents.progress: a bar on a terminal, plain lines
    elsewhere), or None when `show` is off."""
    if not show:
        return None
    from agents.progress import progress
    return progress(total=total, desc=f"{getattr(agent, 'name', 'agent')} vs {_opponent_name(opponent)}",
                    unit="game")


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
        bot = make_bot(opponent, game, agent, seed=seed, worlds=worlds)
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
                    from agents.replay import decision_probs
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


_WORKER = {}


def _match_worker_init(build, spec):
    torch.set_num_threads(1)
    _WORKER["game"], _, _WORKER["agent"] = build(spec)


def _match_worker_play(opponent, lo, hi, seed, worlds, n_record):
    game, agent = _WORKER["game"], _WORKER["agent"]
    if isinstance(agent, Policy):      # a sampled read-out: each chunk its own stream, not each process the same
        agent.rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, lo, 0xC4A2])
    before = {k: getattr(agent, k, 0) for k in SEARCH_STATS}
    record = [[] for _ in range(n_record)]
    diffs, capped = play_deals(game, agent, opponent, range(lo, hi), seed=seed, worlds=worlds, record=record)
    stats = {k: getattr(agent, k, 0) - before[k] for k in SEARCH_STATS}
    return diffs, capped, record, stats


def parallel_match(spec, opponent, games, seed=0, worlds=16, jobs=2, progress=False, record=None, agent=None,
                   *, build):
    """duplicate_match over `jobs` worker processes: the deals are split into
    chunks, and each process rebuilds the agent from `spec` with `build`, a
    picklable function spec -> (game, policy or None, agent) such as
    agents.players.agent_from_spec, and plays whole chunks, so each deal is
    played exactly as duplicate_match would play it. The statistics are
    computed over all deals at the end. With a deterministic agent and
    opponent (a search player's worlds depend only on its seed and what it
    sees) the result equals duplicate_match's. `opponent` is a bot's name, a
    picklable bot or a picklable factory (each worker builds its bot from
    its own agent). `agent`, a local copy of the search player, gets the
    workers' decision counts and times (for ms_per_decision). A worker
    process that dies fails the match with an error that names the deals;
    no partial result is returned."""
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
                                 initargs=(build, spec)) as ex:
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
                               f"against {_opponent_name(opponent)} were finished: {e}; no result is reported") from None
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
