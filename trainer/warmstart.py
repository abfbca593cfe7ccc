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
(trainer.search's race). That is a depth-1 cutoff's regret averaged over K
worlds instead of the one the traversal uses: a policy improvement step on
the heuristic. A net fitted to many such noisy labels averages them over
similar states and can play better than the 64-world teacher itself
(docs/lost_cities_strength.md).
The nets are then trained on those rows, so the first traversals already
play the teacher, and CFR's sampled regrets take over as they accumulate
(or, with a lasting prior, make up the rest of every batch).

The heuristic is used here as a starting point and as the playout policy
only; nothing in training treats it as the opponent to beat.
"""
import numpy as np


def _play(name, params, seeds, worlds, explore, progress=None):
    """Self-play of the deals `seeds`: {player: (info uint8 [n, T], mask
    uint8 [n, A], label int64 [n])}. A game's exploration draws are seeded
    by its deal, the teacher's by what it sees at each decision
    (SearchPlayer.decision_rng), so any split of the deals over processes
    gives the same rows."""
    import engine
    game = engine.load_game(name, **params)
    teacher = None
    if worlds > 0:
        from trainer.search import SearchPlayer
        teacher = SearchPlayer(game, worlds=worlds)
    T, A = game.information_state_tensor_size(), game.num_distinct_actions()
    info, mask, act = {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}
    for seed in seeds:
        key = int(seed) & 0xFFFFFFFFFFFF
        rng = np.random.default_rng([key, 0x7EAC])
        state = game.new_initial_state(seed=seed)
        while not state.is_terminal():
            p = state.current_player()
            m = state.legal_actions_mask()
            a = game.heuristic_action(state) if teacher is None else teacher.step(state)
            info[p].append(state.information_state_tensor(p))
            mask[p].append(m)
            act[p].append(a)
            if explore > 0 and rng.random() < explore:
                a = int(rng.choice(np.flatnonzero(m)))
            state.apply_action(a)
        if progress is not None:
            progress(1)
    out = {}
    for p in (0, 1):
        n = len(act[p])
        i = np.asarray(info[p], dtype=np.float32).reshape(n, T)
        u = i.astype(np.uint8)
        if not np.array_equal(u, i):
            raise ValueError("warm start: an info-state entry is not an exact uint8")
        out[p] = (u, np.asarray(mask[p], dtype=np.uint8).reshape(n, A), np.asarray(act[p], dtype=np.int64))
    return out


def _play_chunk(args):
    return _play(*args)


def _read_cache(path, meta):
    """The parts saved at `path` if it holds rows made with `meta`, else None."""
    import json
    import zipfile
    try:
        with np.load(path) as z:
            if json.loads(str(z["meta"])) != meta:
                return None
            return [{p: (z[f"info{p}"], z[f"mask{p}"], z[f"act{p}"]) for p in (0, 1)}]
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def _write_cache(path, meta, parts):
    """Save the labelled decisions (not the targets, which follow from them)
    durably (trainer.checkpoint.write_durably): a crash mid-write leaves no
    half file under `path`, and a failed write raises CheckpointWriteError."""
    import json
    from trainer.checkpoint import write_durably
    arrays = {"meta": np.array(json.dumps(meta))}
    for p in (0, 1):
        for i, name in enumerate(("info", "mask", "act")):
            arrays[f"{name}{p}"] = np.concatenate([part[p][i] for part in parts])
    write_durably(path, lambda f: np.savez_compressed(f, **arrays))


def heuristic_rows(game, games, seed, advantage, worlds=0, explore=0.0, progress=None, procs=1,
                   cache=None):
    """({player: advantage rows}, strategy rows) of `games` self-play games
    from deals seed, seed + 1, ... Rows are dicts of info (uint8), target
    (float32), mask (uint8) and weight (float32, all 1).

    worlds 0: every decision is labelled with the heuristic's move, and the
    heuristic plays it. worlds K > 0 (Lost Cities): labelled with the move of
    a one-step lookahead over K redealt worlds with heuristic playouts
    (trainer.search.SearchPlayer, the race schedule), the regret target of a
    depth-1 cutoff averaged over K worlds instead of one; the lookahead plays
    it, so the rows follow the improved policy's own games. explore: the
    share of moves played uniformly at random instead (still labelled with
    the teacher's move), so the rows also cover states off the teacher's
    path. procs > 1: the games are shared out over that many processes (the
    rows do not depend on it). progress: called with the number of games
    just finished. cache: a file path; rows saved there with the same game,
    deals and teacher are read back instead of played again (a resumed run
    need not repeat a lookahead warm start), and rows played are saved."""
    if not hasattr(game, "heuristic_action"):
        raise ValueError(f"{game.name} has no rule-based policy to warm-start from")
    if worlds < 0 or not 0.0 <= explore < 1.0:
        raise ValueError(f"worlds must be >= 0 and explore in [0, 1), got {worlds} and {explore}")
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    seeds = list(range(seed, seed + games))
    params = dict(game.params)
    # format 2: the lookahead's worlds come from a stream per decision (SearchPlayer.decision_rng);
    # format 1's came from one stream per game, so its rows are not what this code plays
    meta = {"game": game.name, "params": params, "games": int(games), "seed": int(seed),
            "worlds": int(worlds), "explore": float(explore), "format": 2}
    parts = _read_cache(cache, meta) if cache is not None else None
    cached = parts is not None
    if cached:
        if progress is not None:
            progress(games)
    elif procs == 1 or games < 2:
        parts = [_play(game.name, params, seeds, worlds, explore, progress)]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        size = max(1, min(25, games // procs))
        chunks = [seeds[i:i + size] for i in range(0, games, size)]
        parts = []
        # spawn: the trainer holds torch's threads, which a fork would copy in a bad state
        with ProcessPoolExecutor(procs, mp_context=mp.get_context("spawn")) as pool:
            for chunk, part in zip(chunks, pool.map(_play_chunk, [(game.name, params, c, worlds, explore)
                                                                 for c in chunks])):
                parts.append(part)
                if progress is not None:
                    progress(len(chunk))
    if cache is not None and not cached:
        _write_cache(cache, meta, parts)
    adv = {}
    strat = []
    for p in (0, 1):
        info = np.concatenate([part[p][0] for part in parts])
        m = np.concatenate([part[p][1] for part in parts])
        act = np.concatenate([part[p][2] for part in parts])
        n = len(act)
        onehot = np.zeros((n, m.shape[1]), np.float32)
        onehot[np.arange(n), act] = 1.0
        target = np.where(m > 0, np.where(onehot > 0, advantage, -advantage), 0.0).astype(np.float32)
        rows = {"info": info, "mask": m, "weight": np.ones(n, np.float32)}
        adv[p] = {**rows, "target": target}
        strat.append({**rows, "target": onehot})
    strategy = {k: np.concatenate([s[k] for s in strat]) for k in strat[0]}
    return adv, strategy


class PriorMix:
    """Minibatches of which a fixed share comes from the warm-start rows
    (`prior`) for the whole run, the rest from `memory` (the run's own
    samples). A prior row weighs as much as the memory rows of its batch
    on average, so `share` is the prior's share of every batch's loss: the
    nets keep the heuristic as a prior that CFR's regrets must outweigh, in
    the manner of a magnet policy, instead of a start that fades."""

    def __init__(self, memory, prior, share):
        if not 0.0 < share < 1.0:
            raise ValueError(f"the prior's share must be in (0, 1), got {share}")
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
        part = {name: self.prior[name][idx] for name in ("info", "target", "mask")}
        if k == batch_size:
            part["weight"] = np.ones(k, np.float32)
            return part
        own = self.memory.sample(batch_size - k, rng)
        part["weight"] = np.full(k, own["weight"].mean(), np.float32)
        return {name: np.concatenate([part[name], own[name]]) for name in ("info", "target", "mask", "weight")}
