"""Checkpoints: everything needed to rebuild and resume a run.

A checkpoint is one file, RUN_DIR/checkpoints/iter_NNNNNN.pt, written with
torch.save and read with torch.load(weights_only=True): only tensors, numbers,
strings, lists and dicts (no pickled objects). Memories, when kept, sit beside
it as iter_NNNNNN.memories.npz. RUN_DIR/checkpoints/latest holds the name of
the newest complete checkpoint (written last, so a crash mid-save leaves the
previous one in force).

Keys: "format" (1), "config" (the run config as a dict), "iteration" (last
completed iteration), "nets" ({"adv0", "adv1", "strategy"} -> state dicts),
"net_spec" (MLP spec), "optimizers" ({name -> state dict}), "rng" (torch,
numpy and python generator states), "versions" (batcher model versions),
"counters" (totals for metrics), "memories" (file name or None), and with
train.average=sdcfr "sdcfr" (the running sums of agents.sdcfr).
"""
import os

import torch

from agents.checkpoint import FORMAT, build_net, checkpoint_dir, game_of, latest_checkpoint, load_checkpoint  # noqa: F401 (reading lives in agents)


def save_checkpoint(run_dir, iteration, payload):
    """Write iter_NNNNNN.pt atomically and point `latest` at it; returns its path."""
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"iter_{iteration:06d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save({"format": FORMAT, "iteration": iteration, **payload}, tmp)
    os.replace(tmp, path)
    latest_tmp = d / "latest.tmp"
    latest_tmp.write_text(path.name)
    os.replace(latest_tmp, d / "latest")
    return path
