"""The deployment, without a Docker engine: the compose file validates, and
each service's command, read from the compose file, runs as a local process
(CPU device, tiny config) and the run trains to completion."""
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml
from batcher_helpers import stop_processes  # noqa: E402
from batcher.client import BatcherClient  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(text, env):
    """Compose-style ${VAR:-default} substitution."""
    def sub(m):
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is None:
            raise KeyError(f"compose variable {name} has no default")
        return default
    return VAR.sub(sub, text)


def load_compose(env):
    return yaml.safe_load(interpolate(COMPOSE.read_text(), env))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_file_structure():
    spec = load_compose({})
    services = spec["services"]
    assert set(services) == {"batcher", "trainer", "worker"}
    gpu = services["batcher"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert "runs:/runs" in services["trainer"]["volumes"] and "runs" in spec["volumes"]
    for name in ("batcher", "trainer"):
        assert services[name]["healthcheck"]["test"][0] == "CMD"
    assert int(services["worker"]["scale"]) == 12        # the default: 12 workers for a 16-core GPU box
    # batcher and workers share a tmpfs for their shared-memory slots, owned by the image's user
    for name in ("batcher", "worker"):
        assert "slots:/slots" in services[name]["volumes"]
        cmd = services[name]["command"]
        assert cmd[cmd.index("--shm-dir") + 1] == "/slots"
    opts = spec["volumes"]["slots"]["driver_opts"]
    assert opts["type"] == "tmpfs" and "uid=1000" in opts["o"] and "mode=0700" in opts["o"]
    assert "--uid 1000" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert services["batcher"]["command"][:3] == ["python", "-m", "batcher"]
    # every ${VAR} used has a documented line in .env.example
    documented = {line.split("=")[0] for line in (ROOT / "deploy" / ".env.example").read_text().splitlines()
                  if line and not line.startswith("#")}
    used = set(VAR.findall(COMPOSE.read_text()))
    assert {name for name, _ in used} <= documented


def test_docker_compose_config_validates():
    exe = shutil.which("docker-compose")
    if exe is not None:
        r = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True,
                           cwd=COMPOSE.parent, timeout=60)
        assert r.returncode == 0, r.stderr
    else:
        # no docker-compose here: the structural checks above and this parse stand in
        spec = load_compose({})
        assert all("command" in s for s in spec["services"].values())


def _as_local(cmd, ports, run_root):
    """A compose command for this machine: service hosts -> loopback ports, /runs -> tmp."""
    out = []
    for arg in cmd:
        arg = str(arg)
        arg = arg.replace("tcp://0.0.0.0:5555", f"tcp://127.0.0.1:{ports[5555]}")
        arg = arg.replace("tcp://0.0.0.0:5556", f"tcp://127.0.0.1:{ports[5556]}")
        arg = arg.replace("tcp://batcher:5555", f"tcp://127.0.0.1:{ports[5555]}")
        arg = arg.replace("tcp://trainer:5556", f"tcp://127.0.0.1:{ports[5556]}")
        arg = arg.replace("tcp://127.0.0.1:5555", f"tcp://127.0.0.1:{ports[5555]}")
        arg = arg.replace("('127.0.0.1', 5556)", f"('127.0.0.1', {ports[5556]})")
        arg = arg.replace("/runs/", f"{run_root}/")
        if arg == "/slots":                   # the shared tmpfs volume: a directory here
            arg = str(Path(run_root) / "slots")
            Path(arg).mkdir(exist_ok=True)
        out.append(arg)
    if out and out[0] == "python":
        out[0] = sys.executable
    return out


def _wait_healthy(service, ports, run_root, timeout=90):
    test = _as_local(service["healthcheck"]["test"][1:], ports, run_root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(test, cwd=ROOT, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"healthcheck never passed: {test}")


def test_compose_services_run_as_local_processes_and_train(tmp_path):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(yaml.safe_dump({
        "game": {"name": "kuhn_poker"}, "traversal": {"algorithm": "external"},
        "network": {"hidden": [16, 16]},
        "train": {"iterations": 2, "traversals": 40, "adv_steps": 5, "strategy_steps": 10, "batch_size": 32},
        "eval": {"every": 0}, "run": {"tensorboard": False}}))
    env = {"BATCHER_DEVICE": "cpu", "TRAIN_DEVICE": "cpu", "CONFIG": str(tiny), "RUN_NAME": "compose",
           "ITERATIONS": "2", "WORKERS": "2", "WORKER_MACHINES": "16", "WORKER_GROUPS": "2"}
    services = load_compose(env)["services"]
    ports = {5555: free_port(), 5556: free_port()}
    procs = []

    def start(name):
        cmd = _as_local(services[name]["command"], ports, tmp_path)
        log = open(tmp_path / f"{name}{len(procs)}.log", "w")
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        start("batcher")
        _wait_healthy(services["batcher"], ports, tmp_path)
        trainer = start("trainer")
        _wait_healthy(services["trainer"], ports, tmp_path)
        for _ in range(int(services["worker"]["scale"])):
            start("worker")
        rc = trainer.wait(timeout=240)
        log = (tmp_path / "trainer1.log").read_text()
        assert rc == 0, log[-3000:]
        assert "done: iterations 1-2 of 2" in log and "\nevaluation after iteration 2:\n" in log   # the summary
        lines = [json.loads(l) for l in (tmp_path / "compose" / "metrics.jsonl").read_text().splitlines()]
        assert [m["iteration"] for m in lines] == [1, 2] and "exploitability" in lines[-1]
        mon = BatcherClient(f"tcp://127.0.0.1:{ports[5555]}", timeout_s=10)
        try:
            stats = mon.stats()
        finally:
            mon.close()
        assert stats["shm_requests"] > 0 and not stats["errors"]     # the workers' rounds went through /slots
    finally:
        stop_processes(procs)
