"""The Deep CFR loop.

For each iteration t and each player p: hand out p's traversal jobs, collect
the samples into the reservoir memories (a job at a time, in job order),
train p's advantage net on its memory (LCFR-weighted MSE; re-initialised or
warm-started), push it to the batcher with a new version. Every
train.strategy_every iterations, at evaluations and at the end, train the
strategy net (the average policy) on the strategy memory. With
train.average: sdcfr the average policy is instead SD-CFR's exact mixture of
the advantage nets' policies (agents.sdcfr), added to before each traversal
phase. Evaluate, checkpoint, and write one metrics line per iteration.
"""
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch

import engine
from batcher.networks import MLP
from batcher.server import resolve_device
from trainer.config import config_to_dict
from trainer.jobs import Job, JobLedger, JobServer, phase_config
from trainer.label_stage import label_stage
from trainer.learn import advantage_loss, held_out_error, strategy_loss, train_net
from trainer.memory import MergingMemory, ReservoirMemory
from agents.progress import progress
from trainer.schedule import advantage_lr, checkpoint_due, eval_due, is_first, is_last, step, strategy_due
from trainer.seeds import (exit_deals_seed, exit_nets_seed, memory_seed, reinit_advantage_seed, strategy_memory_seed,
                           warm_start_deals_seed)
from trainer.summary import iteration_line
from trainer.supervise import Supervisor, counter_growth

STRATEGY_MODEL = 2


def _device(name):
    """train.device as a torch.device, with the batcher's checks (DeviceError is a RuntimeError)."""
    return resolve_device(name, "train.device")


def _adam(net, lr):
    """Adam, with the fused kernel on the devices that have one (less time a step
    for small nets on the CPU: docs/benchmarks.md, "Lost Cities training steps")."""
    device = next(net.parameters()).device
    fused = device.type in ("cpu", "cuda")
    return torch.optim.Adam(net.parameters(), lr=lr, fused=fused)


