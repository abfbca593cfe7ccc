"""CURVE authentication: only holders of the client key reach the batcher and
the trainer; services bind to loopback unless told otherwise."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from batcher.client import BatcherClient, BatcherTimeout, wait_for_batcher
from batcher.keys import make_keys
from batcher.server import BatcherOptions
from trainer.config import Config

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_defaults_bind_loopback():
    assert BatcherOptions().bind.startswith("tcp://127.0.0.1:")
    assert Config().service.jobs_bind.startswith("tcp://127.0.0.1:")


def test_keys_command_refuses_to_overwrite(tmp_path):
    r = subprocess.run([sys.executable, "-m", "batcher.keys", str(tmp_path / "k")], capture_output=True, text=True)
    assert r.returncode == 0 and (tmp_path / "k" / "authorized" / "client.key").exists()
    r = subprocess.run([sys.executable, "-m", "batcher.keys", str(tmp_path / "k")], capture_output=True, text=True)
    assert r.returncode == 2 and "already holds keys" in r.stderr


def test_only_key_holders_reach_a_curve_batcher(tmp_path):
    keys = make_keys(tmp_path / "keys")
    strangers = make_keys(tmp_path / "other")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "batcher", "--bind", endpoint, "--init-game", "kuhn_poker",
                             "--hidden", "8", "--curve-keys", str(keys), "--log-interval", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        pong = wait_for_batcher(endpoint, timeout_s=30, curve_keys=str(keys))
        assert pong["type"] == "pong"
        with pytest.raises(BatcherTimeout):
            wait_for_batcher(endpoint, timeout_s=1.5)                       # no keys: plain socket
        with pytest.raises(BatcherTimeout):
            wait_for_batcher(endpoint, timeout_s=1.5, curve_keys=str(strangers))  # keys not authorised
        client = BatcherClient(endpoint, timeout_s=10, curve_keys=str(keys))
        try:
            assert client.ping()["type"] == "pong"                          # still serving its clients
        finally:
            client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_missing_key_dir_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "batcher", "--bind", f"tcp://127.0.0.1:{free_port()}",
                        "--curve-keys", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "CURVE key file" in r.stderr and "not found" in r.stderr


def test_training_run_with_curve(tmp_path):
    keys = make_keys(tmp_path / "keys")
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "trainer", "--config", "configs/kuhn.yaml", "--run-dir", str(run_dir),
                        "--set", "train.iterations=1", "--set", "train.traversals=30", "--set", "train.adv_steps=3",
                        "--set", "train.strategy_steps=3", "--set", "network.hidden=[8]", "--set", "eval.every=0",
                        "--set", "run.progress=false", "--set", "run.tensorboard=false",
                        "--set", f"service.curve_keys={keys}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["samples_adv_0"] > 0
