"""Network training on reservoir memories.

Advantage nets: linear-CFR-weighted MSE on the legal actions,
    loss = sum_i w_i * sum_{a legal} (f(I_i)_a - r_i,a)^2 / sum_i w_i,
w_i being the iteration that produced sample i.
Strategy net: weighted cross-entropy between the sampled policy and the
softmax of the net's logits over the legal actions.
"""
import time

import numpy as np
import torch


def _batch_tensors(batch, device, augment=None, rng=None):
    """(info, target, mask, weight) on `device`, renamed by `augment` on the
    side where it is cheaper: numpy arrays on the CPU, tensors on any other
    device (the info rows travel as stored, uint8, and become float there)."""
    on_cpu = torch.device(device).type == "cpu"
    if augment is not None and on_cpu:
        batch = augment(batch, rng)
    cols = {key: torch.from_numpy(batch[key]).to(device) for key in ("info", "target", "mask", "weight")}
    if augment is not None and not on_cpu:
        cols = augment(cols, rng)
    weight = cols["weight"]
    return cols["info"].float(), cols["target"], cols["mask"].bool(), weight / weight.mean().clamp_min(1e-12)


def advantage_loss(net, info, target, mask, weight):
    pred = net(info)
    err = torch.where(mask, (pred - target) ** 2, torch.zeros_like(pred)).sum(1)
    return (weight * err).mean()


def strategy_loss(net, info, target, mask, weight):
    logits = net(info).masked_fill(~mask, float("-inf"))
    logp = torch.log_softmax(logits, dim=1)
    ce = -(torch.where(mask, target * logp, torch.zeros_like(logp))).sum(1)
    return (weight * ce).mean()


def train_net(net, memory, steps, batch_size, optimizer, device, rng, loss_fn, grad_clip=1.0, progress=None,
              cosine_decay=False, augment=None, deadline=None, stats=None):
    """`steps` Adam steps on minibatches from `memory`; returns the mean loss
    of the last tenth of the steps (or None if the memory is empty). With
    cosine_decay the learning rate falls from its set value to 0 over the
    steps (and is restored afterwards). `augment(batch, rng)`, if given,
    transforms each minibatch before the step (agents.symmetry.ColourAugment):
    a dict of numpy arrays when training on the CPU, of tensors already on
    `device` otherwise. deadline: a time.monotonic() at which the steps
    stop early (the cosine schedule still spans `steps`). stats: a dict that
    gets "steps", the steps taken."""
    if memory.size == 0 or steps == 0:
        return None
    net.train()
    losses = []
    base_lrs = [g["lr"] for g in optimizer.param_groups]
    for step in range(steps):
        if deadline is not None and step > 0 and time.monotonic() >= deadline:
            break
        if cosine_decay:
            factor = 0.5 * (1.0 + np.cos(np.pi * step / steps))
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr * factor
        info, target, mask, weight = _batch_tensors(memory.sample(batch_size, rng), device, augment, rng)
        loss = loss_fn(net, info, target, mask, weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress.update(1)
    for g, lr in zip(optimizer.param_groups, base_lrs):
        g["lr"] = lr
    net.eval()
    if stats is not None:
        stats["steps"] = len(losses)
    tail = losses[-max(1, len(losses) // 10):]
    return float(np.mean(tail))


def held_out_error(net, rows, device="cpu"):
    """An advantage net's error on sample rows it has not trained on:
    {"heldout_mse": the weighted squared error summed over legal actions (the
    training loss's form), "heldout_zero_mse": the same for predicting 0}.
    Below the second, the net carries over something to states it has not
    seen; the first can never go below the targets' own noise."""
    with torch.inference_mode():
        pred = net(torch.from_numpy(np.asarray(rows["info"]).astype(np.float32)).to(device)).cpu().double().numpy()
    mask = np.asarray(rows["mask"]).astype(bool)
    target = np.asarray(rows["target"], dtype=np.float64)
    w = np.asarray(rows["weight"], dtype=np.float64)
    w = w / w.sum()
    err = np.where(mask, (pred - target) ** 2, 0.0).sum(axis=1)
    zero = np.where(mask, target ** 2, 0.0).sum(axis=1)
    return {"heldout_mse": float((w * err).sum()), "heldout_zero_mse": float((w * zero).sum())}


def label_error(net, rows):
    """A strategy net on labelled rows (one-hot targets) it has not trained
    on: {"agree": how often its most likely legal move is the label, "mse":
    the squared error of its probabilities against the one-hot label,
    summed over the legal moves, "uniform_mse": the same for the uniform
    policy over the legal moves}. NaN for no rows."""
    from agents.probs import policy_probs
    if len(rows["target"]) == 0:
        return {"agree": float("nan"), "mse": float("nan"), "uniform_mse": float("nan")}
    mask = np.asarray(rows["mask"]) > 0
    probs = policy_probs(net, np.asarray(rows["info"]).astype(np.float32), rows["mask"])
    uniform = mask / mask.sum(axis=1, keepdims=True)
    target = np.asarray(rows["target"], dtype=np.float64)
    return {"agree": float((probs.argmax(axis=1) == target.argmax(axis=1)).mean()),
            "mse": float(np.where(mask, (probs - target) ** 2, 0.0).sum(axis=1).mean()),
            "uniform_mse": float(np.where(mask, (uniform - target) ** 2, 0.0).sum(axis=1).mean())}
