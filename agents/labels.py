"""The prior's labels: self-play games of given deals, every decision
labelled by a teacher, one whole game at a time.

    labeller = Labeller(game, worlds=64, explore=0.1)          # or blueprint=policy, topk=4
    finished = label_deals(labeller, seeds, sink, deadline=None)
    parts = parts_of_chunks(row_chunks, value_chunks)          # trainer.warmstart's parts

The teacher is the heuristic (`worlds` 0), a one-step lookahead over K
redealt worlds with heuristic playouts (agents.searcher.SearchPlayer), or,
in an expert-iteration round, a search over an agent's most likely moves
while the agent plays (trainer.warmstart describes the rows' meaning).

A game's rows go out as two column dicts (`sink(rows, values)`, a chunk of
a few whole games at a time):
  rows   (ROW_COLUMNS): info uint8 [n, T], mask uint8 [n, A], act int64
         (the teacher's move), outcome float32 (the game's final return for
         the player to move), game int64 (the deal seed), player int8, seq
         int32 (the row's place among its player's rows of the game);
  values (VALUE_COLUMNS): the value net's further rows of each player,
         info uint8 [m, T], points float32, game int64, kind int8 (OBSERVER
         or SEARCH), player int8, seq int32.
Every random draw is seeded by the deal (exploration) or by what the player
sees at a decision (the search's worlds, SearchPlayer.decision_rng), so a
game's rows do not depend on which process plays it, or after which other
games. parts_of_chunks orders the rows by (player, deal, seq), whatever
order the chunks came in.

Two places play through this module, with the same code: the workers' label
jobs (traverser/jobworker.py; the only import of `agents` by the worker
package, allowed by name in pyproject.toml's import-linter contract) and
the in-process labelling of tools and tests (trainer.warmstart.heuristic_rows
without a label stage). This module never imports `trainer`.
"""
import time

import numpy as np

OBSERVER, SEARCH = 0, 1     # kinds of the further value rows
SEARCH_OTHERS = 2           # candidates besides the move chosen whose search values become value rows
ROW_COLUMNS = ("info", "mask", "act", "outcome", "game", "player", "seq")
VALUE_COLUMNS = ("info", "points", "game", "kind", "player", "seq")
GAMES_PER_CHUNK = 4         # whole games per streamed chunk


class Labeller:
    """Plays and labels one deal at a time (`play`). game: an engine game
    with a rule-based policy (Lost Cities); worlds: 0 for the heuristic
    teacher, K > 0 for a K-world lookahead; explore: the share of moves
    played uniformly at random (still labelled); blueprint: an
    expert-iteration round's agent (a policy with .step, e.g.
    blueprint_policy), which plays the games while a search over its `topk`
    most likely moves labels them."""

    def __init__(self, game, worlds=0, explore=0.0, blueprint=None, topk=0):
        if not hasattr(game, "heuristic_action"):
            raise ValueError(f"{game.name} has no rule-based policy to label with")
        if worlds < 0 or not 0.0 <= explore < 1.0 or topk < 0:
            raise ValueError(f"worlds must be >= 0, explore in [0, 1) and topk >= 0, got {worlds}, {explore} "
                             f"and {topk}")
        if blueprint is not None and worlds < 1:
            raise ValueError(f"an expert-iteration search needs worlds >= 1, got {worlds}")
        self.game = game
        self.explore = float(explore)
        self.agent = blueprint
        self.teacher = None
        if blueprint is not None or worlds > 0:
            from agents.searcher import SearchPlayer
            self.teacher = (SearchPlayer(game, blueprint=blueprint, worlds=worlds, topk=topk) if blueprint is not None
                            else SearchPlayer(game, worlds=worlds))
        self.width = game.information_state_tensor_size()
        self.actions = game.num_distinct_actions()
        self.unseen = _unseen_outcome_actions(game)

    def play(self, seed, deadline=None):
        """(rows, values) of the game dealt from `seed`, played to its end,
        or None if `deadline` (a time.time()) passed before it ended: a game
        is labelled whole or not at all."""
        game, teacher, agent = self.game, self.teacher, self.agent
        key = int(seed) & 0xFFFFFFFFFFFF
        rng = np.random.default_rng([key, 0x7EAC])
        pick = np.random.default_rng([key, 0x5EA1])        # which candidates' values become rows
        state = game.new_initial_state(seed=seed)
        rows = {0: [], 1: []}
        vrows = {0: [], 1: []}          # (info, search value or None for the game's outcome, kind)
        while not state.is_terminal():
            if deadline is not None and time.time() >= deadline:
                return None
            p = state.current_player()
            m = state.legal_actions_mask()
            if teacher is not None:
                teacher.last_values = None          # a forced move is not searched: no values of its own
            a = game.heuristic_action(state) if teacher is None else teacher.step(state)
            rows[p].append((state.information_state_tensor(p), m, a))
            vrows[1 - p].append((state.information_state_tensor(1 - p), None, OBSERVER))
            if teacher is not None and teacher.last_values is not None:
                _search_value_rows(state, p, a, teacher.last_values, self.unseen, pick, vrows[p])
            if agent is not None:
                a = agent.step(state)               # the agent plays its own games; the search only labels them
            if self.explore > 0 and rng.random() < self.explore:
                a = int(rng.choice(np.flatnonzero(m)))
            state.apply_action(a)
        returns = state.returns()
        return self._columns(int(seed), returns, rows, vrows)

    def _columns(self, seed, returns, rows, vrows):
        T, A = self.width, self.actions
        order = [(p, i) for p in (0, 1) for i in range(len(rows[p]))]
        vorder = [(p, i) for p in (0, 1) for i in range(len(vrows[p]))]
        n, k = len(order), len(vorder)
        out = {"info": _exact_u8([rows[p][i][0] for p, i in order], n, T),
               "mask": np.asarray([rows[p][i][1] for p, i in order], dtype=np.uint8).reshape(n, A),
               "act": np.asarray([rows[p][i][2] for p, i in order], dtype=np.int64),
               "outcome": np.asarray([returns[p] for p, _ in order], dtype=np.float32),
               "game": np.full(n, seed, dtype=np.int64),
               "player": np.asarray([p for p, _ in order], dtype=np.int8),
               "seq": np.asarray([i for _, i in order], dtype=np.int32)}
        values = {"info": _exact_u8([vrows[p][i][0] for p, i in vorder], k, T),
                  "points": np.asarray([returns[p] if vrows[p][i][1] is None else vrows[p][i][1]
                                        for p, i in vorder], dtype=np.float32),
                  "game": np.full(k, seed, dtype=np.int64),
                  "kind": np.asarray([vrows[p][i][2] for p, i in vorder], dtype=np.int8),
                  "player": np.asarray([p for p, _ in vorder], dtype=np.int8),
                  "seq": np.asarray([i for _, i in vorder], dtype=np.int32)}
        return out, values


