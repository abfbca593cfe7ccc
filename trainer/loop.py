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
from trainer import checkpoint as ck
from trainer.config import config_to_dict
from trainer.jobs import Job, JobLedger, JobServer, phase_config
from trainer.label_stage import label_stage
from trainer.learn import advantage_loss, held_out_error, strategy_loss, train_net
from trainer.memory import MergingMemory, ReservoirMemory
from agents.progress import progress
from trainer.summary import iteration_line
from trainer.supervise import Supervisor, counter_growth

STRATEGY_MODEL = 2


def _device(name):
    """train.device as a torch.device, with the batcher's checks (DeviceError is a RuntimeError)."""
    return resolve_device(name, "train.device")


def _adam(net, lr):
    """Adam, with the fused kernel (about 10% less time per step for small
    nets on CPU) on the devices that have one."""
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
            from trainer.symmetry import ColourAugment
            self.augment = ColourAugment(self.game)
        memory = MergingMemory if cfg.train.merge_duplicates else ReservoirMemory
        self.adv_mem = [memory(cfg.train.adv_memory, T, A, seed=seed * 3 + p + 1) for p in (0, 1)]
        self.strat_mem = memory(cfg.train.strategy_memory, T, A, seed=seed * 3 + 3)
        self.versions = {0: 0, 1: 0}
        self.start_iteration = 1
        self.sdcfr = None
        self.prior = None                 # warm-start rows kept apart (train.warm_start_share > 0)
        self.labels = None                # run()'s label stage: the workers label (None: this process)
        if cfg.train.average == "sdcfr":
            from agents.sdcfr import TabularAverage
            self.sdcfr = TabularAverage(self.game, cfg.traversal.fallback)
        self.counters = {"nodes": 0, "traversals": 0, "requeued_jobs": 0, "dropped_rows": 0}
        self.losses = {}
        if resume is not None:
            self._restore(resume)
        (self.run_dir / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=1))

    # ---- setup helpers
    def _new_net(self):
        return MLP(self.game.information_state_tensor_size(), self.game.num_distinct_actions(),
                   tuple(self.cfg.network.hidden), input_scale=self.game.input_scale()).to(self.device)

    def _restore(self, ckpt):
        for name, net in self.nets.items():
            net.load_state_dict(ckpt["nets"][name])
        for name, opt in self.optimizers.items():
            if name in ckpt.get("optimizers", {}):
                opt.load_state_dict(ckpt["optimizers"][name])
        if self.value_net is not None:
            if "value_net" not in ckpt:
                raise ValueError(f"{ckpt['path']}: train.value_steps > 0 but the checkpoint holds no value net")
            self.value_net.load_state_dict(ckpt["value_net"])
            if "value" in ckpt.get("optimizers", {}):
                self.value_optimizer.load_state_dict(ckpt["optimizers"]["value"])
        rng = ckpt["rng"]
        torch.set_rng_state(rng["torch"])
        self.np_rng.bit_generator.state = json.loads(rng["numpy"])
        random.setstate(_tuple_state(json.loads(rng["python"])))
        self.versions = {int(k): int(v) for k, v in ckpt["versions"].items()}
        self.counters = dict(ckpt["counters"])
        self.start_iteration = int(ckpt["iteration"]) + 1
        if self.sdcfr is not None:
            if "sdcfr" not in ckpt:
                raise ValueError(f"{ckpt['path']}: train.average is sdcfr but the checkpoint holds no SD-CFR sums")
            self.sdcfr.load_state_dict(ckpt["sdcfr"])
        mem = ckpt.get("memories")
        if mem:
            arrays = np.load(Path(ckpt["path"]).parent / mem)
            for p in (0, 1):
                self.adv_mem[p].load_state_dict(arrays, f"adv{p}")
            self.strat_mem.load_state_dict(arrays, "strategy")
        else:
            self.log("resuming without memories (run.save_memories was off): they start empty")
        self.log(f"resumed from {ckpt['path']} at iteration {self.start_iteration}")

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
        adv, strat = heuristic_rows(self.game, tr.warm_start_games, seed=(self.cfg.run.seed + 1) * 1000003,
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
        from trainer.learn import label_error
        from trainer.warmstart import blueprint_of, exit_split_seed, heuristic_rows, hold_out_games
        tr = self.cfg.train
        for r in range(1, tr.exit_rounds + 1):
            t0 = time.monotonic()
            tag = f"_exit{r}"
            what = f"a {tr.exit_worlds}-world search over the agent's top {tr.exit_topk} moves"
            budget = f", budget {tr.exit_budget_s:g} s" if tr.exit_budget_s > 0 else ""
            bar = self._bar(total=tr.exit_games, desc=f"expert iteration {r}: label ({what}{budget})", unit="game",
                            budget_s=tr.exit_budget_s or None) if pretrain else None
            stats = {}
            cache = self.run_dir / f"exit_rows_{r}.npz"
            if not pretrain and not cache.exists():
                self.log(f"expert iteration {r}: no {cache.name} to read back; the prior keeps the earlier rounds")
                break
            new_adv, new_strat = heuristic_rows(
                self.game, tr.exit_games, seed=(self.cfg.run.seed + 1) * 1000003 + r * 7000001,
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
            if not pretrain:
                continue
            # a fresh net on the pooled labels, not the last round's net fine-tuned
            torch.manual_seed(self.cfg.run.seed * 100003 + 7919 * r)
            for name in self.nets:
                self.nets[name] = self._new_net()
                self.optimizers[name] = _adam(self.nets[name], tr.lr)
            trained = self._pretrain({name: self._memory(name) for name in self.nets}, tag)
            score = label_error(self.nets["strategy"], test)
            self.warm_start_info.update({f"exit_heldout_{k}_{r}": v for k, v in score.items()})
            self.log(f"expert iteration {r}: fresh nets, {trained}; "
                     f"the round took {time.monotonic() - t0:.0f} s")
            self.log(f"expert iteration {r}: on {len(held)} held-out games of the round the search's move is the "
                     f"most likely of the fresh strategy net at {score['agree']:.1%} of the decisions (the agent "
                     f"that played them: {before['agree']:.1%}); squared error {score['mse']:.4g} (the agent "
                     f"{before['mse']:.4g}, the uniform policy {score['uniform_mse']:.4g})")
        return adv, strat

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
            torch.manual_seed(self.cfg.run.seed * 100003 + t * 2 + p)
            self.nets[name] = self._new_net()
            self.optimizers[name] = _adam(self.nets[name], self.cfg.train.lr)
        after = self.cfg.train.adv_lr_after
        for g in self.optimizers[name].param_groups:
            # late iterations: smaller steps, as the regrets the nets must resolve shrink
            g["lr"] = self.cfg.train.lr * (math.sqrt(after / t) if 0 < after < t else 1.0)
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

    def _self_play(self, t, t_start, server, sup, job_config):
        """PPO self-play fine-tuning of the strategy net on the workers
        (trainer/selfplay_stage.py) for train.selfplay_budget_s, or what is
        left of train.time_limit_s. Returns its selfplay_* metrics."""
        from trainer.selfplay import SelfPlay, SelfPlaySettings
        from trainer.selfplay_stage import SelfPlayStage
        tr = self.cfg.train
        budget = tr.selfplay_budget_s
        if tr.time_limit_s > 0:
            budget = min(budget, tr.time_limit_s - (time.monotonic() - t_start))
        if budget <= 0:
            self.log(f"self-play: no time left of train.time_limit_s ({tr.time_limit_s:g} s); the agent is CFR's")
            return {"selfplay_waves": 0}
        # the agent CFR made, kept apart: "what did the self-play add" is then one head-to-head command
        from agents.checkpoint import before_selfplay_checkpoint
        from trainer.warmstart import save_playing_checkpoint
        path = save_playing_checkpoint(before_selfplay_checkpoint(self.run_dir), self.cfg, self.nets,
                                       t, self.value_net, before_selfplay=True)
        self.log(f"self-play: CFR's agent kept as {path}")
        settings = SelfPlaySettings(games=tr.selfplay_games, lr=tr.selfplay_lr, epochs=tr.selfplay_epochs,
                                    autocast=tr.selfplay_autocast, lr_hold_s=tr.selfplay_lr_hold_s)
        tuner = SelfPlay(self.game, self.nets["strategy"], settings, seed=self.cfg.run.seed, device=self.device)
        self.log(f"self-play: the update in {tuner.precision()} (train.selfplay_autocast: {tr.selfplay_autocast}); "
                 f"the games on the workers, their forwards on the batcher")
        stage = SelfPlayStage(tuner, server, sup, job_config, self.cfg.run.seed,
                              workers=self.cfg.service.workers or server.live_workers(), ledger=self.ledger,
                              log=self.log)
        bar = self._bar(desc=f"self-play: PPO on the strategy net ({tr.selfplay_games} games a wave)", unit="wave",
                        budget_s=budget)
        stats = stage.run(budget_s=budget, progress=None if bar is None else bar.update)
        if bar is not None:
            bar.close()
        self.log(f"self-play: {stats['selfplay_games']} games ({stats['selfplay_waves']} waves) in "
                 f"{stats['selfplay_s']:.0f} s, mean version lag {stats['selfplay_mean_version_lag']:.2f}")
        return stats

    def _evaluate(self, t, first, last):
        from agents.evaluate import evaluate
        from agents.policy import AveragePolicy, CurrentPolicy, parse_kind
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
    def save(self, t):
        mem_name = None
        d = ck.checkpoint_dir(self.run_dir)
        d.mkdir(parents=True, exist_ok=True)
        if self.cfg.run.save_memories:
            mem_name = f"iter_{t:06d}.memories.npz"
            arrays = {**self.adv_mem[0].state_dict("adv0"), **self.adv_mem[1].state_dict("adv1"),
                      **self.strat_mem.state_dict("strategy")}
            ck.write_durably(d / mem_name, lambda f: np.savez(f, **arrays))
        payload = {
            "config": config_to_dict(self.cfg),
            "nets": {k: {n: v.detach().cpu() for n, v in net.state_dict().items()} for k, net in self.nets.items()},
            "net_spec": self.nets["strategy"].spec(),
            "optimizers": {k: opt.state_dict() for k, opt in self.optimizers.items()},
            **self._value_payload(),
            "rng": {"torch": torch.get_rng_state(), "numpy": json.dumps(self.np_rng.bit_generator.state),
                    "python": json.dumps(random.getstate())},
            "versions": {str(k): v for k, v in self.versions.items()},
            "counters": dict(self.counters),
            "memories": mem_name,
        }
        if self.value_net is not None:
            payload["optimizers"]["value"] = self.value_optimizer.state_dict()
        if self.sdcfr is not None:
            payload["sdcfr"] = self.sdcfr.state_dict()
        return ck.save_checkpoint(self.run_dir, t, payload)

    def _value_payload(self):
        """The value net's checkpoint keys, value_net (its state dict) and
        value_spec; none without one (save() adds its optimizer to "optimizers")."""
        if self.value_net is None:
            return {}
        return {"value_net": {n: v.detach().cpu() for n, v in self.value_net.state_dict().items()},
                "value_spec": self.value_net.spec()}

    # ---- main
    def run(self):
        cfg = self.cfg
        server = JobServer(cfg.service.jobs_bind, cfg.service.heartbeat_timeout_s, curve_keys=cfg.service.curve_keys)
        sup = None
        metrics_f = open(self.run_dir / "metrics.jsonl", "a")
        self.ledger = JobLedger(self.run_dir / "jobs.jsonl", self.start_iteration)
        tb = None
        if cfg.run.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                tb = SummaryWriter(str(self.run_dir / "tb"))
            except ImportError:
                self.log("tensorboard is not installed: no TensorBoard scalars")
        t_start = time.monotonic()
        last_metrics = {}
        warm = {}       # the warm start's figures, for the first metrics line and the summary
        try:
            # the services start first, so that the warm start is supervised like every other phase
            sup = self.supervisor = Supervisor(self, server).start()
            self.labels = label_stage(cfg, server, sup, self.ledger, self.log)
            if cfg.train.warm_start_games > 0 and (self.start_iteration == 1 or cfg.train.warm_start_share > 0):
                sup.enter("warm start")
                warm = self._warm_start(pretrain=self.start_iteration == 1)
            sup.enter("push")
            stats_at = sup.stats()         # pushes the weights first
            self.log(f"run dir {self.run_dir}; batcher {sup.services.batcher_endpoint}; jobs {server.endpoint}; "
                     f"{cfg.service.workers} local worker(s)")
            job_config = phase_config(cfg)
            t = self.start_iteration - 1
            for t in range(self.start_iteration, cfg.train.iterations + 1):
                m = {"iteration": t, **(warm if t == self.start_iteration else {})}
                batcher_rows = batcher_shm = 0
                for p in (0, 1):
                    if self.sdcfr is not None:
                        # the opponent's policy in this phase, as the strategy memory samples it
                        self.sdcfr.add(1 - p, self.nets[f"adv{1 - p}"], t)
                    t0 = time.monotonic()
                    sup.enter("traverse", t)
                    added = self._traverse(server, sup, t, p, job_config)
                    m[f"time_traverse_s_{p}"] = time.monotonic() - t0
                    # a snapshot per phase: a batcher restart loses only that phase's earlier rows
                    bstats = sup.stats()
                    batcher_rows += counter_growth(stats_at, bstats, "rows")[0]
                    if "shm_requests" in bstats and "shm_requests" in stats_at:
                        batcher_shm += counter_growth(stats_at, bstats, "shm_requests")[0]
                    stats_at = bstats
                    m[f"samples_adv_{p}"] = added["adv"]
                    m[f"samples_strat_{p}"] = added["strat"]
                    if "heldout_mse" in added:
                        m[f"adv_heldout_mse_{p}"] = added["heldout_mse"]
                        m[f"adv_heldout_zero_mse_{p}"] = added["heldout_zero_mse"]
                    t0 = time.monotonic()
                    sup.enter("train")
                    m[f"adv_loss_{p}"] = self._train_advantage(p, t)
                    m[f"time_train_s_{p}"] = time.monotonic() - t0
                    sup.enter("push")
                    sup.push(p)
                m["time_traverse_s"] = m["time_traverse_s_0"] + m["time_traverse_s_1"]
                m["time_train_s"] = m["time_train_s_0"] + m["time_train_s_1"]
                m["batcher_rows"] = batcher_rows
                m["batcher_shm_requests"] = batcher_shm     # rounds that came through shared memory
                m["queries_per_s"] = m["batcher_rows"] / max(m["time_traverse_s"], 1e-9)
                m["batcher_mean_batch"] = bstats["mean_batch"]
                m["batcher_busy_fraction"] = bstats["busy_fraction"]
                m["adv_memory_0"], m["adv_memory_1"] = len(self.adv_mem[0]), len(self.adv_mem[1])
                m["strategy_memory"] = len(self.strat_mem)
                # the time limit leaves the self-play fine-tuning its budget after the last iteration
                last = t == cfg.train.iterations or (cfg.train.time_limit_s > 0 and time.monotonic() - t_start
                                                      >= cfg.train.time_limit_s - cfg.train.selfplay_budget_s)
                first = t == self.start_iteration == 1 and cfg.eval.every > 0
                do_eval = last or first or (cfg.eval.every > 0 and t % cfg.eval.every == 0)
                strategy_due = last or do_eval or (cfg.train.strategy_every > 0 and t % cfg.train.strategy_every == 0)
                if strategy_due and (self.sdcfr is None or cfg.train.strategy_steps > 0):
                    t0 = time.monotonic()
                    sup.enter("train")
                    m["strategy_loss"] = self._train_strategy(t)
                    m["time_strategy_s"] = time.monotonic() - t0
                if last and cfg.train.selfplay_budget_s > 0:
                    sup.enter("self-play")
                    m.update(self._self_play(t, t_start, server, sup, job_config))
                if do_eval:
                    t0 = time.monotonic()
                    if cfg.run.progress and self.game.name == "lost_cities":
                        self.log(f"iter {t}: evaluating, {cfg.eval.lc_games} games against each of "
                                 f"{', '.join(cfg.eval.opponents)}")
                    sup.enter("evaluate")
                    m.update(self._evaluate(t, first, last))
                    m["time_eval_s"] = time.monotonic() - t0
                m["requeued_jobs"] = self.counters["requeued_jobs"]
                m["dropped_rows"] = self.counters["dropped_rows"]
                m["restarts"] = sup.total_restarts()     # by this trainer process, every phase
                m["restarts_batcher"], m["restarts_worker"] = sup.restarts["batcher"], sup.restarts["worker"]
                m["wall_s"] = time.monotonic() - t_start
                metrics_f.write(json.dumps({k: v for k, v in m.items() if v is not None}) + "\n")
                metrics_f.flush()
                if tb is not None:
                    for k, v in m.items():
                        if isinstance(v, (int, float)) and k != "iteration":
                            tb.add_scalar(k, v, t)
                self.log(iteration_line(m))
                last_metrics = m
                if last or (cfg.run.checkpoint_every > 0 and t % cfg.run.checkpoint_every == 0):
                    sup.enter("checkpoint")
                    path = self.save(t)
                    self.log(f"checkpoint {path}")
                if last:
                    break
            return {**warm, **last_metrics} if last_metrics else last_metrics
        finally:
            metrics_f.close()
            self.ledger.close()
            if tb is not None:
                tb.close()
            if sup is not None:
                sup.close()
            server.close()


def _ordered(chunks):
    if not chunks:
        return None
    cat = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    order = np.lexsort((cat["seq"], cat["traversal"]))
    return {k: v[order] for k, v in cat.items()}


HELD_OUT_ROWS = 4096        # new advantage samples per phase scored before the net trains on them


def _tuple_state(x):
    if isinstance(x, list):
        return tuple(_tuple_state(v) for v in x)
    return x
