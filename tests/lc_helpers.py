"""Shared setup for the Lost Cities learning tests (tests/test_exit.py,
tests/test_selfplay.py): a small game, a tiny real strategy net, and the
trainer run as a real subprocess."""
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from batcher.networks import MLP  # noqa: E402

SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=200)


def tiny_net(game, seed=3):
    """A 16-unit strategy MLP of `game`, its weights seeded."""
    torch.manual_seed(seed)
    return MLP(game.information_state_tensor_size(), game.num_distinct_actions(), (16,),
               input_scale=game.input_scale()).eval()


def run_trainer(args, timeout=300):
    """`python -m trainer ARGS` in the repository root; fails the test with its output's tail unless it exits 0."""
    r = subprocess.run([sys.executable, "-m", "trainer", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def local_wave(tuner, games, wave=0, version=0, served=None):
    """One self-play wave of `games` deals played in this process by the
    workers' own code (traverser.selfplay.play_local over PlayGroups), on
    `served` (default tuner.served(): the strategy net and critic as the
    batcher serves them), assembled by tuner.wave_from_chunks: (wave,
    returns, the deal seeds)."""
    import numpy as np
    from traverser.selfplay import play_local, wave_seeds
    served = tuner.served() if served is None else served
    seeds = wave_seeds(0, wave, games)
    decisions, ends = [], []

    def forward(rows):
        with torch.no_grad():
            return served(torch.from_numpy(rows)).float().numpy()

    play_local(tuner.game, forward, np.arange(games), seeds, lambda d, e: (decisions.append(d), ends.append(e)),
               slots=max(1, games // 2), version=version)
    wave, returns = tuner.wave_from_chunks(decisions, ends)
    return wave, returns, seeds


def rows_of_deals(game, deals, **kw):
    """The rows trainer.warmstart.heuristic_rows labels in this process for
    exactly these deals, in this order (the strategy rows player 0's of
    every game, then player 1's, as one call gives them)."""
    import numpy as np
    from trainer.warmstart import heuristic_rows
    parts = [heuristic_rows(game, 1, seed=d, advantage=0.1, **kw) for d in deals]
    adv = {p: {k: np.concatenate([part[0][p][k] for part in parts]) for k in parts[0][0][p]} for p in (0, 1)}
    n0 = [len(part[0][0]["weight"]) for part in parts]
    strat = {k: np.concatenate([part[1][k][:n] for part, n in zip(parts, n0)] +
                               [part[1][k][n:] for part, n in zip(parts, n0)]) for k in parts[0][1]}
    return adv, strat


def same_rows(a, b):
    """Assert two (adv, strategy) row sets of heuristic_rows equal, every column and dtype."""
    import numpy as np
    (adv_a, strat_a), (adv_b, strat_b) = a, b
    for x, y in ((strat_a, strat_b), (adv_a[0], adv_b[0]), (adv_a[1], adv_b[1])):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), k


def save_small_run(run_dir, params, critic=True, seed=1):
    """A small Lost Cities run (game params `params`) whose checkpoint holds
    untrained 8-unit nets and, with critic, a critic as the self-play stage
    keeps it. Returns (checkpoint path, game, nets, critic or None)."""
    import engine
    from batcher.networks import net_for_game
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **params)
    nets = {k: net_for_game(game, hidden=(8,), seed=seed + i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    payload = {"config": {"game": {"name": "lost_cities", "params": params}, "traversal": {"fallback": "uniform"}},
               "nets": {k: n.state_dict() for k, n in nets.items()}, "net_spec": nets["strategy"].spec()}
    c = None
    if critic:
        torch.manual_seed(seed)
        c = MLP(game.information_state_tensor_size(), 1, (8,), input_scale=game.input_scale())
        payload.update(critic=c.state_dict(), critic_spec=c.spec(), critic_value_scale=0.01)
    return save_checkpoint(run_dir, 1, payload), game, nets, c
