"""What a run prints of itself: the one log line of each iteration, and the
summary at the end (the iterations, the wall time, the warm start, the last
evaluation with its 95% intervals, and the commands that follow)."""
import shlex
from pathlib import Path


def iteration_line(m):
    """The one log line of an iteration."""
    parts = [f"iter {m['iteration']}"]
    if "time_traverse_s" in m:           # not in the line of a run that resumed its self-play stage
        parts += [f"traverse {m['time_traverse_s']:.1f}s", f"train {m['time_train_s']:.1f}s",
                  f"{m['queries_per_s']:,.0f} queries/s",
                  f"adv loss {m.get('adv_loss_0') or 0:.4g}/{m.get('adv_loss_1') or 0:.4g}"]
    if m.get("selfplay_waves"):
        parts.append(f"self-play {m['selfplay_waves']} waves, {m['selfplay_games']} games")
        if m.get("selfplay_mean_last10_mse"):       # the critic on its last waves, each held out whole
            parts.append(f"critic held-out MSE {m['selfplay_critic_last10_mse']:.4g} "
                         f"(mean {m['selfplay_mean_last10_mse']:.4g})")
    if "adv_heldout_mse_0" in m and "adv_heldout_mse_1" in m:
        # the advantage nets on this iteration's new samples, before training on them
        parts.append(f"adv held-out {m['adv_heldout_mse_0']:.4g}/{m['adv_heldout_mse_1']:.4g} "
                     f"(zero {m['adv_heldout_zero_mse_0']:.4g}/{m['adv_heldout_zero_mse_1']:.4g})")
    for key in ("exploitability", "openspiel_exploitability", "strategy_net_exploitability"):
        if key in m:
            parts.append(f"{key} {m[key]:.4g}")
    for r in opponent_results(m):
        margin = "" if r["margin"] is None else f" margin {r['margin']:+.3g}"
        parts.append(f"vs {r['opponent']} win {r['win_rate']:.3f}{margin}")
    if m.get("value_heldout_mse") is not None:          # the first line of a run with a value net
        parts.append(f"value held-out MSE {m['value_heldout_mse']:.4g} (mean {m['value_heldout_mean_mse']:.4g}, "
                     f"zero {m['value_heldout_zero_mse']:.4g}; {m['value_heldout_games']} games)")
    return " | ".join(parts)


# An evaluation's keys per opponent X: vs_X_win_rate with a CI under either
# name pair, and a point margin (or, by its older name, score difference).
_RATE_CI = (("_win_lo", "_win_hi"), ("_win_rate_lo", "_win_rate_hi"))
_MARGINS = ("_margin", "_score_diff")


def opponent_results(m):
    """[{opponent, win_rate, win_lo, win_hi, margin, margin_lo, margin_hi,
    games, capped}] for every `vs_<opponent>_win_rate` in the metrics dict
    `m`, in the dict's order; a part the evaluation did not report is None.
    `capped`: games that the turn cap ended."""
    out = []
    for key in m:
        if not (key.startswith("vs_") and key.endswith("_win_rate")) or m[key] is None:
            continue
        base = key[:-len("_win_rate")]
        r = {"opponent": base[3:], "win_rate": m[key], "win_lo": None, "win_hi": None,
             "margin": None, "margin_lo": None, "margin_hi": None, "games": m.get(base + "_games"),
             "capped": m.get(base + "_capped")}
        for lo, hi in _RATE_CI:
            if base + lo in m and base + hi in m:
                r["win_lo"], r["win_hi"] = m[base + lo], m[base + hi]
                break
        for name in _MARGINS:
            if base + name in m:
                r["margin"] = m[base + name]
                r["margin_lo"], r["margin_hi"] = m.get(base + name + "_lo"), m.get(base + name + "_hi")
                break
        out.append(r)
    return out


SUMMARY_MAX_LINES = 12
# How the docs' Lost Cities figures are judged (docs/lost_cities_strength.md,
# "How strength is measured"): 2000 duplicate games a opponent, seed 777.
FIGURES_OPPONENTS = "heuristic,cautious,random"
FIGURES_MATCHES = "--games 2000 --seed 777 --jobs 2"


def final_summary(metrics, run_dir, cfg, first_iteration):
    """What the main command prints when a run ends, at most SUMMARY_MAX_LINES
    lines: the iterations, the wall time, the last evaluation with its 95%
    intervals, the run directory, and the commands to evaluate, plot and
    resume it. `metrics` is the last iteration's metrics line ({} when the
    run had nothing left to do); metrics.jsonl holds every line."""
    run = shlex.quote(str(run_dir))
    planned = cfg.train.iterations
    lines = []
    if not metrics:
        lines.append(f"nothing to do: the run is at iteration {first_iteration - 1} of {planned}")
        more = max(planned, first_iteration - 1) * 2
    else:
        last = metrics["iteration"]
        why = "" if last >= planned or cfg.train.time_limit_s <= 0 else \
            f" (stopped by train.time_limit_s={cfg.train.time_limit_s:g})"
        span = f"iteration {last}" if last == first_iteration else f"iterations {first_iteration}-{last}"
        lines.append(f"done: {span} of {planned}{why}, "
                     f"wall time {_duration(metrics.get('wall_s', 0.0))}, {cfg.game.name}")
        more = planned * 2 if last >= planned else planned
        if metrics.get("warm_start_games_labelled"):
            lines.append(_warm_start_line(metrics, cfg))
        if metrics.get("selfplay_waves"):
            lines.append(_self_play_line(metrics, run_dir))
        note = cfg.run.summary_note.strip().splitlines() if cfg.run.summary_note.strip() else []
        lines += _evaluation_lines(metrics, SUMMARY_MAX_LINES - 4 - len(lines) - len(note))
        lines += note
    resume = f"python -m trainer --resume {run}" + (f" --set train.iterations={more}" if more != planned else "")
    lines += [f"run dir   {run_dir}  (every metric: {shlex.quote(str(Path(run_dir) / 'metrics.jsonl'))})",
              f"evaluate  {evaluate_command(run_dir, cfg)}",
              f"plot      python -m trainer.plot {run}",
              f"resume    {resume}"]
    return "\n".join(lines)


