"""A trainer's state in and out of its checkpoints (trainer.loop.Trainer's
save and resume): the nets, the optimisers, the value net, the RNGs, the
weight versions, the counters (the run's time among them), the memories
when run.save_memories is on, SD-CFR's sums, and the trainer-play stage's
state while it runs."""
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from trainer import checkpoint as ck
from trainer.config import config_to_dict


def restore(trainer, ckpt):
    """Put a loaded checkpoint's state into `trainer` (a resumed run's start)."""
    for name, net in trainer.nets.items():
        net.load_state_dict(ckpt["nets"][name])
    for name, opt in trainer.optimizers.items():
        if name in ckpt.get("optimizers", {}):
            opt.load_state_dict(ckpt["optimizers"][name])
    if trainer.value_net is not None:
        if "value_net" not in ckpt:
            raise ValueError(f"{ckpt['path']}: train.value_steps > 0 but the checkpoint holds no value net")
        trainer.value_net.load_state_dict(ckpt["value_net"])
        if "value" in ckpt.get("optimizers", {}):
            trainer.value_optimizer.load_state_dict(ckpt["optimizers"]["value"])
    rng = ckpt["rng"]
    torch.set_rng_state(rng["torch"])
    trainer.np_rng.bit_generator.state = json.loads(rng["numpy"])
    random.setstate(_tuple_state(json.loads(rng["python"])))
    trainer.versions = {int(k): int(v) for k, v in ckpt["versions"].items()}
    trainer.counters = dict(ckpt["counters"])
    trainer.spent_s = float(trainer.counters.get("wall_s", 0.0))
    trainer.selfplay_state = ckpt.get("selfplay")
    trainer.start_iteration = int(ckpt["iteration"]) + 1
    if trainer.sdcfr is not None:
        if "sdcfr" not in ckpt:
            raise ValueError(f"{ckpt['path']}: train.average is sdcfr but the checkpoint holds no SD-CFR sums")
        trainer.sdcfr.load_state_dict(ckpt["sdcfr"])
    mem = ckpt.get("memories")
    if mem:
        arrays = np.load(Path(ckpt["path"]).parent / mem)
        for p in (0, 1):
            trainer.adv_mem[p].load_state_dict(arrays, f"adv{p}")
        trainer.strat_mem.load_state_dict(arrays, "strategy")
    else:
        trainer.log("resuming without memories (run.save_memories was off): they start empty")
    trainer.log(f"resumed from {ckpt['path']} at iteration {trainer.start_iteration}")


def save(trainer, t, selfplay=None):
    """Checkpoint iteration t (selfplay: the trainer-play stage's state, or
    {"done": True} once it ended); the counters carry the run's time."""
    mem_name = None
    trainer.counters["wall_s"] = time.monotonic() - trainer.t_start
    d = ck.checkpoint_dir(trainer.run_dir)
    d.mkdir(parents=True, exist_ok=True)
    if trainer.cfg.run.save_memories:
        mem_name = f"iter_{t:06d}.memories.npz"
        arrays = {**trainer.adv_mem[0].state_dict("adv0"), **trainer.adv_mem[1].state_dict("adv1"),
                  **trainer.strat_mem.state_dict("strategy")}
        ck.write_durably(d / mem_name, lambda f: np.savez(f, **arrays))
    payload = {
        "config": config_to_dict(trainer.cfg),
        "nets": {k: {n: v.detach().cpu() for n, v in net.state_dict().items()} for k, net in trainer.nets.items()},
        "net_spec": trainer.nets["strategy"].spec(),
        "optimizers": {k: opt.state_dict() for k, opt in trainer.optimizers.items()},
        **_value_payload(trainer),
        "rng": {"torch": torch.get_rng_state(), "numpy": json.dumps(trainer.np_rng.bit_generator.state),
                "python": json.dumps(random.getstate())},
        "versions": {str(k): v for k, v in trainer.versions.items()},
        "counters": dict(trainer.counters),
        "memories": mem_name,
    }
    if trainer.value_net is not None:
        payload["optimizers"]["value"] = trainer.value_optimizer.state_dict()
    if trainer.sdcfr is not None:
        payload["sdcfr"] = trainer.sdcfr.state_dict()
    if selfplay is not None:
        payload["selfplay"] = selfplay
    if trainer.critic is not None:      # the self-play critic, from the stage's start on (agents.checkpoint.build_critic)
        payload["critic"] = {n: v.detach().cpu().clone() for n, v in trainer.critic.state_dict().items()}
        payload["critic_spec"] = trainer.critic.spec()
        payload["critic_value_scale"] = trainer.critic_value_scale
    return ck.save_checkpoint(trainer.run_dir, t, payload)

def _value_payload(trainer):
    """The value net's checkpoint keys, value_net (its state dict) and
    value_spec; none without one (save() adds its optimizer to "optimizers")."""
    if trainer.value_net is None:
        return {}
    return {"value_net": {n: v.detach().cpu() for n, v in trainer.value_net.state_dict().items()},
            "value_spec": trainer.value_net.spec()}


def _tuple_state(x):
    if isinstance(x, list):
        return tuple(_tuple_state(v) for v in x)
    return x
