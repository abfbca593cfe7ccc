"""Checkpoints: everything needed to rebuild and resume a run.

A checkpoint is one file, RUN_DIR/checkpoints/iter_NNNNNN.pt, written with
torch.save and read with torch.load(weights_only=True): only tensors, numbers,
strings, lists and dicts (no pickled objects). Memories, when kept, sit beside
it as iter_NNNNNN.memories.npz. RUN_DIR/checkpoints/latest holds the name of
the newest complete checkpoint (written last, so a crash mid-save leaves the
previous one in force). Every file is written durably (write_durably): to a
temporary name, fsynced, renamed, and the directory fsynced, so a power loss
never leaves a `latest` naming a file whose bytes are not on the disk. A
write that fails (disk full) raises CheckpointWriteError naming the file and
the error, and leaves the previous checkpoint in force.

Keys: "format" (1), "config" (the run config as a dict), "iteration" (last
completed iteration), "nets" ({"adv0", "adv1", "strategy"} -> state dicts),
"net_spec" (MLP spec), "optimizers" ({name -> state dict}), "rng" (torch,
numpy and python generator states), "versions" (batcher model versions),
"counters" (totals for metrics), "memories" (file name or None), and with
train.average=sdcfr "sdcfr" (the running sums of agents.sdcfr). A run with
a value net (train.value_steps > 0, trainer/value.py) adds "value_net" (its
state dict), "value_spec" (its MLP spec) and optimizers["value"]. From
the self-play stage's start on, "critic" (the stage's critic, a state
dict), "critic_spec" and "critic_value_scale" (its outputs per point);
"selfplay" holds the stage's state to resume it, or {"done": True}.
"""
import os
from pathlib import Path

import torch

from agents.checkpoint import FORMAT, build_net, checkpoint_dir, game_of, latest_checkpoint, load_checkpoint  # noqa: F401 (reading lives in agents)


class CheckpointWriteError(RuntimeError):
    """A checkpoint file could not be written; the message names it and the error."""


def write_durably(path, write):
    """Create or replace the file `path` with what write(f) puts in the binary
    file object f, all or nothing, and on the disk when this returns: written
    to PATH.tmp, fsynced, renamed over `path`, the directory fsynced. On
    failure the temporary file is removed, `path` is as it was, and
    CheckpointWriteError says which file and why, in one line."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, RuntimeError) as e:        # torch.save reports a failed write as a RuntimeError
        try:
            tmp.unlink()
        except OSError:
            pass
        reason = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).strip() or type(e).__name__)
        raise CheckpointWriteError(f"cannot write {path}: {reason.splitlines()[0]}") from None


def fsync_dir(directory):
    """Make a rename or a new file in `directory` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return                  # e.g. Windows: directories cannot be opened
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(run_dir, iteration, payload):
    """Write iter_NNNNNN.pt durably, then point `latest` at it; returns its path."""
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"iter_{iteration:06d}.pt"
    write_durably(path, lambda f: torch.save({"format": FORMAT, "iteration": iteration, **payload}, f))
    write_durably(d / "latest", lambda f: f.write(path.name.encode()))
    return path