def evaluate_command(run_dir, cfg):
    """The command that judges the run as the docs' figures are judged. Lost
    Cities: agents.evaluate's default read-out (the greedy average policy)
    against HeuristicBot, CautiousBot (never seen in training) and random,
    and head to head against the run's warm-start prior if it has one.
    Poker: the exact exploitability of the SD-CFR average or strategy net."""
    run = shlex.quote(str(run_dir))
    if cfg.game.name != "lost_cities":
        return f"python -m agents.evaluate {run}"
    from agents.checkpoint import PRIOR, checkpoint_dir
    opponents = FIGURES_OPPONENTS + (",prior" if (checkpoint_dir(run_dir) / PRIOR).exists() else "")
    return f"python -m agents.evaluate {run} --opponent {opponents} {FIGURES_MATCHES}"


def _warm_start_line(m, cfg):
    """The summary's line on the warm start: games, teacher, pretraining."""
    tr = cfg.train
    teacher = f"a {tr.warm_start_worlds}-world lookahead" if tr.warm_start_worlds else "the heuristic"
    text = f"warm start: {m['warm_start_games_labelled']} games labelled by {teacher}"
    if m.get("warm_start_label_s") is not None:
        text += f" in {_duration(m['warm_start_label_s'])}"
    steps = [m.get(f"warm_start_pretrain_steps_{name}") for name in ("adv0", "adv1", "strategy")]
    if None not in steps:
        text += (f", then {steps[0]} steps per net" if len(set(steps)) == 1
                 else f", then {'/'.join(map(str, steps))} steps (adv0/adv1/strategy)")
        if m.get("warm_start_pretrain_s") is not None:
            text += f" in {_duration(m['warm_start_pretrain_s'])}"
    return text


def _self_play_line(m, run_dir):
    """The summary's line on the PPO self-play at the end of the run, and
    where CFR's agent before it was kept (the `--opponent run:...` to
    measure what the self-play added)."""
    from agents.checkpoint import BEFORE_SELFPLAY, checkpoint_dir
    before = shlex.quote(str(checkpoint_dir(run_dir) / BEFORE_SELFPLAY))
    critic = ""
    if m.get("selfplay_mean_last10_mse"):
        critic = (f"; its critic {1 - m['selfplay_critic_last10_mse'] / m['selfplay_mean_last10_mse']:.0%} below the "
                  f"mean return's error on its last waves, kept in the checkpoint")
    return (f"self-play: {m.get('selfplay_games', 0):,} games of PPO ({m['selfplay_waves']} waves) in "
            f"{_duration(m.get('selfplay_s', 0.0))}{critic}; CFR's agent kept: --opponent run:{before}")


def _evaluation_lines(m, budget):
    """At most `budget` lines on the evaluation in the metrics line `m`."""
    lines = []
    expl = [(label, m[key]) for key, label in (("exploitability", "exploitability"),
                                                ("openspiel_exploitability", "OpenSpiel"),
                                                ("strategy_net_exploitability", "strategy net"))
            if m.get(key) is not None]
    results = opponent_results(m)
    if not expl and not results:
        return ["no evaluation in the last iteration"]
    games = sorted({r["games"] for r in results if r["games"] is not None})
    note = f", {games[0]} games per opponent" if len(games) == 1 else ""
    ci = "95% intervals" if any(r["win_lo"] is not None or r["margin_lo"] is not None for r in results) else ""
    paren = ", ".join(x for x in (ci, note[2:]) if x)
    lines.append(f"evaluation after iteration {m['iteration']}" + (f" ({paren}):" if paren else ":"))
    if expl:
        (label, value), rest = expl[0], expl[1:]
        extra = "; ".join(f"{k} {v:.4g}" for k, v in rest)
        lines.append(f"  {label} {value:.4g}" + (f" ({extra})" if extra else ""))
    width = max((len(r["opponent"]) for r in results), default=0)
    room = budget - len(lines)
    shown = results if len(results) <= room else results[:max(0, room - 1)]
    rates = []
    for r in shown:
        rate = f"win rate {_pct(r['win_rate'])}"
        if r["win_lo"] is not None and r["win_hi"] is not None:
            rate += f" [{_pct(r['win_lo'])}, {_pct(r['win_hi'])}]"
        rates.append(rate)
    rate_width = max((len(x) for x in rates), default=0)
    for r, rate in zip(shown, rates):
        text = f"  vs {r['opponent']:<{width}}  {rate:<{rate_width}}"
        if r["margin"] is not None:
            text += f"   margin {r['margin']:+.1f}"
            if r["margin_lo"] is not None and r["margin_hi"] is not None:
                text += f" [{r['margin_lo']:+.1f}, {r['margin_hi']:+.1f}]"
        counts = [f"{r['games']} games"] if r["games"] is not None and len(games) > 1 else []
        if r["capped"]:
            counts.append(f"{r['capped']} capped")
        if counts:
            text += f"   ({', '.join(counts)})"
        lines.append(text.rstrip())
    if len(shown) < len(results):
        lines.append(f"  ... {len(results) - len(shown)} more opponents in metrics.jsonl")
    return lines


def _pct(x):
    return f"{100 * x:.1f}%"


def _duration(seconds):
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    mins, sec = divmod(rem, 60)
    return f"{h}h {mins:02d}m {sec:02d}s" if h else f"{mins}m {sec:02d}s"
