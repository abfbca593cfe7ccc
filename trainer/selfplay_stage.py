"""The self-play stage on the service: workers play the waves, the batcher
answers their forwards, the trainer learns.

    stage = SelfPlayStage(tuner, server, sup, job_config, run_seed, workers=1, ledger=ledger, log=print)
    stats = stage.run(budget_s=1320)

A wave is `games` deals (traverser.selfplay.wave_seeds: a stream per run and
wave) cut into one job per worker (kind "selfplay"). Each worker plays its
games to the end in nogil C (traverser/_selfplay.pyx), asking the batcher
for the policy's logits and the critic's value in one forward (the
AdvantageValue served as model SELFPLAY_MODEL), and streams back every
decision (info-state, legal mask, move, its behaviour log-probability, the
value, the weights version) and every game's end. The job server commits a
job's records only when the whole job is done, in job order, and hands the
job of a dead or silent worker out again: every game is counted once.

Play and update overlap (an actor-learner split): the workers play wave
k + 1 on the weights last pushed while the trainer runs PPO on wave k
(agents.ppo.SelfPlay.learn), pumping the job server between minibatches;
the new weights are pushed after. Wave k + 1's jobs go out as soon as the
weights that learnt wave k - 1 are served, and wait in the job server
until a worker ending its wave-k job takes them (WaveFeed): so the workers
never wait for the trainer between waves. Wave k + 1 is played one version
behind the weights that learn from it, and PPO's ratio divides by the
recorded behaviour probability, exact under that lag. Each wave logs its
mean version lag, and how long the trainer waited for the wave (`wait_s`:
near 0 when the update bounds the stage, the play time beyond the update
when the workers do).
"""
import time

import numpy as np
import torch

from traverser.selfplay import wave_seeds
from trainer.jobs import Job
from agents.ppo import scheduled_lr

SELFPLAY_MODEL = 3          # the batcher's model id of the served policy-value net


def wave_jobs(run_seed, wave, games, workers, first_id=0):
    """A wave's self-play jobs: its `games` deals (wave_seeds), numbered
    0..G-1 within the wave, cut into one job per worker; job ids from
    first_id on (unique across the waves of one phase)."""
    seeds = wave_seeds(run_seed, wave, games)
    ids = np.arange(games, dtype=np.int64)
    return [Job(first_id + k, ids=ids[c], kind="selfplay", fields={"wave": wave, "model": SELFPLAY_MODEL},
                arrays={"games": ids[c], "seeds": seeds[c]}, kinds=("decisions", "ends"))
            for k, c in enumerate(np.array_split(np.arange(games), min(max(1, workers), games)))]


class WaveFeed:
    """Waves handed out in one job-server phase, up to two at a time: the
    next wave's jobs wait in the server while the last one's play out, so a
    worker that asks early (traverser/selfplay_session.py) starts it as its
    current job's last games end. Each wave's chunks are gathered apart;
    collect(wave) pumps the server until that wave is committed."""

    def __init__(self, server, job_config, run_seed, games, workers, log=None, ledger=None, supervise=None):
        self.server, self.job_config, self.log, self.ledger = server, job_config, log, ledger
        self.run_seed, self.games, self.workers = int(run_seed), int(games), max(1, int(workers))
        self.supervise = supervise
        # wave -> {"decisions": [...], "ends": [...], "left": jobs not committed, "at": when it was handed
        # out, "played": seconds it took to come in}
        self.chunks = {}
        self.next_id = 0
        self.open = False

    def _commit(self, job, decisions, ends):
        wave = job.fields["wave"]
        c = self.chunks[wave]
        c["decisions"] += decisions
        c["ends"] += ends
        c["left"] -= 1
        if not c["left"]:
            c["played"] = time.monotonic() - c["at"]
        if self.ledger is not None:
            self.ledger.commit_selfplay(job, wave, sum(len(x["action"]) for x in decisions),
                                        sum(len(x["game"]) for x in ends))

    def submit(self, wave):
        """Hand out wave `wave`'s jobs (after those handed out before)."""
        jobs = wave_jobs(self.run_seed, wave, self.games, self.workers, self.next_id)
        self.next_id += len(jobs)
        self.chunks[wave] = {"decisions": [], "ends": [], "left": len(jobs), "at": time.monotonic()}
        if self.open:
            self.server.add_jobs(jobs)
        else:
            self.server.start_phase(jobs, self.job_config, self._commit, log=self.log)
            self.open = True

    def pump(self, timeout_ms=0):
        """The server's messages (between the update's minibatches)."""
        self.server.pump(timeout_ms, supervise=self.supervise)

    def done(self, wave):
        return not self.chunks[wave]["left"]

    def collect(self, wave):
        """Wait for wave `wave`: (its decision chunks, its game-end chunks, seconds it took to play)."""
        while not self.done(wave):
            self.server.pump(200, supervise=self.supervise)
        c = self.chunks.pop(wave)
        return c["decisions"], c["ends"], c["played"]


