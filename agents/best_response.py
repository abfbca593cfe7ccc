"""A learned best response: PPO against a frozen agent, the strong lower
bound on how much a Lost Cities agent can be exploited.

    python -m agents.evaluate RUN --opponent br:20          # 20 min of PPO against RUN's agent, then the match
    responder = train_responder(game, frozen, start, budget_s=1200, seed=0)

The agent's side never learns: its net answers its seat in every game, as
it is judged (greedy, its most probable legal move, for a -greedy read-out;
sampled otherwise). The responder starts as a copy of `start` (the agent's
own strategy net) with the critic the checkpoint kept where it has one,
plays the other seat, and learns by PPO (agents.ppo.SelfPlay) from its own
decisions only. It plays seat g % 2 in game g, so it learns both seats. The
games are played by the workers' own code (traverser.selfplay.play_local:
PlayGroups stepped in nogil C) with the forwards in this process.

The training deals are drawn from their own stream (traverser.selfplay.
wave_seeds), apart from the duplicate deals of the match that judges the
responder. agents.evaluate saves the responder as a checkpoint beside the
run (RUN_DIR/responders/) and then plays it, greedy, like any run:.
"""
import copy
import dataclasses
import time

import numpy as np
import torch

from agents.ppo import SelfPlay, SelfPlaySettings

PREFIX = "br:"
GREEDY_SCALE = 1e4      # logits times this: C's softmax over the legal moves puts all the mass on the best one


def parse_br(text):
    """Minutes of training in an opponent spec 'br:MINUTES' ('br:20', 'br:0.5').
    ValueError in one line when it is not one."""
    if not text.startswith(PREFIX):
        raise ValueError(f"{text!r} is not a learned best response (br:MINUTES)")
    rest = text[len(PREFIX):].strip()
    try:
        minutes = float(rest)
    except ValueError:
        raise ValueError(f"{text}: br:MINUTES needs the minutes of training as a number, e.g. br:20; "
                         f"got {rest!r}") from None
    if not (0 < minutes < float("inf")):
        raise ValueError(f"{text}: the minutes of training must be positive and finite, got {rest}")
    return minutes


class FrozenNet:
    """The agent's side: forward(rows float32 [n, T]) -> logits [n, A] of a
    strategy net that never trains, sharpened to its best legal move when greedy."""

    def __init__(self, net, greedy=True):
        self.net = copy.deepcopy(net).float().eval()
        for p in self.net.parameters():
            p.requires_grad_(False)
        self.greedy = bool(greedy)

    def __call__(self, rows):
        with torch.no_grad():
            logits = self.net(torch.from_numpy(rows)).numpy()
        return logits * GREEDY_SCALE if self.greedy else logits


def train_responder(game, frozen, start, budget_s, seed=0, games=512, settings=None, critic=None, waves=None,
                    progress=None):
    """PPO of a copy of `start` (a strategy MLP) against `frozen`
    (rows float32 [n, T] -> logits [n, A], e.g. a FrozenNet) for budget_s
    seconds or `waves` waves of `games` games, whichever ends first.
    critic: a critic MLP to start from (copied), else a fresh one.
    progress(wave_stats): called after each wave. Returns (the responder's
    SelfPlay learner, its net in eval mode at learner.net; a list of the
    waves' figures, each with "margin": the responder's mean margin in that
    wave's games as it played them, sampled)."""
    from traverser.selfplay import play_local, wave_seeds
    settings = settings or SelfPlaySettings(games=games)
    if critic is not None:
        settings = dataclasses.replace(settings, critic_hidden=tuple(critic.hidden))
    learner = SelfPlay(game, copy.deepcopy(start).float(), settings, seed=seed)
    if critic is not None:
        learner.critic.load_state_dict(critic.state_dict())
    A = game.num_distinct_actions()

    def forward(rows, players, gids):
        out = np.zeros((len(rows), A + 1), np.float32)
        mine = players == (gids % 2)
        x = torch.from_numpy(rows)
        with torch.no_grad():
            if mine.any():
                xm = x[torch.from_numpy(mine)]
                out[mine, :A] = learner.forward(learner.net, xm).numpy()
                out[mine, A] = learner.forward(learner.critic, xm)[:, 0].numpy()
            if not mine.all():
                out[~mine, :A] = frozen(rows[~mine])
        return out

    history = []
    t0 = time.monotonic()
    while (waves is None or len(history) < waves) and (not history or time.monotonic() - t0 < budget_s):
        decisions, ends = [], []
        seeds = wave_seeds(seed, len(history), games)
        learner.net.eval()
        play_local(game, forward, np.arange(games), seeds, lambda d, e: (decisions.append(d), ends.append(e)),
                   slots=games, seated=True)
        wave, returns = learner.wave_from_chunks(decisions, ends)
        mine = wave["player"] == wave["row"] % 2
        stats = learner.learn({k: v[mine] for k, v in wave.items()}, returns, lr=settings.lr)
        seat = np.arange(games) % 2
        stats["margin"] = float(np.mean(returns[np.arange(games), seat]))     # returns: the score difference
        stats["elapsed_s"] = time.monotonic() - t0
        history.append(stats)
        if progress is not None:
            progress(stats)
    learner.net.eval()
    return learner, history


