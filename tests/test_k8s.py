"""The Kubernetes manifests (deploy/k8s), without a cluster: every manifest
validates against the Kubernetes schemas of a pinned version, the
kustomization lists every manifest, each container's command is accepted by
the project's own argument parsers and config loader, ports and names agree
across args, Services, probes and NetworkPolicies, the Secret's items give
each pod a key directory its CURVE sockets accept, and the pods' commands,
run as local processes, train and resume a run the way a restarted trainer
pod does."""
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import zmq
import kubernetes_validate

from trainer import checkpoint as ck
from batcher_helpers import stop_processes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
K8S_VERSION = "1.31.0"          # the Kubernetes API the manifests are checked against
IMAGE = "deepcfr-lostcities"
SECRET = "deepcfr-curve-keys"


def manifest_files():
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def load_resources():
    """{(kind, name): resource} over every manifest file."""
    out = {}
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                key = (doc["kind"], doc["metadata"]["name"])
                assert key not in out, f"{path.name}: {key} defined twice"
                out[key] = doc
    return out


RES = load_resources()
BATCHER = RES["Deployment", "deepcfr-batcher"]
TRAINER = RES["Job", "deepcfr-trainer"]
WORKER = RES["Deployment", "deepcfr-worker"]
WORKLOADS = {"batcher": BATCHER, "trainer": TRAINER, "worker": WORKER}


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def container(workload, name):
    spec = pod_spec(workload)
    found = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"no single container {name!r}"
    return found[0]


def argv(c):
    return [str(a) for a in c.get("command", []) + c.get("args", [])]


def option(args, flag):
    assert args.count(flag) == 1, f"{flag} should appear once in {args}"
    return args[args.index(flag) + 1]


def sets(args):
    """The trainer's --set overrides as {key: value}."""
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")


def endpoint_port(endpoint, host):
    assert endpoint.startswith(f"tcp://{host}:"), f"{endpoint!r} is not on tcp://{host}:PORT"
    return int(endpoint.rsplit(":", 1)[1])


def resolve_port(c, port):
    """A probe's or Service's port (number or containerPort name) as a number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    assert port in named, f"port name {port!r} is not a containerPort of {c['name']}"
    return named[port]


def selects(selector, labels):
    """Kubernetes label-selector semantics (matchLabels and In/NotIn/Exists)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value = labels.get(e["key"])
        ok = {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
              "Exists": e["key"] in labels, "DoesNotExist": e["key"] not in labels}[e["operator"]]
        if not ok:
            return False
    return True


def pod_labels(workload):
    return workload["spec"]["template"]["metadata"]["labels"]


# ---- schemas and kustomization

@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates_against_the_pinned_kubernetes_schema(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path.name} holds no resource"
    for doc in docs:
        try:
            # strict: an unknown or misspelt field is an error, not ignored
            assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == "1.31"
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{path.name}: {'.'.join(map(str, e.path))}: {e.message}")


