"""Lost Cities head to head: two agents on duplicate deals, and an agent
compared deal by deal with a baseline.

    python -m agents.evaluate RUN --opponent run:OTHER[:POLICY]       # two trained agents
    python -m agents.evaluate RUN --opponent prior                    # against its own warm-start prior
    python -m agents.evaluate RUN --opponent search:worlds=64,topk=4  # against the no-net search
    python -m agents.evaluate RUN --baseline prior --opponent heuristic,cautious

Sides (what --opponent and --baseline name, besides the bots):
    run:PATH[@prior][:POLICY]   a run directory (its latest checkpoint) or a
                                checkpoint file; @prior: that run's warm-start
                                prior (checkpoints/prior.pt). POLICY is a
                                read-out (average, current, sdcfr, each
                                optionally -greedy); the text after the last
                                ':' is taken as one only if it is a known
                                read-out, so a path may hold ':' but not ','.
                                Default: the read-out the agent plays, or
                                average where the checkpoint has no SD-CFR sums.
    prior                       the evaluated run's own prior, as run:RUN@prior
    search:SETTINGS             the search player (agents.searcher) with
                                agents.search's settings, e.g.
                                search:worlds=64,topk=4; without a source it
                                has no net (heuristic playouts). A first item
                                without '=' is its source: a run or checkpoint
                                (the blueprint, policy=KIND picks its read-out;
                                unset settings from BLUEPRINT_DEFAULTS), prior
                                (the evaluated run's prior as the blueprint),
                                or heuristic / random playouts:
                                search:runs/a,worlds=64,topk=4.
In a comma-separated list an item of the form key=value continues the
search: spec before it; every other item starts a new opponent. Loaded sides
play with seed + 1, so a sampled read-out never shares the agent's stream.

A head-to-head match plays every deal twice, the agent in seat 0 then in
seat 1, both sides' policy decisions batched over the games in progress (one
forward per side per step; a search player moves game by game). A baseline
comparison plays the agent and the baseline against the same opponent on the
same deals (the same seed) and reports, per opponent, the mean over deals of
(agent minus baseline), each deal's value being the mean over its two seats,
for wins (a tie counts half) and points, with 95% intervals over the deals.
"""
import numpy as np

from agents.checkpoint import game_of, load_checkpoint, prior_checkpoint
from agents.matches import SEARCH_STATS, _as_policy, match_summary, mean_ci, play_deals
from agents.players import OPPONENTS, agent_from_spec, opponent_of
from agents.policy import KINDS, CurrentPolicy, Policy, SymmetricPolicy, parse_kind, policy_from_checkpoint

PREFIXES = ("run:", "search:")
FIELDS = ("win_rate", "win_rate_lo", "win_rate_hi", "margin", "margin_lo", "margin_hi", "games", "capped")


# --------------------------------------------------------------------------
# Specs

def split_opponents(text):
    """'random,run:a:current,search:worlds=64,topk=4,prior' ->
    ['random', 'run:a:current', 'search:worlds=64,topk=4', 'prior']."""
    items = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if items and items[-1].startswith("search:") and "=" in part and not part.startswith(PREFIXES):
            items[-1] += "," + part
        else:
            items.append(part)
    return items


def is_side(text):
    """Whether an opponent item names a side (a run, the prior, a search) rather than a bot."""
    return text == "prior" or text.startswith(PREFIXES)


def _known_kind(text):
    try:
        parse_kind(text)
        return True
    except ValueError:
        return False


def parse_run(text):
    """'run:PATH[@prior][:POLICY]' (the 'run:' optional) -> (path, prior, kind or None)."""
    body = text[len("run:"):] if text.startswith("run:") else text
    kind = None
    head, sep, tail = body.rpartition(":")
    if sep and _known_kind(tail):
        body, kind = head, tail
    prior = body.endswith("@prior")
    if prior:
        body = body[:-len("@prior")]
    if not body:
        raise ValueError("names no run directory or checkpoint")
    return body, prior, kind


