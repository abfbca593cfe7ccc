"""agents.progress: tqdm bars on a terminal, plain periodic lines elsewhere."""
import io

import pytest

from agents.progress import PlainProgress, duration, interval_s, progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_plain_lines_come_once_per_interval_and_at_the_end():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress(total=10, desc="label", unit="games", stream=out, interval=30, clock=clock)
    for _ in range(4):              # 4 updates within 29 s: no line yet
        clock.now += 7.25
        bar.update()
    assert out.getvalue() == ""
    clock.now += 1.0                # 30 s in, 5 of 10 done
    bar.update()
    clock.now += 10
    bar.update(3)                   # 10 s after the last line: none
    clock.now += 20
    bar.update(2)                   # 30 s after it: one
    bar.close()
    bar.close()                     # a second close prints nothing
    lines = out.getvalue().splitlines()
    assert lines == ["[label] 5/10 games (50%) in 30.0s, ~30.0s left",
                     "[label] 10/10 games (100%) in 1m 00s",
                     "[label] done: 10/10 games (100%) in 1m 00s"]
    assert "\r" not in out.getvalue()


def test_plain_lines_without_a_total_and_as_a_context_manager():
    out, clock = io.StringIO(), Clock()
    with PlainProgress(desc="steps", unit="steps", stream=out, interval=5, clock=clock) as bar:
        clock.now += 6
        bar.update(12)
    assert out.getvalue().splitlines() == ["[steps] 12 steps in 6.0s", "[steps] done: 12 steps in 6.0s"]


def test_the_stream_decides_bar_or_lines(monkeypatch):
    assert isinstance(progress(total=3, stream=io.StringIO()), PlainProgress)     # not a terminal
    from tqdm import tqdm
    bar = progress(total=3, stream=io.StringIO(), tty=True)
    assert isinstance(bar, tqdm)
    bar.close()
    monkeypatch.setenv("DEEPCFR_PROGRESS_S", "0.5")
    assert interval_s() == 0.5 and progress(stream=io.StringIO()).interval == 0.5
    monkeypatch.delenv("DEEPCFR_PROGRESS_S")
    assert interval_s() == 30.0
    for bad in ("soon", "0", "-2"):
        monkeypatch.setenv("DEEPCFR_PROGRESS_S", bad)
        with pytest.raises(ValueError, match="DEEPCFR_PROGRESS_S must be"):
            interval_s()


def test_duration():
    assert duration(4.25) == "4.2s" and duration(61) == "1m 01s" and duration(3725) == "1h 02m 05s"


def test_a_budget_bounds_the_time_left_and_hides_a_total_it_will_not_reach():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress(total=100_000, desc="label", unit="game", stream=out, interval=30, clock=clock, budget_s=240)
    clock.now += 60
    bar.update(200)                 # at this rate the cap is far beyond the budget
    clock.now += 200
    bar.update(600)
    bar.close()
    bar = PlainProgress(total=1000, desc="pretrain", unit="step", stream=out, interval=30, clock=clock, budget_s=40)
    clock.now += 30
    bar.update(900)                 # will reach its total within the budget
    assert out.getvalue().splitlines() == ["[label] 200 games in 1m 00s, ~3m 00s left",
                                           "[label] 800 games in 4m 20s, ~0.0s left",
                                           "[label] done: 800 games in 4m 20s",
                                           "[pretrain] 900/1000 steps (90%) in 30.0s, ~3.3s left"]
