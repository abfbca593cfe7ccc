"""A learned belief about the opponent's hand, for the Lost Cities search.

The search (agents.searcher) redeals the cards its player cannot see. With
no belief every deal consistent with what the player has seen is as likely;
the opponent's play says more than that (a player who opened an expedition
tends to hold its colour). A BeliefNet reads what the player sees (its
information state, the policy's encoding) and predicts, for each kind of
card the player cannot see, the share of those cards that the opponent
holds. `belief=PATH` in a search spec redeals each world with those odds
(engine._lc_search.resample_weighted): the opponent's unseen cards are
drawn one at a time, each remaining card with probability proportional to
the odds of its kind.

    python -m agents.belief RUN --games 8000 --minutes 4      # RUN/belief.pt
    python -m agents.evaluate RUN --search playout=critic,...,belief=RUN/belief.pt ...

It learns from the run's own agent playing itself (`play_rows`): the
belief of a player about an opponent that plays as it does. Its held-out
error is reported against the uniform redeal's (every unseen card held with
the same probability), on whole games held out.
"""
import argparse
import json
import os
import pickle
import sys
import time

import numpy as np
import torch

from engine._batch import StateBatch
from engine._lc_search import hidden_counts
from trainer.symmetry import ColourAugment

FORMAT = "deepcfr-belief-1"


def play_rows(policy, games, seed=0, batch=512, greedy=True):
    """The agent `policy` (agents.policy.Policy) plays `games` deals against
    itself, `batch` at a time, one batched forward per player per step.
    Returns (info float16 [N, T], pool uint8 [N, K], opp uint8 [N, K], game
    int32 [N]): a row per decision, what the player to act sees, the unseen
    cards of each kind and how many of them the opponent holds
    (engine._lc_search.hidden_counts), and the game's index. `greedy` plays
    each side's most likely move, as the agent plays when judged."""
    from agents.policy import sample_actions
    game = policy.game
    T, A = game.information_state_tensor_size(), game.num_distinct_actions()
    rng = np.random.default_rng([seed, 0xBE11EF])
    out = {"info": [], "pool": [], "opp": [], "game": []}
    info = np.zeros((batch, T), np.float32)
    mask = np.zeros((batch, A), np.uint8)
    for first in range(0, games, batch):
        n = min(batch, games - first)
        b = StateBatch(game, n)
        for i in range(n):
            b.set(i, game.new_initial_state(seed=int(seed) * 1_000_003 + first + i))
        while True:
            players = b.current_players(0, n)
            if (players < 0).all():
                break
            rows_all, acts_all = [], []
            for p in (0, 1):
                rows = np.flatnonzero(players == p)
                if not len(rows):
                    continue
                m = len(rows)
                b.encode(rows, p, info, mask)
                pool, opp = hidden_counts(b, rows, p)
                out["info"].append(info[:m].astype(np.float16))
                out["pool"].append(pool)
                out["opp"].append(opp)
                out["game"].append((first + rows).astype(np.int32))
                probs = policy.probs(info[:m], mask[:m], np.full(m, p))
                rows_all.append(rows)
                acts_all.append(sample_actions(probs, rng, greedy))
            b.apply(np.concatenate(rows_all), np.concatenate(acts_all))
    return tuple(np.concatenate(out[k]) for k in ("info", "pool", "opp", "game"))


def build_belief_net(T, K, hidden=(256, 256)):
    layers, width = [], T
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, K))
    return torch.nn.Sequential(*layers)


def belief_loss(logits, pool, opp):
    """Per-row binomial log loss of the opponent's share of each kind: a
    kind with `pool` unseen cards, `opp` of them in the opponent's hand,
    costs opp * -log p + (pool - opp) * -log(1 - p), p = sigmoid(logit);
    summed over kinds, mean over rows."""
    pool, opp = pool.float(), opp.float()
    ll = opp * torch.nn.functional.logsigmoid(logits) + (pool - opp) * torch.nn.functional.logsigmoid(-logits)
    return -ll.sum(dim=1).mean()


def uniform_loss(pool, opp):
    """belief_loss of the uniform redeal: every unseen card held with
    probability (opponent's unseen cards) / (all unseen cards)."""
    pool, opp = pool.double(), opp.double()
    p = (opp.sum(1, keepdim=True) / pool.sum(1, keepdim=True).clamp(min=1)).clamp(1e-9, 1 - 1e-9)
    ll = opp * torch.log(p) + (pool - opp) * torch.log1p(-p)
    return float(-ll.sum(dim=1).mean())


class BeliefNet:
    """A trained belief (see the module docstring): `odds(state, me)` is
    float64 [num_kinds], per unseen card of each kind the odds p / (1 - p)
    that `me`'s opponent holds it, for resample_weighted."""

    def __init__(self, net, path=None):
        self.net = net.eval()
        self.path = path
        self.name = os.path.basename(path) if path else "net"

    def odds(self, state, me):
        info = torch.as_tensor(np.asarray(state.information_state_tensor(me), np.float32))[None]
        with torch.inference_mode():
            logit = self.net(info)[0].double().numpy()
        return np.exp(np.clip(logit, -20.0, 20.0))


