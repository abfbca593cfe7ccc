"""Evaluation of a Deep CFR average strategy (the "strategy" net, or the
SD-CFR average of trainer.sdcfr).

    python -m trainer.evaluate CHECKPOINT [--opponent heuristic|random|both]
                               [--games N] [--seed S] [--greedy] [--json]
                               [--policy auto|network|sdcfr]

Policy convention: the strategy net maps an info-state tensor to one logit per
action id; the policy at a state is the softmax over the legal actions only
(illegal logits masked to -inf), see `policy_probs`.

Kuhn and Leduc poker: exact exploitability, from our own best response over
the engine (`exploitability`), checked against OpenSpiel's
(`openspiel_exploitability`) when pyspiel is installed. Both follow OpenSpiel:
nash_conv = BR_0 + BR_1, exploitability = nash_conv / num_players.

Lost Cities: batched head-to-head matches against RandomBot or HeuristicBot
with alternating seats (`head_to_head`): win rate with a 95% Wilson interval
and mean score difference with a 95% normal-approximation interval.
"""
import argparse
import itertools
import json
import math
import sys

import numpy as np
import torch

POKER_GAMES = ("kuhn_poker", "leduc_poker")
# Cards in the deck of each poker game (deals are ordered tuples of distinct cards).
_NUM_CARDS = {"kuhn_poker": 3, "leduc_poker": 6}
OPPONENTS = ("random", "heuristic")


# --------------------------------------------------------------------------
# The policy of a strategy net

def _net_device(net):
    for p in net.parameters():
        return p.device
    for b in net.buffers():
        return b.device
    return torch.device("cpu")


def policy_probs(net, info, mask):
    """Action probabilities of the strategy net: softmax of its logits over the
    legal actions (mask nonzero), illegal actions get exactly 0.

    info: float32 [n, T]; mask: bool/uint8/int8 [n, A]. Returns float64 [n, A].
    One batched forward under torch.inference_mode. `net` may also be a
    tabular policy with a `probs(info, mask)` method (trainer.sdcfr)."""
    if not isinstance(net, torch.nn.Module) and hasattr(net, "probs"):
        return net.probs(info, mask)
    info = np.asarray(info, dtype=np.float32)
    mask = np.asarray(mask).astype(bool)
    if info.ndim != 2 or mask.ndim != 2 or info.shape[0] != mask.shape[0]:
        raise ValueError(f"policy_probs needs info [n, T] and mask [n, A], got {info.shape} and {mask.shape}")
    n, num_actions = mask.shape
    if n == 0:
        return np.zeros((0, num_actions), dtype=np.float64)
    if not mask.any(axis=1).all():
        bad = int(np.flatnonzero(~mask.any(axis=1))[0])
        raise ValueError(f"policy_probs: row {bad} has no legal action")
    with torch.inference_mode():
        x = torch.from_numpy(np.ascontiguousarray(info)).to(_net_device(net))
        logits = net(x).detach().to("cpu", torch.float64).numpy()
    if logits.shape != (n, num_actions):
        raise ValueError(f"net output has shape {logits.shape}, expected {(n, num_actions)}")
    logits = np.where(mask, logits, -np.inf)
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)  # exp(-inf) == 0 exactly
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------
# Exact exploitability over our engine (Kuhn, Leduc)

