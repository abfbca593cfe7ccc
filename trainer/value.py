"""The value net: the expected return of the player whose info-state it is,
learned from the outcomes of the warm start's games (issue 28, part 2).

Targets: every warm-start decision row carries its game's final return for
the player to move (trainer.warmstart, raw points) and the game's deal;
value_rows turns them into rows {info, target [n, 1] = outcome *
traversal.value_scale, mask [n, 1] of ones, weight, game}, in the traversal's
value units, so the batcher can hand the value to a cutoff as it is.

Hold-out: the rows of one game are strongly alike (and share one target),
so a net that has seen some of a game's positions has as good as seen its
outcome. split_by_game holds out whole games, and the error on them says
what the net carries over to games it has not seen; it is reported next to
the error of predicting 0 and of predicting the training rows' mean target.

train_value fits the net by MSE (trainer.learn.train_net with value_loss)
on the training games' rows, stopping early by the error on validation
games (apart from the held-out ones); with colour augmentation only the
info rows are renamed (info_only), since the [n, 1] target is not per
action.
"""
import time

import numpy as np
import torch


MOVER, OBSERVER, SEARCH = 0, 1, 2      # value rows' kinds (value_rows' "kind" column)
LABELS = {"outcome": (MOVER, OBSERVER), "both": (MOVER, OBSERVER, SEARCH), "search": (SEARCH,)}


def value_rows(adv_rows, value_scale):
    """Value rows of the warm start's advantage rows: `adv_rows` is one
    dict of rows or {player: rows} (trainer.warmstart.heuristic_rows' first
    result), each with info, outcome, game and weight, and optionally the
    further value rows (value_info, value_points, value_game, value_kind).
    Returns one dict of info (uint8 [n, T]), target (float32 [n, 1], points
    * value_scale), mask (uint8 [n, 1], all 1), weight (float32 [n], all
    1), game (int64 [n]) and kind (int8 [n]): MOVER, a decision's row with
    its game's outcome for the player to move; OBSERVER, the other player's
    view at that decision with its own outcome; SEARCH, the mover's view
    after a candidate move with the lookahead's mean value of it."""
    parts = [adv_rows] if "info" in adv_rows else [adv_rows[p] for p in sorted(adv_rows)]
    info, points, game, kind = [], [], [], []
    for part in parts:
        missing = {"info", "outcome", "game"} - set(part)
        if missing:
            raise ValueError(f"value rows need the warm start's outcome and game columns; missing {sorted(missing)}")
        info.append(np.asarray(part["info"]))
        points.append(np.asarray(part["outcome"], np.float64))
        game.append(np.asarray(part["game"], np.int64))
        kind.append(np.full(len(points[-1]), MOVER, np.int8))
        if "value_info" in part:
            info.append(np.asarray(part["value_info"]))
            points.append(np.asarray(part["value_points"], np.float64))
            game.append(np.asarray(part["value_game"], np.int64))
            kind.append(np.asarray(part["value_kind"], np.int8) + 1)   # trainer.warmstart's OBSERVER 0, SEARCH 1
    info, points, game, kind = (np.concatenate(x) for x in (info, points, game, kind))
    n = len(points)
    return {"info": info, "target": (points * float(value_scale)).astype(np.float32).reshape(n, 1),
            "mask": np.ones((n, 1), np.uint8), "weight": np.ones(n, np.float32), "game": game, "kind": kind}


