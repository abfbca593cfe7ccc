"""Warm start from the game's own rule-based policy (Lost Cities' heuristic),
or from a lookahead that uses it as its playout policy.

Before iteration 1, the decisions of `games` self-play games go into the
memories as samples of a virtual iteration 0 whose weight is `weight` (a
real sample of iteration t weighs t under linear CFR), or are kept apart as
a lasting prior (PriorMix):
  - advantage rows of the player to move: +`advantage` for the teacher's
    move and -`advantage` for every other legal move, so regret matching on
    a net that fits them plays the teacher;
  - strategy rows: the teacher's move with probability 1.
The teacher is the heuristic itself (`worlds` 0) or a one-step lookahead:
every legal move is played in K redealt worlds of what the player cannot
see and played out by the heuristic for both sides, and the best mean wins
(agents.searcher's race). That is a depth-1 cutoff's regret averaged over K
worlds instead of the one the traversal uses: a policy improvement step on
the heuristic. A net fitted to many such noisy labels averages them over
similar states and can play better than the 64-world teacher itself
(docs/lost_cities_strength.md).
The nets are then trained on those rows, so the first traversals already
play the teacher, and CFR's sampled regrets take over as they accumulate
(or, with a lasting prior, make up the rest of every batch).

A wall-clock budget (train.warm_start_budget_s) can end the labelling
early: the games finished by then are the rows, so a slower box gets fewer
games in the same minutes instead of more minutes.

Expert iteration (train.exit_rounds, trainer.loop) reuses the same
labelling with the agent in the teacher's place: the agent plays, and a
search over its most likely moves (heuristic playouts) labels each decision;
the rows join the prior's and fresh nets train on the pool.

The heuristic is used here as a starting point and as the playout policy
only; nothing in training treats it as the opponent to beat.
"""
import numpy as np


def teacher_name(tr):
    """The warm start's teacher in words, from the train config `tr`."""
    return ((f"a {tr.warm_start_worlds}-world lookahead" if tr.warm_start_worlds else "the heuristic")
            + (f", {tr.warm_start_explore:g} random moves" if tr.warm_start_explore else ""))