class _Tree:
    """The full game tree of a poker game, over every deal.

    Nodes are numbered in depth-first order. Per node: `player` (-1 for a
    terminal), `info` (index of the acting player's infoset, -1 at terminals),
    `children` (list of (action, node)), `ret` (returns at terminals). `roots`
    holds the root node of each deal; every deal has probability `chance_p`."""

    def __init__(self, game):
        name = game.name
        if name not in _NUM_CARDS:
            raise ValueError(f"exact exploitability covers {', '.join(POKER_GAMES)}, not {name}")
        deals = list(itertools.permutations(range(_NUM_CARDS[name]), game.deal_length()))
        self.chance_p = 1.0 / len(deals)
        self.player, self.info, self.children, self.ret = [], [], [], []
        self.roots = []
        self.info_index = {}          # tensor bytes (of the acting player) -> infoset id
        self.info_tensors, self.info_masks, self.info_player = [], [], []
        self.info_nodes = []          # infoset id -> [node, ...]
        for deal in deals:
            state = game.new_initial_state(deal=list(deal))
            self.roots.append(self._build(state))

    def _build(self, state):
        node = len(self.player)
        self.player.append(-1)
        self.info.append(-1)
        self.children.append([])
        self.ret.append(None)
        if state.is_terminal():
            self.ret[node] = state.returns()
            return node
        p = state.current_player()
        t = state.information_state_tensor(p)
        key = t.tobytes()
        i = self.info_index.get(key)
        if i is None:
            i = self.info_index[key] = len(self.info_tensors)
            self.info_tensors.append(t)
            self.info_masks.append(state.legal_actions_mask())
            self.info_player.append(p)
            self.info_nodes.append([])
        self.info_nodes[i].append(node)
        self.player[node] = p
        self.info[node] = i
        kids = []
        for a in state.legal_actions():
            state.apply_action(a)
            kids.append((a, self._build(state)))
            state.undo_action()
        self.children[node] = kids
        return node

    def best_response_value(self, br_player, policy):
        """Value for `br_player` of a best response to `policy` ([infosets, A])
        played by the other player."""
        n = len(self.player)
        # Opponent-and-chance reach of every node, top-down (children follow parents).
        reach = np.zeros(n)
        for root in self.roots:
            reach[root] = self.chance_p
            stack = [root]
            while stack:
                h = stack.pop()
                if self.player[h] < 0:
                    continue
                own = self.player[h] == br_player
                pol = policy[self.info[h]]
                for a, c in self.children[h]:
                    reach[c] = reach[h] if own else reach[h] * pol[a]
                    stack.append(c)

        value = [None] * n
        br_action = {}

        def val(h):
            v = value[h]
            if v is not None:
                return v
            p = self.player[h]
            if p < 0:
                v = self.ret[h][br_player]
            elif p == br_player:
                a = best(self.info[h])
                v = next(val(c) for b, c in self.children[h] if b == a)
            else:
                pol = policy[self.info[h]]
                v = sum(pol[a] * val(c) for a, c in self.children[h])
            value[h] = v
            return v

        def best(i):
            a = br_action.get(i)
            if a is not None:
                return a
            # Perfect recall: the subtrees below this infoset never return to it.
            totals = {}
            for h in self.info_nodes[i]:
                for b, c in self.children[h]:
                    totals[b] = totals.get(b, 0.0) + reach[h] * val(c)
            a = max(totals, key=lambda b: (totals[b], -b))  # ties: lowest action id
            br_action[i] = a
            return a

        # Recursion depth is bounded by the game length (a few dozen frames).
        return sum(self.chance_p * val(r) for r in self.roots)


_TREES = {}


def _tree(game):
    """The game tree of a poker game, built once per game name."""
    t = _TREES.get(game.name)
    if t is None:
        t = _TREES[game.name] = _Tree(game)
    return t


def exploitability(game, net):
    """Exact exploitability of the strategy net's policy on kuhn_poker or
    leduc_poker, from our own best response over the engine.

    Every deal (ordered tuple of distinct cards, equally likely) and the whole
    betting tree are enumerated; the net is queried once, in one batch, for
    all distinct info states. Returns {"nash_conv": BR_0 + BR_1,
    "exploitability": nash_conv / 2}, OpenSpiel's definitions."""
    tree = _tree(game)
    policy = policy_probs(net, np.stack(tree.info_tensors), np.stack(tree.info_masks))
    br = [tree.best_response_value(p, policy) for p in (0, 1)]
    nash_conv = float(br[0] + br[1])
    return {"nash_conv": nash_conv, "exploitability": nash_conv / 2,
            "br_value_0": float(br[0]), "br_value_1": float(br[1])}


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
# Lost Cities: batched matches against the bots

def _make_opponent(kind, game, seed):
    from engine.match import make_bot
    if kind not in OPPONENTS:
        raise ValueError(f"unknown opponent {kind!r}; known: {', '.join(OPPONENTS)}")
    return make_bot(kind, game, seed)