def split_by_game(rows, share, seed):
    """(train, held_out): the rows of a deterministic `share` of the games
    (rows["game"]) held out whole, every row of a held-out game out of
    training. The held-out games are round(share * games) of them, drawn by
    `seed`, and at least one game is on each side when there are two or
    more games (and share > 0). The same rows, share and seed give the same
    split."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"the held-out share of games must be in [0, 1), got {share}")
    game = np.asarray(rows["game"])
    games = np.unique(game)
    k = int(round(share * len(games)))
    if share > 0 and len(games) >= 2:
        k = min(max(k, 1), len(games) - 1)
    held = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x7A1E]).permutation(games)[:k]
    out = np.isin(game, held)
    return ({key: np.asarray(v)[~out] for key, v in rows.items()},
            {key: np.asarray(v)[out] for key, v in rows.items()})


class Rows:
    """A fixed set of rows to draw minibatches from (uniformly, with
    replacement), in the form trainer.learn.train_net samples memories."""

    def __init__(self, rows):
        self.rows = {k: rows[k] for k in ("info", "target", "mask", "weight")}
        self.size = len(self.rows["weight"])

    def sample(self, batch_size, rng):
        idx = rng.integers(0, self.size, size=batch_size)
        return {k: v[idx] for k, v in self.rows.items()}


def value_loss(net, info, target, mask, weight):
    """Weighted squared error of a one-output net against [n, 1] targets."""
    return (weight * ((net(info) - target) ** 2).sum(1)).mean()


def info_only(augment):
    """An augmentation that renames the info rows by `augment` (e.g.
    agents.symmetry.ColourAugment) and leaves every other column, the
    [n, 1] value target and its mask among them, as it is."""
    def rename(batch, rng):
        out = dict(batch)
        out["info"] = augment({"info": batch["info"]}, rng)["info"]
        return out
    return rename


def value_errors(net, rows, mean_target, device="cpu"):
    """{"mse": the net's mean squared error on `rows`, "mean_mse": that of
    predicting `mean_target` everywhere, "zero_mse": that of predicting 0}
    (weighted by rows["weight"]); all None for no rows."""
    n = len(rows["weight"])
    if n == 0:
        return {"mse": None, "mean_mse": None, "zero_mse": None}
    with torch.inference_mode():
        pred = net(torch.from_numpy(np.asarray(rows["info"]).astype(np.float32)).to(device)).cpu().double().numpy()
    target = np.asarray(rows["target"], np.float64).reshape(n)
    w = np.asarray(rows["weight"], np.float64)
    w = w / w.sum()
    return {"mse": float((w * (pred[:, 0] - target) ** 2).sum()),
            "mean_mse": float((w * (mean_target - target) ** 2).sum()),
            "zero_mse": float((w * target ** 2).sum())}


HELD_OUT_SHARE = 0.1        # of the warm start's games, for the value net's held-out error
VALIDATION_SHARE = 0.1      # of the other games, for early stopping
CHECK_EVERY = 100           # steps between validation checks
PATIENCE = 5                # checks without a better validation error before the training stops


def train_value(net, optimizer, adv_rows, value_scale, steps, batch_size, device, rng, seed, grad_clip=1.0,
                augment=None, budget_s=0.0, progress=None, held_out_share=HELD_OUT_SHARE, labels="both"):
    """Train the value net `net` on the warm start's games (trainer.warmstart's
    advantage rows `adv_rows`) and return its metrics.

    The games are split three ways, each game whole on one side
    (split_by_game): a share held out for the error reported
    (value_heldout_*), a share of the rest for validation, and the rest
    trained on. `labels` says which rows it learns (train.value_labels):
    "outcome" (MOVER and OBSERVER rows), "search" (SEARCH rows) or "both";
    the held-out errors of both kinds are reported whatever it learns.
    Every CHECK_EVERY steps the validation error is taken; the
    net keeps the weights of the best check, and the training stops after
    `steps`, after PATIENCE checks without a better one, or once budget_s
    seconds (> 0) have passed. A net fitted to a few hundred games
    memorises their outcomes within a few thousand steps (its error on new
    games then grows again), so `steps` is a ceiling and the validation
    games say when to stop.

    Metrics: value_heldout_mse, value_heldout_mean_mse (predicting the
    training rows' mean target), value_heldout_zero_mse, value_train_mse,
    value_val_mse (of the net kept), value_train_rows, value_heldout_rows,
    value_heldout_games, value_val_games, value_steps (taken),
    value_best_step (of the weights kept), value_train_s, value_loss."""
    t0 = time.monotonic()
    deadline = t0 + budget_s if budget_s > 0 else None
    if labels not in LABELS:
        raise ValueError(f"value labels must be one of {', '.join(LABELS)}, got {labels!r}")
    rest, held = split_by_game(value_rows(adv_rows, value_scale), held_out_share, seed)
    every, val = split_by_game(rest, VALIDATION_SHARE, seed + 1)
    train, val = _kinds(every, LABELS[labels]), _kinds(val, LABELS[labels])
    if len(train["weight"]) == 0:
        raise ValueError(f"the value net has no training rows of its labels ({labels}): the warm start labelled "
                         "no game" + (", or its teacher (warm_start_worlds 0) values no moves" if labels == "search"
                                      else ""))
    mean = float(np.average(train["target"][:, 0], weights=train["weight"]))
    taken, loss, best = _fit(net, optimizer, Rows(train), val, mean, steps, batch_size, device, rng, grad_clip,
                             progress, None if augment is None else info_only(augment), deadline)
    out, fit, searched = _held_out_errors(net, every, held, mean, device)
    return {"value_heldout_mse": out["mse"], "value_heldout_mean_mse": out["mean_mse"],
            "value_heldout_zero_mse": out["zero_mse"], "value_train_mse": fit["mse"],
            "value_heldout_search_mse": None if searched is None else searched["mse"],
            "value_heldout_search_mean_mse": None if searched is None else searched["mean_mse"],
            "value_search_rows": int((train["kind"] == SEARCH).sum()),
            "value_val_mse": best[0] if best[1] is not None else None,
            "value_train_rows": len(train["weight"]), "value_heldout_rows": len(held["weight"]),
            "value_heldout_games": len(np.unique(held["game"])), "value_val_games": len(np.unique(val["game"])),
            "value_steps": taken, "value_best_step": best[2] if best[1] is not None else taken,
            "value_train_s": time.monotonic() - t0, "value_loss": loss}


def _fit(net, optimizer, memory, val, mean, steps, batch_size, device, rng, grad_clip, progress, augment, deadline):
    """Train `net` on `memory` up to `steps` steps (or the deadline), taking
    the validation error on `val` every CHECK_EVERY steps and stopping after
    PATIENCE checks without a better one; the net keeps the weights of the
    best check. Returns (steps taken, the last loss, (the best validation
    error, its weights or None without validation rows, its step))."""
    import copy

    from trainer.learn import train_net
    taken, loss = 0, None
    best = (float("inf"), None, 0)          # (validation error, weights, step)
    since_best = 0
    while taken < steps and (deadline is None or time.monotonic() < deadline):
        done = {}
        loss = train_net(net, memory, min(CHECK_EVERY, steps - taken), batch_size, optimizer, device, rng,
                         value_loss, grad_clip, progress, augment=augment, deadline=deadline, stats=done)
        taken += done.get("steps", 0)
        if len(val["weight"]) == 0:
            continue
        err = value_errors(net, val, mean, device)["mse"]
        if err < best[0]:
            best, since_best = (err, copy.deepcopy(net.state_dict()), taken), 0
        else:
            since_best += 1
            if since_best >= PATIENCE:
                break
    if best[1] is not None:
        net.load_state_dict(best[1])
    return taken, loss, best


def _held_out_errors(net, every, held, mean, device):
    """(held-out outcome errors, training outcome errors, held-out search
    errors or None): the error of the games' outcomes (MOVER and OBSERVER
    rows) against the outcome rows' mean, and apart from it that of the
    search's values against theirs; `every`: the rows not held out."""
    outcome_train, outcome_held = _kinds(every, (MOVER, OBSERVER)), _kinds(held, (MOVER, OBSERVER))
    searched = None
    outcome_mean = _mean(outcome_train, mean)
    out = value_errors(net, outcome_held, outcome_mean, device)
    fit = value_errors(net, outcome_train, outcome_mean, device)
    search_held = _kinds(held, (SEARCH,))
    if len(search_held["weight"]):
        searched = value_errors(net, search_held, _mean(_kinds(every, (SEARCH,)), mean), device)
    return out, fit, searched


