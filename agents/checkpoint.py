"""Reading checkpoints: the newest of a run, its nets and its game.

The format (one iter_NNNNNN.pt per checkpoint, RUN_DIR/checkpoints/latest
naming the newest) is described in trainer/checkpoint.py, which writes them.
A run that starts with a warm start also keeps RUN_DIR/checkpoints/prior.pt,
its nets at the end of the warm start (iteration 0, written once by
trainer.warmstart.save_prior; `latest` never names it). A run that ends
with PPO self-play (train.selfplay_budget_s) keeps
RUN_DIR/checkpoints/before_selfplay.pt, its nets when CFR stopped and the
self-play began: `run:RUN/checkpoints/before_selfplay.pt` plays it. Its
checkpoints from the self-play stage on keep the stage's critic
(build_critic, build_policy_value).
"""
from pathlib import Path

import torch

FORMAT = 1
PRIOR = "prior.pt"
BEFORE_SELFPLAY = "before_selfplay.pt"


def checkpoint_dir(run_dir):
    return Path(run_dir) / "checkpoints"


def latest_checkpoint(run_dir):
    """Path of the newest complete checkpoint of a run, or None."""
    d = checkpoint_dir(run_dir)
    try:
        name = (d / "latest").read_text().strip()
    except FileNotFoundError:
        return None
    return d / name


def run_dir_of(path):
    """The run directory of a run directory or of one of its checkpoint files."""
    p = Path(path)
    if p.is_dir():
        return p
    return p.parent.parent if p.parent.name == "checkpoints" else p.parent


def prior_checkpoint(path):
    """Path of the warm-start prior (checkpoints/prior.pt) of the run that
    `path` (a run directory or one of its checkpoints) belongs to; it may
    not exist."""
    return checkpoint_dir(run_dir_of(path)) / PRIOR


def before_selfplay_checkpoint(path):
    """Path of the nets a run had when its PPO self-play began
    (checkpoints/before_selfplay.pt) of the run that `path` belongs to; it
    may not exist."""
    return checkpoint_dir(run_dir_of(path)) / BEFORE_SELFPLAY


def load_checkpoint(path):
    """Load a checkpoint file (or the latest of a run dir)."""
    p = Path(path)
    if p.is_dir():
        found = latest_checkpoint(p)
        if found is None:
            raise FileNotFoundError(f"{p} holds no checkpoint (no checkpoints/latest)")
        p = found
    if not p.exists():
        raise FileNotFoundError(f"no checkpoint at {p}")
    ckpt = torch.load(p, map_location="cpu", weights_only=True)
    if ckpt.get("format") != FORMAT:
        raise ValueError(f"{p}: unsupported checkpoint format {ckpt.get('format')!r}")
    ckpt["path"] = str(p)
    return ckpt


def save_agent_file(path, payload):
    """torch.save `payload` at `path` whole or not at all (written to
    PATH.tmp, then renamed over it); a failed write leaves `path` as it
    was and raises OSError naming the file. For the files agents write
    (exported agents, responders); the trainer's own checkpoints go through
    trainer.checkpoint.write_durably."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(payload, tmp)
        tmp.replace(path)
    except (OSError, RuntimeError) as e:       # torch.save reports a failed write as a RuntimeError
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        reason = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).strip() or type(e).__name__)
        raise OSError(f"cannot write {path}: {reason.splitlines()[0]}") from None
    return path


def build_net(ckpt, name):
    """The network `name` ("adv0", "adv1" or "strategy") of a loaded checkpoint."""
    from batcher.networks import build_mlp
    if name not in ckpt["nets"]:
        raise ValueError(f"{ckpt.get('path')} holds no {name} net"
                         + (" (an exported agent keeps the strategy net: play its average policy)"
                            if "exported_from" in ckpt else ""))
    net = build_mlp(ckpt["net_spec"])
    net.load_state_dict(ckpt["nets"][name])
    return net.eval()


def build_critic(ckpt):
    """The self-play critic a checkpoint kept (an MLP: info state -> the
    expected final score difference for the player whose info state it is,
    times ckpt["critic_value_scale"]), or None where the run had no
    self-play stage or was written before the critic was kept."""
    if "critic" not in ckpt:
        return None
    from batcher.networks import build_mlp
    net = build_mlp(ckpt["critic_spec"])
    net.load_state_dict(ckpt["critic"])
    return net.eval()


def build_policy_value(ckpt):
    """The strategy net and the kept critic as one module (logits, then the
    value: batcher.networks.AdvantageValue), what the batcher serves to
    answer both in one forward; None without a critic."""
    from batcher.networks import AdvantageValue
    critic = build_critic(ckpt)
    return None if critic is None else AdvantageValue(build_net(ckpt, "strategy"), critic).eval()


def game_of(ckpt):
    """The engine game a checkpoint was trained on."""
    import engine
    g = ckpt["config"]["game"]
    return engine.load_game(g["name"], **g.get("params", {}))