def _play(name, params, seeds, worlds, explore, progress=None, deadline=None, blueprint=None, topk=0):
    """Self-play of the deals `seeds`: ({player: (info uint8 [n, T], mask
    uint8 [n, A], label int64 [n], outcome float32 [n], game int64 [n],
    value info uint8 [m, T], value points float32 [m], value game int64
    [m], value kind int8 [m])}, games finished): a row's outcome is its
    game's final return for the player to move (state.returns()[p], raw
    points), its game the deal seed. The value columns are the value net's
    further rows of that player (trainer/value.py): kind OBSERVER, its view
    at the other player's decisions, with its own final return; kind SEARCH
    (a lookahead teacher only), its view after the move chosen and after
    SEARCH_OTHERS other candidates drawn at random, with the search's mean
    final score difference for that candidate (the candidate's value under
    heuristic play, a label of every move the search weighed, not only of
    those the teacher plays). A game's exploration
    draws are seeded by its deal, the teacher's by what it sees at each
    decision (SearchPlayer.decision_rng), so any split of the deals over
    processes gives the same rows. deadline: a time.time() after which no
    game starts and the game in progress is dropped, so the games kept are
    a prefix of `seeds`, each whole.
    blueprint: an expert-iteration round's agent, {"net_spec", "state"} of a
    strategy net: the agent plays the games (its most likely move, or a
    random one at the `explore` rate) and the search over it labels every
    decision (SearchPlayer with the agent as blueprint: its `topk` most
    likely moves, `worlds` worlds of heuristic playouts)."""
    import time
    import engine
    game = engine.load_game(name, **params)
    teacher = agent = None
    if blueprint is not None:
        from agents.searcher import SearchPlayer
        agent = _blueprint_policy(blueprint)
        teacher = SearchPlayer(game, blueprint=agent, worlds=worlds, topk=topk)
    elif worlds > 0:
        from agents.searcher import SearchPlayer
        teacher = SearchPlayer(game, worlds=worlds)
    T, A = game.information_state_tensor_size(), game.num_distinct_actions()
    unseen = _unseen_outcome_actions(game)
    info, mask, act = {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}
    outcome, deal = {0: [], 1: []}, {0: [], 1: []}
    vinfo, vpoints, vgame, vkind = {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}
    finished = 0
    for seed in seeds:
        if deadline is not None and time.time() >= deadline:
            break
        key = int(seed) & 0xFFFFFFFFFFFF
        rng = np.random.default_rng([key, 0x7EAC])
        pick = np.random.default_rng([key, 0x5EA1])        # which candidates' values become rows
        state = game.new_initial_state(seed=seed)
        rows = {0: [], 1: []}
        vrows = {0: [], 1: []}          # (info, search value or None for the game's outcome, kind)
        while not state.is_terminal():
            if deadline is not None and time.time() >= deadline:
                break
            p = state.current_player()
            m = state.legal_actions_mask()
            if teacher is not None:
                teacher.last_values = None          # a forced move is not searched: no values of its own
            a = game.heuristic_action(state) if teacher is None else teacher.step(state)
            rows[p].append((state.information_state_tensor(p), m, a))
            vrows[1 - p].append((state.information_state_tensor(1 - p), None, OBSERVER))
            if teacher is not None and teacher.last_values is not None:
                _search_value_rows(state, p, a, teacher.last_values, unseen, pick, vrows[p])
            if agent is not None:
                a = agent.step(state)               # the agent plays its own games; the search only labels them
            if explore > 0 and rng.random() < explore:
                a = int(rng.choice(np.flatnonzero(m)))
            state.apply_action(a)
        if not state.is_terminal():
            break                       # the budget ran out mid-game: the game is not kept
        returns = state.returns()
        for p in (0, 1):
            for i, m, a in rows[p]:
                info[p].append(i)
                mask[p].append(m)
                act[p].append(a)
            outcome[p] += [returns[p]] * len(rows[p])
            deal[p] += [int(seed)] * len(rows[p])
            for i, v, kind in vrows[p]:
                vinfo[p].append(i)
                vpoints[p].append(returns[p] if v is None else v)
                vkind[p].append(kind)
            vgame[p] += [int(seed)] * len(vrows[p])
        finished += 1
        if progress is not None:
            progress(1)
    out = {}
    for p in (0, 1):
        n, k = len(act[p]), len(vpoints[p])
        out[p] = (_exact_u8(info[p], n, T), np.asarray(mask[p], dtype=np.uint8).reshape(n, A),
                  np.asarray(act[p], dtype=np.int64), np.asarray(outcome[p], dtype=np.float32),
                  np.asarray(deal[p], dtype=np.int64), _exact_u8(vinfo[p], k, T),
                  np.asarray(vpoints[p], dtype=np.float32), np.asarray(vgame[p], dtype=np.int64),
                  np.asarray(vkind[p], dtype=np.int8))
    return out, finished


def _blueprint_policy(blueprint):
    """The greedy strategy-net policy of an expert-iteration blueprint
    ({"net_spec", "state"}), on the CPU."""
    from agents.checkpoint import build_net
    from agents.policy import AveragePolicy
    net = build_net({"net_spec": blueprint["net_spec"], "nets": {"strategy": blueprint["state"]}}, "strategy")
    return AveragePolicy(net, greedy=True)


def blueprint_of(net):
    """An expert-iteration blueprint of a strategy net, for heuristic_rows:
    its spec and a CPU copy of its weights, which pickle to the labelling
    processes."""
    return {"net_spec": net.spec(), "state": {n: v.detach().cpu().clone() for n, v in net.state_dict().items()}}


OBSERVER, SEARCH = 0, 1     # kinds of the further value rows (_play)
SEARCH_OTHERS = 2           # candidates besides the move chosen whose search values become value rows