def _sample(probs, rng, greedy):
    if greedy:
        return probs.argmax(axis=1)
    cum = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cum[:, -1]
    # First index whose cumulative sum exceeds u: its probability is > 0, so legal.
    return (cum > u[:, None]).argmax(axis=1)


def head_to_head(game, net, opponent, games, seed=0, greedy=False, progress=False):
    """Play `games` games of the strategy-net policy against `opponent`
    ("random" or "heuristic"). Game g: the net sits in seat g % 2, the deal
    comes from seed + g, a random opponent is seeded with seed + 2g + 1. All
    games advance together; the net's decisions across games at each step are
    one forward. Moves are sampled from the policy (numpy Generator seeded
    from `seed`), or the argmax if `greedy`.

    Returns {"games", "wins", "ties", "win_rate", "win_rate_ci95",
    "mean_score_diff", "score_diff_ci95", "games_by_seat", "wins_by_seat"};
    score differences are from the net's seat (state.returns()[seat])."""
    from engine.match import wilson_interval
    if games < 1:
        raise ValueError("head_to_head needs at least one game")
    states = [game.new_initial_state(seed=seed + g) for g in range(games)]
    seats = [g % 2 for g in range(games)]
    bots = [_make_opponent(opponent, game, seed + 2 * g + 1) for g in range(games)]
    rng = np.random.default_rng(seed)
    active = list(range(games))
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=games, desc=f"vs {opponent}")
        except ImportError:
            bar = None
    while active:
        # Opponents move until each game waits on the net (or ends).
        waiting = []
        for g in active:
            s = states[g]
            while not s.is_terminal() and s.current_player() != seats[g]:
                s.apply_action(bots[g].step(s))
            if not s.is_terminal():
                waiting.append(g)
        if bar is not None:
            bar.update(len(active) - len(waiting))
        active = waiting
        if not active:
            break
        info = np.stack([states[g].information_state_tensor(seats[g]) for g in active])
        mask = np.stack([states[g].legal_actions_mask() for g in active])
        actions = _sample(policy_probs(net, info, mask), rng, greedy)
        for g, a in zip(active, actions):
            states[g].apply_action(int(a))
    if bar is not None:
        bar.close()

    diffs = np.array([states[g].returns()[seats[g]] for g in range(games)], dtype=np.float64)
    seat_arr = np.array(seats)
    wins = int((diffs > 0).sum())
    ties = int((diffs == 0).sum())
    mean = float(diffs.mean())
    sd = float(diffs.std(ddof=1)) if games > 1 else 0.0
    half = 1.96 * sd / math.sqrt(games)
    # wilson_interval can round a hair past [0, 1] (e.g. -7e-18 at 0 wins).
    lo, hi = wilson_interval(wins, games)
    return {"games": games, "wins": wins, "ties": ties, "losses": games - wins - ties,
            "win_rate": wins / games, "win_rate_ci95": (max(0.0, lo), min(1.0, hi)),
            "mean_score_diff": mean, "score_diff_ci95": (mean - half, mean + half),
            "games_by_seat": [int((seat_arr == s).sum()) for s in (0, 1)],
            "wins_by_seat": [int(((seat_arr == s) & (diffs > 0)).sum()) for s in (0, 1)]}


# --------------------------------------------------------------------------
# Dispatch, table, CLI

def _pyspiel_available():
    try:
        _import_pyspiel()
        return True
    except ImportError:
        return False


