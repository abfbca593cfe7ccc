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

Who labels: in a training run, the workers. The deals go out as label
jobs (trainer/label_stage.py: a few deals each, kind "label" of the job
protocol, docs/protocol.md), any worker takes them, local or remote, plays
and labels each game with agents.labels and streams its rows back; the job
server commits a job's rows when the job is done and hands the job of a dead
worker out again, so each game is labelled whole by one worker and counted
once (a "label" line per job in RUN/jobs.jsonl). Tools and tests that call
heuristic_rows without a label stage play the same code in their own
process. Either way the rows are ordered by deal seed and do not depend on
who played which game.

A wall-clock budget (train.warm_start_budget_s) can end the labelling
early: no job is handed out and no game started after it, and the game a
worker is playing then is dropped. The rows are those of the whole games
finished in time (on the workers, a prefix of each job's deals), so a
slower box gets fewer games in the same minutes instead of more minutes.

Expert iteration (train.exit_rounds, trainer.loop) reuses the same
labelling with the agent in the teacher's place: the agent plays, and a
search over its most likely moves (heuristic playouts) labels each decision;
the rows join the prior's and fresh nets train on the pool.

The heuristic is used here as a starting point and as the playout policy
only; nothing in training treats it as the opponent to beat.
"""
import numpy as np

from agents.labels import OBSERVER, SEARCH, SEARCH_OTHERS  # noqa: F401 (the value rows' kinds, re-exported)
from trainer.seeds import exit_heldout_seed


def teacher_name(tr):
    """The warm start's teacher in words, from the train config `tr`."""
    return ((f"a {tr.warm_start_worlds}-world lookahead" if tr.warm_start_worlds else "the heuristic")
            + (f", {tr.warm_start_explore:g} random moves" if tr.warm_start_explore else ""))


def blueprint_of(net):
    """An expert-iteration blueprint of a strategy net, for heuristic_rows:
    its spec and a CPU copy of its weights (a label job sends them to the
    workers as raw float32 arrays, trainer.label_stage)."""
    return {"net_spec": net.spec(), "state": {n: v.detach().cpu().clone() for n, v in net.state_dict().items()}}


_COLUMNS = ("info", "mask", "act", "outcome", "game", "vinfo", "vpoints", "vgame", "vkind")   # a part's, in order


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


def heuristic_rows(game, games, seed, advantage, worlds=0, explore=0.0, progress=None, cache=None, budget_s=0.0,
                   stats=None, blueprint=None, topk=0, round=0, stage=None):
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
    path. blueprint (blueprint_of; with topk and round >= 1): an
    expert-iteration round, whose agent plays the games while a search over
    its topk most likely moves labels them (agents.labels.Labeller).
    progress: called with the number of games just finished. cache: a file
    path; rows saved there with the same game, deals and teacher are read
    back instead of played again (a resumed run need not repeat a lookahead
    warm start), and rows played are saved.

    stage: who plays the games: None, this process (tools and tests), or a
    trainer.label_stage.LabelStage, whose label jobs the workers play (the
    trainer). Both play each game with agents.labels, so the rows are the
    same either way and whatever the number of workers.

    budget_s > 0: a wall-clock budget; no game starts after it is spent and
    a game still being played then is dropped, so the rows are those of the
    whole games finished in time (at most `games`; on the workers, each job's
    games finished in time, a prefix of its deals). Each game's rows are the
    same as without a budget; how many games fit is the machine's.
    stats: a dict that gets "games" (games labelled), "deals" (their deal
    seeds, ascending: the rows' order), "seconds" (to label or read them
    back), "budget_hit" (the budget stopped the labelling) and "cached"
    (read back).

    The advantage rows also carry the value net's columns (_rows says which)."""
    import time
    _check_args(game, worlds, explore, budget_s, blueprint, topk, round)
    t0 = time.monotonic()
    seeds = list(range(seed, seed + games))
    meta = _cache_meta(game, games, seed, worlds, explore, budget_s, blueprint, topk, round)
    deadline = time.time() + budget_s if budget_s > 0 else None
    parts, deals, cached = _read_or_play(game, seeds, cache, meta, stage, worlds, explore, deadline, progress,
                                         blueprint, topk, round)
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


def _read_or_play(game, seeds, cache, meta, stage, worlds, explore, deadline, progress, blueprint, topk, round):
    """(parts, deals, cached): the rows kept in `cache` if they were made
    with `meta`, else the deals `seeds` played by `stage` (None: here)."""
    found = _read_cache(cache, meta) if cache is not None else None
    if found is not None:
        parts, deals = found
        if progress is not None:
            progress(len(deals))
        return parts, deals, True
    play = _play_here if stage is None else stage.play
    parts, deals = play(game, seeds, worlds, explore, deadline, progress, blueprint, topk, round)
    return parts, deals, False


def _check_args(game, worlds, explore, budget_s, blueprint, topk, round):
    """heuristic_rows' argument checks: a ValueError for what it cannot label."""
    import math
    if not hasattr(game, "heuristic_action"):
        raise ValueError(f"{game.name} has no rule-based policy to warm-start from")
    if blueprint is not None and (worlds < 1 or topk < 0 or round < 1):
        raise ValueError(f"an expert-iteration round needs worlds >= 1, topk >= 0 and round >= 1, got {worlds}, "
                         f"{topk} and {round}")
    if worlds < 0 or not 0.0 <= explore < 1.0:
        raise ValueError(f"worlds must be >= 0 and explore in [0, 1), got {worlds} and {explore}")
    if not (math.isfinite(budget_s) and budget_s >= 0):
        raise ValueError(f"the warm start's budget must be a number of seconds >= 0 (0: none), got {budget_s}")


def _cache_meta(game, games, seed, worlds, explore, budget_s, blueprint, topk, round):
    """What a cache of heuristic_rows' rows must have been made with to be
    read back: the game, the deals, the teacher, the budget and the
    expert-iteration round, and the rows' format."""
    # format 2: the lookahead's worlds come from a stream per decision (SearchPlayer.decision_rng);
    # format 1's came from one stream per game, so its rows are not what this code plays.
    # format 3: rows also carry their game's outcome and deal (the value net's targets);
    # format 4: and the further value rows (the observer's view, the search's values)
    meta = {"game": game.name, "params": dict(game.params), "games": int(games), "seed": int(seed),
            "worlds": int(worlds), "explore": float(explore), "format": 4}
    if budget_s > 0:
        meta["budget_s"] = float(budget_s)      # the games a budget let through are a run's own
    if blueprint is not None:
        meta.update(exit_round=int(round), topk=int(topk))
    return meta


def _play_here(game, seeds, worlds, explore, deadline, progress, blueprint, topk, round):
    """heuristic_rows' games played in this process, in deal order: ([part],
    the deals finished: a prefix of `seeds`). The label stage's play
    (trainer.label_stage) takes the same arguments."""
    from agents.labels import Labeller, blueprint_policy, label_deals, parts_of_chunks
    agent = None if blueprint is None else blueprint_policy(blueprint["net_spec"], blueprint["state"])
    labeller = Labeller(game, worlds, explore, agent, topk)
    rows, values = [], []
    done = label_deals(labeller, seeds, lambda r, v: (rows.append(r), values.append(v)), deadline,
                       on_game=None if progress is None else lambda: progress(1))
    return [parts_of_chunks(rows, values, labeller.width, labeller.actions)], seeds[:done]


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
    """heuristic_rows' (adv, strategy) rows of its parts (_play_here's, the label stage's, a cache's).

    The advantage rows also carry, for the value net (trainer.value), the
    outcome (float32: the row's game's final return for its player, raw
    points) and game (int64: the game's deal seed) of every row, and the
    player's further value rows (agents.labels), in columns of their own
    length: value_info (uint8), value_points (float32, raw points),
    value_game (int64) and value_kind (int8: OBSERVER or SEARCH)."""
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
    """The seed of expert-iteration round r's held-out games in a run of config `cfg` (trainer.seeds)."""
    return exit_heldout_seed(cfg.run.seed, r)


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
