"""Steady-state scaling of the self-play stage:
`python -m benchmarks.scaling --stage selfplay --workers 1,2,4 [--agent RUN] [--hidden 256 256]`.

For each worker count W: a fresh batcher, W worker processes (`python -m
traverser --trainer ... --batcher ...`, as the trainer starts them) and the
job server in this process. The served policy-value net is the agent's
(--agent RUN: its strategy net, whose games are as long as a trained
agent's) or a fresh one (--hidden), with the self-play critic beside it.
Waves of --games deals are handed out back to back, one job per worker, as
the stage hands them out; after --warmup-s, the games committed in a
--window-s window give the point's games/s, which is what the workers and
the batcher can play. As in the stage, the next wave waits in the job
server while the last one is played (trainer.selfplay_stage.WaveFeed),
so a worker goes on to it as its job's last games end. The PPO update's
own rate (games/s it learns, from --update-waves timed updates of a
played wave on --update-threads torch threads) is measured once in the
same run. Each point names its limit:
the trainer's update where it learns fewer games/s than are played,
otherwise the batcher where its forwards keep it busy, or its process
uses its core, over 85% of the window, otherwise the workers.

The remote-worker share: one worker's games/s through the batcher over the
same games played in this process by the same code (traverser.selfplay.
play_local, the forward in this process, one torch thread, run as the
batcher runs it on a CPU: in bf16 weights cast once, rows padded to 16), measured
in the same run. On a box with too few cores for W workers, W x the share is
the stage's reach, as the service ceiling reasons for CFR. With
--null-forward both sides answer every row with ones (a uniform policy, no
net), as the ceiling does: the share is then what the service costs the
worker itself, where a GPU makes the forward nearly free.
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from batcher.networks import for_inference, padded_forward

ROOT = Path(__file__).resolve().parent.parent
LIMIT_BUSY = 0.85


def _setup(args):
    """(game, SelfPlay tuner, served module) for the benchmark's net."""
    import engine
    from batcher.networks import MLP
    from agents.ppo import SelfPlay, SelfPlaySettings
    if args.agent:
        from agents.checkpoint import build_net, game_of, load_checkpoint
        ckpt = load_checkpoint(args.agent)
        game, net = game_of(ckpt), build_net(ckpt, "strategy")
    else:
        game = engine.load_game("lost_cities", max_turns=200, features=1)
        torch.manual_seed(0)
        net = MLP(game.information_state_tensor_size(), game.num_distinct_actions(), tuple(args.hidden),
                  input_scale=game.input_scale())
    tuner = SelfPlay(game, net, SelfPlaySettings(games=args.games, critic_waves=0), seed=0)
    return game, tuner, tuner.served()


def model_wait(args):
    """The self-play net's wait on the batcher: --max-wait-us, or the stage's (service.selfplay_max_wait_us)."""
    from trainer.config import ServiceSection
    return ServiceSection().selfplay_max_wait_us if args.max_wait_us is None else args.max_wait_us


