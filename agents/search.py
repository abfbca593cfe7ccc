"""The search player's command line: without a net (heuristic or random
playouts) against HeuristicBot or RandomBot on duplicate deals.

    python -m agents.search --worlds 640 --games 400 [--jobs N]

The player itself is agents.searcher.SearchPlayer (re-exported here).
"""
import argparse
import json
import sys
import time

from agents.searcher import (BLUEPRINT_DEFAULTS, DEFAULT_WORLDS, PLAYOUTS, SCHEDULES,  # noqa: F401 (re-exported)
                             SearchPlayer, make_search_player, parse_oracle, parse_search_spec,
                             with_blueprint_defaults)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m agents.search",
        description="The search player without a net (heuristic or random playouts) against HeuristicBot "
                    "on duplicate deals: win rate and margin with 95% intervals, and time per decision.")
    ap.add_argument("--worlds", type=int, nargs="+", default=[64],
                    help="worlds per decision (several: a table; default 64, a quick look: "
                         f"the player's own default is {DEFAULT_WORLDS})")
    ap.add_argument("--playout", choices=["heuristic", "random"], default="heuristic")
    ap.add_argument("--no-halving", action="store_true", help="spend every world on every candidate")
    ap.add_argument("--schedule", choices=SCHEDULES, default=None,
                    help="how the worlds are spent (default: race with heuristic playouts, else halving)")
    ap.add_argument("--z", type=float, default=3.0, help="race: standard errors before a candidate leaves")
    ap.add_argument("--eps", type=float, default=0.1, help="race: points of indifference")
    ap.add_argument("--time-ms", type=float, default=None, help="time budget per decision")
    ap.add_argument("--games", type=int, default=400, help="games per point, in duplicate pairs (default 400)")
    ap.add_argument("--opponent", choices=["heuristic", "random"], default="heuristic")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1,
                    help="play the games in this many processes, one thread each (default 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.games < 2 or min(args.worlds) < 1:
        ap.error("--games must be >= 2 and --worlds >= 1")
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    import engine
    import torch
    from agents.matches import duplicate_match, parallel_match
    from agents.players import agent_from_spec
    torch.set_num_threads(1)
    game_spec = {"name": "lost_cities", "max_turns": 200}
    game = engine.load_game(**game_spec)
    rows = []
    for k in args.worlds:
        settings = dict(worlds=k, playout=args.playout, seed=args.seed, halving=not args.no_halving,
                        time_limit_s=args.time_ms / 1000.0 if args.time_ms else None,
                        schedule=args.schedule, z=args.z, eps=args.eps)
        player = SearchPlayer(game, **settings)
        t0 = time.perf_counter()
        if args.jobs > 1:
            r = parallel_match({"game": game_spec, "search": settings}, args.opponent, args.games,
                               seed=args.seed, jobs=args.jobs, agent=player, build=agent_from_spec)
        else:
            r = duplicate_match(game, player, args.opponent, args.games, seed=args.seed)
        row = {"worlds": k, "games": r["games"], "win_rate": r["win_rate"], "win_rate_lo": r["win_rate_lo"],
               "win_rate_hi": r["win_rate_hi"], "margin": r["margin"], "margin_lo": r["margin_lo"],
               "margin_hi": r["margin_hi"], "ms_per_decision": player.ms_per_decision(),
               "cpu_ms_per_decision": player.ms_per_decision(cpu=True),
               "decisions": player.decisions, "seconds": time.perf_counter() - t0,
               "player": player.name, "worlds_per_decision": player.worlds_played / max(player.decisions, 1)}
        rows.append(row)
        if not args.json:
            print(f"{player.name} worlds {k:>4}: {r['win_rate']:.1%} [{r['win_rate_lo']:.1%}, {r['win_rate_hi']:.1%}] wins, "
                  f"margin {r['margin']:+.1f} [{r['margin_lo']:+.1f}, {r['margin_hi']:+.1f}] "
                  f"vs {args.opponent} over {r['games']} games; {row['ms_per_decision']:.2f} ms per decision "
                  f"({row['cpu_ms_per_decision']:.2f} ms of CPU, {row['worlds_per_decision']:.0f} worlds)",
                  flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