def default_kind(agent_kind, ckpt):
    """The read-out a loaded side plays without a POLICY suffix: the agent's,
    or average (same greediness) where `ckpt` has no SD-CFR sums."""
    base, greedy = parse_kind(agent_kind)
    if base == "sdcfr" and "sdcfr" not in ckpt:
        base = "average"
    return base + ("-greedy" if greedy else "")


def kind_of(policy):
    """The read-out kind of a Policy ('average', 'current-greedy', ...); an
    SD-CFR average counts as average (a prior holds no SD-CFR sums)."""
    base = ("current" if isinstance(policy, CurrentPolicy) else "symmetric" if isinstance(policy, SymmetricPolicy)
            else "average")
    return base + ("-greedy" if policy.greedy else "")


def _same_game(game, other, what):
    if (game.name, dict(game.params)) != (other.name, dict(other.params)):
        raise ValueError(f"{what} plays {other.name} {dict(other.params)}, the agent "
                         f"{game.name} {dict(game.params)}")


def _load_run(path, prior, kind, game, agent_kind, seed, what):
    if prior:
        p = prior_checkpoint(path)
        if not p.exists():
            raise ValueError(f"no warm-start prior at {p} (a run keeps one only if it began with a warm "
                             "start, train.warm_start_games > 0)")
        path = p
    try:
        ckpt = load_checkpoint(path)
    except FileNotFoundError as e:
        head, sep, tail = str(path).rpartition(":")
        if sep and head and tail and not _known_kind(tail):
            raise ValueError(f"unknown read-out {tail!r}; known: "
                             + ", ".join(k + s for k in KINDS for s in ("", "-greedy"))) from None
        raise ValueError(str(e)) from None
    _same_game(game, game_of(ckpt), what)
    policy = policy_from_checkpoint(ckpt, kind or default_kind(agent_kind, ckpt), seed=seed)
    policy.checkpoint = ckpt["path"]
    return policy


def load_side(text, game, agent_kind="average", agent_run=None, seed=0, what=None):
    """The player a side spec names (module docstring): a Policy, or a
    SearchPlayer for search:. `agent_kind` is the agent's read-out (the
    default for runs), `agent_run` its run directory or checkpoint (for
    'prior'), `seed` the side's seed. Bad specs raise ValueError naming the
    problem; `what` (default: the spec) names the side in those messages."""
    what = what or text
    if text == "prior":
        if agent_run is None:
            raise ValueError("prior: the agent is not a run's checkpoint")
        return _load_run(agent_run, True, None, game, agent_kind, seed, what)
    if text.startswith("search:"):
        from agents.searcher import make_search_player
        rest = text[len("search:"):]
        first = rest.split(",", 1)[0].strip()
        if not first or "=" in first:
            rest = "heuristic," + rest
        elif first == "prior":
            if agent_run is None:
                raise ValueError("search:prior: the agent is not a run's checkpoint")
            rest = str(prior_checkpoint(agent_run)) + rest[len(first):]
        if "seed=" not in rest:
            rest += f",seed={seed}"
        player = make_search_player(rest, game)
        if player.blueprint is not None:
            _same_game(game, player.blueprint.game, what)
        return player
    if text.startswith("run:"):
        path, prior, kind = parse_run(text)
        return _load_run(path, prior, kind, game, agent_kind, seed, what)
    raise ValueError(f"not a side: {text!r}; sides are run:PATH[@prior][:POLICY], prior, search:SETTINGS")


def load_baseline(text, game, agent_kind="average", agent_run=None, seed=0):
    """--baseline's player: a side spec, or a bare run directory / checkpoint
    (as run:TEXT)."""
    if text in OPPONENTS:
        raise ValueError(f"{text} is a bot; a baseline is a run, prior or search: "
                         "(to see its own figures, add it to --opponent)")
    return load_side(text if is_side(text) else "run:" + text, game, agent_kind, agent_run, seed)


