"""Bot matches: `python -m engine.match --games 200 [--a heuristic --b random]`.

Plays seeded Lost Cities games between two bots, alternating seats, and
prints the win rate of bot A with a 95% confidence interval and the mean
score difference.
"""
import argparse
import math

import engine
from engine.bots import HeuristicBot, RandomBot, play_game

try:
    from tqdm import tqdm
except ImportError:  # progress bars are optional here
    def tqdm(it, **_):
        return it


def make_bot(kind, game, seed):
    """A bot by name ("random", "heuristic"), or `kind` itself if it is any
    object with a `.step(state)` method (a trained policy, your own bot)."""
    if not isinstance(kind, str):
        if callable(getattr(kind, "step", None)):
            return kind
        raise ValueError(f"a bot needs a .step(state) method, got {kind!r}")
    if kind == "random":
        return RandomBot(seed)
    if kind == "heuristic":
        return HeuristicBot(game)
    raise ValueError(f"unknown bot {kind!r}; known: heuristic, random")


def wilson_interval(wins, n, z=1.96):
    """95% Wilson score interval for a win rate."""
    if n == 0:
        return (0.0, 1.0)
    p = wins / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _label(bot):
    return bot if isinstance(bot, str) else getattr(bot, "name", type(bot).__name__)


def run_match(game, a, b, games, seed=0, progress=True):
    """Bot a against bot b (names, or objects with `.step(state)`), seats
    alternating; results from a's seat."""
    wins = ties = 0
    diffs = []
    for g in tqdm(range(games), desc=f"{_label(a)} vs {_label(b)}", disable=not progress):
        seat = g % 2
        bots = [None, None]
        bots[seat] = make_bot(a, game, seed + 2 * g)
        bots[1 - seat] = make_bot(b, game, seed + 2 * g + 1)
        r = play_game(game, bots, seed + g).returns()[seat]
        wins += r > 0
        ties += r == 0
        diffs.append(r)
    mean = sum(diffs) / games
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / max(games - 1, 1))
    return {"games": games, "wins": wins, "ties": ties, "win_rate": wins / games,
            "win_rate_ci95": wilson_interval(wins, games), "mean_score_diff": mean,
            "score_diff_ci95": (mean - 1.96 * sd / math.sqrt(games), mean + 1.96 * sd / math.sqrt(games))}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m engine.match", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--a", default="heuristic", choices=["heuristic", "random"])
    ap.add_argument("--b", default="random", choices=["heuristic", "random"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.games < 1:
        ap.error("--games must be at least 1")
    game = engine.load_game("lost_cities")
    r = run_match(game, args.a, args.b, args.games, args.seed)
    lo, hi = r["win_rate_ci95"]
    dlo, dhi = r["score_diff_ci95"]
    print(f"{args.a} vs {args.b}: {r['wins']}/{r['games']} wins ({r['win_rate']:.1%}, 95% CI {lo:.1%}-{hi:.1%}), "
          f"mean score diff {r['mean_score_diff']:+.1f} (95% CI {dlo:+.1f}..{dhi:+.1f})")


if __name__ == "__main__":
    main()
