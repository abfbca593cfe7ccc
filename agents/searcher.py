"""Search at play time: determinized Monte Carlo over the cards a player
cannot see, for Lost Cities.

    player = SearchPlayer(game, blueprint=None, worlds=640)     # heuristic playouts, no net
    action = player.step(state)
    python -m agents.search --worlds 640 --games 400           # against HeuristicBot, duplicate deals
    python -m agents.evaluate RUN --search worlds=640,topk=4   # with a trained blueprint
    ... --jobs N                                                # either one, deals split over N processes

Each decision draws its worlds from a stream seeded by the player's seed and
what the player to act sees (`decision_rng`), so a game's moves do not
depend on the games played before it or on the process that plays it.

At each decision the player
  1. samples `worlds` deals of what it cannot see (the opponent's unseen hand
     and the deck order), consistent with what it has seen
     (`StateBatch.resample`);
  2. takes the candidate actions: every legal one, or the `topk` most likely
     under the blueprint's policy, of those at least `floor` times as
     likely as its most likely one;
  3. plays every candidate in every world and plays the game out: with the
     heuristic (`playout="heuristic"`), uniformly at random, or with the
     blueprint for both sides for `depth` decisions and the heuristic after
     (`playout="blueprint"`), or with the blueprint for the searching player's
     next `depth` decisions (0: all of them) and the heuristic for the
     opponent, then for both (`playout="mixed"`); or with the blueprint
     for both sides for `depth` decisions (0: none) and then values the
     position by the blueprint's self-play critic, the kept one of its
     checkpoint, from the view of the player to act (`playout="critic"`; the
     final score where the game ended); every playout of the decision
     advances together, so the blueprint's forwards are batched;
  4. plays the candidate with the best mean final score difference; or,
     with `prefer=True` and a blueprint, the blueprint's own most likely
     move unless the search dropped it as worse (it left the race, or was
     halved away): the search as a check on the blueprint, which moves
     only where the worlds show it a better move.
Diagnostics only: `oracle` lets the search see cards no player can see,
to measure what the hidden information is worth (benchmarks.lc_ceiling):
"hand" shows it the opponent's hand (its worlds shuffle only the deck
order), "endgame:D" the whole deal once the deck holds D cards or fewer,
"hand+endgame:D" both, "all" the whole deal at every decision.
With an `opponent` model (a policy), each playout first finishes the
player's turn with the playout policy and lets that model play the
opponent's next turn: a best response to the model one turn deep, which is
what the exploiter (agents.exploiter) is.
How the worlds are spent (`schedule`):
  race (the default with heuristic playouts and no opponent model): every
     candidate still in the race is played in the same worlds, 16 (`chunk`)
     at a time; after each step the leader is the best mean, and a candidate
     leaves once, even optimistically (its mean paired difference to the
     leader plus `z` standard errors), it is not `eps` points better. The
     heuristic playouts are deterministic, so paired differences are due to
     the action alone and most candidates leave after a few steps; the
     budget of the plain search (worlds x candidates playouts), the time
     limit or one candidate left ends it. The whole race is one nogil C call
     (engine._lc_search), with a bit-walking copy of the heuristic that
     plays move for move as lc_heuristic_action, about twice as fast.
  halving (the default otherwise; `halving=True`): sequential halving, below.
  plain (`halving=False`): every world for every candidate.
With `halving` the worlds are spent by sequential halving:
the budget of the plain search (worlds x candidates playouts) is split over
log2(candidates) rounds, and after each round the worse half of the
candidates is dropped, so the close contenders are compared over several
times more worlds for the same cost. All candidates alive in a round are
played in the same worlds (common random numbers).
The copies, redeals, moves and playouts are nogil C loops (engine._batch,
or engine._lc_search for heuristic playouts); Python runs once per batch
(once per decision in the race). A `time_limit_s` budget (wall clock) stops
adding worlds (in chunks of `chunk` worlds) when the time is up; at least one
chunk is played.

With `bf16`, the blueprint's nets and its critic run in bfloat16, cast once
(`Policy.in_bf16`): their forwards are most of a blueprint search's time,
and a CPU that multiplies bfloat16 in hardware runs them about twice as fast.

The player plays through the same interface as the bots (`.step(state)`),
and `action_probs(state)` gives the share of worlds in which each candidate
was best (the search's own confidence, for hints and replays).
"""
import hashlib
import math
import time