# --------------------------------------------------------------------------
# Matches

def play_sides(game, a, b, deal_ids, seed=0, bar=None, record=None):
    """Play deals `deal_ids` (deal d dealt from seed + d) twice each, `a` in
    seat 0 then in seat 1, `b` in the other seat. Returns (diffs, capped) as
    agents.matches.play_deals does, from a's seat. Each step, every game in
    progress makes one move of each side whose turn it is; a Policy's moves
    are one batched forward, a player with `.step(state)` moves game by game.
    `record` as in play_deals (probs at a's decisions)."""
    deal_ids = [int(d) for d in deal_ids]
    n = 2 * len(deal_ids)
    states = [game.new_initial_state(seed=seed + deal_ids[g // 2]) for g in range(n)]
    seat_a = np.arange(n) % 2
    active = list(range(n))
    while active:
        for side, player in enumerate((a, b)):
            rows = [g for g in active if not states[g].is_terminal()
                    and (states[g].current_player() == seat_a[g]) == (side == 0)]
            if not rows:
                continue
            movers = np.array([states[g].current_player() for g in rows])
            keep = [i for i, g in enumerate(rows) if record is not None and g < len(record)]
            if not isinstance(player, Policy):          # e.g. the search player: game by game
                for i, g in enumerate(rows):
                    x = int(player.step(states[g]))
                    if i in keep:
                        p = None
                        if side == 0:
                            from agents.replay import decision_probs
                            p = decision_probs(player, states[g], x)
                        record[g].append((int(movers[i]), x, p))
                    states[g].apply_action(x)
                continue
            info = np.stack([states[g].information_state_tensor(p) for g, p in zip(rows, movers)])
            mask = np.stack([states[g].legal_actions_mask() for g in rows])
            actions = player.actions(info, mask, movers)
            if keep:     # the probabilities behind the recorded games' moves (no RNG is used)
                probs = player.probs(info[keep], mask[keep], movers[keep]) if side == 0 else [None] * len(keep)
                for i, p in zip(keep, probs):
                    record[rows[i]].append((int(movers[i]), int(actions[i]), p))
            for g, x in zip(rows, actions):
                states[g].apply_action(int(x))
        done = [g for g in active if states[g].is_terminal()]
        if bar is not None and done:
            bar.update(len(done))
        active = [g for g in active if not states[g].is_terminal()]
    diffs = np.array([states[g].returns()[seat_a[g]] for g in range(n)], dtype=np.float64)
    capped = sum(bool(getattr(s, "capped", lambda: False)()) for s in states)
    return diffs, int(capped)


def head_to_head(game, a, b, games, seed=0, bar=None, record=None):
    """duplicate_match's statistics of `a` against `b` (each a Policy, a
    strategy net or a player with `.step(state)`) from a's seat."""
    if games < 1:
        raise ValueError("a match needs at least one game")
    diffs, capped = play_sides(game, _as_policy(a, seed), _as_policy(b, seed + 1), range((games + 1) // 2),
                               seed=seed, bar=bar, record=record)
    return match_summary(diffs, capped)


def deal_diffs(game, agent, opponent, games, seed=0, worlds=16, bar=None, record=None):
    """(diffs, capped) of `agent` against `opponent` (a bot's name or a
    player) on deals 0 .. games/2 - 1, seat 0 then seat 1 of each."""
    deals = range((games + 1) // 2)
    if isinstance(opponent, str):
        return play_deals(game, agent, opponent_of(opponent), deals, seed=seed, worlds=worlds, bar=bar,
                          record=record)
    return play_sides(game, agent, opponent, deals, seed=seed, bar=bar, record=record)


def paired(diffs_agent, diffs_baseline):
    """The agent's advantage over the baseline, deal by deal: both diffs as
    play_deals returns them (deal by deal, seat 0 then seat 1) over the same
    deals. Returns {"deals", "win_rate_diff", "margin_diff", each with _lo
    and _hi (95% over the deals), "per_deal_win_rate_diff",
    "per_deal_margin_diff"}: a deal's value is the mean over its two seats of
    the agent's minus the baseline's (wins: 1, a tie 0.5, a loss 0)."""
    a = np.asarray(diffs_agent, dtype=np.float64)
    b = np.asarray(diffs_baseline, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2 or len(a) % 2:
        raise ValueError(f"paired diffs need two equal, even lengths of at least 2; got {a.shape} and {b.shape}")

    def wins(d):
        return np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)).reshape(-1, 2).mean(axis=1)

    win = wins(a) - wins(b)
    margin = a.reshape(-1, 2).mean(axis=1) - b.reshape(-1, 2).mean(axis=1)
    w, w_lo, w_hi = mean_ci(win, -1.0, 1.0)
    m, m_lo, m_hi = mean_ci(margin)
    return {"deals": len(win), "win_rate_diff": w, "win_rate_diff_lo": w_lo, "win_rate_diff_hi": w_hi,
            "margin_diff": m, "margin_diff_lo": m_lo, "margin_diff_hi": m_hi,
            "per_deal_win_rate_diff": win.tolist(), "per_deal_margin_diff": margin.tolist()}


def compare(game, agent, baseline, opponent, games, seed=0, worlds=16):
    """The agent and the baseline each against `opponent` (a bot's name or a
    player) on the same deals: {"agent": match_summary, "baseline":
    match_summary, "paired": paired(...)}. The exploiter is each side's own
    best response; "random" deals both sides the same random stream."""
    agent, baseline = _as_policy(agent, seed), _as_policy(baseline, seed + 1)
    da, ca = deal_diffs(game, agent, opponent, games, seed=seed, worlds=worlds)
    db, cb = deal_diffs(game, baseline, opponent, games, seed=seed, worlds=worlds)
    return {"agent": match_summary(da, ca), "baseline": match_summary(db, cb), "paired": paired(da, db)}


def flat(label, r, prefix=""):
    """vs_LABEL_* metrics of a match_summary (FIELDS), with a prefix."""
    return {f"{prefix}vs_{label}_{k}": r[k] for k in FIELDS}


def comparison_metrics(label, c):
    """The flat metrics of compare(): the agent's vs_LABEL_*, the baseline's
    baseline_vs_LABEL_*, and diff_vs_LABEL_{win_rate,margin} with _lo/_hi and
    diff_vs_LABEL_deals."""
    p = c["paired"]
    out = {**flat(label, c["agent"]), **flat(label, c["baseline"], "baseline_")}
    for k in ("win_rate", "margin"):
        for s in ("", "_lo", "_hi"):
            out[f"diff_vs_{label}_{k}{s}"] = p[f"{k}_diff{s}"]
    out[f"diff_vs_{label}_deals"] = p["deals"]
    return out


# --------------------------------------------------------------------------
# Several matches, in one process or several

_WORKER = {}


def _worker_init(agent_spec, sides, baseline, kind, run, seed):
    import torch
    torch.set_num_threads(1)
    game, _, agent = agent_from_spec(agent_spec)
    players = {"agent": agent, **{o: load_side(o, game, kind, run, seed=seed + 1) for o in sides}}
    if baseline is not None:
        players["baseline"] = load_baseline(baseline, game, kind, run, seed=seed + 1)
    _WORKER.update(game=game, players=players)


def _worker_play(who, opponent, lo, hi, seed, worlds):
    game, players = _WORKER["game"], _WORKER["players"]
    player, opp = players[who], players.get(opponent, opponent)
    for i, p in enumerate((player, opp)):
        if isinstance(p, Policy):   # a sampled read-out: each chunk its own stream, whichever process plays it
            p.rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, lo, 0xC4A2 + i])
    before = {k: getattr(player, k, 0) for k in SEARCH_STATS}
    if isinstance(opp, str):
        diffs, capped = play_deals(game, player, opponent_of(opp), range(lo, hi), seed=seed, worlds=worlds)
    else:
        diffs, capped = play_sides(game, player, opp, range(lo, hi), seed=seed)
    return diffs, capped, {k: getattr(player, k, 0) - before[k] for k in SEARCH_STATS}


def run_matches(game, players, tasks, seed=0, worlds=16, jobs=1, init=None, progress=False):
    """{(who, opponent): (diffs, capped)} for each task (who, opponent,
    games): players[who] against players[opponent], or against the bot of
    that name, on deals 0 .. games/2 - 1 (deal_diffs). With `jobs` > 1 the
    deals of all tasks are split into chunks played by that many processes,
    each rebuilding the players from `init` = (agent spec as in
    agents.players.agent_from_spec, side specs, baseline spec or None,
    agent read-out, agent run, seed), players "agent", "baseline" and the
    side specs; deterministic players give the same diffs as one process."""
    import math
    tasks = [(who, opp, (n + 1) // 2) for who, opp, n in tasks]
    out = {(who, opp): [np.zeros(2 * deals), 0] for who, opp, deals in tasks}
    bar = None
    if progress:
        from agents.matches import _match_bar
        bar = _match_bar(True, sum(2 * d for _, _, d in tasks), players.get("agent"), "head to head")
    try:
        if jobs <= 1:
            for who, opp, deals in tasks:
                out[who, opp] = deal_diffs(game, players[who], players.get(opp, opp), 2 * deals, seed=seed,
                                           worlds=worlds, bar=bar)
            return {k: (v[0], int(v[1])) for k, v in out.items()}
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool
        chunks = []
        for who, opp, deals in tasks:
            size = max(1, math.ceil(deals / (4 * jobs)))
            chunks += [(who, opp, lo, min(deals, lo + size)) for lo in range(0, deals, size)]
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(jobs, len(chunks)), mp_context=ctx, initializer=_worker_init,
                                 initargs=init) as ex:
            futures = {ex.submit(_worker_play, who, opp, lo, hi, seed, worlds): (who, opp, lo, hi)
                       for who, opp, lo, hi in chunks}
            for f in as_completed(futures):
                who, opp, lo, hi = futures[f]
                try:
                    d, c, stats = f.result()
                except BrokenProcessPool as e:
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise RuntimeError(f"a worker process died before deals {seed + lo}..{seed + hi - 1} of "
                                       f"{who} against {opp} were finished: {e}; no result is reported") from None
                out[who, opp][0][2 * lo:2 * hi] = d
                out[who, opp][1] += c
                for k, v in stats.items():      # the search's decisions and times, for ms_per_decision
                    if hasattr(players[who], k):
                        setattr(players[who], k, getattr(players[who], k) + v)
                if bar is not None:
                    bar.update(2 * (hi - lo))
        return {k: (v[0], int(v[1])) for k, v in out.items()}
    finally:
        if bar is not None:
            bar.close()


# --------------------------------------------------------------------------
# In-run: the policy against the run's own prior

def vs_prior(run_dir, game, policy, games, seed=0):
    """vs_prior_* metrics (FIELDS) of `policy` (an AveragePolicy or
    CurrentPolicy of the run's nets) head to head against the same read-out
    of the run's warm-start prior; {} unless the game is Lost Cities and the
    run has a prior (checkpoints/prior.pt)."""
    path = prior_checkpoint(run_dir)
    if game.name != "lost_cities" or not path.exists() or games < 1:
        return {}
    prior = policy_from_checkpoint(load_checkpoint(path), kind_of(policy), seed=seed + 1)
    return flat("prior", head_to_head(game, policy, prior, games, seed=seed))
