"""Where an agent's losses lie, deal by deal.
`python -m studies.lc_losses AGENT [--opponent heuristic] [--deals 1000] [--seed 777]`

AGENT is a run directory or checkpoint (its greedy average policy),
"search:SPEC" (the search player, as `agents.play search:SPEC`: a run
directory with optional settings, or "heuristic" for the search without a
net), or a bot: "heuristic" or "cautious".

Every deal is played twice with the seats swapped, as agents.evaluate's
duplicate matches do (the same deals for the same --seed), and a third
time as the mirror: the opponent bot against itself. The mirror's final
score difference from a seat says how the deal treats that seat when both
sides play the bot's way. The report: the share of deals the agent wins in
both seats, one or neither; its win rate and margin by the mirror's
difference from its seat; and how many of its losses come in seats where
the mirror lost too, which is the part of the losses a deal's cards explain
at the bot's level of play.
"""
import argparse
import json
import sys

import numpy as np

import engine

BINS = (-np.inf, -40, -20, 0, 20, 40, np.inf)


def load_agent(spec):
    """(player with .step(state), its game) for an AGENT argument."""
    if spec in ("heuristic", "cautious"):
        from agents.players import make_opponent
        game = engine.load_game("lost_cities", max_turns=200)
        return make_opponent(spec, game, None), game
    if spec.startswith("search:"):
        from agents.searcher import make_search_player
        player = make_search_player(spec[len("search:"):])
        return player, player.game
    from agents.policy import load_policy
    policy = load_policy(spec, kind="average-greedy")
    return policy, policy.game


def where_losses_lie(game, agent, opponent, deals, seed):
    """The report as a dict (module docstring); `diffs` and `mirror` are the
    agent's and the mirror's score differences, game 2i + s being deal i
    from seat s."""
    from agents.matches import play_deals
    from agents.players import make_opponent, opponent_of
    ids = range(deals)
    mirror, _ = play_deals(game, make_opponent(opponent, game, None), opponent_of(opponent), ids, seed=seed)
    diffs, capped = play_deals(game, agent, opponent_of(opponent), ids, seed=seed)
    mirror, diffs = np.asarray(mirror, np.float64), np.asarray(diffs, np.float64)
    win = (diffs > 0) + 0.5 * (diffs == 0)
    per_deal = win[0::2] + win[1::2]
    lost = win < 0.5
    bins = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (mirror >= lo) & (mirror < hi)
        bins.append({"mirror_lo": float(lo), "mirror_hi": float(hi), "games": int(m.sum()),
                     "win_rate": float(win[m].mean()) if m.any() else None,
                     "margin": float(diffs[m].mean()) if m.any() else None})
    return {"games": len(diffs), "capped": int(capped), "win_rate": float(win.mean()), "margin": float(diffs.mean()),
            "deals_won": {str(k): float(np.mean(per_deal == k)) for k in (0, 0.5, 1, 1.5, 2)},
            "by_mirror": bins,
            "losses": int(lost.sum()),
            "losses_mirror_lost": float(np.mean(mirror[lost] < 0)) if lost.any() else None,
            "losses_mirror_margin": float(mirror[lost].mean()) if lost.any() else None,
            "diffs": diffs.tolist(), "mirror": mirror.tolist()}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_losses", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("agent")
    ap.add_argument("--opponent", default="heuristic", choices=["heuristic", "cautious"])
    ap.add_argument("--deals", type=int, default=1000, help="deals, each played from both seats (default 1000)")
    ap.add_argument("--seed", type=int, default=777, help="deal d is dealt from seed + d (default 777)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.deals < 1:
        ap.error("--deals must be at least 1")
    agent, game = load_agent(args.agent)
    out = where_losses_lie(game, agent, args.opponent, args.deals, args.seed)
    out.update(agent=args.agent, opponent=args.opponent, seed=args.seed)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.agent} vs {args.opponent}, {out['games']} games on {args.deals} deals (seed {args.seed}): "
          f"{out['win_rate']:.1%} wins, {out['margin']:+.1f} points a game")
    print("deals won in both seats {2:.1%}, in one {1:.1%}, in neither {0:.1%} (ties: half a win)".format(
        *(out["deals_won"][k] for k in ("0", "1", "2"))))
    print(f"{'mirror diff from the seat':>26} | games | wins   | margin")
    for b in out["by_mirror"]:
        if b["games"]:
            label = f"[{b['mirror_lo']:g}, {b['mirror_hi']:g})"
            print(f"{label:>26} | {b['games']:5d} | {b['win_rate']:6.1%} | {b['margin']:+6.1f}")
    if out["losses"]:
        print(f"of {out['losses']} losses, {out['losses_mirror_lost']:.1%} in seats the mirror lost too "
              f"(the mirror's mean difference there: {out['losses_mirror_margin']:+.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
