"""What the hidden cards are worth to the search player, Lost Cities.
`python -m benchmarks.lc_ceiling [--oracles plain hand endgame:6 all] [--worlds 640] [--games 400]
                                 [--seed 777] [--jobs 2] [--json]`

The no-net search player (agents.searcher: heuristic playouts, raced) plays
HeuristicBot on duplicate deals, once as a player plays it and once per
oracle, on the same deals (deal d dealt from seed + d). An oracle lets the
search see cards that no player can see (SearchPlayer's `oracle`):
    plain            nothing hidden is seen: the search as it plays
    hand             the opponent's hand; the worlds shuffle the deck order only
    endgame:D        the whole deal once the deck holds at most D cards
    hand+endgame:D   both
    all              the whole deal at every decision
So each row bounds what a better guess of those cards could add to this
search: weighting the worlds by the opponent's past moves can at most see
its hand, and an endgame search at most the deal once the deck is short.
The rows are diagnostics of the search, never players.
"""
import argparse
import json
import sys
import time

DEFAULT_ORACLES = ("plain", "hand", "endgame:6", "hand+endgame:6", "all")


def oracle_setting(row):
    """SearchPlayer's `oracle` for a row's name ("plain": None)."""
    return None if row == "plain" else row


def ceiling_rows(oracles, worlds=640, games=400, seed=777, jobs=1, progress=None):
    """One dict per oracle: the duplicate match's statistics (agents.evaluate
    duplicate_match) and the search's time per decision."""
    import engine
    import torch
    from agents.matches import duplicate_match, parallel_match
    from agents.players import agent_from_spec
    from agents.searcher import SearchPlayer
    torch.set_num_threads(1)
    game_spec = {"name": "lost_cities", "max_turns": 200}
    game = engine.load_game(**game_spec)
    rows = []
    for oracle in oracles:
        settings = {"worlds": worlds, "seed": seed, "oracle": oracle_setting(oracle)}
        player = SearchPlayer(game, **settings)       # checks the oracle before any game is played
        t0 = time.perf_counter()
        if jobs > 1:
            r = parallel_match({"game": game_spec, "search": settings}, "heuristic", games, seed=seed,
                               jobs=jobs, agent=player, build=agent_from_spec)
        else:
            r = duplicate_match(game, player, "heuristic", games, seed=seed)
        row = {"oracle": oracle, "player": player.name, "seconds": time.perf_counter() - t0,
               "ms_per_decision": player.ms_per_decision(), "decisions": player.decisions,
               **{k: r[k] for k in ("games", "win_rate", "win_rate_lo", "win_rate_hi", "margin", "margin_lo",
                                    "margin_hi", "capped")}}
        rows.append(row)
        if progress:
            progress(row)
    return rows


def format_row(row):
    return (f"{row['oracle']:>16} | {row['win_rate']:6.1%} ({row['win_rate_lo']:.1%}-{row['win_rate_hi']:.1%}) | "
            f"{row['margin']:+6.1f} ({row['margin_lo']:+.1f}..{row['margin_hi']:+.1f}) | "
            f"{row['ms_per_decision']:7.1f} ms | {row['seconds']:6.0f} s")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lc_ceiling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracles", nargs="+", default=list(DEFAULT_ORACLES),
                    help="rows, in order (default: %(default)s)")
    ap.add_argument("--worlds", type=int, default=640, help="worlds per decision (default 640)")
    ap.add_argument("--games", type=int, default=400, help="games per row, in duplicate pairs (default 400)")
    ap.add_argument("--seed", type=int, default=777, help="deal d is dealt from seed + d (default 777)")
    ap.add_argument("--jobs", type=int, default=1, help="processes per row, one thread each (default 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.games < 2 or args.worlds < 1 or args.jobs < 1:
        ap.error("--games must be >= 2, --worlds and --jobs >= 1")
    from agents.searcher import parse_oracle
    for oracle in args.oracles:          # every row checked before hours of games
        try:
            parse_oracle(oracle_setting(oracle))
        except ValueError as e:
            ap.error(str(e))
    if not args.json:
        print(f"the no-net search ({args.worlds} worlds) vs HeuristicBot, {args.games} games a row "
              f"on the same deals (seed {args.seed})")
        print(f"{'sees':>16} | {'wins (95% CI)':<21} | {'margin (95% CI)':<22} | {'decision':>10} | {'wall':>8}")
    rows = ceiling_rows(args.oracles, args.worlds, args.games, args.seed, args.jobs,
                        progress=None if args.json else lambda r: print(format_row(r), flush=True))
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