import numpy as np

from engine._batch import StateBatch
from engine._lc_search import race_values, search_values, shuffle_decks

PLAYOUTS = ("heuristic", "random", "blueprint", "mixed", "critic")
SCHEDULES = ("race", "halving", "plain")

# The settings measured best (docs/studies/2026-12-01-search-player.md), which the
# CLIs and SearchPlayer use where none are given: 640 worlds of heuristic
# playouts, raced. Without a net every legal move is a candidate (about 82%
# against HeuristicBot, 18 ms of CPU a decision); with a trained blueprint its
# 4 most likely moves (about 82%, 8 ms). Blueprint and mixed playouts cost
# 15-150 times as much and won no more.
DEFAULT_WORLDS = 640
BLUEPRINT_DEFAULTS = {"worlds": DEFAULT_WORLDS, "topk": 4, "playout": "heuristic"}


def with_blueprint_defaults(settings):
    """SearchPlayer keywords with BLUEPRINT_DEFAULTS where `settings` is silent."""
    return {**BLUEPRINT_DEFAULTS, **settings}


class SearchPlayer:
    """Determinized search (see the module docstring). `blueprint` is a
    agents.policy.Policy or None; `topk` 0 searches every legal action."""

    def __init__(self, game, blueprint=None, worlds=DEFAULT_WORLDS, topk=0, playout="heuristic", depth=4,
                 time_limit_s=None, chunk=16, halving=True, opponent=None, seed=0, schedule=None,
                 z=3.0, eps=0.1, prefer=False, oracle=None, floor=0.0, bf16=False):
        if game.name != "lost_cities":
            raise ValueError(f"the search player plays lost_cities, not {game.name}")
        if worlds < 1 or chunk < 1:
            raise ValueError(f"worlds and chunk must be at least 1, got {worlds} and {chunk}")
        if playout not in PLAYOUTS:
            raise ValueError(f"playout must be one of {', '.join(PLAYOUTS)}, got {playout!r}")
        if (topk > 0 or playout in ("blueprint", "mixed", "critic")) and blueprint is None:
            raise ValueError("topk and blueprint or critic playouts need a blueprint (a trained run)")
        if playout == "critic" and getattr(blueprint, "critic", None) is None:
            raise ValueError("playout=critic values the leaves by the self-play critic: the blueprint's "
                             "checkpoint kept none (a run without a self-play stage, or written before "
                             "checkpoints kept it)")
        if prefer and blueprint is None:
            raise ValueError("prefer keeps the blueprint's move: it needs a blueprint (a trained run)")
        if topk < 0 or depth < 0:
            raise ValueError("topk and depth must be >= 0")
        if not 0 <= floor <= 1:
            raise ValueError(f"floor must be in [0, 1], got {floor}")
        if floor > 0 and blueprint is None:
            raise ValueError("floor keeps the blueprint's likely moves: it needs a blueprint (a trained run)")
        if time_limit_s is not None and time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {time_limit_s}")
        if schedule is None:
            schedule = "plain" if not halving else "race" if playout == "heuristic" and opponent is None \
                else "halving"
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if schedule == "race" and (playout != "heuristic" or opponent is not None):
            raise ValueError("the race schedule plays heuristic playouts without an opponent model")
        if z <= 0 or eps < 0:
            raise ValueError(f"z must be > 0 and eps >= 0, got {z} and {eps}")
        self.oracle = oracle
        self.sees_hand, self.sees_all_at = parse_oracle(oracle)
        self.redeal = "all"               # a decision's redeal: "all" it cannot see, "deck" order, or "none"
        self.game = game
        if bf16 and blueprint is None:
            raise ValueError("bf16 runs the blueprint's nets in bfloat16: it needs a blueprint (a trained run)")
        self.bf16 = bool(bf16)
        self.blueprint = blueprint.in_bf16() if self.bf16 else blueprint
        self.worlds = int(worlds)
        self.topk = int(topk)
        self.floor = float(floor)
        self.prefer = bool(prefer)
        self.playout = playout
        self.depth = int(depth)
        self.time_limit_s = time_limit_s
        self.chunk = min(int(chunk), self.worlds)
        self.schedule = schedule
        self.halving = schedule == "halving"
        self.z = float(z)
        self.eps = float(eps)
        self.opponent = opponent
        self.seed = int(seed)
        self.rng = np.random.default_rng([self.seed, 0x5EA2C4])
        cap = self.chunk * game.max_legal_actions()
        self.batch = StateBatch(game, cap)
        self.info = np.zeros((cap, game.information_state_tensor_size()), np.float32)
        self.mask = np.zeros((cap, game.num_distinct_actions()), np.uint8)
        self.decisions = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0            # process CPU time: what a decision costs on a busy machine
        self.worlds_played = 0
        self.last = None                  # (candidates, mean values, share of worlds best) of the last search
        # (candidates, each one's mean final score difference over the worlds it was played in, NaN where
        # none, and how many worlds) of the last search: every candidate's value, also those that left early
        self.last_values = None

    @property
    def name(self):
        parts = [f"worlds={self.worlds}"] + {"halving": [], "plain": ["halving=0"],
                                             "race": [f"race(z={self.z:g},eps={self.eps:g})"]}[self.schedule]
        if self.topk:
            parts.append(f"topk={self.topk}")
        if self.floor:
            parts.append(f"floor={self.floor:g}")
        if self.prefer:
            parts.append("prefer=blueprint")
        parts.append(f"playout={self.playout}"
                     + (f",depth={self.depth}" if self.playout in ("blueprint", "mixed", "critic") else ""))
        if self.time_limit_s:
            parts.append(f"time={self.time_limit_s * 1000:g}ms")
        if self.oracle is not None:
            parts.append(f"oracle={self.oracle}")
        if self.bf16:
            parts.append("bf16")
        return "search(" + ",".join(parts) + ")"

    def candidates(self, state):
        """The moves searched: every legal one, or the `topk` most likely
        under the blueprint, of those at least `floor` times as likely as
        its most likely move (a move the blueprint never plays leads where
        its critic has not learnt: a value search takes it for its errors)."""
        legal = state.legal_actions()
        if (not self.topk or len(legal) <= self.topk) and not self.floor:
            return legal
        probs = self.blueprint.action_probs(state)
        ranked = sorted(legal, key=lambda a: (-probs[a], a))
        if self.floor:
            top = probs[ranked[0]]
            ranked = [a for a in ranked if probs[a] >= self.floor * top]
        return sorted(ranked[:self.topk] if self.topk else ranked)

    def decision_rng(self, state):
        """The random stream of a decision: from the player's seed and what
        the player to act sees (its information state), so a decision does
        not depend on the games played before it or in which process."""
        seen = np.asarray(state.information_state_tensor(state.current_player()), np.float32)
        key = hashlib.blake2b(seen.tobytes(), digest_size=16).digest()
        return np.random.default_rng([self.seed, 0x5EA2C4, *np.frombuffer(key, np.uint32).tolist()])

    def search(self, state):
        """(candidates, mean final score difference of each over the worlds it
        was played in, share of those worlds in which it was best)."""
        t0 = time.perf_counter()
        c0 = time.process_time()
        me = state.current_player()
        self.rng = self.decision_rng(state)
        self.redeal = "none" if state.deck_size() <= self.sees_all_at else "deck" if self.sees_hand else "all"
        cands = self.candidates(state)
        A = len(cands)
        if A == 1 and self.floor:       # the floor left the blueprint's move alone: nothing to weigh
            self.decisions += 1
            self.last_values = (cands, np.full(1, np.nan), np.zeros(1, np.int64))
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.process_time() - c0
            self.last = (cands, np.zeros(1), np.ones(1))
            return self.last
        if self.schedule == "race":
            return self._race(state, me, cands, t0, c0)
        totals, counts, wins = np.zeros(A), np.zeros(A), np.zeros(A)
        alive = np.arange(A)
        rounds = max(1, math.ceil(math.log2(A))) if self.halving and A > 2 else 1
        budget = self.worlds * A                       # playouts: what the plain search would spend
        played = 0
        for r in range(rounds):
            k = self.worlds if rounds == 1 else max(1, budget // (rounds * len(alive)))
            done = 0
            while done < k:
                m = min(k - done, max(1, self.batch.capacity // len(alive)))
                v = self._chunk_values(state, me, [cands[i] for i in alive], m)       # [len(alive), m]
                totals[alive] += v.sum(axis=1)
                counts[alive] += m
                best = v.max(axis=0)
                top = v == best
                wins[alive] += (top / top.sum(axis=0)).sum(axis=1)
                done += m
                played += m
                if self._out_of_time(t0):
                    break
            if self._out_of_time(t0) or r == rounds - 1:
                break
            means = totals[alive] / counts[alive]
            keep = max(2, math.ceil(len(alive) / 2))
            alive = alive[np.argsort(-means, kind="stable")[:keep]]
        values = np.where(counts > 0, totals / np.maximum(counts, 1), -np.inf)
        self.last_values = (cands, np.where(counts > 0, values, np.nan), counts.astype(np.int64))
        # the choice is among the last survivors, by their mean over the worlds they all saw
        final = np.full(A, -np.inf)
        final[alive] = values[alive]
        self.decisions += 1
        self.worlds_played += played
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        share = wins / max(wins.sum(), 1e-12)
        self.last = (cands, final, share)
        return self.last

    def _race(self, state, me, cands, t0, c0):
        """The race (engine._lc_search.lc_race), one nogil call: every
        candidate in the same worlds; one leaves once its paired difference to
        the leader is, with z standard errors, under eps points; the budget of
        the plain search (worlds x candidates playouts) or the time limit
        ends it, or one left."""
        A = len(cands)
        seed = int(self.rng.integers(1 << 62))
        budget = self.worlds * A
        hidden = 2 if state.deck_size() <= self.sees_all_at else 1 if self.sees_hand else 0
        b, vals, seen = race_values(state, me, seed, cands, budget, first_round=self.chunk,
                                    chunk=self.chunk, z=self.z, eps=self.eps,
                                    time_limit=self.time_limit_s or 0.0, hidden=hidden)
        final = np.full(A, -np.inf)
        wins = np.zeros(A)
        means = np.full(A, np.nan)
        if vals.shape[1]:
            sums = np.where(np.isnan(vals), 0.0, vals).sum(axis=1)
            means = np.where(seen > 0, sums / np.maximum(seen, 1), np.nan)
            last = seen == seen.max()                  # still in the race at the end
            final[last] = sums[last] / seen[last]
            v = np.where(np.isnan(vals), -np.inf, vals)
            top = v == v.max(axis=0)
            wins = (top / top.sum(axis=0)).sum(axis=1)
        else:
            final[0] = 0.0
            wins[0] = 1.0
        self.last_values = (cands, means, seen.astype(np.int64))
        played = int(vals.shape[1])
        self.decisions += 1
        self.worlds_played += played
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        self.last = (cands, final, wins / max(wins.sum(), 1e-12))
        return self.last

    def _out_of_time(self, t0):
        return self.time_limit_s is not None and time.perf_counter() - t0 >= self.time_limit_s

    def _chunk_values(self, state, me, cands, K):
        b = self.batch
        A = len(cands)
        n = K * A
        seed = int(self.rng.integers(1 << 62))
        if self.playout == "heuristic" and self.opponent is None and self.redeal == "all":
            return search_values(state, me, seed, cands, 0, K)     # the same values, one nogil C loop
        b.fill(state, 0, K)
        if self.redeal == "all":
            b.resample(me, seed, 0, K)
        elif self.redeal == "deck":                 # oracle=hand: the true hands, the deck order redealt
            shuffle_decks(b, seed, 0, K)
        if A > 1:
            b.copy_rows(np.tile(np.arange(K), A - 1), np.arange(K, n))
        b.apply(np.arange(n), np.repeat(np.asarray(cands, np.int32), K))
        if self.opponent is not None:
            self._opponent_turn(me, n, K, seed)
        if self.playout == "critic":
            self._blueprint_steps(n, self.depth)
            return self._critic_values(me, n).reshape(A, K)
        if self.playout == "blueprint":
            self._blueprint_steps(n, self.depth)
        elif self.playout == "mixed":
            self._mixed_steps(me, seed, n, self.depth)
        b.playout(seed, 0, n, policy="random" if self.playout == "random" else "game")
        return b.returns(me, 0, n).reshape(A, K)

    def _opponent_turn(self, me, n, K, seed):
        """Finish my turn with the playout policy, then let the opponent model
        play its whole next turn (play, then draw), one batched forward per
        step. Its samples use one uniform number per world for every
        candidate (common random numbers)."""
        b = self.batch
        b.advance(me, seed, 0, n, policy="random" if self.playout == "random" else "game")
        opp = 1 - me
        for _ in range(2):
            rows = np.flatnonzero(b.current_players(0, n) == opp)
            if len(rows) == 0:
                break
            m = len(rows)
            b.encode(rows, opp, self.info, self.mask)
            probs = self.opponent.probs(self.info[:m], self.mask[:m], np.full(m, opp))
            if getattr(self.opponent, "greedy", False):
                acts = probs.argmax(axis=1)
            else:
                cum = np.cumsum(probs, axis=1)
                u = self.rng.random(K)[rows % K] * cum[:, -1]
                acts = (cum > u[:, None]).argmax(axis=1)
            b.apply(rows, acts)

    def _blueprint_steps(self, n, depth):
        """`depth` decisions of every live row by the blueprint, both sides,
        one batched forward per player per step."""
        b = self.batch
        for _ in range(depth):
            players = b.current_players(0, n)
            live = False
            actions_rows, actions = [], []
            for p in (0, 1):
                rows = np.flatnonzero(players == p)
                if len(rows) == 0:
                    continue
                live = True
                actions_rows.append(rows)
                actions.append(self._blueprint_actions(rows, p))
            if not live:
                return
            b.apply(np.concatenate(actions_rows), np.concatenate(actions))

    def _critic_values(self, me, n):
        """float64 [n]: each row's value for `me` in points: the final score
        difference where the game is over, else the blueprint's critic on
        the info state of the player to act (its own expected margin, the
        sign turned where that is the opponent), one forward per player."""
        b = self.batch
        out = b.returns(me, 0, n).astype(np.float64)
        players = b.current_players(0, n)
        for p in (0, 1):
            rows = np.flatnonzero(players == p)
            if len(rows):
                m = len(rows)
                b.encode(rows, p, self.info, self.mask)
                v = self.blueprint.values(self.info[:m])
                out[rows] = v if p == me else -v
        return out

    def _mixed_steps(self, me, seed, n, depth):
        """The blueprint plays `me`'s next `depth` decisions (0: every one to
        the end) in every live row, one batched forward per decision, and the
        heuristic plays the opponent's moves in between."""
        b = self.batch
        done = 0
        while not depth or done < depth:
            b.advance(1 - me, seed, 0, n, policy="game")
            rows = np.flatnonzero(b.current_players(0, n) == me)
            if len(rows) == 0:
                return
            b.apply(rows, self._blueprint_actions(rows, me))
            done += 1

    def _blueprint_actions(self, rows, player):
        """The blueprint's actions for `player` to act in batch rows `rows`,
        one forward, sampled (unless greedy) from the decision's stream."""
        from agents.policy import sample_actions
        m = len(rows)
        self.batch.encode(rows, player, self.info, self.mask)
        probs = self.blueprint.probs(self.info[:m], self.mask[:m], np.full(m, player))
        return sample_actions(probs, self.rng, getattr(self.blueprint, "greedy", False))

    def step(self, state):
        legal = state.legal_actions()
        if len(legal) == 1:
            return legal[0]
        cands, values, _ = self.search(state)
        if self.prefer:
            probs = self.blueprint.action_probs(state)
            own = max(legal, key=lambda a: (probs[a], -a))
            if own in cands and np.isfinite(values[list(cands).index(own)]):
                return int(own)                      # still in contention: the blueprint's move stands
        return int(cands[int(np.argmax(values))])

    def action_probs(self, state):
        """{action: share of the searched worlds in which it was best} (0 for
        actions outside the candidates)."""
        legal = state.legal_actions()
        if len(legal) == 1:
            return {legal[0]: 1.0}
        cands, _, share = self.search(state)
        out = {a: 0.0 for a in legal}
        out.update({a: float(s) for a, s in zip(cands, share)})
        return out

    def ms_per_decision(self, cpu=False):
        """Mean wall-clock (or, with cpu, process CPU) milliseconds per search."""
        return 1000.0 * (self.cpu_seconds if cpu else self.seconds) / max(self.decisions, 1)


def parse_oracle(text):
    """SearchPlayer's `oracle` -> (sees the opponent's hand, sees the whole
    deal once the deck holds at most this many cards; -1: never)."""
    if text is None:
        return False, -1
    hand, all_at = False, -1
    for part in str(text).split("+"):
        kind, _, arg = part.partition(":")
        if kind == "hand" and not arg and not hand:
            hand = True
        elif kind == "all" and not arg and all_at < 0:
            all_at = 1 << 30
        elif kind == "endgame" and all_at < 0 and arg.isdigit():
            all_at = int(arg)
        else:
            raise ValueError(f"bad oracle {text!r}: hand, endgame:D (D cards left in the deck), all, "
                             "or hand+endgame:D")
    return hand, all_at


def parse_search_spec(text):
    """"worlds=64,topk=4,playout=blueprint,depth=4,time=20,chunk=16,policy=average"
    -> keyword arguments (time in milliseconds). Unknown keys raise ValueError."""
    kinds = {"worlds": int, "topk": int, "depth": int, "chunk": int, "time": float, "seed": int,
             "halving": int, "playout": str, "policy": str, "schedule": str, "z": float, "eps": float,
             "prefer": int, "floor": float, "bf16": int, "oracle": str}
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or key not in kinds:
            raise ValueError(f"bad search setting {part!r}; settings: "
                             + ", ".join(f"{k}=..." for k in kinds) + " (time in ms)")
        try:
            out[key] = kinds[key](value)
        except ValueError:
            raise ValueError(f"search setting {key} needs a {kinds[key].__name__}, got {value!r}") from None
    if "time" in out:
        out["time_limit_s"] = out.pop("time") / 1000.0
    for key in ("halving", "prefer", "bf16"):
        if key in out:
            out[key] = bool(out[key])
    return out


def make_search_player(spec, game=None):
    """A SearchPlayer from "SOURCE[,key=value...]": SOURCE is a run directory
    or checkpoint (the blueprint; unset settings from BLUEPRINT_DEFAULTS)
    or "heuristic" / "random" (no net: those playouts, DEFAULT_WORLDS worlds).
    The player's game is `game` (a run's must have the same rules: its
    batched playouts hold the states it is given), or the run's, or the
    capped classic game."""
    import engine
    source, _, rest = spec.partition(",")
    kwargs = parse_search_spec(rest)
    kind = kwargs.pop("policy", "average")
    if source in ("heuristic", "random"):
        kwargs.setdefault("playout", source)
        game = game or engine.load_game("lost_cities", max_turns=200)
        return SearchPlayer(game, **kwargs)
    from agents.policy import load_policy
    blueprint = load_policy(source, kind=kind, seed=kwargs.get("seed", 0))
    if game is None:
        game = blueprint.game
    elif (game.name, dict(game.params)) != (blueprint.game.name, dict(blueprint.game.params)):
        raise ValueError(f"{source} plays {blueprint.game.name} {dict(blueprint.game.params)}, not "
                         f"{game.name} {dict(game.params)}")
    return SearchPlayer(game, blueprint=blueprint, **with_blueprint_defaults(kwargs))
