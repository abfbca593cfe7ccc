"""Network definitions. Advantage and strategy nets share one shape: an MLP
from the info-state tensor to one output per action id (illegal ones are
ignored by regret matching / masked in training). A value net is an MLP
with one output; AdvantageValue serves an advantage net and a value net as
one module whose answer rows are the advantages followed by the value."""
import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    """info-state (tensor_size) -> hidden layers with ReLU -> num_actions."""

    def __init__(self, input_size, num_actions, hidden=(512, 512, 512), input_scale=None):
        super().__init__()
        if input_size < 1 or num_actions < 1 or any(h < 1 for h in hidden):
            raise ValueError(f"bad MLP shape: {input_size} -> {list(hidden)} -> {num_actions}")
        self.input_size = int(input_size)
        self.num_actions = int(num_actions)
        self.hidden = tuple(int(h) for h in hidden)
        layers, width = [], self.input_size
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, self.num_actions))
        self.net = nn.Sequential(*layers)
        scale = torch.ones(self.input_size) if input_scale is None else torch.as_tensor(input_scale, dtype=torch.float32)
        if scale.shape != (self.input_size,):
            raise ValueError(f"input_scale has shape {tuple(scale.shape)}, expected ({self.input_size},)")
        self.register_buffer("input_scale", scale.clone())

    def forward(self, x):
        return self.net(self.scale_input(x))

    def scale_input(self, x):
        """x times input_scale in the first layer's dtype (float32, or
        bfloat16 after for_inference): what self.net takes. A learner that
        passes over the same rows many times scales them once."""
        return (x * self.input_scale).to(self.net[0].weight.dtype)

    def spec(self):
        """Constructor arguments, enough to rebuild the net (no pickling)."""
        return {"input_size": self.input_size, "num_actions": self.num_actions, "hidden": list(self.hidden)}


class AdvantageValue(nn.Module):
    """An advantage net `adv` (info-state -> A advantages) and a value net
    `value` (info-state -> 1: the expected return of the player whose
    info-state it is, in traversal value units) answered by one module:
    forward(x) is [adv(x), value(x)], A + 1 columns, the value last. Its
    spec's "num_actions" is that output width (A + 1), so a server that
    sizes its answers by the spec needs no other rule; "value_hidden" marks
    it (build_mlp)."""

    def __init__(self, adv, value):
        super().__init__()
        if getattr(value, "num_actions", None) != 1:
            raise ValueError(f"the value net must have one output, not {getattr(value, 'num_actions', None)}")
        if adv.input_size != value.input_size:
            raise ValueError(f"the advantage net takes {adv.input_size} inputs but the value net "
                             f"{value.input_size}")
        self.adv = adv
        self.value = value
        self.input_size = adv.input_size
        self.num_actions = adv.num_actions + 1

    def forward(self, x):
        return torch.cat([self.adv(x), self.value(x)], dim=1)

    def spec(self):
        return {"input_size": self.input_size, "num_actions": self.num_actions, "hidden": list(self.adv.hidden),
                "value_hidden": list(self.value.hidden)}


def padded_rows(n, multiple=16):
    """n rounded up to a multiple of `multiple`: the rows a bf16 forward on a
    CPU runs on. oneDNN builds its kernels for each batch shape and keeps a bounded
    number of them, so batches of every size from 1 to a few hundred keep
    evicting each other: a bf16 forward of varying size cost 1.4 to 1.8
    times a fixed-size one a row (2026-12-06). A few extra rows cost less."""
    return -(-n // multiple) * multiple


def padded_forward(net, rows):
    """net's answers (a tensor [n, ...]) to float32 numpy rows [n, T], as
    the batcher runs them: a net cast to bfloat16 on a CPU (for_inference)
    on padded_rows(n) rows, zeros past the last; any other net on the n
    rows, on its device. The caller chooses the grad mode."""
    n = len(rows)
    x = np.ascontiguousarray(rows, dtype=np.float32)
    first = next(iter(net.parameters()), None)
    device = torch.device("cpu") if first is None else first.device
    if first is not None and first.dtype == torch.bfloat16 and device.type == "cpu" and padded_rows(n) > n:
        x = np.zeros((padded_rows(n), x.shape[1]), np.float32)
        x[:n] = rows
    return net(torch.from_numpy(x).to(device))[:n]


def for_inference(net, dtype=None):
    """`net` itself, in eval mode, for forwards only. With dtype (bfloat16,
    for a CPU) its Linear layers' weights are cast to it once, in place: a
    forward then answers exactly as autocast does (the scaled input is cast
    to the first layer's dtype, each layer computes in it), without casting
    every weight at every call (5-8% of a forward of 300-500 rows)."""
    if dtype is not None:
        for m in net.modules():
            if isinstance(m, nn.Linear):
                m.to(dtype)
    return net.eval()


def build_mlp(spec):
    """The net of the given spec (an AdvantageValue if it has "value_hidden",
    else an MLP); its input_scale comes with the weights."""
    if "value_hidden" in spec:
        if int(spec["num_actions"]) < 2:
            raise ValueError(f"an advantage-value spec needs num_actions >= 2 (the advantages and the value), "
                             f"got {spec['num_actions']}")
        return AdvantageValue(MLP(spec["input_size"], int(spec["num_actions"]) - 1, tuple(spec["hidden"])),
                              MLP(spec["input_size"], 1, tuple(spec["value_hidden"])))
    return MLP(spec["input_size"], spec["num_actions"], tuple(spec["hidden"]))


def net_for_game(game, hidden=(512, 512, 512), seed=None):
    """A freshly initialised MLP sized for `game` (seeded if seed is given)."""
    if seed is not None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
    net = MLP(game.information_state_tensor_size(), game.num_distinct_actions(), hidden,
              input_scale=game.input_scale())
    if seed is not None:
        torch.random.set_rng_state(gen_state)
    return net
