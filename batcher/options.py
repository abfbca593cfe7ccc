"""The batcher's options, its device, and the errors that stop it from
starting (a device that is not there, an endpoint it cannot bind)."""
from dataclasses import dataclass

import torch

from batcher import protocol as P


class DeviceError(RuntimeError):
    pass


class BindError(RuntimeError):
    pass


def resolve_device(name, what="--device"):
    """'auto' -> cuda if available else cpu; 'cuda' without CUDA, or a GPU
    index that is not there, raises DeviceError naming `what` (the option or
    config key the name came from)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise DeviceError(f"{what} {name}: CUDA is not available ({why}, torch {torch.__version__})")
        try:
            device = torch.device(name)
        except RuntimeError:
            raise DeviceError(f"{what} {name}: not a device name (use cuda or cuda:N)") from None
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"{what} {name}: no such GPU ({count} visible: cuda:0..cuda:{count - 1})")
        return device
    if name == "cpu":
        return torch.device("cpu")
    raise DeviceError(f"{what} {name}: unknown device (use auto, cuda or cpu)")


@dataclass
class BatcherOptions:
    bind: str = "tcp://127.0.0.1:5555"
    """Endpoint to bind (loopback by default)."""
    device: str = "auto"
    """auto, cuda, cuda:N or cpu."""
    max_batch: int = 2048
    """Most rows in one forward (a larger single request runs alone)."""
    max_wait_us: int = 500
    """Longest wait after a model's oldest queued row before its forward runs."""
    autocast: str = "none"
    """none, bf16 or fp16 (GPU autocast for the forward)."""
    max_message_bytes: int = P.DEFAULT_MAX_MESSAGE_BYTES
    """Larger messages get a too_large error reply."""
    log_interval_s: float = 10.0
    """Seconds between periodic log lines (0 = off)."""
    torch_threads: int = 0
    """torch intra-op threads on CPU (0 = torch's default)."""
    curve_keys: str = ""
    """Directory of CURVE keys (python -m batcher.keys): only key holders may connect."""
    null_forward: bool = False
    """Benchmark mode: answer ones (uniform policy) without running the net; never for training."""
    forwards_in_flight: int = 2
    """GPU: forwards launched before the oldest must be answered (1 = wait for each forward
    before going on). While the device computes, the loop receives and stages the next batch."""
    shm_dir: str = ""
    """Directory of clients' shared-memory slots (batcher.shm): infer requests from this machine
    may pass their rows and answers there instead of through the socket. Empty = refused."""