def _kinds(rows, kinds):
    keep = np.isin(rows["kind"], kinds)
    return {k: v[keep] for k, v in rows.items()}


def _mean(rows, default):
    return float(np.average(rows["target"][:, 0], weights=rows["weight"])) if len(rows["weight"]) else default


def value_line(m):
    """The value net's training in one log line, from train_value's metrics."""
    def f(x):
        return "-" if x is None else f"{x:.4g}"
    line = (f"value net: {m['value_steps']} steps on {m['value_train_rows']} rows in {m['value_train_s']:.0f} s; "
            f"kept step {m['value_best_step']} (validation MSE {f(m['value_val_mse'])} on "
            f"{m['value_val_games']} games); held-out MSE {f(m['value_heldout_mse'])} on {m['value_heldout_games']} games "
            f"(mean predictor {f(m['value_heldout_mean_mse'])}, zero {f(m['value_heldout_zero_mse'])}; "
            f"train {f(m['value_train_mse'])})")
    base = min((x for x in (m["value_heldout_mean_mse"], m["value_heldout_zero_mse"]) if x), default=None)
    if base and m["value_heldout_mse"] is not None:
        line += f", {100 * (1 - m['value_heldout_mse'] / base):+.1f}% better than the better of the two"
    if m.get("value_heldout_search_mse") is not None:
        line += (f"; the search's values of held-out games: MSE {f(m['value_heldout_search_mse'])} "
                 f"(mean predictor {f(m['value_heldout_search_mean_mse'])})")
    return line