def run_point(args, game, served, workers, autocast=None):
    """One worker count: games/s and decisions/s played in the window, the batcher's busy fraction, and a wave."""
    from batcher.bench import spawn_batcher
    from batcher.client import BatcherClient
    from trainer.jobs import JobServer
    from trainer.launcher import _die_with_parent, local_endpoint, local_shm_dir, remove_local_endpoint
    from trainer.selfplay_stage import SELFPLAY_MODEL, WaveFeed
    endpoint = local_endpoint("ipc")
    shm_dir = local_shm_dir() if args.shm else ""      # as the trainer's local workers (service.batcher_shm)
    py = sys.executable
    batcher = spawn_batcher([py, "-m", "batcher", "--bind", endpoint, "--device", args.device, "--torch-threads",
                             str(args.batcher_threads), "--max-batch", str(args.max_batch), "--shm-dir", shm_dir,
                             *(["--null-forward"] if args.null_forward else [])],
                            endpoint, cwd=ROOT,
                            preexec_fn=_die_with_parent)      # a killed benchmark leaves no child behind
    server = JobServer("tcp://127.0.0.1:0", heartbeat_timeout_s=60)
    procs = []
    client = BatcherClient(endpoint, timeout_s=60)
    try:
        # the stage's play precision and wait
        client.push_weights(SELFPLAY_MODEL, served, 1, autocast=autocast, max_wait_us=model_wait(args))
        procs = [subprocess.Popen([py, "-m", "traverser", "--trainer", server.endpoint, "--batcher", endpoint,
                                   "--machines", str(args.machines), "--groups", str(args.groups),
                                   "--shm-dir", shm_dir], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
                 for _ in range(workers)]
        job_config = {"game": {"name": game.name, "params": dict(game.params)}, "seed": 0}
        # as the stage hands them out: the next wave waits in the server while the last one ends
        feed = WaveFeed(server, job_config, 0, args.games, workers)
        feed.submit(0)
        feed.submit(1)
        committed, wave = [], 0
        t0 = time.monotonic()
        start, end = t0 + args.warmup_s, t0 + args.warmup_s + args.window_s
        stats0 = None
        while time.monotonic() < end:
            if stats0 is None and time.monotonic() >= start:
                stats0 = (time.monotonic(), client.stats())
            decisions, ends, _ = feed.collect(wave)
            committed.append((time.monotonic(), sum(len(c["game"]) for c in ends),
                              sum(len(c["action"]) for c in decisions), decisions, ends))
            feed.submit(wave + 2)
            wave += 1
        t1, stats1 = time.monotonic(), client.stats()
        if stats0 is None:
            stats0 = (t1, stats1)
        inside = [c for c in committed if start <= c[0] <= t1]
        seconds = t1 - start
        s0 = stats0[1] if stats0 else {"busy_fraction": 0.0, "uptime_s": 0.0, "cpu_s": 0.0}
        span = max(stats1["uptime_s"] - s0["uptime_s"], 1e-9)
        busy = (stats1["busy_fraction"] * stats1["uptime_s"] - s0["busy_fraction"] * s0["uptime_s"]) / span
        # the batcher process's CPU time in the window (its forwards and its messages)
        cpu = (stats1.get("cpu_s", 0.0) - s0.get("cpu_s", 0.0)) / span
        server.stop_workers()
        return {"workers": workers, "games_per_s": sum(c[1] for c in inside) / seconds,
                "decisions_per_s": sum(c[2] for c in inside) / seconds, "batcher_busy": busy, "batcher_cpu": cpu,
                "mean_batch": stats1.get("mean_batch", float("nan")),
                "forward_ms_mean": stats1.get("forward_ms_mean", float("nan")), "waves": wave}, committed
    finally:
        client.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        batcher.kill()
        batcher.wait()
        server.close()
        remove_local_endpoint(endpoint)
        if shm_dir:
            shutil.rmtree(shm_dir, ignore_errors=True)


def in_process_rate(game, served, games, seconds, autocast="none", null_forward=False):
    """Games/s of play_local on this process's one torch thread, in the
    stage's play precision (the remote share's denominator); with
    null_forward every row is answered with ones, as the batcher's
    --null-forward does."""
    from traverser.selfplay import play_local, wave_seeds
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cols = game.num_distinct_actions() + 1
    # the batcher's CPU forward: in bf16 the weights cast once, the rows padded to a multiple of 16
    net = for_inference(copy.deepcopy(served), torch.bfloat16 if autocast == "bf16" else None)

    def forward(rows):
        if null_forward:
            return np.ones((len(rows), cols), np.float32)
        with torch.inference_mode():
            return padded_forward(net, rows).float().numpy()
    try:
        done, t0, wave = 0, time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            done += play_local(game, forward, np.arange(games), wave_seeds(1, wave, games), lambda d, e: None,
                               groups=1, slots=games)
            wave += 1
        return done / (time.monotonic() - t0)
    finally:
        torch.set_num_threads(threads)


def update_rate(tuner, committed, waves, threads):
    """Games/s the PPO update learns: `waves` timed updates of a wave the workers played."""
    # a whole wave: the last wave's jobs (committed in job order, so its games are the last ones)
    games = tuner.settings.games
    take, got = [], 0
    for c in reversed(committed):
        take.append(c)
        got += c[1]
        if got >= games:
            break
    decisions = [d for c in take for d in c[3]]
    ends = [e for c in take for e in c[4]]
    wave, returns = tuner.wave_from_chunks(decisions, ends)
    torch.set_num_threads(threads)
    t0 = time.monotonic()
    for _ in range(waves):
        tuner.learn(wave, returns, lr=tuner.settings.lr)
    return games * waves / (time.monotonic() - t0), len(wave["action"])


def selfplay_scaling(args):
    game, tuner, served = _setup(args)
    counts = [int(x) for x in args.workers.split(",")]
    rows, committed = [], None
    for w in counts:
        r, committed_w = run_point(args, game, served, w, autocast=tuner.autocast)
        rows.append(r)
        committed = committed or committed_w
        print(f"{w:3d} workers: {r['games_per_s']:8.1f} games/s ({r['decisions_per_s']:,.0f} decisions/s) played, "
              f"batcher busy {r['batcher_busy']:.2f} (its CPU {r['batcher_cpu']:.2f}), mean batch "
              f"{r['mean_batch']:.0f}", flush=True)
    upd, wave_decisions = update_rate(tuner, committed, args.update_waves, args.update_threads)
    local = in_process_rate(game, served, args.games, args.window_s, tuner.autocast, args.null_forward)
    one = rows[0]["games_per_s"] / rows[0]["workers"]
    for r in rows:
        r["update_games_per_s"] = upd
        r["scaling"] = r["games_per_s"] / (r["workers"] * one)
        # what bounds the play (the workers and the batcher), and the stage (the play or the update)
        r["play_limit"] = "the batcher" if max(r["batcher_busy"], r["batcher_cpu"]) > LIMIT_BUSY else "the workers"
        r["limit"] = "the trainer's update" if upd < r["games_per_s"] else r["play_limit"]
    share = rows[0]["games_per_s"] / rows[0]["workers"] / local
    print(f"the update learns {upd:.1f} games/s ({args.update_threads} torch threads, {wave_decisions:,} decisions "
          f"a wave of {args.games}); in this process one torch thread plays {local:.1f} games/s: remote-worker "
          f"share {share:.2f} (the net's wait on the batcher {model_wait(args)} us"
          f"{', null forward' if args.null_forward else ''})", flush=True)
    for r in rows:
        print(f"{r['workers']:3d} workers: stage {min(r['games_per_s'], upd):8.1f} games/s; scaling "
              f"{r['scaling']:.2f} of W x one worker's; limit: {r['limit']} (the play's: {r['play_limit']})",
              flush=True)
    meta = {"stage": "selfplay", "agent": args.agent, "hidden": None if args.agent else args.hidden,
            "games": args.games, "device": args.device, "cpu_count": os.cpu_count(), "warmup_s": args.warmup_s,
            "window_s": args.window_s, "null_forward": args.null_forward, "groups": args.groups,
            "max_wait_us": model_wait(args), "shm": args.shm, "in_process_games_per_s": local, "remote_share": share,
            "loadavg_after": os.getloadavg()}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}.json")
    return rows, meta


