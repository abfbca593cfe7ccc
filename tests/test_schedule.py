"""The run's schedule (trainer/schedule.py): the last iteration, the
evaluations, the strategy training, the checkpoints, the advantage nets'
rate, and the step timer, each by hand."""
import math

import pytest

from trainer.schedule import advantage_lr, checkpoint_due, eval_due, is_first, is_last, step, strategy_due


def test_the_last_iteration_is_the_count_or_the_time_that_leaves_self_play_its_budget():
    assert is_last(10, 10, 0.0, 0, 0) and not is_last(9, 10, 1e9, 0, 0)       # no time limit: the count
    assert not is_last(3, 10000, 2099.0, 3420, 1320)                          # 2100 s = 3420 - 1320 left to CFR
    assert is_last(3, 10000, 2100.0, 3420, 1320)
    assert is_last(3, 10000, 3420.0, 3420, 0)


def test_the_first_iteration_is_a_fresh_runs_with_evaluations_on():
    assert is_first(1, 1, 5) and not is_first(1, 1, 0) and not is_first(4, 4, 5)   # a resumed run's first is not


@pytest.mark.parametrize("t,first,last,every,want", [
    (1, True, False, 20, True), (20, False, False, 20, True), (21, False, False, 20, False),
    (7, False, True, 20, True), (40, False, False, 0, False)])
def test_evaluations_come_first_last_and_every_nth(t, first, last, every, want):
    assert eval_due(t, first, last, every) == want


def test_the_strategy_net_trains_before_evaluations_at_the_end_and_every_nth():
    assert strategy_due(3, False, True, 10) and strategy_due(3, True, False, 0)
    assert strategy_due(10, False, False, 10) and not strategy_due(11, False, False, 10)
    assert not strategy_due(10, False, False, 0)


def test_checkpoints_at_the_end_and_every_nth():
    assert checkpoint_due(5, True, 0) and checkpoint_due(10, False, 10) and not checkpoint_due(9, False, 10)


def test_the_advantage_rate_falls_as_one_over_the_root_of_t_after_its_iteration():
    assert advantage_lr(0.002, 0, 100) == 0.002
    assert advantage_lr(0.002, 2, 2) == 0.002 and advantage_lr(0.002, 2, 8) == pytest.approx(0.001)
    assert advantage_lr(0.002, 2, 32) == pytest.approx(0.0005) and advantage_lr(1.0, 4, 9) == math.sqrt(4 / 9)


def test_a_step_enters_its_phase_and_adds_its_seconds():
    class Sup:
        def __init__(self):
            self.entered = []

        def enter(self, phase, iteration=None):
            self.entered.append((phase, iteration))

    sup, m = Sup(), {}
    with step(m, "time_x", sup, "train", 3):
        pass
    with step(m, "time_x"):
        pass
    assert sup.entered == [("train", 3)] and m["time_x"] >= 0.0
    with pytest.raises(ValueError):
        with step(m, "time_y"):
            raise ValueError("the block failed")
    assert "time_y" in m                      # timed however the block ends
