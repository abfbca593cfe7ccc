"""How noisy are Lost Cities regret targets? `python -m studies.lc_targets`

The default traversal values each cutoff with one heuristic playout of the
true deal. The heuristic is deterministic, so that value is a function of
the deal: what makes a regret target noisy is the part of the deal the
traverser cannot see (the opponent's hand, the deck order).

This measures that noise directly. At `--states` decision points (player to
play or discard, at turns spread over the game, reached by heuristic
self-play from seeded deals) it redeals the hidden cards `--worlds` times
(StateBatch.resample), and in every world plays every legal action and then
the heuristic for both sides to the end. With v[w, a] the final score
difference for the player to act and r[w, a] = v[w, a] - mean_a v[w, a] the
regret target against a uniform policy in world w:

    signal  S = mean_a (mean_w r[w, a])^2     what the net should learn
    noise   N = mean_a var_w r[w, a]          what one world's target adds

and the noise of a target averaged over k worlds is N / k. It also reports
how often the best action of k worlds' mean agrees with the best action of
all worlds' mean. Scores are in game points (value_scale not applied).
"""
import argparse
import json
import sys
import time

import numpy as np

import engine
from engine._batch import StateBatch


def decision_states(game, n, seed):
    """n play-phase states at turns spread over the game, by heuristic self-play."""
    rng = np.random.default_rng(seed)
    states = []
    g = 0
    while len(states) < n:
        state = game.new_initial_state(seed=seed * 100003 + g)
        g += 1
        stop = int(rng.integers(0, 40))            # a turn in the first ~80% of a typical game
        while not state.is_terminal() and state.turn() < stop:
            state.apply_action(game.heuristic_action(state))
        if not state.is_terminal() and state.phase() == "play":
            states.append(state)
    return states


def world_values(game, state, worlds, seed, batch=None):
    """v[w, a]: final score difference for the player to act, in world w after action a."""
    me = state.current_player()
    legal = state.legal_actions()
    K, A = worlds, len(legal)
    b = batch if batch is not None and batch.capacity >= K * A else StateBatch(game, K * A)
    b.fill(state, 0, K)
    b.resample(me, seed, 0, K)
    if A > 1:
        b.copy_rows(np.tile(np.arange(K), A - 1), np.arange(K, K * A))
    b.apply(np.arange(K * A), np.repeat(np.asarray(legal, np.int32), K))
    b.playout(seed, 0, K * A)
    return b.returns(me, 0, K * A).reshape(A, K).T, legal


def target_noise(values, ks=(1, 4, 16, 64), rng=None):
    """Signal, noise and best-action agreement of one state's v[w, a]."""
    r = values - values.mean(axis=1, keepdims=True)
    mean_r = r.mean(axis=0)
    out = {"signal": float((mean_r ** 2).mean()), "noise": float(r.var(axis=0, ddof=1).mean())}
    best = int(np.argmax(mean_r))
    rng = rng or np.random.default_rng(0)
    K = len(values)
    for k in ks:
        if k > K // 2:
            continue
        trials = 32
        hits = 0
        for _ in range(trials):
            pick = rng.choice(K, size=k, replace=False)
            hits += int(np.argmax(r[pick].mean(axis=0)) == best)
        out[f"agree_{k}"] = hits / trials
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m studies.lc_targets", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--states", type=int, default=200, help="decision points (default 200)")
    ap.add_argument("--worlds", type=int, default=128, help="redeals of the hidden cards per point (default 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-turns", type=int, default=200, help="the game's turn cap, as the training configs set it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.states < 1 or args.worlds < 8:
        ap.error("--states must be >= 1 and --worlds >= 8")
    game = engine.load_game("lost_cities", max_turns=args.max_turns)
    t0 = time.perf_counter()
    states = decision_states(game, args.states, args.seed)
    batch = StateBatch(game, args.worlds * game.max_legal_actions())
    rng = np.random.default_rng(args.seed)
    rows = []
    for i, s in enumerate(states):
        v, legal = world_values(game, s, args.worlds, args.seed * 7919 + i, batch)
        rows.append({"turn": s.turn(), "actions": len(legal), **target_noise(v, rng=rng)})
    elapsed = time.perf_counter() - t0
    sig = np.array([r["signal"] for r in rows])
    noi = np.array([r["noise"] for r in rows])
    summary = {"states": len(rows), "worlds": args.worlds, "seconds": elapsed,
               "mean_signal": float(sig.mean()), "mean_noise": float(noi.mean()),
               "noise_to_signal": float(noi.mean() / sig.mean()),
               "median_state_noise_to_signal": float(np.median(noi / np.maximum(sig, 1e-9)))}
    for k in (1, 4, 16, 64):
        vals = [r[f"agree_{k}"] for r in rows if f"agree_{k}" in r]
        if vals:
            summary[f"best_action_agreement_{k}_worlds"] = float(np.mean(vals))
    by_phase = {}
    for name, lo, hi in (("early (turns 0-12)", 0, 13), ("middle (13-25)", 13, 26), ("late (26+)", 26, 10 ** 6)):
        sel = [r for r in rows if lo <= r["turn"] < hi]
        if sel:
            by_phase[name] = {"states": len(sel),
                              "noise_to_signal": float(np.mean([r["noise"] for r in sel]) /
                                                       np.mean([r["signal"] for r in sel]))}
    summary["by_phase"] = by_phase
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{len(rows)} decision points x {args.worlds} redeals of the hidden cards, heuristic playouts "
          f"({elapsed:.1f} s)")
    print(f"  signal (mean squared true advantage)   {summary['mean_signal']:10.1f} points^2")
    print(f"  noise of a one-world target (variance) {summary['mean_noise']:10.1f} points^2")
    print(f"  noise / signal                         {summary['noise_to_signal']:10.2f}"
          f"   (median over points {summary['median_state_noise_to_signal']:.2f})")
    for k in (1, 4, 16, 64):
        key = f"best_action_agreement_{k}_worlds"
        if key in summary:
            print(f"  best action of {k:>2} world(s) = best of all {args.worlds}: {summary[key]:.1%}"
                  f"   (noise / signal of the {k}-world mean: {summary['noise_to_signal'] / k:.2f})")
    for name, d in by_phase.items():
        print(f"  {name:<20} {d['states']:>4} points, noise / signal {d['noise_to_signal']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
