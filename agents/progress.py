"""Progress of a long phase, shaped for where it goes.

On a terminal (stderr is a TTY) a phase gets a tqdm bar that redraws in
place. Anywhere else, a log file or a pipe (`nohup python -m trainer ... >
run.log 2>&1`), carriage-return redraws would fill the file, so a phase
prints one plain line about every `interval` seconds and one when it ends:

    [warm start: label] 412/3000 games (14%) in 2m 00s, ~12m 33s left

The interval is DEEPCFR_PROGRESS_S seconds (default 30). This module
imports nothing from the project, so the training loop and the agents'
matches can both use it.
"""
import os
import sys
import time

DEFAULT_INTERVAL_S = 30.0


def interval_s():
    """The plain lines' period: DEEPCFR_PROGRESS_S, else 30 s."""
    raw = os.environ.get("DEEPCFR_PROGRESS_S", "")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"DEEPCFR_PROGRESS_S must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"DEEPCFR_PROGRESS_S must be > 0, got {raw!r}")
    return value


def progress(total=None, desc="", unit="it", stream=None, interval=None, tty=None, budget_s=None):
    """A progress reporter with update(n=1) and close(): a tqdm bar when
    `stream` (default stderr) is a terminal and tqdm is installed, else a
    PlainProgress. `tty` forces the choice (True: tqdm if installed).
    budget_s: the phase stops after this many seconds, if not before, so
    the time left shown is at most what remains of it."""
    stream = sys.stderr if stream is None else stream
    if tty is None:
        isatty = getattr(stream, "isatty", None)
        tty = bool(isatty and isatty())
    if tty:
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, file=stream)
    return PlainProgress(total, desc, unit, stream, interval, budget_s=budget_s)


class PlainProgress:
    """Plain progress lines: one when `interval` seconds have passed since
    the last (checked at each update), one at close. No carriage returns."""

    def __init__(self, total=None, desc="", unit="it", stream=None, interval=None, clock=time.monotonic,
                 budget_s=None):
        self.total = total
        self.budget_s = budget_s
        self.desc = desc
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.interval = interval_s() if interval is None else float(interval)
        self.clock = clock
        self.n = 0
        self.start = clock()
        self.last_line = self.start
        self.closed = False

    def update(self, n=1):
        self.n += n
        now = self.clock()
        if now - self.last_line >= self.interval:
            self._line(now, "")
        return None

    def set_description(self, desc):
        self.desc = desc

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._line(self.clock(), "done: ")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _line(self, now, prefix):
        self.last_line = now
        elapsed = now - self.start
        total = self.total
        if total and self.budget_s and self.n < total and (self.n == 0 or elapsed * total / self.n > self.budget_s):
            total = None        # the budget ends the phase first: the total is only a cap
        count = f"{self.n}/{total}" if total else f"{self.n}"
        unit = self.unit if self.unit.endswith("s") or (total or self.n) == 1 else self.unit + "s"
        text = f"[{self.desc}] {prefix}{count} {unit}"
        if total:
            text += f" ({100 * self.n / total:.0f}%)"
        text += f" in {duration(elapsed)}"
        if not prefix and self.total and 0 < self.n < self.total:
            left = elapsed * (self.total - self.n) / self.n
            if self.budget_s:
                left = max(0.0, min(left, self.budget_s - elapsed))
            text += f", ~{duration(left)} left"
        elif not prefix and self.budget_s:
            text += f", ~{duration(max(0.0, self.budget_s - elapsed))} left"
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):    # a closed or broken stream must not stop the run
            pass


def duration(seconds):
    """'1h 02m 03s', '2m 03s' or '4.2s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    mins, sec = divmod(rem, 60)
    return f"{h}h {mins:02d}m {sec:02d}s" if h else f"{mins}m {sec:02d}s"
