"""The batcher service (batcher/) and the remote traversal worker (traverser/worker.py)
over real ZeroMQ sockets on loopback.

In-process tests run Batcher.serve() in a background thread with a zmq.Context
per test; the multi-process paths (CLI, restart, fuzz + memory, worker CLI)
start `python -m batcher` / `python -m traverser` subprocesses, always killed
in teardown. Every wait is bounded.
"""
import collections
import os
import signal
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batcher_helpers as H  # noqa: E402
import engine  # noqa: E402
from batcher import protocol as P  # noqa: E402
from batcher.__main__ import build_parser  # noqa: E402
from batcher.client import BatcherClient, BatcherError, BatcherTimeout, infer_blocking, wait_for_batcher  # noqa: E402
from batcher.networks import MLP, net_for_game  # noqa: E402
from batcher.server import Batcher, BatcherOptions, BindError, DeviceError, resolve_device  # noqa: E402
from batcher.weights import net_to_bytes  # noqa: E402
from traverser.config import TraverserConfig  # noqa: E402
from traverser.local import LocalEvaluator, run_local, sort_samples  # noqa: E402
from traverser.worker import run_remote  # noqa: E402

torch.set_num_threads(1)

HIDDEN = (16, 16)
ATOL = 1e-5
LEDUC = engine.load_game("leduc_poker")
KUHN = engine.load_game("kuhn_poker")
COLS = LEDUC.information_state_tensor_size()


def forward(net, rows):
    with torch.inference_mode():
        return net(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))).float().numpy()


@pytest.fixture
def nets():
    """Leduc-sized advantage nets for models 0 and 1 (the --init-game seeds)."""
    return {0: net_for_game(LEDUC, HIDDEN, seed=0), 1: net_for_game(LEDUC, HIDDEN, seed=1)}


@contextmanager_fixture = None  # (placeholder removed below)
