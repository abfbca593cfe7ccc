"""The run's schedule as pure functions (trainer/loop.py asks them), and the
one context manager that enters a phase, times it and records the time.

    last = is_last(t, cfg.train.iterations, elapsed_s, cfg.train.time_limit_s, cfg.train.selfplay_budget_s)
    with step(m, "time_eval_s", sup, "evaluate"):
        ...
"""
import math
import time
from contextlib import contextmanager


def is_last(t, iterations, elapsed_s, time_limit_s, selfplay_budget_s):
    """Whether CFR iteration t is the run's last: train.iterations reached,
    or the time limit (on the run's clock) leaves no more than the self-play
    stage's budget."""
    return t >= iterations or (time_limit_s > 0 and elapsed_s >= time_limit_s - selfplay_budget_s)


def is_first(t, start_iteration, eval_every):
    """Whether iteration t is a fresh run's first, evaluated when evaluations are on."""
    return t == start_iteration == 1 and eval_every > 0


def eval_due(t, first, last, every):
    """An evaluation after iteration t: the first and the last, and every `every`-th (0: none between)."""
    return last or first or (every > 0 and t % every == 0)


def strategy_due(t, last, evaluating, every):
    """The strategy net trained after iteration t: before each evaluation, at
    the end, and every `every`-th iteration (0: only then)."""
    return last or evaluating or (every > 0 and t % every == 0)


def checkpoint_due(t, last, every):
    """A checkpoint after iteration t: at the end and every `every`-th (0: only at the end)."""
    return last or (every > 0 and t % every == 0)


def advantage_lr(lr, after, t):
    """The advantage nets' rate at iteration t: lr up to iteration `after`,
    then lr * sqrt(after / t), smaller steps as the regrets the nets must
    resolve shrink (after 0: lr throughout)."""
    return lr * (math.sqrt(after / t) if 0 < after < t else 1.0)


@contextmanager
def step(m, key, sup=None, phase=None, iteration=None):
    """Enter `phase` with the supervisor `sup` (if given), run the block, and
    add its seconds to m[key]."""
    if sup is not None:
        sup.enter(phase, iteration)
    t0 = time.monotonic()
    try:
        yield
    finally:
        m[key] = m.get(key, 0.0) + time.monotonic() - t0
