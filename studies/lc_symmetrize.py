"""Can the strategy net learn its own symmetric read-out?
`python -m studies.lc_symmetrize RUN --out SYM.pt [--games 2000] [--epochs 4]`

The symmetric read-out (agents.policy.SymmetricPolicy) averages a net over
every renaming of Lost Cities' colours, at C! forwards' rows a decision.
This plays --games of the agent's own games (its sampled policy in both
seats, every game in progress moving together, one forward a step), takes
the symmetric read-out's probabilities at each decision with two or more
legal moves, fine-tunes the strategy net on them (cross-entropy, each
row's colours renamed at random, --epochs passes at --lr), and saves the
checkpoint with the net replaced, which every evaluation tool reads as a
run. It prints how often the net's greedy move and the symmetric
read-out's differ on those decisions, before and after.
docs/studies/2026-12-08-colour-symmetry.md has the figures.
"""
import argparse
import json
import time

import numpy as np
import torch

from agents.checkpoint import build_net, game_of, load_checkpoint, save_agent_file
from agents.policy import AveragePolicy, SymmetricPolicy
from agents.symmetry import ColourAugment
from trainer.learn import strategy_loss

CHUNK = 4096


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_symmetrize", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a Lost Cities run directory or checkpoint file")
    ap.add_argument("--out", required=True, help="where to save the checkpoint with the fine-tuned net (.pt)")
    ap.add_argument("--games", type=int, default=2000, help="the agent's own games to learn on (default 2000)")
    ap.add_argument("--epochs", type=float, default=4.0, help="passes over their decisions (default 4)")
    ap.add_argument("--lr", type=float, default=1e-4, help="Adam's rate (default 1e-4)")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.games < 1 or args.epochs <= 0 or args.lr <= 0 or args.batch < 1:
        ap.error("--games and --batch must be >= 1, --epochs and --lr > 0")
    ckpt = load_checkpoint(args.run)
    game = game_of(ckpt)
    if game.name != "lost_cities":
        ap.error(f"{ckpt['path']} is a {game.name} run; the colours to rename are Lost Cities'")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    net = build_net(ckpt, "strategy")
    t0 = time.monotonic()
    info, mask, players = own_decisions(game, AveragePolicy(net, seed=args.seed), args.games, args.seed)
    target = _probs(SymmetricPolicy(net, game), info, mask, players).astype(np.float32)
    before = _differ(target, _probs(AveragePolicy(net), info, mask, players))
    played_s = time.monotonic() - t0
    steps = fine_tune(net, game, info, mask, target, args.epochs, args.lr, args.batch, rng)
    after = _differ(target, _probs(AveragePolicy(net), info, mask, players))
    out = {k: v for k, v in ckpt.items() if k != "path"}
    out["nets"] = dict(ckpt["nets"], strategy={k: v.detach().clone() for k, v in net.state_dict().items()})
    out["symmetrized"] = {"from": ckpt["path"], "games": args.games, "decisions": len(info), "epochs": args.epochs,
                          "lr": args.lr, "seed": args.seed}
    save_agent_file(args.out, out)
    print(json.dumps({"out": args.out, "games": args.games, "decisions": int(len(info)), "steps": steps,
                      "greedy_differs_before": round(before, 4), "greedy_differs_after": round(after, 4),
                      "games_and_targets_s": round(played_s, 1), "total_s": round(time.monotonic() - t0, 1)}),
          flush=True)


def own_decisions(game, agent, games, seed):
    """(info uint8, mask bool, player) of every decision with two or more
    legal moves in `games` games of `agent` against itself, sampled."""
    states = [game.new_initial_state(seed=50_000_000 + seed * 100_000 + g) for g in range(games)]
    parts = []
    live = list(range(games))
    while live:
        players = np.array([states[g].current_player() for g in live])
        x = np.stack([states[g].information_state_tensor(p) for g, p in zip(live, players)]).astype(np.float32)
        m = np.stack([states[g].legal_actions_mask() for g in live]).astype(bool)
        for g, a in zip(live, agent.actions(x, m, players)):
            states[g].apply_action(int(a))
        keep = m.sum(axis=1) > 1
        parts.append((x[keep].astype(np.uint8), m[keep], players[keep]))
        live = [g for g in live if not states[g].is_terminal()]
    return tuple(np.concatenate(p) for p in zip(*parts))


def fine_tune(net, game, info, mask, target, epochs, lr, batch, rng):
    """Cross-entropy of the net's policy to `target` over minibatches drawn
    with replacement, each row's colours renamed at random. Returns the steps."""
    augment = ColourAugment(game)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    steps = max(1, int(epochs * len(info) / batch))
    net.train()
    for _ in range(steps):
        idx = rng.integers(0, len(info), batch)
        b = augment({"info": info[idx].astype(np.float32), "mask": mask[idx].astype(np.float32),
                     "target": target[idx]}, rng)
        x, m, t = (torch.from_numpy(b[k]) for k in ("info", "mask", "target"))
        loss = strategy_loss(net, x, t, m > 0, torch.ones(len(x)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
    net.eval()
    return steps


def _probs(policy, info, mask, players):
    return np.concatenate([policy.probs(info[i:i + CHUNK].astype(np.float32), mask[i:i + CHUNK], players[i:i + CHUNK])
                           for i in range(0, len(info), CHUNK)])


def _differ(a, b):
    return float(np.mean(a.argmax(axis=1) != b.argmax(axis=1)))


if __name__ == "__main__":
    main()
