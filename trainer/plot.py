"""Learning curves of a run: `python -m trainer.plot RUN_DIR [--out DIR]`.

Reads RUN_DIR/metrics.jsonl (one JSON object per iteration; any key may be
missing from any line) and writes, into RUN_DIR/plots (or --out):

    learning.png   how strong the policy is, against wall-clock (left) and
                   against iterations (right), with 95% bands:
                   Lost Cities: the point margin per game against each
                   opponent (random, heuristic, the exploiter, whose margin is
                   a floor on exploitability, and head to head the run's own
                   warm-start prior: what training added after the warm
                   start) and the win rate;
                   poker: exploitability on a log scale.
    training.png   the advantage and strategy losses, the advantage nets'
                   error on each iteration's new samples before they train
                   on them (and that of predicting 0), the batcher's
                   queries/s and where each iteration's time went.

A series whose values never change is left out (a panel of a constant says
nothing). Read-outs other than the first carry a prefix (current_vs_...) and
are drawn dashed. Prints the paths written. Needs matplotlib (Agg backend).
"""
import argparse
import json
import math
import sys
from pathlib import Path


class MetricsError(Exception):
    """The metrics file is missing, empty or unreadable."""


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_metrics(path):
    """The JSON objects of a metrics.jsonl file, in order. Blank lines are
    skipped; an unparsable line (e.g. a half-written last line) is skipped
    with a warning on stderr."""
    path = Path(path)
    if not path.is_file():
        raise MetricsError(f"no metrics file at {path}")
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"warning: {path}:{n}: skipped unparsable line ({e})", file=sys.stderr)
                continue
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                print(f"warning: {path}:{n}: skipped a line that is not a JSON object", file=sys.stderr)
    if not rows:
        raise MetricsError(f"{path} holds no metrics")
    return rows


def wall_minutes(rows):
    """Wall-clock minutes since the run began, per row: `wall_s` counts the
    run's time, a resumed run's from the time its checkpoint had spent (the
    rows it redoes after a kill stand at the times they were redone)."""
    return [row.get("wall_s") / 60.0 if _is_number(row.get("wall_s")) else None for row in rows]


def _points(rows, xs, key):
    """(x, y, lo, hi) of every row holding `key` (lo/hi None without a band)."""
    pts = []
    for x, row in zip(xs, rows):
        y = row.get(key)
        if x is None or not _is_number(y):
            continue
        lo, hi = row.get(key + "_lo"), row.get(key + "_hi")
        pts.append((x, float(y), float(lo) if _is_number(lo) else None, float(hi) if _is_number(hi) else None))
    return pts


def _varies(rows, key):
    values = {row[key] for row in rows if _is_number(row.get(key))}
    return len(values) > 1


def _all_keys(rows):
    seen = {}
    for row in rows:
        for k, v in row.items():
            if _is_number(v):
                seen.setdefault(k, None)
    return list(seen)


def _read_out(key, marker):
    """('current', 'heuristic') for current_vs_heuristic_margin; the first
    read-out has no prefix ('', ...)."""
    i = key.find("vs_")
    prefix = key[:i].rstrip("_")
    return prefix, key[i + 3:-len(marker)]


def learning_panels(rows):
    """What learning.png shows: [(title, ylabel, log_y, reference_y, [(key, label, dashed)])],
    leaving out series that never change."""
    keys = [k for k in _all_keys(rows) if _varies(rows, k) or k.endswith(("_margin", "_win_rate"))]
    panels = []
    for marker, title, ylabel, ref in (("_margin", "point margin per game (from the agent's seat)", "points", 0.0),
                                       ("_win_rate", "win rate (a tie counts half)", "win rate", 0.5)):
        lines = []
        for k in keys:
            if "vs_" not in k or not k.endswith(marker) or k.startswith("exploiter"):
                continue
            prefix, opp = _read_out(k, marker)
            label = f"vs {opp}" + (f" ({prefix})" if prefix else "")
            if opp == "prior":
                label = "vs its warm-start prior (head to head)" + (f" ({prefix})" if prefix else "")
            if opp == "exploiter" and marker == "_margin":
                label += " (its margin, minus this, is a floor on exploitability)"
            lines.append((k, label, bool(prefix)))
        if lines:
            panels.append((title, ylabel, False, ref, lines))
    expl = [(k, label, False) for k, label in (("exploitability", "exploitability"),
                                               ("openspiel_exploitability", "OpenSpiel's"),
                                               ("strategy_net_exploitability", "strategy net"))
            if k in keys]
    if expl:
        panels.append(("exploitability", "exploitability (log)", True, None, expl))
    return panels