class SelfPlayStage:
    """PPO self-play of `tuner` (agents.ppo.SelfPlay) on the workers of
    `server` (trainer.jobs.JobServer), supervised by `sup`
    (trainer.supervise.Supervisor), which serves the weights."""

    def __init__(self, tuner, server, sup, job_config, run_seed, workers=1, ledger=None, log=None,
                 checkpoint=None, checkpoint_s=0.0, threads=None, max_wait_us=None):
        self.tuner = tuner
        self.sup = sup
        self.feed = WaveFeed(server, job_config, run_seed, tuner.settings.games, workers, log=log, ledger=ledger,
                             supervise=sup.check)
        self.server = server
        self.log = log
        self.checkpoint = checkpoint     # checkpoint(state) every checkpoint_s seconds (state: self.state())
        self.checkpoint_s = checkpoint_s
        self.elapsed_s = 0.0
        # the update's torch threads: (while the workers play the next wave, once it is in); None: as they are
        self.threads = threads
        self.max_wait_us = max_wait_us   # the net's own wait on the batcher (None: the batcher's)
        self._playing = None             # the wave the workers play while the update runs

    def _tick(self):
        """Between the update's minibatches: the job server's messages, and
        the update's threads: few while the next wave is being played beside
        it (more would spin against the players), all once it is in."""
        self.feed.pump(0)
        if self.threads is not None:
            want = self.threads[1] if self._playing is None or self.feed.done(self._playing) else self.threads[0]
            if torch.get_num_threads() != want:
                torch.set_num_threads(want)

    def _push(self):
        # the batcher plays in the update's precision, so the ratios of an unlagged wave start at 1
        self.sup.serve(SELFPLAY_MODEL, self.tuner.served(), autocast=self.tuner.autocast,
                       max_wait_us=self.max_wait_us)

    def state(self):
        """The stage's state for a checkpoint: the tuner's, the seconds spent."""
        return {**self.tuner.state(), "elapsed_s": self.elapsed_s}

    def run(self, budget_s=None, waves=None, progress=None, start_s=0.0):
        """Waves until `waves` are learnt or `budget_s` seconds are spent
        (every wave handed out is learnt), counting `start_s` seconds spent
        before (a stage resumed from a checkpoint). Returns the totals and
        the last wave's figures.

        Wave k + 1 is handed out once the weights that learnt wave k - 1 are
        served, as wave k is still being played: it is played on those
        weights, as it would be if it waited for wave k, and the workers go
        from one to the other without a gap (the version lag is the same)."""
        if budget_s is None and waves is None:
            raise ValueError("self-play needs a budget (seconds) or a number of waves")
        s = self.tuner.settings
        t0 = time.monotonic() - start_s
        saved = time.monotonic()
        first = self.tuner.waves         # a resumed tuner's waves are learnt
        self._push()
        last, done, lags, policy_s, errors = {}, 0, [], 0.0, []
        requeued, dropped, early = self.server.requeued, self.server.dropped_rows, self.server.early
        submitted = [first] + ([first + 1] if waves is None or waves > 1 else [])
        for w in submitted:
            self.feed.submit(w)
        while done < len(submitted):
            tw = time.monotonic()
            k = first + done
            decisions, ends, played = self.feed.collect(k)
            waited = time.monotonic() - tw
            wave, returns = self.tuner.wave_from_chunks(decisions, ends)
            elapsed = time.monotonic() - t0
            self._playing = k + 1 if k + 1 in self.feed.chunks else None
            lr = scheduled_lr(s.lr, s.lr_hold_s, budget_s, elapsed)
            # the version served now (a batcher restart re-serves the weights under a higher one)
            last = self.tuner.learn(wave, returns, lr, version=self.sup.served[SELFPLAY_MODEL][1], tick=self._tick)
            self._push()
            done += 1
            # the next wave is played on the weights just pushed (see above)
            if ((waves is None or len(submitted) < waves) and (budget_s is None or elapsed < budget_s)
                    and len(submitted) == done + 1):
                submitted.append(first + len(submitted))
                self.feed.submit(submitted[-1])
            lags.append(last["version_lag"])
            errors.append((last["critic_heldout_mse"], last["mean_mse"]))
            last.update(wait_s=waited, wave_s=time.monotonic() - tw, play_s=played)
            if "kl" in last:
                policy_s += last["wave_s"]
            if progress is not None:
                progress(1)
            if self.log is not None and (self.tuner.waves <= 3 or self.tuner.waves % 10 == 0):
                self.log(wave_line(last, self.tuner.games_played, time.monotonic() - t0))
            self.elapsed_s = time.monotonic() - t0
            if (self.checkpoint is not None and self.checkpoint_s > 0 and done < len(submitted)
                    and time.monotonic() - saved >= self.checkpoint_s):
                self.checkpoint(self.state())
                saved = time.monotonic()
        return {"selfplay_waves": self.tuner.waves, "selfplay_games": self.tuner.games_played,
                "selfplay_autocast": self.tuner.autocast, "selfplay_decisions": self.tuner.decisions,
                "selfplay_s": self.elapsed_s, "selfplay_mean_version_lag": float(np.mean(lags)),
                "selfplay_policy_s": policy_s, "selfplay_requeued_jobs": self.server.requeued - requeued,
                "selfplay_dropped_rows": self.server.dropped_rows - dropped,
                # jobs a worker took while its last one's games ended (the waves back to back)
                "selfplay_early_jobs": self.server.early - early,
                # the critic on its last 10 waves, each before it trained on it, next to the waves' mean return
                "selfplay_critic_last10_mse": float(np.mean([e[0] for e in errors[-10:]])),
                "selfplay_mean_last10_mse": float(np.mean([e[1] for e in errors[-10:]])),
                **{f"selfplay_{k}": v for k, v in last.items() if k != "wave"}}