def label_deals(labeller, seeds, sink, deadline=None, per_chunk=GAMES_PER_CHUNK, on_game=None):
    """Play the deals `seeds` in order with `labeller`, calling sink(rows,
    values) with the columns of every `per_chunk` whole games (and of the
    last few) and on_game() after each game. deadline: a time.time() after
    which no game starts and the game in play is dropped, so the games
    finished are a prefix of `seeds`. Returns how many games finished."""
    done, rows, values = 0, [], []
    for seed in seeds:
        if deadline is not None and time.time() >= deadline:
            break
        game = labeller.play(seed, deadline)
        if game is None:
            break
        rows.append(game[0])
        values.append(game[1])
        done += 1
        if on_game is not None:
            on_game()
        if len(rows) >= per_chunk:
            sink(_cat(rows), _cat(values))
            rows, values = [], []
    if rows:
        sink(_cat(rows), _cat(values))
    return done


def _cat(chunks):
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def parts_of_chunks(row_chunks, value_chunks, width, actions):
    """trainer.warmstart's parts ({player: (info, mask, act, outcome, game,
    value info, value points, value game, value kind)}) of label chunks,
    each player's rows in (deal, seq) order. width, actions: the game's
    info-state width and action count (the shapes when there are no rows)."""
    rows = _sorted(row_chunks, ROW_COLUMNS, {"info": (0, width), "mask": (0, actions)})
    values = _sorted(value_chunks, VALUE_COLUMNS, {"info": (0, width)})
    out = {}
    for p in (0, 1):
        r, v = rows["player"] == p, values["player"] == p
        out[p] = (rows["info"][r], rows["mask"][r], rows["act"][r], rows["outcome"][r], rows["game"][r],
                  values["info"][v], values["points"][v], values["game"][v], values["kind"][v])
    return out


_DTYPES = {"info": np.uint8, "mask": np.uint8, "act": np.int64, "outcome": np.float32, "game": np.int64,
           "player": np.int8, "seq": np.int32, "points": np.float32, "kind": np.int8}


def _sorted(chunks, columns, shapes):
    chunks = [c for c in chunks if len(c["game"])]
    if not chunks:
        return {k: np.zeros(shapes.get(k, (0,)), _DTYPES[k]) for k in columns}
    cat = {k: np.concatenate([np.asarray(c[k], dtype=_DTYPES[k]) for c in chunks]) for k in columns}
    order = np.lexsort((cat["seq"], cat["game"], cat["player"]))
    return {k: v[order] for k, v in cat.items()}


def blueprint_policy(spec, state):
    """The greedy strategy-net policy of an expert-iteration blueprint: the
    net of `spec` (batcher.networks' spec dict) with the weights `state`
    ({name: tensor or numpy array}), on the CPU."""
    import torch

    from agents.checkpoint import build_net
    from agents.policy import AveragePolicy
    weights = {n: torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v for n, v in state.items()}
    net = build_net({"net_spec": dict(spec), "nets": {"strategy": weights}}, "strategy")
    return AveragePolicy(net, greedy=True)


def _exact_u8(rows, n, T):
    i = np.asarray(rows, dtype=np.float32).reshape(n, T)
    u = i.astype(np.uint8)
    if not np.array_equal(u, i):
        raise ValueError("labels: an info-state entry is not an exact uint8")
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
