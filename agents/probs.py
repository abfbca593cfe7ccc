"""Action probabilities from nets and advantages, shared by the policies
(agents.policy), exact exploitability (agents.exact) and the SD-CFR average
(agents.sdcfr). It imports none of them, so they import it without a circle."""
import numpy as np
import torch

from batcher.networks import padded_forward


def _check_batch(info, mask):
    info = np.asarray(info, dtype=np.float32)
    mask = np.asarray(mask).astype(bool)
    if info.ndim != 2 or mask.ndim != 2 or info.shape[0] != mask.shape[0]:
        raise ValueError(f"a policy needs info [n, T] and mask [n, A], got {info.shape} and {mask.shape}")
    if len(mask) and not mask.any(axis=1).all():
        bad = int(np.flatnonzero(~mask.any(axis=1))[0])
        raise ValueError(f"row {bad} has no legal action")
    return info, mask


def _forward(net, info):
    """net(info) as float64 numpy. A net cast to bfloat16 on a CPU
    (batcher.networks.for_inference) runs on padded_rows(n) rows, as the
    batcher's forward does: one oneDNN kernel a padded shape."""
    with torch.inference_mode():
        return padded_forward(net, info).detach().to("cpu", torch.float64).numpy()


def policy_probs(net, info, mask):
    """Action probabilities of a strategy net: softmax of its logits over the
    legal actions (mask nonzero); illegal actions get exactly 0.

    info: float32 [n, T]; mask: bool/uint8/int8 [n, A]. Returns float64 [n, A].
    One batched forward under torch.inference_mode. `net` may also be a
    tabular policy with a `probs(info, mask)` method (agents.sdcfr)."""
    if not isinstance(net, torch.nn.Module) and hasattr(net, "probs"):
        return net.probs(info, mask)
    info, mask = _check_batch(info, mask)
    n, num_actions = mask.shape
    if n == 0:
        return np.zeros((0, num_actions), dtype=np.float64)
    logits = _forward(net, info)
    if logits.shape != (n, num_actions):
        raise ValueError(f"net output has shape {logits.shape}, expected {(n, num_actions)}")
    logits = np.where(mask, logits, -np.inf)
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)  # exp(-inf) == 0 exactly
    return e / e.sum(axis=1, keepdims=True)


def regret_matching(advantages, masks, fallback="argmax"):
    """Regret matching on [n, A] advantages over the legal actions (masks
    [n, A]), as the traverser does it: positive parts normalised; with none
    positive, "argmax" plays the highest advantage (lowest id on ties),
    "uniform" every legal action alike. Returns float64 [n, A]."""
    if fallback not in ("argmax", "uniform"):
        raise ValueError(f"fallback must be argmax or uniform, got {fallback!r}")
    adv = np.asarray(advantages, dtype=np.float64)
    masks = np.asarray(masks).astype(bool)
    pos = np.where(masks, np.maximum(adv, 0.0), 0.0)
    total = pos.sum(axis=1, keepdims=True)
    sigma = np.divide(pos, total, out=np.zeros_like(pos), where=total > 0)
    none = total[:, 0] <= 0
    if none.any():
        if fallback == "uniform":
            legal = masks[none].astype(np.float64)
            sigma[none] = legal / legal.sum(axis=1, keepdims=True)
        else:
            masked = np.where(masks[none], adv[none], -np.inf)
            best = masked.argmax(axis=1)  # first maximum: the lowest action id
            sigma[none] = 0.0
            sigma[np.flatnonzero(none), best] = 1.0
    return sigma


def sample_actions(probs, rng, greedy=False):
    """One action per row of probs [n, A]: sampled with numpy Generator `rng`,
    or the most probable (lowest id on ties) if `greedy`."""
    if greedy:
        return probs.argmax(axis=1)
    cum = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cum[:, -1]
    # first index whose cumulative sum exceeds u: its probability is > 0, so legal
    return (cum > u[:, None]).argmax(axis=1)