def wave_line(m, games, elapsed):
    """A wave's log line."""
    parts = [f"self-play wave {m['wave']}: {games} games in {elapsed:.0f} s",
             f"critic error on the new wave {m['critic_heldout_mse']:.4f} (its mean {m['mean_mse']:.4f}, "
             f"zero {m['zero_mse']:.4f})"]
    if "kl" in m:
        parts.append(f"kl {m['kl']:.4f}, clipped {m['clipped']:.3f}, entropy {m['entropy']:.3f}, lr {m['lr']:.2g}")
    else:
        parts.append("critic only")
    parts.append(f"wave {m['wave_s']:.1f} s (played in {m['play_s']:.1f} s, waited {m['wait_s']:.1f} s for it), "
                 f"version lag {m['version_lag']:.2f}")
    return "; ".join(parts)


def update_threads(cfg):
    """The self-play update's torch threads (train.selfplay_threads; 0: the
    cores less the local workers and the embedded batcher's threads, at least 1)."""
    import os
    if cfg.train.selfplay_threads > 0:
        return cfg.train.selfplay_threads
    batcher = 0 if cfg.service.batcher else max(1, cfg.service.batcher_threads)
    return max(1, (os.cpu_count() or 1) - cfg.service.workers * max(1, cfg.service.worker_threads) - batcher)


class _Threads:
    """torch's CPU threads set to n inside the block, as they were after it."""

    def __init__(self, n):
        self.n, self.before = n, None

    def __enter__(self):
        self.before = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.before)