def evaluate(game, net, lc_games=200, opponents=OPPONENTS, seed=0, openspiel=True,
             greedy=False, progress=False):
    """All metrics of a strategy net on its game, as a flat dict.

    Poker: "exploitability", "nash_conv" (our best response) and, if
    `openspiel` and pyspiel imports, "openspiel_exploitability" and
    "openspiel_nash_conv". Lost Cities, per opponent X: "vs_X_win_rate",
    "vs_X_win_rate_lo"/"_hi" (95% Wilson), "vs_X_score_diff", "vs_X_score_diff_lo"/"_hi",
    "vs_X_games", "vs_X_wins", "vs_X_ties"."""
    if game.name in POKER_GAMES:
        own = exploitability(game, net)
        out = {"exploitability": own["exploitability"], "nash_conv": own["nash_conv"]}
        if openspiel and _pyspiel_available():
            ref = openspiel_exploitability(game.name, net)
            out["openspiel_exploitability"] = ref["exploitability"]
            out["openspiel_nash_conv"] = ref["nash_conv"]
        return out
    if game.name == "lost_cities":
        if isinstance(opponents, str):
            opponents = (opponents,)
        out = {}
        for opp in opponents:
            r = head_to_head(game, net, opp, lc_games, seed=seed, greedy=greedy, progress=progress)
            k = f"vs_{opp}"
            out[f"{k}_win_rate"] = r["win_rate"]
            out[f"{k}_win_rate_lo"], out[f"{k}_win_rate_hi"] = r["win_rate_ci95"]
            out[f"{k}_score_diff"] = r["mean_score_diff"]
            out[f"{k}_score_diff_lo"], out[f"{k}_score_diff_hi"] = r["score_diff_ci95"]
            out[f"{k}_games"] = r["games"]
            out[f"{k}_wins"] = r["wins"]
            out[f"{k}_ties"] = r["ties"]
        return out
    raise ValueError(f"no evaluation for game {game.name!r}")


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


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainer.evaluate",
                                 description="Evaluate the strategy net of a Deep CFR checkpoint.")
    ap.add_argument("checkpoint", help="checkpoint file or run directory (its latest checkpoint)")
    ap.add_argument("--opponent", choices=["heuristic", "random", "both"], default="both",
                    help="Lost Cities opponent(s) (default: both)")
    ap.add_argument("--games", type=int, default=200, help="Lost Cities games per opponent (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--greedy", action="store_true", help="play the argmax action instead of sampling")
    ap.add_argument("--no-openspiel", action="store_true", help="poker: skip OpenSpiel's cross-check")
    ap.add_argument("--progress", action="store_true", help="progress bars for Lost Cities matches")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--policy", choices=["auto", "network", "sdcfr"], default="auto",
                    help="average policy to evaluate: the strategy net, or the SD-CFR sums a "
                         "train.average=sdcfr checkpoint holds (default auto: sdcfr if present)")
    args = ap.parse_args(argv)
    if args.games < 1:
        ap.error("--games must be at least 1")

    from trainer.checkpoint import build_net, game_of, load_checkpoint
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    use_sdcfr = args.policy == "sdcfr" or (args.policy == "auto" and "sdcfr" in ckpt)
    if use_sdcfr and "sdcfr" not in ckpt:
        print(f"error: {ckpt['path']}: --policy sdcfr, but the run was trained with train.average=network "
              "(no SD-CFR sums in the checkpoint)", file=sys.stderr)
        return 2
    try:
        game = game_of(ckpt)
        if use_sdcfr:
            from trainer.sdcfr import TabularAverage
            net = TabularAverage(game)
            net.load_state_dict(ckpt["sdcfr"])
        else:
            net = build_net(ckpt, "strategy")
    except (KeyError, ValueError, RuntimeError) as e:
        print(f"error: {ckpt['path']}: cannot rebuild game/average policy: {e!r}", file=sys.stderr)
        return 2
    opponents = OPPONENTS if args.opponent == "both" else (args.opponent,)
    metrics = evaluate(game, net, lc_games=args.games, opponents=opponents, seed=args.seed,
                       openspiel=not args.no_openspiel, greedy=args.greedy, progress=args.progress)
    if args.json:
        print(json.dumps(_jsonable({"checkpoint": ckpt["path"], "iteration": ckpt.get("iteration"),
                                    "game": game.name, "policy": "sdcfr" if use_sdcfr else "network",
                                    **metrics})))
    else:
        print(f"{ckpt['path']}  (game {game.name}, iteration {ckpt.get('iteration')}, "
              f"policy {'sdcfr' if use_sdcfr else 'network'})")
        print(format_table(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
