"""Learning curves of a run: `python -m trainer.plot RUN_DIR [--out DIR]`.

Reads RUN_DIR/metrics.jsonl (one JSON object per iteration; any numeric key
may be missing from any line) and writes one PNG per group of metrics that
has at least one key present, into RUN_DIR/plots (or --out):

    evaluation.png   exploitability, nash_conv, vs_*_win_rate, vs_*_score_diff, ...
    losses.png       *loss*
    throughput.png   *_per_s, samples_*, nodes_*, batcher_*, *memory*, ...
    timings.png      time_*, *_s
    other.png        any other numeric key

Each present key gets its own panel (x = "iteration", or the line number when
a line has none); a key's "_lo"/"_hi" companions are drawn as a shaded 95%
band. Prints the paths written. Needs matplotlib (Agg backend).
"""
import argparse
import json
import math
import sys
from pathlib import Path

GROUPS = ("evaluation", "losses", "throughput", "timings", "other")
_SKIP = {"iteration", "time", "timestamp", "wall_time", "seed"}


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


def group_of(key):
    """Which figure a metric key belongs to."""
    k = key.lower()
    if (k in ("exploitability", "nash_conv") or k.startswith(("vs_", "openspiel_", "eval_"))
            or "exploitability" in k or "nash_conv" in k or "win_rate" in k):
        return "evaluation"
    if "loss" in k:
        return "losses"
    if (k.endswith(("_per_s", "_per_sec")) or "memory" in k
            or k.startswith(("samples", "nodes", "throughput", "batcher", "queries", "traversals"))):
        return "throughput"
    if k.startswith("time") or k.endswith(("_s", "_sec", "_seconds", "_time")):
        return "timings"
    return "other"


def _series(rows):
    """key -> ([x], [y]) for every numeric key (iteration excluded)."""
    out = {}
    for i, row in enumerate(rows):
        x = row.get("iteration")
        x = x if _is_number(x) else i + 1
        for k, v in row.items():
            if k in _SKIP or not _is_number(v):
                continue
            xs, ys = out.setdefault(k, ([], []))
            xs.append(x)
            ys.append(float(v))
    return out


def _bands(series):
    """Keys drawn as a main curve, with their (lo, hi) band keys if present."""
    main = {}
    for k in series:
        for suffix in ("_lo", "_hi"):
            if k.endswith(suffix) and k[: -len(suffix)] in series:
                break
        else:
            lo, hi = k + "_lo", k + "_hi"
            main[k] = (lo, hi) if lo in series and hi in series else None
    return main


def plot_run(run_dir, out_dir=None):
    """Write the learning-curve PNGs of a run; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    if run_dir.is_file():
        metrics, run_dir = run_dir, run_dir.parent
    else:
        metrics = run_dir / "metrics.jsonl"
    rows = read_metrics(metrics)
    series = _series(rows)
    if not series:
        raise MetricsError(f"{metrics} holds no numeric metrics")
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)

    by_group = {g: [] for g in GROUPS}
    for k, band in _bands(series).items():
        by_group[group_of(k)].append((k, band))

    written = []
    for group in GROUPS:
        keys = sorted(by_group[group])
        if not keys:
            continue
        n = len(keys)
        cols = 1 if n < 4 else 2
        nrows = math.ceil(n / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 2.6 * nrows + 0.6),
                                 squeeze=False, sharex=True)
        for ax, (k, band) in zip(axes.flat, keys):
            xs, ys = series[k]
            style = "o-" if len(xs) <= 30 else "-"
            ax.plot(xs, ys, style, markersize=3, linewidth=1.2, label=k)
            if band is not None:
                lo, hi = series[band[0]], series[band[1]]
                common = sorted(set(lo[0]) & set(hi[0]))
                if common:
                    lo_map, hi_map = dict(zip(*lo)), dict(zip(*hi))
                    ax.fill_between(common, [lo_map[x] for x in common], [hi_map[x] for x in common],
                                    alpha=0.25, linewidth=0, label="95% CI")
            positive = all(y > 0 for y in ys)
            if positive and (group == "losses" or "exploitability" in k or "nash_conv" in k):
                if max(ys) / min(ys) > 20:
                    ax.set_yscale("log")
            if "win_rate" in k:
                ax.set_ylim(-0.02, 1.02)
            ax.set_title(k, fontsize=9)
            ax.grid(True, alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        for ax in axes[-1]:
            ax.set_xlabel("iteration")
        fig.suptitle(f"{run_dir.name}: {group}", fontsize=11)
        fig.tight_layout()
        path = out_dir / f"{group}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
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