def save_belief(path, net, meta):
    T = net[0].in_features
    K = net[-1].out_features
    hidden = [m.out_features for m in net if isinstance(m, torch.nn.Linear)][:-1]
    torch.save({"format": FORMAT, "T": T, "K": K, "hidden": hidden, "state_dict": net.state_dict(),
                "meta": meta}, path)


def load_belief(path):
    """A BeliefNet from a file written by `python -m agents.belief`;
    ValueError naming the file if it is not one."""
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"cannot read a belief from {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{path} is not a belief file (python -m agents.belief writes them)")
    net = build_belief_net(d["T"], d["K"], d["hidden"])
    net.load_state_dict(d["state_dict"])
    return BeliefNet(net, path)


def train_belief(info, pool, opp, games, minutes=4.0, seed=0, batch=1024, lr=1e-3, heldout=0.1,
                 hidden=(256, 256), game=None, log=print):
    """Train a belief net on play_rows' arrays for `minutes` of wall clock;
    whole games (a `heldout` share) are kept out and judged. With `game`,
    every minibatch row gets a random renaming of the colours
    (trainer.symmetry.ColourAugment). Returns (net, metrics): held-out log
    loss, the uniform redeal's, and the share below it."""
    torch.manual_seed(seed)
    gids = np.unique(games)
    rng = np.random.default_rng([seed, 0xBE11EF, 1])
    held = np.isin(games, rng.choice(gids, max(1, int(len(gids) * heldout)), replace=False))
    tr, te = np.flatnonzero(~held), np.flatnonzero(held)
    X, P, O = torch.from_numpy(info), torch.from_numpy(pool), torch.from_numpy(opp)
    K = pool.shape[1]
    net = build_belief_net(info.shape[1], K, hidden)
    rename = ColourAugment(game) if game is not None else None
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def judge():
        net.eval()
        with torch.inference_mode():
            loss = sum(float(belief_loss(net(X[te[i:i + 8192]].float()), P[te[i:i + 8192]], O[te[i:i + 8192]]))
                       * len(te[i:i + 8192]) for i in range(0, len(te), 8192)) / len(te)
        net.train()
        return loss

    base = uniform_loss(P[te], O[te])
    t0, steps, last = time.monotonic(), 0, 0.0
    while time.monotonic() - t0 < minutes * 60:
        idx = tr[rng.integers(0, len(tr), batch)]
        x, p, o = info[idx].astype(np.float32), pool[idx], opp[idx]
        if rename is not None:           # the kinds' columns move with the colours, as play actions do
            target = np.zeros((batch, game.num_distinct_actions()), np.float32)
            target[:, :K], target[:, K:2 * K] = p, o
            r = rename({"info": x, "target": target}, rng)
            x, p, o = r["info"], r["target"][:, :K], r["target"][:, K:2 * K]
        loss = belief_loss(net(torch.from_numpy(x)), torch.from_numpy(np.ascontiguousarray(p)),
                           torch.from_numpy(np.ascontiguousarray(o)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if time.monotonic() - last > 30:
            last = time.monotonic()
            h = judge()
            log(f"belief step {steps}: held-out log loss {h:.4f} a row, uniform {base:.4f} "
                f"({100 * (1 - h / base):.1f}% below), {time.monotonic() - t0:.0f} s")
    h = judge()
    metrics = {"steps": steps, "rows": int(len(tr)), "heldout_rows": int(len(te)), "heldout_loss": h,
               "uniform_loss": base, "below_uniform": 1 - h / base}
    return net.eval(), metrics


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m agents.belief", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a Lost Cities run directory or checkpoint: its agent plays the games")
    ap.add_argument("--games", type=int, default=8000, help="self-played games to learn from (default 8000)")
    ap.add_argument("--minutes", type=float, default=4.0, help="training wall clock (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="where to write it (default RUN/belief.pt, or next to a "
                                                "checkpoint file)")
    args = ap.parse_args(argv)
    if args.games < 10 or args.minutes <= 0:
        ap.error("--games must be at least 10 and --minutes > 0")
    from agents.policy import load_policy
    try:
        policy = load_policy(args.run, kind="average-greedy", seed=args.seed)
    except (OSError, ValueError) as e:
        ap.error(str(e))
    if policy.game.name != "lost_cities":
        ap.error(f"a belief is for lost_cities, and {args.run} plays {policy.game.name}")
    out = args.out or os.path.join(args.run if os.path.isdir(args.run) else os.path.dirname(args.run),
                                   "belief.pt")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.monotonic()
    info, pool, opp, games = play_rows(policy, args.games, seed=args.seed)
    print(f"played {args.games} games: {len(info)} decisions in {time.monotonic() - t0:.0f} s", flush=True)
    net, metrics = train_belief(info, pool, opp, games, minutes=args.minutes, seed=args.seed,
                                game=policy.game, log=lambda m: print(m, flush=True))
    metrics.update(games=args.games, run=args.run)
    save_belief(out, net, metrics)
    print(json.dumps({"out": out, **metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