class Trainer:
    def __init__(self, cfg, run_dir, resume=None, log=print):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = log
        torch.set_num_threads(max(1, cfg.train.torch_threads))
        self.device = _device(cfg.train.device)
        self.game = engine.load_game(cfg.game.name, **cfg.game.params)
        T, A = self.game.information_state_tensor_size(), self.game.num_distinct_actions()
        seed = cfg.run.seed
        torch.manual_seed(seed)
        random.seed(seed)
        self.np_rng = np.random.default_rng(seed)
        self.nets = {name: self._new_net() for name in ("adv0", "adv1", "strategy")}
        self.optimizers = {name: _adam(net, cfg.train.lr) for name, net in self.nets.items()}
        self.value_net = self.value_optimizer = None       # trainer/value.py (train.value_steps > 0)
        if cfg.train.value_steps > 0:
            self.value_net = MLP(T, 1, tuple(cfg.network.value_hidden),
                                 input_scale=self.game.input_scale()).to(self.device)
            self.value_optimizer = _adam(self.value_net, cfg.train.lr)
        self.augment = None
        if cfg.train.augment_colours:
            from agents.symmetry import ColourAugment
            self.augment = ColourAugment(self.game)
        memory = MergingMemory if cfg.train.merge_duplicates else ReservoirMemory
        self.adv_mem = [memory(cfg.train.adv_memory, T, A, seed=memory_seed(seed, p)) for p in (0, 1)]
        self.strat_mem = memory(cfg.train.strategy_memory, T, A, seed=strategy_memory_seed(seed))
        self.versions = {0: 0, 1: 0}
        self.start_iteration = 1
        self.sdcfr = None
        self.prior = None                 # warm-start rows kept apart (train.warm_start_share > 0)
        self.labels = None                # run()'s label stage: the workers label (None: this process)
        self.warm_start_info = {}         # the warm start's and expert iteration's figures (_warm_start fills it)
        if cfg.train.average == "sdcfr":
            from agents.sdcfr import TabularAverage
            self.sdcfr = TabularAverage(self.game, cfg.traversal.fallback)
        self.counters = {"nodes": 0, "traversals": 0, "requeued_jobs": 0, "dropped_rows": 0}
        self.losses = {}
        self.spent_s = 0.0                # the run's time at the checkpoint it resumes from
        self.t_start = time.monotonic()   # the run's clock starts here (run() moves it back by spent_s)
        self.selfplay_state = None        # the self-play stage's state, resumed in that stage
        self.critic, self.critic_value_scale = None, 0.01   # the self-play critic, checkpointed once the stage starts
        self.ledger = self.metrics_f = self.tb = self.supervisor = self.stats_at = None
        if resume is not None:
            self._restore(resume)
        (self.run_dir / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=1))

    # ---- setup helpers
    def _new_net(self):
        return MLP(self.game.information_state_tensor_size(), self.game.num_distinct_actions(),
                   tuple(self.cfg.network.hidden), input_scale=self.game.input_scale()).to(self.device)

    def _restore(self, ckpt):
        from trainer.state import restore
        restore(self, ckpt)

    # ---- phases
    def _jobs(self, t, p, job_size):
        n = self.cfg.train.traversals
        ids = p * n + np.arange(n, dtype=np.int64)
        return [Job(job_id=k, iteration=t, traverser=p, ids=ids[i:i + job_size], weight=float(t))
                for k, i in enumerate(range(0, n, job_size))]

    def _job_size(self, server):
        """service.job_size, or one job per worker: the local workers, or
        with workers started elsewhere (service.workers 0) those the job
        server has heard from lately (at least one). A worker runs a job's
        traversals all at once, so larger jobs keep more of its machines
        busy (docs/benchmarks.md, "Jobs")."""
        if self.cfg.service.job_size:
            return self.cfg.service.job_size
        workers = self.cfg.service.workers or server.live_workers()
        return max(1, math.ceil(self.cfg.train.traversals / max(1, workers)))

    def _traverse(self, server, sup, t, p, job_config):
        sup.check()         # workers that died since the last phase, a batcher without weights
        jobs = self._jobs(t, p, self._job_size(server))
        bar = self._bar(total=self.cfg.train.traversals, desc=f"iter {t} traverse p{p}", unit="trav")
        added = {"adv": 0, "strat": 0}
        held_out = {"rows": 0, "chunks": []}

        def commit(job, adv_chunks, strat_chunks):
            # rows in (traversal id, position) order: chunk arrival order depends on
            # timing, the memories' contents must not
            adv, strat = _ordered(adv_chunks), _ordered(strat_chunks)
            if adv is not None:
                if held_out["rows"] < HELD_OUT_ROWS:
                    held_out["chunks"].append({k: np.asarray(v)[:HELD_OUT_ROWS - held_out["rows"]]
                                               for k, v in adv.items()})
                    held_out["rows"] += len(held_out["chunks"][-1]["weight"])
                self.adv_mem[p].add(adv)
                added["adv"] += len(adv["weight"])
            if strat is not None:
                self.strat_mem.add(strat)
                added["strat"] += len(strat["weight"])
            self.ledger.commit(job, 0 if adv is None else len(adv["weight"]), 0 if strat is None else len(strat["weight"]))

        before_req, before_drop = server.requeued, server.dropped_rows
        server.run_phase(jobs, job_config, commit,
                         supervise=sup.check,
                         progress=bar.update if bar else None,
                         log=self.log)
        if bar:
            bar.close()
        self.counters["requeued_jobs"] += server.requeued - before_req
        self.counters["dropped_rows"] += server.dropped_rows - before_drop
        self.counters["traversals"] += self.cfg.train.traversals
        added.update(self._held_out_error(p, held_out["chunks"]))
        return added

    def _held_out_error(self, p, chunks):
        if not chunks:
            return {}
        rows = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
        return held_out_error(self.nets[f"adv{p}"], rows, self.device)

    def _warm_start(self, pretrain=True):
        """Heuristic self-play rows (trainer/warmstart.py), labelled by the workers (self.labels, a
        trainer.label_stage.LabelStage): into the memories (warm_start_share 0) or kept apart as a lasting
        prior; then, at the start of a run, every net is pretrained on them. A lasting prior's rows are saved
        in the run directory (warm_start_rows.npz), and a resumed run reads them back. Returns the warm
        start's metrics (warm_start_games_labelled and its times) for metrics.jsonl."""
        from trainer.warmstart import heuristic_rows, save_prior, teacher_name
        tr = self.cfg.train
        t0 = time.monotonic()
        teacher = teacher_name(tr)
        budget = f", budget {tr.warm_start_budget_s:g} s" if tr.warm_start_budget_s > 0 else ""
        bar = self._bar(total=tr.warm_start_games, desc=f"warm start: label ({teacher}{budget})", unit="game",
                        budget_s=tr.warm_start_budget_s or None)
        # a lasting prior is kept on disk, so that a resumed run reads it back instead of playing it again
        cache = self.run_dir / "warm_start_rows.npz" if tr.warm_start_share > 0 else None
        stats = {}
        adv, strat = heuristic_rows(self.game, tr.warm_start_games, seed=warm_start_deals_seed(self.cfg.run.seed),
                                    advantage=tr.warm_start_advantage, worlds=tr.warm_start_worlds,
                                    explore=tr.warm_start_explore, progress=None if bar is None else bar.update,
                                    cache=cache, budget_s=tr.warm_start_budget_s, stats=stats, stage=self.labels)
        if bar is not None:
            bar.close()
        games = stats["games"]
        self.warm_start_info = {"warm_start_games_labelled": games, "warm_start_decisions": len(strat["weight"])}
        if not stats["cached"]:
            self.warm_start_info["warm_start_label_s"] = stats["seconds"]
        stopped = f" (the budget of {tr.warm_start_budget_s:g} s stopped it)" if stats["budget_hit"] else ""
        self.log(f"warm-start rows: {len(strat['weight'])} decisions of {games} games labelled by "
                 f"{teacher}, " + (f"read back from {cache}" if stats["cached"] else
                                   f"in {stats['seconds']:.0f} s{stopped}"))
        if tr.warm_start_share > 0:
            self.prior = {"adv0": adv[0], "adv1": adv[1], "strategy": strat}
            memories = {name: self._memory(name) for name in self.prior}
        else:
            for p in (0, 1):
                adv[p]["weight"] *= tr.warm_start_weight
                self.adv_mem[p].add(adv[p])
            strat["weight"] *= tr.warm_start_weight
            self.strat_mem.add(strat)
            memories = {"adv0": self.adv_mem[0], "adv1": self.adv_mem[1], "strategy": self.strat_mem}
        if not pretrain:
            self.log(f"warm-start prior: {games} games labelled by {teacher}, share {tr.warm_start_share:g}")
            if tr.exit_rounds > 0:
                adv, strat = self._exit_rounds(adv, strat, pretrain=False)
            return self.warm_start_info
        trained = self._pretrain(memories, "")
        self.log(f"warm start: {len(adv[0]['weight']) + len(adv[1]['weight'])} decisions from "
                 f"{games} games, {trained} in {time.monotonic() - t0:.0f} s"
                 + (f"; kept as {tr.warm_start_share:g} of every batch" if tr.warm_start_share > 0 else ""))
        if self.value_net is not None and tr.exit_rounds == 0:
            self.warm_start_info.update(self._train_value(adv))
        # the run's prior, for head-to-head evaluation: the imitation of the teacher, before any expert iteration
        save_prior(self.run_dir, self.cfg, self.nets, self.value_net if tr.exit_rounds == 0 else None)
        if tr.exit_rounds > 0:
            adv, strat = self._exit_rounds(adv, strat, pretrain=True)
            if self.value_net is not None:
                self.warm_start_info.update(self._train_value(adv))
        return self.warm_start_info

    def _pretrain(self, memories, tag):
        """Train each net warm_start_steps steps (or a third of
        warm_start_pretrain_budget_s) on `memories`; the steps and time go
        into warm_start_info under warm_start_pretrain_*{tag}. Returns the
        steps and final losses in words, for the log."""
        tr = self.cfg.train
        t1 = time.monotonic()
        losses, steps = [], []
        for i, name in enumerate(("adv0", "adv1", "strategy")):
            # a pretraining budget is shared out evenly: each net gets a third of it
            deadline = t1 + (i + 1) * tr.warm_start_pretrain_budget_s / 3 if tr.warm_start_pretrain_budget_s > 0 else None
            bar = self._bar(total=tr.warm_start_steps, desc=f"warm start: pretrain {name}{tag}", unit="step",
                            budget_s=None if deadline is None else deadline - time.monotonic())
            done = {}
            losses.append(
                train_net(self.nets[name], memories[name], tr.warm_start_steps, tr.batch_size,
                          self.optimizers[name], self.device, self.np_rng,
                          strategy_loss if name == "strategy" else advantage_loss, tr.grad_clip,
                          bar, cosine_decay=tr.warm_start_lr_decay, augment=self.augment, deadline=deadline,
                          stats=done))
            if bar is not None:
                bar.close()
            steps.append(done.get("steps", 0))
        self.warm_start_info.update({f"warm_start_pretrain_steps_{name}{tag}": n
                                     for name, n in zip(("adv0", "adv1", "strategy"), steps)})
        self.warm_start_info[f"warm_start_pretrain_s{tag}"] = time.monotonic() - t1
        per_net = f"{steps[0]} steps per net" if len(set(steps)) == 1 else f"{'/'.join(map(str, steps))} steps"
        return f"{per_net} (losses {', '.join('-' if x is None else f'{x:.4g}' for x in losses)})"

    def _exit_rounds(self, adv, strat, pretrain):
        """Expert iteration after the warm start (train.exit_rounds): in each
        round the current agent (the strategy net, greedy) plays exit_games
        games (or what exit_budget_s allows), a search over it labels every
        decision (agents.labels, on the workers), the labels join the pool, and
        three fresh nets are pretrained on the whole pool, which becomes the
        lasting prior. The rows of round r are kept in exit_rows_r.npz, so a
        resumed run (pretrain False) reads them back into its prior. Returns
        the pooled (adv, strat) rows."""
        for r in range(1, self.cfg.train.exit_rounds + 1):
            pooled = self._exit_round(r, adv, strat, pretrain)
            if pooled is None:
                break
            adv, strat = pooled
        return adv, strat

    def _exit_round(self, r, adv, strat, pretrain):
        """Expert-iteration round r: label the agent's games (or read them
        back), pool them with (adv, strat) into the prior, and with pretrain
        train fresh nets on the pool. Returns the pooled rows, or None for a
        resumed run without the round's rows."""
        from trainer.learn import label_error
        from trainer.warmstart import blueprint_of, exit_split_seed, heuristic_rows, hold_out_games
        tr = self.cfg.train
        t0 = time.monotonic()
        what = f"a {tr.exit_worlds}-world search over the agent's top {tr.exit_topk} moves"
        budget = f", budget {tr.exit_budget_s:g} s" if tr.exit_budget_s > 0 else ""
        bar = self._bar(total=tr.exit_games, desc=f"expert iteration {r}: label ({what}{budget})", unit="game",
                        budget_s=tr.exit_budget_s or None) if pretrain else None
        stats = {}
        cache = self.run_dir / f"exit_rows_{r}.npz"
        if not pretrain and not cache.exists():
            self.log(f"expert iteration {r}: no {cache.name} to read back; the prior keeps the earlier rounds")
            return None
        new_adv, new_strat = heuristic_rows(
            self.game, tr.exit_games, seed=exit_deals_seed(self.cfg.run.seed, r),
            advantage=tr.warm_start_advantage, worlds=tr.exit_worlds, explore=tr.warm_start_explore,
            progress=None if bar is None else bar.update, cache=cache, budget_s=tr.exit_budget_s, stats=stats,
            stage=self.labels,
            blueprint=blueprint_of(self.nets["strategy"]), topk=tr.exit_topk, round=r)
        if bar is not None:
            bar.close()
        # a tenth of the round's games is held out whole, to score the fresh nets on games they never saw
        new_adv, new_strat, test, held = hold_out_games(new_adv, new_strat, 0.1, exit_split_seed(self.cfg, r))
        if pretrain:
            before = label_error(self.nets["strategy"], test)       # the agent whose games these are
            self.warm_start_info.update({f"exit_heldout_agent_{k}_{r}": v for k, v in before.items()})
        adv = {p: {k: np.concatenate([adv[p][k], new_adv[p][k]]) for k in adv[p]} for p in (0, 1)}
        strat = {k: np.concatenate([strat[k], new_strat[k]]) for k in strat}
        self.prior = {"adv0": adv[0], "adv1": adv[1], "strategy": strat}
        self.warm_start_info[f"exit_games_labelled_{r}"] = stats["games"]
        self.warm_start_info[f"exit_decisions_{r}"] = len(new_strat["weight"])
        if not stats["cached"]:
            self.warm_start_info[f"exit_label_s_{r}"] = stats["seconds"]
        source = f"read back from {cache}" if stats["cached"] else f"in {stats['seconds']:.0f} s" + (
            f" (the budget of {tr.exit_budget_s:g} s stopped it)" if stats["budget_hit"] else "")
        self.log(f"expert iteration {r}: {stats['games']} games of the agent labelled by {what}, {source}; "
                 f"{len(held)} held out, {len(new_strat['weight'])} decisions join the pool, which holds "
                 f"{len(strat['weight'])}")
        if pretrain:
            self._exit_fresh_nets(r, test, len(held), before, t0)
        return adv, strat

    def _exit_fresh_nets(self, r, test, held, before, t0):
        """Fresh nets pretrained on the pooled prior (not the last round's
        fine-tuned), scored on the round's `held` held-out games (`test`)
        against the agent that played them (`before`)."""
        from trainer.learn import label_error
        torch.manual_seed(exit_nets_seed(self.cfg.run.seed, r))
        for name in self.nets:
            self.nets[name] = self._new_net()
            self.optimizers[name] = _adam(self.nets[name], self.cfg.train.lr)
        trained = self._pretrain({name: self._memory(name) for name in self.nets}, f"_exit{r}")
        score = label_error(self.nets["strategy"], test)
        self.warm_start_info.update({f"exit_heldout_{k}_{r}": v for k, v in score.items()})
        self.log(f"expert iteration {r}: fresh nets, {trained}; "
                 f"the round took {time.monotonic() - t0:.0f} s")
        self.log(f"expert iteration {r}: on {held} held-out games of the round the search's move is the "
                 f"most likely of the fresh strategy net at {score['agree']:.1%} of the decisions (the agent "
                 f"that played them: {before['agree']:.1%}); squared error {score['mse']:.4g} (the agent "
                 f"{before['mse']:.4g}, the uniform policy {score['uniform_mse']:.4g})")

    def _train_value(self, adv):
        """Train the value net on the warm start's games (trainer/value.py); its metrics."""
        from trainer.value import train_value, value_line
        tr = self.cfg.train
        bar = self._bar(total=tr.value_steps, desc="warm start: train the value net", unit="step",
                        budget_s=tr.value_budget_s or None)
        m = train_value(self.value_net, self.value_optimizer, adv, self.cfg.traversal.value_scale, tr.value_steps,
                        tr.batch_size, self.device, self.np_rng, seed=self.cfg.run.seed, grad_clip=tr.grad_clip,
                        augment=self.augment, budget_s=tr.value_budget_s, progress=bar,
                        labels=tr.value_labels)
        if bar is not None:
            bar.close()
        self.log(value_line(m))
        return m

    def _memory(self, name):
        """What a net trains on: its memory, mixed with the warm-start prior if one is kept."""
        from trainer.warmstart import PriorMix
        memory = self.strat_mem if name == "strategy" else self.adv_mem[int(name[-1])]
        if self.prior is None:
            return memory
        return PriorMix(memory, self.prior[name], self._prior_share(name))

    def _prior_share(self, name):
        """The lasting prior's share of `name`'s batches: train.adv_prior_share
        for the advantage nets where it is set, else train.warm_start_share."""
        tr = self.cfg.train
        return tr.adv_prior_share if name != "strategy" and tr.adv_prior_share != -1.0 else tr.warm_start_share

    def _train_advantage(self, p, t):
        name = f"adv{p}"
        if self.cfg.train.reinit_advantage:
            torch.manual_seed(reinit_advantage_seed(self.cfg.run.seed, t, p))
            self.nets[name] = self._new_net()
            self.optimizers[name] = _adam(self.nets[name], self.cfg.train.lr)
        for g in self.optimizers[name].param_groups:
            g["lr"] = advantage_lr(self.cfg.train.lr, self.cfg.train.adv_lr_after, t)
        bar = self._bar(total=self.cfg.train.adv_steps, desc=f"iter {t} train adv{p}", unit="step")
        loss = train_net(self.nets[name], self._memory(name), self.cfg.train.adv_steps, self.cfg.train.batch_size,
                         self.optimizers[name], self.device, self.np_rng, advantage_loss,
                         self.cfg.train.grad_clip, bar, augment=self.augment)
        if bar:
            bar.close()
        return loss

    def _train_strategy(self, t):
        bar = self._bar(total=self.cfg.train.strategy_steps, desc=f"iter {t} train strategy", unit="step")
        loss = train_net(self.nets["strategy"], self._memory("strategy"), self.cfg.train.strategy_steps,
                         self.cfg.train.batch_size, self.optimizers["strategy"], self.device, self.np_rng,
                         strategy_loss, self.cfg.train.grad_clip, bar, cosine_decay=self.cfg.train.strategy_lr_decay,
                         augment=self.augment)
        if bar:
            bar.close()
        return loss

    def _evaluate(self, t, first, last):
        from agents.evaluate import evaluate
        from agents.policy import AveragePolicy, CurrentPolicy, SymmetricPolicy, parse_kind
        e = self.cfg.eval
        nets = {k: self.nets[k].to("cpu") for k in ("strategy", "adv0", "adv1")}
        threads = torch.get_num_threads()
        torch.set_num_threads(1)        # evaluation forwards are small batches
        try:
            if self.sdcfr is not None:
                out = evaluate(self.game, self.sdcfr, openspiel=e.openspiel)
                if self.cfg.train.strategy_steps > 0:
                    out["strategy_net_exploitability"] = evaluate(self.game, nets["strategy"],
                                                                  openspiel=False)["exploitability"]
                return out
            out = {}
            fallback = self.cfg.traversal.fallback
            for i, kind in enumerate(e.policies):
                base, greedy = parse_kind(kind)
                seed = self.cfg.run.seed
                policy = (CurrentPolicy([nets["adv0"], nets["adv1"]], fallback, greedy, seed) if base == "current"
                          else SymmetricPolicy(nets["strategy"], self.game, greedy, seed) if base == "symmetric"
                          else AveragePolicy(nets["strategy"], greedy, seed))
                opponents = list(e.opponents)
                exploiter = (i == 0 and e.exploiter_games > 0 and self.game.name == "lost_cities" and
                             (first or last or (e.exploiter_every > 0 and t % e.exploiter_every == 0)))
                if exploiter:
                    opponents.append("exploiter")
                r = evaluate(self.game, policy, lc_games=e.lc_games, opponents=tuple(opponents),
                             seed=self.cfg.run.seed, openspiel=e.openspiel, exploiter_games=e.exploiter_games,
                             worlds=e.exploiter_worlds, prior_of=self.run_dir if i == 0 else None)
                prefix = "" if i == 0 else kind.replace("-", "_") + "_"
                out.update({prefix + k: v for k, v in r.items()})
            return out
        finally:
            torch.set_num_threads(threads)
            for k, net in nets.items():
                net.to(self.device)

    def _bar(self, total=None, desc="", unit="it", budget_s=None):
        """A tqdm bar on a terminal, plain lines every ~30 s elsewhere (agents/progress.py); None with
        run.progress off."""
        if not self.cfg.run.progress:
            return None
        return progress(total=total, desc=desc, unit=unit, budget_s=budget_s)

    # ---- checkpoint
    def save(self, t, selfplay=None):
        """Checkpoint iteration t (trainer/state.py); selfplay: the self-play stage's state, or {"done": True}."""
        from trainer.state import save
        return save(self, t, selfplay)

    # ---- main
    def run(self):
        """The run: the warm start, CFR iterations until the last (by
        train.iterations or by the time limit, which leaves the self-play
        stage its budget), then the self-play stage, evaluations, metrics
        and checkpoints. A run resumed from a checkpoint taken in the
        self-play stage goes on with that stage. Returns the last metrics."""
        cfg = self.cfg
        server = JobServer(cfg.service.jobs_bind, cfg.service.heartbeat_timeout_s, curve_keys=cfg.service.curve_keys)
        sup = None
        self.metrics_f = open(self.run_dir / "metrics.jsonl", "a")
        in_stage = self.selfplay_state is not None
        self.ledger = JobLedger(self.run_dir / "jobs.jsonl", self.start_iteration,
                                selfplay_wave=self.selfplay_state.get("waves", 0) if in_stage else None)
        self.tb = self._tensorboard()
        # the run's clock: a resumed run counts the time its checkpoint had spent, so the stages' budgets hold
        self.t_start = time.monotonic() - self.spent_s
        warm = {}       # the warm start's figures, for the first metrics line and the summary
        try:
            # the services start first, so that the warm start is supervised like every other phase
            sup = self.supervisor = Supervisor(self, server).start()
            if in_stage and self.selfplay_state.get("done"):
                self.log(f"the run finished its self-play stage at iteration {self.start_iteration - 1}: "
                         f"nothing to resume")
                return {}
            self.labels = label_stage(cfg, server, sup, self.ledger, self.log)
            if (not in_stage and cfg.train.warm_start_games > 0
                    and (self.start_iteration == 1 or cfg.train.warm_start_share > 0)):
                sup.enter("warm start")
                warm = self._warm_start(pretrain=self.start_iteration == 1)
            sup.enter("push")
            self.stats_at = sup.stats()         # pushes the weights first
            self.log(f"run dir {self.run_dir}; batcher {sup.services.batcher_endpoint}; jobs {server.endpoint}; "
                     f"{cfg.service.workers} local worker(s)")
            job_config = phase_config(cfg)
            if in_stage:                        # killed in the self-play stage: it goes on from its checkpoint
                t = self.start_iteration - 1
                return self._end_iteration(t, {"iteration": t}, server, sup, job_config, first=False, last=True)
            m = {}
            for t in range(self.start_iteration, cfg.train.iterations + 1):
                m = {"iteration": t, **(warm if t == self.start_iteration else {})}
                self._cfr_iteration(t, m, server, sup)
                # the time limit leaves the self-play fine-tuning its budget after the last iteration
                last = is_last(t, cfg.train.iterations, time.monotonic() - self.t_start, cfg.train.time_limit_s,
                               cfg.train.selfplay_budget_s)
                first = is_first(t, self.start_iteration, cfg.eval.every)
                m = self._end_iteration(t, m, server, sup, job_config, first, last)
                if last:
                    break
            return {**warm, **m} if m else m
        finally:
            self.metrics_f.close()
            self.ledger.close()
            if self.tb is not None:
                self.tb.close()
            if sup is not None:
                sup.close()
            server.close()

    def _tensorboard(self):
        if not self.cfg.run.tensorboard:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
            return SummaryWriter(str(self.run_dir / "tb"))
        except ImportError:
            self.log("tensorboard is not installed: no TensorBoard scalars")
            return None

    def _cfr_iteration(self, t, m, server, sup):
        """Each player's traversals, its advantage net trained and pushed; the figures into m."""
        job_config = phase_config(self.cfg)
        batcher_rows = batcher_shm = 0
        for p in (0, 1):
            if self.sdcfr is not None:
                # the opponent's policy in this phase, as the strategy memory samples it
                self.sdcfr.add(1 - p, self.nets[f"adv{1 - p}"], t)
            with step(m, f"time_traverse_s_{p}", sup, "traverse", t):
                added = self._traverse(server, sup, t, p, job_config)
            # a snapshot per phase: a batcher restart loses only that phase's earlier rows
            bstats = sup.stats()
            batcher_rows += counter_growth(self.stats_at, bstats, "rows")[0]
            if "shm_requests" in bstats and "shm_requests" in self.stats_at:
                batcher_shm += counter_growth(self.stats_at, bstats, "shm_requests")[0]
            self.stats_at = bstats
            m[f"samples_adv_{p}"], m[f"samples_strat_{p}"] = added["adv"], added["strat"]
            if "heldout_mse" in added:
                m[f"adv_heldout_mse_{p}"] = added["heldout_mse"]
                m[f"adv_heldout_zero_mse_{p}"] = added["heldout_zero_mse"]
            with step(m, f"time_train_s_{p}", sup, "train"):
                m[f"adv_loss_{p}"] = self._train_advantage(p, t)
            sup.enter("push")
            sup.push(p)
        m["time_traverse_s"] = m["time_traverse_s_0"] + m["time_traverse_s_1"]
        m["time_train_s"] = m["time_train_s_0"] + m["time_train_s_1"]
        m["batcher_rows"] = batcher_rows
        m["batcher_shm_requests"] = batcher_shm     # rounds that came through shared memory
        m["queries_per_s"] = m["batcher_rows"] / max(m["time_traverse_s"], 1e-9)
        m["batcher_mean_batch"] = self.stats_at["mean_batch"]
        m["batcher_busy_fraction"] = self.stats_at["busy_fraction"]
        m["adv_memory_0"], m["adv_memory_1"] = len(self.adv_mem[0]), len(self.adv_mem[1])
        m["strategy_memory"] = len(self.strat_mem)

    def _end_iteration(self, t, m, server, sup, job_config, first, last):
        """The strategy net's training when due, the self-play stage after the
        last iteration, the evaluation, the metrics line and the checkpoint."""
        cfg = self.cfg
        evaluating = eval_due(t, first, last, cfg.eval.every)
        if (strategy_due(t, last, evaluating, cfg.train.strategy_every) and self.selfplay_state is None
                and (self.sdcfr is None or cfg.train.strategy_steps > 0)):
            with step(m, "time_strategy_s", sup, "train"):
                m["strategy_loss"] = self._train_strategy(t)
        stage_done = None
        if last and cfg.train.selfplay_budget_s > 0:
            from trainer.selfplay_stage import run_in_trainer
            sup.enter("self-play", t)
            m.update(run_in_trainer(self, t, server, sup, job_config))
            stage_done = {"done": True}
        if evaluating:
            if cfg.run.progress and self.game.name == "lost_cities":
                self.log(f"iter {t}: evaluating, {cfg.eval.lc_games} games against each of "
                         f"{', '.join(cfg.eval.opponents)}")
            with step(m, "time_eval_s", sup, "evaluate"):
                m.update(self._evaluate(t, first, last))
        m["requeued_jobs"] = self.counters["requeued_jobs"]
        m["dropped_rows"] = self.counters["dropped_rows"]
        m["restarts"] = sup.total_restarts()     # by this trainer process, every phase
        m["restarts_batcher"], m["restarts_worker"] = sup.restarts["batcher"], sup.restarts["worker"]
        m["wall_s"] = time.monotonic() - self.t_start
        self._write_metrics(t, m)
        if checkpoint_due(t, last, cfg.run.checkpoint_every):
            sup.enter("checkpoint")
            self.log(f"checkpoint {self.save(t, selfplay=stage_done)}")
        return m

    def _write_metrics(self, t, m):
        """The iteration's metrics line, its TensorBoard scalars and its log line."""
        self.metrics_f.write(json.dumps({k: v for k, v in m.items() if v is not None}) + "\n")
        self.metrics_f.flush()
        if self.tb is not None:
            for k, v in m.items():
                if isinstance(v, (int, float)) and k != "iteration":
                    self.tb.add_scalar(k, v, t)
        self.log(iteration_line(m))


def _ordered(chunks):
    if not chunks:
        return None
    cat = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    order = np.lexsort((cat["seq"], cat["traversal"]))
    return {k: v[order] for k, v in cat.items()}


HELD_OUT_ROWS = 4096        # new advantage samples per phase scored before the net trains on them