def _exact_u8(rows, n, T):
    i = np.asarray(rows, dtype=np.float32).reshape(n, T)
    u = i.astype(np.uint8)
    if not np.array_equal(u, i):
        raise ValueError("warm start: an info-state entry is not an exact uint8")
    return u


def _unseen_outcome_actions(game):
    """Actions whose result the player cannot know before taking them (Lost
    Cities: the draw from the deck, whose card the search's worlds vary):
    the view after one is no label for the search's mean over its worlds."""
    if game.name == "lost_cities":
        return {game.num_distinct_actions() - int(game.params["colours"]) - 1}
    return set()


def _search_value_rows(state, p, chosen, last_values, unseen, pick, out):
    """Append to `out` (info, value, SEARCH) for the move `chosen` and up to
    SEARCH_OTHERS other candidates drawn by `pick`: p's view after the
    candidate (applied and undone in `state`), valued by the search's mean
    final score difference over the worlds it played it in."""
    cands, means, seen = last_values
    ok = [j for j, c in enumerate(cands) if seen[j] > 0 and np.isfinite(means[j]) and c not in unseen]
    if not ok:
        return
    first = [j for j in ok if cands[j] == chosen]
    others = [j for j in ok if cands[j] != chosen]
    if len(others) > SEARCH_OTHERS:
        others = [others[j] for j in sorted(pick.choice(len(others), SEARCH_OTHERS, replace=False))]
    for j in first + others:
        state.apply_action(cands[j])
        out.append((state.information_state_tensor(p), float(means[j]), SEARCH))
        state.undo_action()


_COLUMNS = ("info", "mask", "act", "outcome", "game", "vinfo", "vpoints", "vgame", "vkind")   # _play's, in order


def _play_chunk(args):
    if args[7] is not None:
        import torch
        torch.set_num_threads(1)        # one labelling process a core: the blueprint's forwards stay on it
    return _play(*args)


def _read_cache(path, meta):
    """(parts, deals) saved at `path` if it holds rows made with `meta`, else None."""
    import json
    import zipfile
    try:
        with np.load(path) as z:
            if json.loads(str(z["meta"])) != meta:
                return None
            deals = ([int(d) for d in z["deals"]] if "deals" in z.files
                     else list(range(meta["seed"], meta["seed"] + meta["games"])))
            return [{p: tuple(z[f"{name}{p}"] for name in _COLUMNS) for p in (0, 1)}], deals
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def _write_cache(path, meta, parts, deals):
    """Save the labelled decisions (not the targets, which follow from them),
    their games' outcomes and deals, and the deals of the games, durably (trainer.checkpoint.write_durably):
    a crash mid-write leaves no half file under `path`, and a failed write
    raises CheckpointWriteError."""
    import json
    from trainer.checkpoint import write_durably
    arrays = {"meta": np.array(json.dumps(meta)), "deals": np.asarray(deals, dtype=np.int64)}
    for p in (0, 1):
        for i, name in enumerate(_COLUMNS):
            arrays[f"{name}{p}"] = np.concatenate([part[p][i] for part in parts])
    write_durably(path, lambda f: np.savez_compressed(f, **arrays))