def labels_scaling(args):
    """`--stage labels`: the prior's label jobs on W local workers a point
    (benchmarks.label_rate.measure: the warm start's deals, a W-worker label
    stage, no batcher), games/s and the scaling over W x one worker's. Label
    jobs use neither the batcher nor the update: the workers are the limit
    until the machine's cores run out."""
    from benchmarks.label_rate import measure
    rows = []
    for w in [int(x) for x in args.workers.split(",")]:
        out = measure(games=args.games, worlds=args.worlds, workers=w)
        rows.append({"workers": w, "games_per_s": out["games_per_s"], "decisions": out["decisions"],
                     "startup_s": out["startup_s"]})
    one = rows[0]["games_per_s"] / rows[0]["workers"]
    for r in rows:
        r["scaling"] = r["games_per_s"] / (r["workers"] * one)
        r["limit"] = "the workers" if r["workers"] <= (os.cpu_count() or 1) else "the cores"
        print(f"{r['workers']:3d} workers: {r['games_per_s']:7.2f} games/s labelled; scaling {r['scaling']:.2f} "
              f"of W x one worker's; limit: {r['limit']}", flush=True)
    meta = {"stage": "labels", "games": args.games, "worlds": args.worlds, "cpu_count": os.cpu_count(),
            "loadavg_after": os.getloadavg()}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}.json")
    return rows, meta
