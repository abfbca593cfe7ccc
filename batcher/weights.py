"""Weights as plain tensors: safetensors bytes plus a JSON-able spec. Never pickle."""
import json

from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from batcher.networks import build_mlp


def net_to_bytes(net):
    """(spec, safetensors bytes) of an MLP or AdvantageValue, tensors moved to CPU."""
    state = {k: v.detach().to("cpu").contiguous() for k, v in net.state_dict().items()}
    return net.spec(), st_save(state, metadata={"spec": json.dumps(net.spec())})


def spec_params(spec):
    """Parameter count a spec describes (an MLP's, or an AdvantageValue's:
    its advantage MLP with num_actions - 1 outputs plus its value MLP with
    one); ValueError if it is malformed."""
    try:
        value = "value_hidden" in spec
        widths = [int(spec["input_size"]), *[int(h) for h in spec["hidden"]], int(spec["num_actions"]) - value]
        parts = [widths]
        if value:
            parts.append([widths[0], *[int(h) for h in spec["value_hidden"]], 1])
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"bad network spec {spec!r}: {e}") from None
    if any(w < 1 for ws in parts for w in ws):
        raise ValueError(f"bad network spec {spec!r}: every width must be >= 1"
                         + (" (num_actions counts the value column too)" if value else ""))
    return sum((a + 1) * b for ws in parts for a, b in zip(ws, ws[1:]))


def net_from_bytes(spec, blob, device="cpu", max_params=None):
    """Rebuild an MLP (or AdvantageValue) from a spec and safetensors bytes; mismatches raise ValueError.
    A spec larger than max_params is refused before anything is allocated."""
    n = spec_params(spec)
    if max_params is not None and n > max_params:
        raise ValueError(f"network spec describes {n} parameters, more than the {max_params} allowed")
    try:
        net = build_mlp(spec)
    except (KeyError, TypeError, ValueError, OverflowError, RuntimeError) as e:
        raise ValueError(f"bad network spec {spec!r}: {e}") from None
    try:
        state = st_load(bytes(blob))
    except Exception as e:
        raise ValueError(f"weights are not valid safetensors ({type(e).__name__}: {e})") from None
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ValueError(f"weights do not fit spec {spec}: {str(e).splitlines()[0]}") from None
    return net.to(device).eval()
