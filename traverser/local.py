"""In-process traversal: the local evaluator (a real PyTorch forward on a
group's request buffer) and the driver that runs machine groups on K threads.

Python runs here once per batch, never per node.
"""
import threading

import numpy as np
import torch

from traverser._traverse import MachineGroup, SampleArrays
from traverser.stats import merge_stats  # noqa: F401 (imported from here by others)


class LocalEvaluator:
    """Answers a group's requests with one batched forward per model present.

    models: {model_id: torch.nn.Module}. Rows asking for an unknown model
    raise KeyError naming it; a model whose answers are not the group's
    answer_width wide (num_actions, + 1 for the value with value cutoffs)
    raises ValueError. autocast: "none", "bf16" or "fp16" runs the
    forward in that precision (bf16 is about 3x faster on CPUs with AVX512-BF16).
    """

    def __init__(self, models, device="cpu", autocast="none"):
        self.device = torch.device(device)
        self.models = {int(k): m.to(self.device).eval() for k, m in models.items()}
        if autocast not in ("none", "bf16", "fp16"):
            raise ValueError(f"autocast must be none, bf16 or fp16, got {autocast!r}")
        self.autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
        self.forwards = 0
        self.rows = 0

    @torch.inference_mode()
    def __call__(self, group, n):
        if n == 0:
            return
        req = torch.from_numpy(group.requests[:n])
        out = torch.from_numpy(group.advantages[:n])
        ids = group.request_model[:n]
        first = int(ids[0])
        width = group.answer_width
        if (ids == first).all():
            out.copy_(self._checked(first, req, width))
            self.forwards += 1
        else:
            for m in np.unique(ids):
                idx = torch.from_numpy(np.flatnonzero(ids == m))
                out[idx] = self._checked(int(m), req[idx], width)
                self.forwards += 1
        self.rows += n

    def _checked(self, model_id, x, width):
        y = self._forward(model_id, x)
        if y.dim() != 2 or y.shape[1] != width:
            raise ValueError(f"model {model_id} answers {tuple(y.shape)[1:]} columns a row, the group's "
                             f"answer_width is {width} (the game's actions, + 1 for the value with value_cutoff > 0)")
        return y

    def _forward(self, model_id, x):
        try:
            model = self.models[model_id]
        except KeyError:
            raise KeyError(f"no model {model_id} loaded (have {sorted(self.models)})") from None
        x = x.to(self.device, non_blocking=True)
        if self.autocast is not None:
            with torch.autocast(self.device.type, dtype=self.autocast):
                return model(x).float().cpu()
        return model(x).float().cpu()


def _concat(parts, empty):
    if not parts:
        return empty
    return SampleArrays({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})


def _run_groups(groups, evaluator, sink, errors):
    try:
        while True:
            active = False
            for g in groups:
                if g.finished() and g.n_requests == 0:
                    continue
                active = True
                n = g.step()
                if n:
                    evaluator(g, n)
                    g.resume(n)
                if g.blocked() or g.finished():
                    sink(g.drain_advantage(), g.drain_strategy())
            if not active:
                break
        for g in groups:
            sink(g.drain_advantage(), g.drain_strategy())
    except BaseException as e:  # surfaced by run_local in the calling thread
        errors.append(e)


def run_local(game, config, traversal_ids, traversers, iteration=1, run_seed=0, weight=None,
              evaluator=None, groups=1, machines=256, threads=1, capacity=4096, sink=None):
    """Run traversals in process; returns (advantage samples, strategy samples, stats).

    With `sink`, each drained chunk goes to sink(adv, strat) (called from the
    stepping threads) and the returned sample arrays are empty.

    traversal_ids are split round-robin over `groups` machine groups of
    `machines` each, stepped by `threads` Python threads (the stepping and the
    forwards release the GIL). evaluator may be None only with
    config.uniform_policy.
    """
    if evaluator is None and not config.uniform_policy:
        raise ValueError("run_local needs an evaluator unless config.uniform_policy is set")
    if threads < 1 or groups < 1 or groups < threads:
        raise ValueError(f"need groups >= threads >= 1, got groups={groups} threads={threads}")
    ids = np.asarray(traversal_ids, dtype=np.int64)
    trav = np.broadcast_to(np.asarray(traversers, dtype=np.int8), ids.shape)
    weight = float(iteration if weight is None else weight)
    group_list = []
    for i in range(groups):
        g = MachineGroup(game, config, n_machines=machines, adv_capacity=capacity, strat_capacity=capacity)
        g.start(ids[i::groups], trav[i::groups], iteration, run_seed, weight)
        group_list.append(g)
    adv_parts, strat_parts, errors = [], [], []
    lock = threading.Lock()

    def collect(adv, strat):
        with lock:
            adv_parts.append(adv)
            strat_parts.append(strat)
    workers = [threading.Thread(target=_run_groups, args=(group_list[t::threads], evaluator,
                                                          sink or collect, errors))
               for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    stats = merge_stats([g.stats() for g in group_list])
    empty = group_list[0].drain_advantage()
    return _concat(adv_parts, empty), _concat(strat_parts, empty), stats


def sort_samples(samples):
    """Rows ordered by (traversal id, position): a canonical order for comparisons."""
    order = np.lexsort((samples["seq"], samples["traversal"]))
    return SampleArrays({k: v[order] for k, v in samples.items()})
