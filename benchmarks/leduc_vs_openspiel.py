"""Leduc side by side: this project's Deep CFR against OpenSpiel's own
(open_spiel.python.pytorch.deep_cfr), given the same wall-clock.

    python -m benchmarks.leduc_vs_openspiel --seconds 300 [--json]

Ours runs as the real entry point (`python -m trainer --config
configs/leduc.yaml` with a time limit); its total wall time, start-up and
final strategy training included, becomes OpenSpiel's budget: OpenSpiel's
solver runs iterations while the next one still fits, then trains its policy
network. Both average policies are judged by OpenSpiel's exploitability.
OpenSpiel's Deep CFR needs `pip install open-spiel dm-tree`.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_ours(seconds, extra_sets):
    run_dir = Path(tempfile.mkdtemp(prefix="leduc_ours_"))
    cmd = [sys.executable, "-m", "trainer", "--config", str(ROOT / "configs" / "leduc.yaml"), "--run-dir", str(run_dir),
           "--set", f"train.time_limit_s={seconds}", "--set", "train.iterations=1000000", "--set", "eval.every=0",
           "--set", "run.progress=false", "--set", "run.checkpoint_every=0"]
    for s in extra_sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"our trainer failed:\n{r.stderr[-3000:]}")
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    return {"wall_s": wall, "iterations": last["iteration"], "exploitability": last["openspiel_exploitability"],
            "own_exploitability": last["exploitability"], "run_dir": str(run_dir)}


def run_openspiel(budget_s, traversals, seed):
    try:
        import pyspiel
        from open_spiel.python import policy
        from open_spiel.python.algorithms import exploitability
        from open_spiel.python.pytorch import deep_cfr
    except ImportError as e:
        raise SystemExit(f"OpenSpiel's Deep CFR is not importable ({e}); pip install open-spiel dm-tree")
    import torch
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    game = pyspiel.load_game("leduc_poker")
    solver = deep_cfr.DeepCFRSolver(game, policy_network_layers=(128, 128), advantage_network_layers=(128, 128),
                                    num_iterations=1, num_traversals=traversals, learning_rate=1e-3,
                                    batch_size_advantage=512, batch_size_strategy=512, memory_capacity=1000000,
                                    policy_network_train_steps=2000, advantage_network_train_steps=200,
                                    reinitialize_advantage_networks=False, seed=seed)
    iterations, last_iter = 0, 0.0
    strategy_estimate = 0.0
    while True:
        elapsed = time.perf_counter() - t0
        if iterations and elapsed + last_iter + strategy_estimate > budget_s:
            break
        ti = time.perf_counter()
        for p in range(game.num_players()):
            for _ in range(traversals):
                solver._traverse_game_tree(solver._root_node, p)
            solver._learn_advantage_network(p)
        solver._iteration += 1
        iterations += 1
        last_iter = time.perf_counter() - ti
        strategy_estimate = max(strategy_estimate, 3 * last_iter)
    solver._learn_strategy_network()
    avg = policy.tabular_policy_from_callable(game, solver.action_probabilities)
    expl = exploitability.exploitability(game, avg)
    return {"wall_s": time.perf_counter() - t0, "iterations": iterations, "exploitability": float(expl)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.leduc_vs_openspiel", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300, help="our time limit; OpenSpiel gets our total wall time")
    ap.add_argument("--openspiel-traversals", type=int, default=200, help="OpenSpiel traversals per player per iteration")
    ap.add_argument("--set", action="append", default=[], help="extra overrides for our trainer")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ours = run_ours(args.seconds, args.set)
    theirs = run_openspiel(ours["wall_s"], args.openspiel_traversals, args.seed)
    out = {"ours": ours, "openspiel": theirs, "ours_lower": ours["exploitability"] < theirs["exploitability"]}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"ours:      {ours['iterations']} iterations in {ours['wall_s']:.0f} s -> exploitability "
              f"{ours['exploitability']:.4f} (own best response {ours['own_exploitability']:.4f})")
        print(f"OpenSpiel: {theirs['iterations']} iterations in {theirs['wall_s']:.0f} s -> exploitability "
              f"{theirs['exploitability']:.4f}")
        print("ours is lower" if out["ours_lower"] else "OpenSpiel's is lower")


if __name__ == "__main__":
    main()