def training_panels(rows):
    """What training.png shows, in the same form as learning_panels."""
    keys = [k for k in _all_keys(rows) if _varies(rows, k)]
    groups = (("losses", "loss", lambda k: "loss" in k),
              ("advantage nets on new samples, before training on them", "weighted squared error",
               lambda k: "heldout" in k),
              ("batcher throughput", "rows/s", lambda k: k.endswith("_per_s")),
              ("time per iteration", "seconds",
               lambda k: k in ("time_traverse_s", "time_train_s", "time_strategy_s", "time_eval_s")))
    panels = []
    for title, ylabel, pick in groups:
        lines = [(k, k, False) for k in keys if pick(k)]
        if lines:
            log = title == "losses" and _wide_positive(rows, [k for k, _, _ in lines])
            panels.append((title, ylabel, log, None, lines))
    return panels


def _wide_positive(rows, keys):
    ys = [row[k] for row in rows for k in keys if _is_number(row.get(k))]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 20


def _draw(ax, rows, xs, panel, plt):
    title, ylabel, log_y, ref, lines = panel
    drawn = 0
    for key, label, dashed in lines:
        pts = _points(rows, xs, key)
        if not pts:
            continue
        x = [p[0] for p in pts]
        y = [p[1] for p in pts]
        style = ("--" if dashed else "-") + ("o" if len(pts) <= 30 else "")
        line, = ax.plot(x, y, style, markersize=3, linewidth=1.3, label=label)
        band = [(p[0], p[2], p[3]) for p in pts if p[2] is not None and p[3] is not None]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                            color=line.get_color(), alpha=0.18, linewidth=0)
        drawn += 1
    if ref is not None and drawn:
        ax.axhline(ref, color="grey", linewidth=0.8, alpha=0.7)
    if log_y and drawn:
        ax.set_yscale("log")
    if "win rate" in ylabel:
        ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="best")
    return drawn


def _save(fig, title, path, plt):
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_run(run_dir, out_dir=None):
    """Write learning.png and training.png for a run; returns their paths
    (a figure with nothing to show is not written)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    if run_dir.is_file():
        metrics, run_dir = run_dir, run_dir.parent
    else:
        metrics = run_dir / "metrics.jsonl"
    rows = read_metrics(metrics)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    iterations = [row.get("iteration") if _is_number(row.get("iteration")) else i + 1
                  for i, row in enumerate(rows)]
    minutes = wall_minutes(rows)
    written = []

    panels = learning_panels(rows)
    if panels:
        has_wall = any(m is not None for m in minutes)
        columns = [("wall-clock (minutes)", minutes)] if has_wall else []
        columns.append(("iteration", iterations))
        fig, axes = plt.subplots(len(panels), len(columns), figsize=(6.2 * len(columns), 3.0 * len(panels) + 0.6),
                                 squeeze=False)
        for r, panel in enumerate(panels):
            for c, (xlabel, xs) in enumerate(columns):
                _draw(axes[r][c], rows, xs, panel, plt)
                axes[r][c].set_xlabel(xlabel, fontsize=8)
        written.append(_save(fig, f"{run_dir.name}: learning curves (95% bands)", out_dir / "learning.png", plt))

    panels = training_panels(rows)
    if panels:
        fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 2.6 * len(panels) + 0.6), squeeze=False)
        for r, panel in enumerate(panels):
            _draw(axes[r][0], rows, iterations, panel, plt)
        axes[-1][0].set_xlabel("iteration", fontsize=8)
        written.append(_save(fig, f"{run_dir.name}: training", out_dir / "training.png", plt))
    if not written:
        raise MetricsError(f"{metrics} holds nothing to plot (no evaluation, loss, throughput or timing "
                           "that changes over the run)")
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainer.plot",
                                 description="Plot a run's learning curves from RUN_DIR/metrics.jsonl.")
    ap.add_argument("run_dir", help="run directory holding metrics.jsonl (or the metrics file itself)")
    ap.add_argument("--out", default=None, help="output directory (default RUN_DIR/plots)")
    args = ap.parse_args(argv)
    try:
        paths = plot_run(args.run_dir, args.out)
    except MetricsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"error: trainer.plot needs matplotlib (pip install matplotlib): {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
