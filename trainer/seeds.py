"""The seeds a run derives from run.seed, as pure functions: one name per
thing seeded, so that no two streams share a seed by accident. The values
are those the loop has always used: a resumed run and the recorded results
depend on them, so none may change."""


def memory_seed(run_seed, player):
    """The advantage memory of `player` (0 or 1): its reservoir's sampling."""
    return run_seed * 3 + player + 1


def strategy_memory_seed(run_seed):
    """The strategy memory: its reservoir's sampling (after both players' memories)."""
    return run_seed * 3 + 3


def warm_start_deals_seed(run_seed):
    """The first deal of the warm start's heuristic games (deals seed, seed + 1, ...)."""
    return (run_seed + 1) * 1000003


def exit_deals_seed(run_seed, r):
    """The first deal of expert-iteration round r's games: past the warm start's deals."""
    return (run_seed + 1) * 1000003 + r * 7000001


def exit_nets_seed(run_seed, r):
    """torch's seed for expert-iteration round r's fresh nets."""
    return run_seed * 100003 + 7919 * r


def exit_heldout_seed(run_seed, r):
    """Which of expert-iteration round r's games are held out to score the fresh nets."""
    return run_seed * 7919 + r


def reinit_advantage_seed(run_seed, t, player):
    """torch's seed for `player`'s advantage net, re-initialised at iteration t (train.reinit_advantage)."""
    return run_seed * 100003 + t * 2 + player