def run_in_trainer(trainer, t, server, sup, job_config):
    """The run's self-play stage after CFR's last iteration t (trainer: a
    trainer.loop.Trainer) for train.selfplay_budget_s, or what is left of
    train.time_limit_s on the run's clock; resumed from the trainer's
    selfplay_state where the run was killed in it, checkpointed every
    train.selfplay_checkpoint_s. Returns its selfplay_* metrics."""
    from agents.checkpoint import before_selfplay_checkpoint
    from agents.ppo import SelfPlay, SelfPlaySettings
    from trainer.warmstart import save_playing_checkpoint
    tr, log = trainer.cfg.train, trainer.log
    resumed = trainer.selfplay_state or {}
    budget = tr.selfplay_budget_s
    if tr.time_limit_s > 0:
        budget = min(budget, resumed.get("elapsed_s", 0.0) + tr.time_limit_s - (time.monotonic() - trainer.t_start))
    if budget <= resumed.get("elapsed_s", 0.0):
        log(f"self-play: no time left of train.time_limit_s ({tr.time_limit_s:g} s); the agent is "
            + ("as its last checkpoint left it" if resumed else "CFR's"))
        return {"selfplay_waves": resumed.get("waves", 0)}
    if not resumed:
        # the agent CFR made, kept apart: "what did the self-play add" is then one head-to-head command
        path = save_playing_checkpoint(before_selfplay_checkpoint(trainer.run_dir), trainer.cfg, trainer.nets,
                                       t, trainer.value_net, before_selfplay=True)
        log(f"self-play: CFR's agent kept as {path}")
    settings = SelfPlaySettings(games=tr.selfplay_games, lr=tr.selfplay_lr, epochs=tr.selfplay_epochs,
                                autocast=tr.selfplay_autocast, lr_hold_s=tr.selfplay_lr_hold_s,
                                entropy=tr.selfplay_entropy, lam=tr.selfplay_lam,
                                critic_epochs=tr.selfplay_critic_epochs,
                                critic_hidden=tuple(trainer.cfg.network.critic_hidden))
    tuner = SelfPlay(trainer.game, trainer.nets["strategy"], settings, seed=trainer.cfg.run.seed,
                     device=trainer.device)
    trainer.critic, trainer.critic_value_scale = tuner.critic, settings.value_scale   # every checkpoint keeps it
    if resumed:
        tuner.load_state(resumed)
        log(f"self-play: resumed at wave {tuner.waves}, {resumed['elapsed_s']:.0f} s of {budget:.0f} s spent")
    threads = (update_threads(trainer.cfg), torch.get_num_threads())
    log(f"self-play: the update and the batcher's forwards in {tuner.precision()} (train.selfplay_autocast: "
        f"{tr.selfplay_autocast}); the update on {threads[0]} torch thread(s) while the workers play, "
        f"{threads[1]} once the wave is in" + (f"; entropy bonus {settings.entropy:g}" if settings.entropy else "")
        + (f"; GAE lambda {settings.lam:g}" if settings.lam != SelfPlaySettings.lam else "")
        + (f"; the critic on {settings.critic_epochs} of {settings.epochs} passes" if settings.critic_epochs else "")
        + f"; the critic's hidden layers {'x'.join(map(str, settings.critic_hidden))}")
    stage = SelfPlayStage(tuner, server, sup, job_config, trainer.cfg.run.seed,
                          workers=trainer.cfg.service.workers or server.live_workers(), ledger=trainer.ledger,
                          log=log, checkpoint=lambda state: log(f"checkpoint {trainer.save(t, selfplay=state)}"),
                          checkpoint_s=tr.selfplay_checkpoint_s, threads=threads,
                          max_wait_us=trainer.cfg.service.selfplay_max_wait_us)
    bar = trainer._bar(desc=f"self-play: PPO on the strategy net ({tr.selfplay_games} games a wave)", unit="wave",
                       budget_s=budget - resumed.get("elapsed_s", 0.0))
    with _Threads(threads[1]):
        stats = stage.run(budget_s=budget, progress=None if bar is None else bar.update,
                          start_s=resumed.get("elapsed_s", 0.0))
    if bar is not None:
        bar.close()
    log(f"self-play: {stats['selfplay_games']} games ({stats['selfplay_waves']} waves) in {stats['selfplay_s']:.0f} s, "
        f"mean version lag {stats['selfplay_mean_version_lag']:.2f}, {stats['selfplay_early_jobs']} jobs taken "
        f"as the last one's games ended")
    return stats


def tune_on_service(trainer, settings, budget_s=None, waves=None, seed=0):
    """Self-play of `trainer`'s strategy net (a trainer.loop.Trainer, its
    nets loaded) on its own services: the batcher and local workers of its
    config (service.*) are started, the stage runs, and they are stopped.
    What benchmarks.lc_selfplay runs on a saved agent. Its jobs go into the
    ledger RUN_DIR/jobs.jsonl (trainer.jobs.selfplay_ledger reads them); the
    critic it trained is then trainer.critic."""
    from trainer.jobs import JobLedger, JobServer, phase_config
    from agents.ppo import SelfPlay
    from trainer.supervise import Supervisor
    cfg = trainer.cfg
    server = JobServer(cfg.service.jobs_bind, cfg.service.heartbeat_timeout_s, curve_keys=cfg.service.curve_keys)
    ledger = JobLedger(trainer.run_dir / "jobs.jsonl", 0)
    sup = None
    try:
        sup = Supervisor(trainer, server).start()
        sup.enter("self-play")
        tuner = SelfPlay(trainer.game, trainer.nets["strategy"], settings, seed=seed, device=trainer.device)
        trainer.critic, trainer.critic_value_scale = tuner.critic, settings.value_scale
        workers = cfg.service.workers or server.live_workers()
        threads = (update_threads(cfg), torch.get_num_threads())
        stage = SelfPlayStage(tuner, server, sup, phase_config(cfg), seed, workers=workers, ledger=ledger,
                              log=trainer.log, threads=threads, max_wait_us=cfg.service.selfplay_max_wait_us)
        trainer.log(f"self-play on {workers} worker(s) and the batcher at {sup.services.batcher_endpoint}; "
                    f"the update and the batcher's forwards in {tuner.precision()}; the update on {threads[0]} "
                    f"torch thread(s) while the workers play, {threads[1]} once the wave is in")
        with _Threads(threads[1]):
            return stage.run(budget_s=budget_s, waves=waves)
    finally:
        if sup is not None:
            sup.close()
        server.close()
        ledger.close()