def test_schema_validation_rejects_a_broken_manifest():
    doc = yaml.safe_load((K8S / "worker-deployment.yaml").read_text())
    doc["spec"]["replicas"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    doc = yaml.safe_load((K8S / "worker-deployment.yaml").read_text())
    doc["spec"]["template"]["spec"]["containers"][0]["argz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    listed = k["resources"]
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(listed) == {p.name for p in manifest_files()}
    assert k["namespace"] == "deepcfr"
    # every container runs the one image, and the kustomization says where it comes from
    assert [i["name"] for i in k["images"]] == [IMAGE]
    for workload in WORKLOADS.values():
        spec = pod_spec(workload)
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert c["image"].split(":")[0] == IMAGE, c["name"]


def test_kubectl_kustomize_builds_every_resource():
    exe = shutil.which("kubectl") or shutil.which("kustomize")
    if exe is None:
        pytest.skip("neither kubectl nor kustomize is installed (test_kustomization_lists_every_manifest stands in)")
    cmd = [exe, "kustomize", str(K8S)] if Path(exe).name == "kubectl" else [exe, "build", str(K8S)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    built = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert {(d["kind"], d["metadata"]["name"]) for d in built} == set(RES)
    assert all(d["metadata"]["namespace"] == "deepcfr" for d in built)


# ---- commands against the project's own parsers

def _parsers():
    from batcher.__main__ import build_parser as batcher_parser
    from batcher.ping import build_parser as ping_parser
    from trainer.__main__ import build_parser as trainer_parser
    from traverser.__main__ import build_parser as traverser_parser
    return {"batcher": batcher_parser, "batcher.ping": ping_parser, "trainer": trainer_parser,
            "traverser": traverser_parser}


def parse_command(cmd):
    """Parse a container or probe command with the parser of its `python -m MODULE`."""
    assert cmd[:2] == ["python", "-m"], f"not a `python -m` command: {cmd}"
    parsers = _parsers()
    assert cmd[2] in parsers, f"unknown module {cmd[2]!r}"
    try:
        return cmd[2], parsers[cmd[2]]().parse_args(cmd[3:])
    except SystemExit:
        raise AssertionError(f"python -m {cmd[2]} rejects its arguments: {cmd[3:]}") from None


def all_commands():
    """(where, argv) of every container and exec probe."""
    out = []
    for name, workload in WORKLOADS.items():
        spec = pod_spec(workload)
        for c in spec.get("initContainers", []) + spec["containers"]:
            out.append((f"{name}/{c['name']}", argv(c)))
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if "exec" in c.get(probe, {}):
                    out.append((f"{name}/{c['name']}/{probe}", [str(a) for a in c[probe]["exec"]["command"]]))
    return out


@pytest.mark.parametrize("where,cmd", all_commands(), ids=[w for w, _ in all_commands()])
def test_container_command_is_accepted_by_the_project_parser(where, cmd):
    module, args = parse_command(cmd)
    expected = {"batcher/batcher": "batcher", "trainer/trainer": "trainer", "worker/worker": "traverser"}
    if where in expected:
        assert module == expected[where]
    else:       # init containers and probes ping the batcher
        assert module == "batcher.ping", where
        assert args.curve_keys


def test_parse_command_rejects_a_bad_flag():
    with pytest.raises(AssertionError, match="rejects its arguments"):
        parse_command(["python", "-m", "traverser", "--batcher", "tcp://x:1", "--thredas", "2"])
    with pytest.raises(AssertionError, match="rejects its arguments"):
        parse_command(["python", "-m", "trainer", "--auto-resume", "--sett", "a.b=1"])


def test_trainer_overrides_load_with_the_config_they_name():
    from trainer.config import load_config
    args = argv(container(TRAINER, "trainer"))
    _, parsed = parse_command(args)
    assert parsed.auto_resume and parsed.run_dir and parsed.resume is None
    cfg = load_config(ROOT / parsed.config, parsed.set)       # the image's WORKDIR is the repo root
    assert cfg.service.workers == 0 and cfg.service.curve_keys and not cfg.run.progress


# ---- ports, names, selectors, keys, volumes

def test_ports_agree_across_args_services_probes_and_policies():
    batcher, trainer, worker = (container(BATCHER, "batcher"), container(TRAINER, "trainer"),
                                container(WORKER, "worker"))
    b_args, t_args, w_args = argv(batcher), argv(trainer), argv(worker)
    t_sets = sets(t_args)
    # each server binds all interfaces (loopback is the default outside Kubernetes)
    b_port = endpoint_port(option(b_args, "--bind"), "0.0.0.0")
    j_port = endpoint_port(t_sets["service.jobs_bind"], "0.0.0.0")
    assert resolve_port(batcher, "batcher") == b_port and resolve_port(trainer, "jobs") == j_port
    # readiness: the batcher's ping goes to its own port over loopback; the trainer's probe to its job port
    ping = [str(a) for a in batcher["readinessProbe"]["exec"]["command"]]
    assert ping[:3] == ["python", "-m", "batcher.ping"] and endpoint_port(ping[3], "127.0.0.1") == b_port
    assert resolve_port(trainer, trainer["readinessProbe"]["tcpSocket"]["port"]) == j_port
    # Services: pick the right pods, forward to the bound port
    for svc_name, workload, c, port in (("deepcfr-batcher", BATCHER, batcher, b_port),
                                        ("deepcfr-trainer", TRAINER, trainer, j_port)):
        svc = RES["Service", svc_name]
        assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(workload))
        others = [w for w in WORKLOADS.values() if w is not workload]
        assert not any(selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(w)) for w in others)
        [sp] = svc["spec"]["ports"]
        assert resolve_port(c, sp["targetPort"]) == port
    batcher_ep = f"tcp://deepcfr-batcher:{RES['Service', 'deepcfr-batcher']['spec']['ports'][0]['port']}"
    jobs_ep = f"tcp://deepcfr-trainer:{RES['Service', 'deepcfr-trainer']['spec']['ports'][0]['port']}"
    # clients reach the services by their Service DNS names
    assert t_sets["service.batcher"] == batcher_ep
    assert option(w_args, "--batcher") == batcher_ep and option(w_args, "--trainer") == jobs_ep
    for workload in (TRAINER, WORKER):
        assert argv(container(workload, "wait-for-batcher"))[3] == batcher_ep
    # NetworkPolicies: isolate each server pod, open only its port, only to the project's clients
    for pol_name, workload, port, clients in (("deepcfr-batcher", BATCHER, b_port, {"trainer", "worker"}),
                                              ("deepcfr-trainer", TRAINER, j_port, {"worker"})):
        spec = RES["NetworkPolicy", pol_name]["spec"]
        assert selects(spec["podSelector"], pod_labels(workload)) and spec["policyTypes"] == ["Ingress"]
        [rule] = spec["ingress"]
        assert [(p["protocol"], p["port"]) for p in rule["ports"]] == [("TCP", port)]
        allowed = {name for name, w in WORKLOADS.items()
                   if any(selects(f["podSelector"], pod_labels(w)) for f in rule["from"])}
        assert allowed == clients
        assert all(set(f) == {"podSelector"} for f in rule["from"])     # this namespace only
        stranger = {"app.kubernetes.io/component": "worker"}            # lacks part-of=deepcfr
        assert not any(selects(f["podSelector"], stranger) for f in rule["from"])


def test_gpu_run_volume_and_restart_policy():
    assert container(BATCHER, "batcher")["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert BATCHER["spec"]["strategy"]["type"] == "Recreate"
    trainer = container(TRAINER, "trainer")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert sets(argv(trainer))["train.device"] == "cuda" and option(argv(container(BATCHER, "batcher")),
                                                                   "--device") == "cuda"
    # the run directory sits on the claim, so a replacement pod finds the checkpoints
    pvc = RES["PersistentVolumeClaim", "deepcfr-runs"]
    runs = [v for v in pod_spec(TRAINER)["volumes"] if "persistentVolumeClaim" in v]
    assert [v["persistentVolumeClaim"]["claimName"] for v in runs] == [pvc["metadata"]["name"]]
    [mount] = [m for m in trainer["volumeMounts"] if m["name"] == runs[0]["name"]]
    run_dir = option(argv(trainer), "--run-dir")
    assert run_dir.startswith(mount["mountPath"].rstrip("/") + "/") and "--auto-resume" in argv(trainer)
    assert pod_spec(TRAINER)["restartPolicy"] == "Never" and TRAINER["spec"]["podReplacementPolicy"] == "Failed"
    # the pods run as the image's user, which owns /runs and reads the keys through fsGroup
    for workload in WORKLOADS.values():
        sc = pod_spec(workload)["securityContext"]
        assert sc["runAsUser"] == 1000 and sc["fsGroup"] == 1000 and sc["runAsNonRoot"]
    assert WORKER["spec"]["replicas"] >= 1


def key_dir_flags(workload):
    """Every CURVE key directory a pod's commands name, with the mountPath of the Secret volume."""
    spec = pod_spec(workload)
    [vol] = [v for v in spec["volumes"] if "secret" in v]
    assert vol["secret"]["secretName"] == SECRET and vol["secret"]["defaultMode"] == 0o440
    dirs = set()
    for c in spec.get("initContainers", []) + spec["containers"]:
        [mount] = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
        assert mount["readOnly"]
        args = argv(c)
        dirs.add((option(args, "--curve-keys") if "--curve-keys" in args else sets(args)["service.curve_keys"],
                  mount["mountPath"]))
        if "exec" in c.get("readinessProbe", {}):
            probe = [str(a) for a in c["readinessProbe"]["exec"]["command"]]
            dirs.add((option(probe, "--curve-keys"), mount["mountPath"]))
    return vol["secret"]["items"], dirs


def secret_volume(keys_dir, items, target):
    """What the kubelet mounts: `kubectl create secret generic --from-file=keys_dir/` takes the regular
    files at the top of keys_dir as keys; the volume's items place them."""
    secret = {p.name: p.read_bytes() for p in keys_dir.iterdir() if p.is_file()}
    for item in items:
        assert item["key"] in secret, f"Secret item {item['key']!r} is not a file of `python -m batcher.keys`"
        dest = target / item["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(secret[item["key"]])
    return target


def curve_exchange(server_dir, client_dir, timeout_ms=3000):
    """True if a CURVE client with client_dir's keys gets an answer from a server with server_dir's."""
    from batcher.keys import secure_client, secure_server
    ctx = zmq.Context()
    try:
        server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        for s in (server, client):
            s.linger = 0
        secure_server(server, server_dir)
        port = server.bind_to_random_port("tcp://127.0.0.1")
        secure_client(client, client_dir)
        client.connect(f"tcp://127.0.0.1:{port}")
        client.send(b"ping")
        if not server.poll(timeout_ms):
            return False
        ident, msg = server.recv_multipart()
        server.send_multipart([ident, b"pong"])
        return client.poll(timeout_ms) and client.recv() == b"pong"
    finally:
        from batcher import keys
        auth = keys._authenticators.pop(id(ctx), None)
        if auth is not None:
            auth.stop()
        ctx.destroy(linger=0)


def test_secret_items_give_each_pod_the_keys_its_commands_use(tmp_path):
    from batcher.keys import make_keys
    keys = make_keys(tmp_path / "keys")
    mounted = {}
    for name, workload in WORKLOADS.items():
        items, dirs = key_dir_flags(workload)
        assert {flag for flag, _ in dirs} == {mount for _, mount in dirs}, f"{name}: --curve-keys is not the mount"
        mounted[name] = secret_volume(keys, items, tmp_path / name)
    # servers: the batcher and the trainer's job endpoint; clients: everyone (the batcher's own probe too)
    for server in ("batcher", "trainer"):
        for client in ("batcher", "trainer", "worker"):
            assert curve_exchange(mounted[server], mounted[client]), f"{client} -> {server}"
    assert not (mounted["worker"] / "server.key_secret").exists()       # workers hold no server secret
    # and the check can fail: keys from another `python -m batcher.keys` are refused
    stranger = make_keys(tmp_path / "other")
    assert not curve_exchange(mounted["batcher"], stranger, timeout_ms=500)


# ---- the pods' commands as local processes: train, then a restarted trainer resumes

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pod_commands_train_and_a_restarted_trainer_resumes(tmp_path):
    from batcher.keys import make_keys
    keys = make_keys(tmp_path / "keys")
    key_dirs = {name: secret_volume(keys, key_dir_flags(w)[0], tmp_path / f"keys-{name}")
                for name, w in WORKLOADS.items()}
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(yaml.safe_dump({
        "game": {"name": "kuhn_poker"}, "traversal": {"algorithm": "external"}, "network": {"hidden": [16, 16]},
        "train": {"traversals": 40, "adv_steps": 5, "strategy_steps": 10, "batch_size": 32},
        "eval": {"every": 0}, "run": {"tensorboard": False}}))
    b_port = endpoint_port(option(argv(container(BATCHER, "batcher")), "--bind"), "0.0.0.0")
    j_port = endpoint_port(sets(argv(container(TRAINER, "trainer")))["service.jobs_bind"], "0.0.0.0")
    b_svc, j_svc = (RES["Service", n]["spec"]["ports"][0]["port"] for n in ("deepcfr-batcher", "deepcfr-trainer"))
    b_local, j_local = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    [runs_mount] = [m["mountPath"] for m in container(TRAINER, "trainer")["volumeMounts"] if m["name"] == "runs"]
    swaps = {f"tcp://0.0.0.0:{b_port}": b_local, f"tcp://127.0.0.1:{b_port}": b_local,
             f"tcp://deepcfr-batcher:{b_svc}": b_local,
             f"tcp://0.0.0.0:{j_port}": j_local, f"tcp://deepcfr-trainer:{j_svc}": j_local,
             runs_mount.rstrip("/") + "/": f"{tmp_path}/runs/"}

    def local(cmd, pod, iterations=1):
        """A pod's command on this machine: loopback ports, CPU, the tiny config, tmp run and key dirs."""
        out = []
        for i, arg in enumerate(cmd):
            for old, new in swaps.items():
                arg = arg.replace(old, new)
            if i > 0 and cmd[i - 1] == "--config":
                arg = str(tiny)
            elif i > 0 and cmd[i - 1] == "--device" or arg.startswith("train.device="):
                arg = arg.replace("cuda", "cpu")
            elif arg.startswith("train.iterations="):
                arg = f"train.iterations={iterations}"
            elif arg == "/keys" or arg.endswith("=/keys"):
                arg = arg.replace("/keys", str(key_dirs[pod]))
            out.append(arg)
        assert out[0] == "python"
        return [sys.executable] + out[1:]

    procs = []

    def start(cmd, log_name):
        log = open(tmp_path / log_name, "w")
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        return procs[-1]

    try:
        start(local(argv(container(BATCHER, "batcher")), "batcher"), "batcher.log")
        probe = local([str(a) for a in container(BATCHER, "batcher")["readinessProbe"]["exec"]["command"]],
                      "batcher")
        # the init containers' wait, with its own timeout
        wait = local(argv(container(WORKER, "wait-for-batcher")), "worker")
        wait[wait.index("--timeout") + 1] = "60"
        assert subprocess.run(wait, cwd=ROOT, capture_output=True, timeout=90).returncode == 0
        assert subprocess.run(probe, cwd=ROOT, capture_output=True, timeout=60).returncode == 0
        trainer_cmd = argv(container(TRAINER, "trainer"))
        worker_cmd = local(argv(container(WORKER, "worker")), "worker")
        run_dir = Path(local(trainer_cmd, "trainer")[trainer_cmd.index("--run-dir") + 1])
        assert run_dir.parent == tmp_path / "runs"
        for attempt, iterations in ((1, 1), (2, 2)):
            # the second pod of the Job: same command, a later iteration target
            trainer = start(local(trainer_cmd, "trainer", iterations), f"trainer{attempt}.log")
            start(worker_cmd, f"worker{attempt}.log")
            rc = trainer.wait(timeout=180)
            log = (tmp_path / f"trainer{attempt}.log").read_text()
            assert rc == 0, log[-3000:]
            assert ck.load_checkpoint(run_dir)["iteration"] == iterations
        first, second = ((tmp_path / f"trainer{i}.log").read_text() for i in (1, 2))
        assert "no checkpoint yet; starting the run" in first and "no checkpoint yet" not in second
        # resumed, not restarted: a fresh start would have logged iteration 1 again
        lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [m["iteration"] for m in lines] == [1, 2]
    finally:
        stop_processes(procs)


def test_auto_resume_argument_errors(capsys):
    from trainer.__main__ import main
    for args in (["--auto-resume"], ["--auto-resume", "--run-dir", "x", "--resume", "x"]):
        assert main(args) == 2
        assert "--auto-resume needs --run-dir and excludes --resume" in capsys.readouterr().err