# --------------------------------------------------------------------------
# agents.evaluate's br:MINUTES opponents

def responder_path(ckpt, minutes, seed):
    """Where agents.evaluate keeps the responder to checkpoint `ckpt`:
    RUN_DIR/responders/br_<minutes>min_seed<seed>_<its file's name>.pt (a
    run's final checkpoint and its before_selfplay.pt share an iteration)."""
    from pathlib import Path
    from agents.checkpoint import run_dir_of
    return run_dir_of(ckpt["path"]) / "responders" / f"br_{minutes:g}min_seed{seed}_{Path(ckpt['path']).stem}.pt"


def save_responder(path, ckpt, learner, info):
    """The responder as a checkpoint that run:PATH plays: the agent's config
    and net spec, its strategy net the responder's, its critic, and
    "best_response" (what it was trained against, for how long)."""
    from agents.checkpoint import FORMAT, save_agent_file
    state = {"format": FORMAT, "config": ckpt["config"], "iteration": ckpt.get("iteration"),
             "net_spec": learner.net.spec(),
             "nets": {"strategy": {k: v.detach().cpu() for k, v in learner.net.state_dict().items()}},
             "critic": {k: v.detach().cpu() for k, v in learner.critic.state_dict().items()},
             "critic_spec": learner.critic.spec(), "best_response": info}
    return save_agent_file(path, state)


def train_responders(opponents, game, ckpt, policy, seed=0, log=print, searching=False):
    """agents.evaluate's br:MINUTES opponents, each trained against `policy`
    (the checkpoint's strategy-net read-out) and saved (responder_path).
    Returns (the opponent list with each br: item replaced by the
    run:PATH:average-greedy that plays its responder, {that run: spec -> the
    br: item}). searching: the agent is a search player over `policy`.
    ValueError in one line when the agent cannot be responded to."""
    import os

    from agents.checkpoint import build_critic
    from agents.progress import progress
    out, names = [], {}
    threads = torch.get_num_threads()
    for o in opponents:
        if not o.startswith(PREFIX):
            out.append(o)
            continue
        minutes = parse_br(o)
        if game.name != "lost_cities":
            raise ValueError(f"{o}: the learned best response is for lost_cities, not {game.name}")
        if searching:
            raise ValueError(f"{o}: the responder learns against the strategy net, not the search player "
                             "over it: drop --search to measure the net's exploitability")
        if getattr(policy, "kind", None) != "average":
            raise ValueError(f"{o}: the responder learns against a strategy net's read-out (average or "
                             f"average-greedy), not {getattr(policy, 'name', type(policy).__name__)}")
        critic = build_critic(ckpt)
        log(f"{o}: PPO against {policy.name} of {ckpt['path']} for {minutes:g} min, from its own weights"
            f" and {'its kept critic' if critic is not None else 'a fresh critic'}")
        bar = progress(desc=f"{o}: the responder's waves", unit="wave", budget_s=60 * minutes)
        torch.set_num_threads(os.cpu_count() or 1)         # the training on every core, the matches on one
        try:
            learner, history = train_responder(game, FrozenNet(policy.net, policy.greedy), policy.net,
                                               60 * minutes, seed=seed, critic=critic,
                                               progress=lambda s: bar.update())
        finally:
            torch.set_num_threads(threads)
            bar.close()
        tail = history[-min(len(history), 10):]
        info = {"against": ckpt["path"], "policy": policy.name, "minutes": minutes, "seed": seed,
                "waves": len(history), "games": int(learner.games_played),
                "last_waves_margin": float(np.mean([h["margin"] for h in tail]))}
        path = save_responder(responder_path(ckpt, minutes, seed), ckpt, learner, info)
        log(f"{o}: {info['waves']} waves, {info['games']} games; its sampled margin over the last "
            f"{len(tail)} waves {info['last_waves_margin']:+.1f}; saved as {path}")
        side = f"run:{path}:average-greedy"
        out.append(side)
        names[side] = o
    return out, names


def name_responders(metrics, names):
    """metrics with each responder's run: spec renamed to its br: item, and
    vs_br:M_responder_margin (with _lo, _hi): the points a game the
    responder takes from the agent, the agent's margin with its sign turned."""
    out = {}
    for key, value in metrics.items():
        for side, o in names.items():
            key = key.replace(f"vs_{side}_", f"vs_{o}_")
        out[key] = value
    for o in names.values():
        if f"vs_{o}_margin" in out:
            out[f"vs_{o}_responder_margin"] = -out[f"vs_{o}_margin"]
            out[f"vs_{o}_responder_margin_lo"] = -out[f"vs_{o}_margin_hi"]
            out[f"vs_{o}_responder_margin_hi"] = -out[f"vs_{o}_margin_lo"]
    return out