def _play_parallel(name, params, seeds, worlds, explore, procs, progress, deadline, blueprint=None, topk=0):
    """_play's chunks of `seeds` over `procs` spawned processes: (the chunks'
    parts in seed order, the deals of the games finished in that order).
    Chunks are handed out a few at a time, and none after the deadline."""
    import multiprocessing as mp
    import time
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    games = len(seeds)
    # small chunks under a budget: a chunk's games are a prefix of it, and the processes stay busy to the end
    size = max(1, min(25 if deadline is None else 4, games // procs))
    chunks = [seeds[i:i + size] for i in range(0, games, size)]
    parts = [None] * len(chunks)
    kept = [[] for _ in chunks]
    # spawn: the trainer holds torch's threads, which a fork would copy in a bad state
    with ProcessPoolExecutor(procs, mp_context=mp.get_context("spawn")) as pool:
        pending, todo = {}, iter(enumerate(chunks))
        while True:
            while len(pending) < 2 * procs and (deadline is None or time.time() < deadline):
                nxt = next(todo, None)
                if nxt is None:
                    break
                k, chunk = nxt
                pending[pool.submit(_play_chunk, (name, params, chunk, worlds, explore, None, deadline,
                                                  blueprint, topk))] = k
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                k = pending.pop(f)
                parts[k], n = f.result()
                kept[k] = chunks[k][:n]
                if progress is not None and n:
                    progress(n)
    return [part for part in parts if part is not None], [d for k in kept for d in k]


def heuristic_rows(game, games, seed, advantage, worlds=0, explore=0.0, progress=None, procs=1,
                   cache=None, budget_s=0.0, stats=None, blueprint=None, topk=0, round=0):
    """({player: advantage rows}, strategy rows) of `games` self-play games
    from deals seed, seed + 1, ... Rows are dicts of info (uint8), target
    (float32), mask (uint8) and weight (float32, all 1).

    worlds 0: every decision is labelled with the heuristic's move, and the
    heuristic plays it. worlds K > 0 (Lost Cities): labelled with the move of
    a one-step lookahead over K redealt worlds with heuristic playouts
    (agents.searcher.SearchPlayer, the race schedule), the regret target of a
    depth-1 cutoff averaged over K worlds instead of one; the lookahead plays
    it, so the rows follow the improved policy's own games. explore: the
    share of moves played uniformly at random instead (still labelled with
    the teacher's move), so the rows also cover states off the teacher's
    path. procs > 1: the games are shared out over that many processes (the
    rows do not depend on it). progress: called with the number of games
    just finished. cache: a file path; rows saved there with the same game,
    deals and teacher are read back instead of played again (a resumed run
    need not repeat a lookahead warm start), and rows played are saved.

    budget_s > 0: a wall-clock budget; no game starts after it is spent and
    a game still being played then is dropped, so the rows are those of the
    games finished in time (at most `games`). Each game's rows are still the
    same whatever the process count; how many games fit is the machine's.
    stats: a dict that gets "games" (games labelled), "deals" (their deal
    seeds, in the rows' order), "seconds" (to label or read them back), "budget_hit" (the budget stopped
    the labelling) and "cached" (read back).

    The advantage rows also carry, for the value net (trainer.value), the
    outcome (float32: the row's game's final return for its player, raw
    points) and game (int64: the game's deal seed) of every row, and the
    player's further value rows (see _play), in columns of their own length:
    value_info (uint8), value_points (float32, raw points), value_game
    (int64) and value_kind (int8: OBSERVER or SEARCH)."""
    import math
    import time
    if not hasattr(game, "heuristic_action"):
        raise ValueError(f"{game.name} has no rule-based policy to warm-start from")
    if blueprint is not None and (worlds < 1 or topk < 0 or round < 1):
        raise ValueError(f"an expert-iteration round needs worlds >= 1, topk >= 0 and round >= 1, got {worlds}, "
                         f"{topk} and {round}")
    if worlds < 0 or not 0.0 <= explore < 1.0:
        raise ValueError(f"worlds must be >= 0 and explore in [0, 1), got {worlds} and {explore}")
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if not (math.isfinite(budget_s) and budget_s >= 0):
        raise ValueError(f"the warm start's budget must be a number of seconds >= 0 (0: none), got {budget_s}")
    t0 = time.monotonic()
    seeds = list(range(seed, seed + games))
    params = dict(game.params)
    # format 2: the lookahead's worlds come from a stream per decision (SearchPlayer.decision_rng);
    # format 1's came from one stream per game, so its rows are not what this code plays.
    # format 3: rows also carry their game's outcome and deal (the value net's targets);
    # format 4: and the further value rows (the observer's view, the search's values)
    meta = {"game": game.name, "params": params, "games": int(games), "seed": int(seed),
            "worlds": int(worlds), "explore": float(explore), "format": 4}
    if budget_s > 0:
        meta["budget_s"] = float(budget_s)      # the games a budget let through are a run's own
    if blueprint is not None:
        meta.update(exit_round=int(round), topk=int(topk))
    deadline = time.time() + budget_s if budget_s > 0 else None
    found = _read_cache(cache, meta) if cache is not None else None
    cached = found is not None
    if cached:
        parts, deals = found
        if progress is not None:
            progress(len(deals))
    elif procs == 1 or games < 2:
        part, played = _play(game.name, params, seeds, worlds, explore, progress, deadline, blueprint, topk)
        parts, deals = [part], seeds[:played]
    else:
        parts, deals = _play_parallel(game.name, params, seeds, worlds, explore, procs, progress, deadline,
                                      blueprint, topk)
    played = len(deals)
    seconds = time.monotonic() - t0
    if played == 0 and games > 0:
        raise RuntimeError(f"the warm start's budget of {budget_s:g} s ran out before one game was labelled; "
                           "raise train.warm_start_budget_s")
    if cache is not None and not cached:
        _write_cache(cache, meta, parts, deals)
    if stats is not None:
        stats.update(games=played, deals=deals, seconds=seconds, cached=cached,
                     budget_hit=not cached and played < games)
    return _rows(parts, advantage)


def read_rows(path, advantage):
    """(adv, strategy rows, meta) of the labelled games a run keeps at `path`
    (RUN/warm_start_rows.npz, RUN/exit_rows_R.npz), the rows as
    heuristic_rows returns them, whoever labelled them; meta says how they
    were labelled."""
    import json
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        if meta.get("format") != 4:
            raise ValueError(f"{path}: labelled rows of format {meta.get('format')!r}, not 4")
        part = {p: tuple(z[f"{name}{p}"] for name in _COLUMNS) for p in (0, 1)}
    adv, strategy = _rows([part], advantage)
    return adv, strategy, meta


def _rows(parts, advantage):
    """heuristic_rows' (adv, strategy) rows of _play's parts."""
    adv = {}
    strat = []
    for p in (0, 1):
        info = np.concatenate([part[p][0] for part in parts])
        m = np.concatenate([part[p][1] for part in parts])
        act = np.concatenate([part[p][2] for part in parts])
        outcome = np.concatenate([part[p][3] for part in parts])
        deal = np.concatenate([part[p][4] for part in parts])
        value = {name: np.concatenate([part[p][i] for part in parts]) for i, name in
                 ((5, "info"), (6, "points"), (7, "game"), (8, "kind"))}
        n = len(act)
        onehot = np.zeros((n, m.shape[1]), np.float32)
        onehot[np.arange(n), act] = 1.0
        target = np.where(m > 0, np.where(onehot > 0, advantage, -advantage), 0.0).astype(np.float32)
        rows = {"info": info, "mask": m, "weight": np.ones(n, np.float32)}
        adv[p] = {**rows, "target": target, "outcome": outcome, "game": deal,
                  **{"value_" + name: v for name, v in value.items()}}
        strat.append({**rows, "target": onehot})
    strategy = {k: np.concatenate([s[k] for s in strat]) for k in strat[0]}
    return adv, strategy


def exit_split_seed(cfg, r):
    """The seed of expert-iteration round r's held-out games in a run of config `cfg`."""
    return cfg.run.seed * 7919 + r


def hold_out_games(adv, strat, share, seed):
    """(adv, strat, held-out strategy rows, held-out games): a `share` of
    the games of heuristic_rows' rows held out whole
    (trainer.value.split_by_game), every column of theirs out of adv and
    strat, the value rows included."""
    from trainer.value import split_by_game
    games_of = np.concatenate([adv[0]["game"], adv[1]["game"]])     # strategy rows: player 0's, then player 1's
    _, held = split_by_game({"game": games_of}, share, seed=seed)
    held = np.unique(held["game"])
    test = _keep_games({**strat, "game": games_of}, held, keep=True)
    strat = _keep_games({**strat, "game": games_of}, held, keep=False)
    del strat["game"], test["game"]
    return {p: _keep_games(adv[p], held, keep=False) for p in (0, 1)}, strat, test, held


def _keep_games(rows, games, keep):
    """Rows of (keep True) or without (keep False) the games `games`: the
    columns as long as rows["game"] by it, the value_* columns (their own
    length) by value_game."""
    sel = np.isin(rows["game"], games)
    vsel = np.isin(rows["value_game"], games) if "value_game" in rows else None
    return {k: v[(vsel if k.startswith("value_") else sel) == keep] for k, v in rows.items()}


class PriorMix:
    """Minibatches of which a fixed share comes from the warm-start rows
    (`prior`) for the whole run, the rest from `memory` (the run's own
    samples). A prior row weighs as much as the memory rows of its batch
    on average, so `share` is the prior's share of every batch's loss: the
    nets keep the heuristic as a prior that CFR's regrets must outweigh, in
    the manner of a magnet policy, instead of a start that fades. While
    `memory` is empty every row is the prior's (the warm start's
    pretraining); share 0 then leaves the prior out once it has rows."""

    def __init__(self, memory, prior, share):
        if not 0.0 <= share < 1.0:
            raise ValueError(f"the prior's share must be in [0, 1), got {share}")
        self.memory = memory
        self.prior = prior
        self.share = float(share)
        self.prior_rows = len(prior["weight"])

    @property
    def size(self):
        return self.memory.size + self.prior_rows

    def sample(self, batch_size, rng):
        k = batch_size if self.memory.size == 0 else int(round(batch_size * self.share))
        idx = rng.integers(0, self.prior_rows, size=k)
        if k == 0:
            return self.memory.sample(batch_size, rng)
        part = {name: self.prior[name][idx] for name in ("info", "target", "mask")}
        if k == batch_size:
            part["weight"] = np.ones(k, np.float32)
            return part
        own = self.memory.sample(batch_size - k, rng)
        part["weight"] = np.full(k, own["weight"].mean(), np.float32)
        return {name: np.concatenate([part[name], own[name]]) for name in ("info", "target", "mask", "weight")}


def save_prior(run_dir, cfg, nets, value=None):
    """Keep the nets at the end of the warm start as the run's prior,
    RUN_DIR/checkpoints/prior.pt (agents.checkpoint.prior_checkpoint), which
    agents.evaluate reads as the `prior` opponent or baseline. Written
    once, when the warm start pretrains; `latest` is left alone, and a
    resumed run keeps the file as it is. value: the value net
    (trainer/value.py), if the run has one. Returns its path."""
    from agents.checkpoint import prior_checkpoint
    return save_playing_checkpoint(prior_checkpoint(run_dir), cfg, nets, 0, value, prior=True)


def save_playing_checkpoint(path, cfg, nets, iteration, value=None, **marks):
    """A checkpoint for playing, not resuming: the config, the nets and their
    spec (no optimizers, memories or RNG), written durably
    (trainer.checkpoint.write_durably) at `path`. `value` (the value net)
    goes under "value_net" with its "value_spec"; `marks` are stored as they
    are (prior=True for the warm-start prior). Returns the path."""
    import torch

    from agents.checkpoint import FORMAT
    from trainer.checkpoint import write_durably
    from trainer.config import config_to_dict
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "iteration": int(iteration), **marks, "config": config_to_dict(cfg),
               "nets": {k: {n: v.detach().cpu().clone() for n, v in net.state_dict().items()}
                        for k, net in nets.items()},
               "net_spec": nets["strategy"].spec()}
    if value is not None:
        payload["value_net"] = {n: v.detach().cpu().clone() for n, v in value.state_dict().items()}
        payload["value_spec"] = value.spec()
    write_durably(path, lambda f: torch.save(payload, f))
    return path
