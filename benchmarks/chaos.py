"""`python -m benchmarks.chaos [--iterations N] [--rate R] [--config configs/smoke.yaml] [--set ...]`

A chaos test of the local training service (docs/reliability.md). It runs a
real local training (`python -m trainer`, its own batcher and workers) and
SIGKILLs the batcher and the workers at random moments in every phase (warm
start, traverse, train, push, self-play, evaluate, checkpoint), then
SIGKILLs the trainer itself half way (or, with --kill-trainer-in self-play,
in its self-play stage) and resumes it with --auto-resume. A fault-free run
of the same config is the reference. At the end it checks that

  - the run completed its iterations;
  - every traversal job of every phase was committed exactly once (the job
    ledger, RUN_DIR/jobs.jsonl), with as many rows as in the fault-free run;
  - every self-play wave's games were committed exactly once, and the
    stage ended;
  - the memories are the fault-free run's: no sample row lost or doubled
    (rows the trainer reported dropped belong to attempts it handed out again);
  - no batcher or worker process, shared-memory or socket directory is left,
    and the killed trainer's children did not outlive it;
  - every checkpoint loads;

and prints one summary line (kills by process and by phase, restarts, jobs
requeued, rows dropped, leftovers). Exit status 0 when every check passed.

The kills come from inside the trainer's process: `--child` runs the
trainer's own main with a listener on its phases (trainer.supervise.
Supervisor.listeners) that schedules each kill at a random moment of the
phase it lands in and records the phase the trainer was in when it fired.
A kill in the weight push fires either as the push starts or once its
request is out, while the trainer waits for the batcher's reply.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("warm start", "traverse", "train", "push", "self-play", "evaluate", "checkpoint")
KILLS = "chaos_kills.jsonl"      # in the run directory: one line per kill, and the children and directories seen

# A row's answer can depend on the batch it rode in (the last float bits), so
# targets are compared within a tolerance: an advantage target is a sum of
# answers (2026-12-02 runs: at most 3e-6 apart); a strategy target is a ratio
# of positive advantages, which a small denominator amplifies (at most 2.1e-4,
# 1 row in 50,579).
TARGET_ATOL = {"adv": 1e-4, "str": 1e-3}

# the smallest Lost Cities run that has every phase: a warm start, evaluation and a checkpoint every iteration
SMALL = ["network.hidden=[32, 32]", "train.traversals=64", "train.adv_steps=20", "train.strategy_steps=20",
         "train.batch_size=64", "train.strategy_every=1", "train.warm_start_games=8", "train.warm_start_steps=20",
         "service.workers=2", "service.machines=8", "service.groups=1",
         "service.job_size=8", "service.heartbeat_timeout_s=30", "eval.every=1", "eval.lc_games=4",
         "eval.opponents=[random]", "eval.openspiel=false", "run.checkpoint_every=1", "run.save_memories=true",
         "run.progress=false", "run.tensorboard=false", "train.time_limit_s=0",
         "train.selfplay_budget_s=6", "train.selfplay_games=16", "train.selfplay_checkpoint_s=1"]


# ---------------------------------------------------------------------------
# inside the trainer's process

class ChaosMonkey:
    """A Supervisor listener: at each phase entry, with probability `rate`,
    SIGKILL the batcher or a worker at a random moment of the phase (the
    phase's last observed length bounds the delay). Each kill is a line of
    RUN_DIR/chaos_kills.jsonl naming the process and the phase it fired in."""

    def __init__(self, run_dir, rate, seed, aim=()):
        self.rng = random.Random(seed)
        self.rate = rate
        self.aim = set(aim)          # (process, phase) pairs killed as the phase first starts
        self.path = Path(run_dir) / KILLS
        self.lengths = {}            # phase -> last length in seconds
        self.entered = None          # (phase, time) of the current phase
        self.lock = threading.Lock()
        self.seen = set()            # child pids noted
        self.killed = set()          # child pids killed

    def __call__(self, sup, phase):
        now = time.monotonic()
        if self.entered is not None:
            self.lengths[self.entered[0]] = now - self.entered[1]
        self.entered = (phase, now)
        self._note_children(sup)
        for target in ("batcher", "worker"):
            if (target, phase) in self.aim:
                self.aim.discard((target, phase))
                if (target, phase) == ("batcher", "push"):
                    self._kill_when_waiting(sup)
                elif phase == "traverse":
                    # the traversal's own loop restarts a child killed before: never block it
                    timer = threading.Timer(0.2, self._kill, (sup, target, True))
                    timer.daemon = True
                    timer.start()
                else:
                    self._kill(sup, target, True)
        if phase == "self-play":
            self._kills_in_stage(sup)
            return
        if self.rng.random() >= self.rate:
            return
        target = "batcher" if phase == "push" or self.rng.random() < 0.5 else "worker"
        if phase == "push" and self.rng.random() < 0.5:
            self._kill_when_waiting(sup)
            return
        delay = self.rng.uniform(0.0, min(self.lengths.get(phase, 0.05), 30.0))
        timer = threading.Timer(delay, self._kill, (sup, target))
        timer.daemon = True             # a kill still pending when the trainer exits is dropped
        timer.start()

    def _kills_in_stage(self, sup):
        """The self-play stage is one long phase: about one kill per 2 s of
        its budget at rate 1 (rate x budget / 2 in all), each of the batcher
        or a worker at a random moment of the stage, mid-wave or mid-update."""
        budget = sup.trainer.cfg.train.selfplay_budget_s
        n = int(self.rate * budget / 2.0 + self.rng.random())
        for _ in range(n):
            target = "batcher" if self.rng.random() < 0.5 else "worker"
            timer = threading.Timer(self.rng.uniform(0.0, budget), self._kill, (sup, target))
            timer.daemon = True
            timer.start()

    def _kill_when_waiting(self, sup):
        """Kill the batcher once the push's request is out and the trainer waits for the reply."""
        client = sup.client
        hook = client.on_wait

        def once():
            client.on_wait = hook
            self._kill(sup, "batcher", True, waiting=True)
            hook()
        client.on_wait = once

    def _kill(self, sup, target, wait=False, waiting=False):
        """SIGKILL the batcher or a random worker; with `wait`, one killed
        before and not restarted yet is waited for (20 s at most), and the
        one killed now until it has exited (5 s at most)."""
        from trainer.supervise import child_exited
        svc = sup.services
        give_up = time.monotonic() + (20.0 if wait else 0.0)
        with self.lock:
            while True:
                if sup._stop.is_set():
                    return
                child = svc.batcher if target == "batcher" else self.rng.choice(svc.workers)
                proc, phase = child.proc, sup.phase
                # a process SIGKILLed a moment ago may not have exited yet: it is not killed twice
                if proc.pid not in self.killed and not child_exited(proc):
                    break
                if time.monotonic() > give_up:
                    return              # dead already, not restarted yet
                time.sleep(0.05)
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.killed.add(proc.pid)
            if wait:
                # a kill aimed at a phase lands in it: the process has exited (a zombie
                # at least) before the phase can end, however short the phase is
                exited_by = time.monotonic() + 5.0
                while not child_exited(proc) and time.monotonic() < exited_by:
                    time.sleep(0.002)
            self._write({"kill": target, "pid": proc.pid, "phase": phase, "iteration": sup.iteration,
                         "trainer": os.getpid(), **({"waiting": True} if waiting else {})})

    def _note_children(self, sup):
        svc = sup.services
        dirs = [d for d in (svc.shm_dir, _socket_dir(svc.batcher_endpoint)) if d]
        pids = [c.proc.pid for c in ([svc.batcher] if svc.batcher else []) + svc.workers if c.proc is not None]
        new = [p for p in pids if p not in self.seen]
        if new or not self.seen:
            self.seen.update(pids)
            with self.lock:
                self._write({"children": new, "dirs": dirs})

    def _write(self, line):
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def _socket_dir(endpoint):
    return str(Path(endpoint[len("ipc://"):]).parent) if endpoint.startswith("ipc://") else ""


def parse_aim(text):
    """"batcher:push,worker:train" -> {("batcher", "push"), ("worker", "train")}; "all": every pair."""
    if text == "all":
        return {(t, ph) for t in ("batcher", "worker") for ph in PHASES}
    out = set()
    for item in filter(None, text.split(",")):
        target, _, phase = item.partition(":")
        if target not in ("batcher", "worker") or phase not in PHASES:
            raise ValueError(f"--aim: {item!r} is not PROCESS:PHASE (batcher or worker; {', '.join(PHASES)})")
        out.add((target, phase))
    return out


def child_main(argv):
    """`--child RATE SEED AIM -- TRAINER ARGS`: the trainer's main with a ChaosMonkey."""
    from trainer.__main__ import main
    from trainer.supervise import Supervisor
    rate, seed, aim, rest = float(argv[0]), int(argv[1]), parse_aim(argv[2]), argv[4:]
    run_dir = rest[rest.index("--run-dir") + 1]
    Supervisor.listeners.append(ChaosMonkey(run_dir, rate, seed, aim))
    return main(rest)


# ---------------------------------------------------------------------------
# the driver

def _children_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                out.append(int(entry))
    return out


def _service_alive(pid):
    """Whether `pid` is a running batcher or traverser process (not a reused pid, not a zombie)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    state = state[state.rindex(b")") + 2:].split()[0]
    return state != b"Z" and any(c in (b"batcher", b"traverser") for c in cmd)


def _trainer(run_dir, config, sets, log_path, rate=None, seed=0, aim=""):
    args = ["--config", str(config), "--run-dir", str(run_dir), "--auto-resume"] + \
           [a for s in sets for a in ("--set", s)]
    cmd = [sys.executable, "-m", "trainer", *args] if rate is None else \
        [sys.executable, "-m", "benchmarks.chaos", "--child", str(rate), str(seed), aim, "--", *args]
    log = open(log_path, "a")
    try:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    finally:
        log.close()


def _caught_up(run_dir, trainer_log):
    """Whether the trainer has logged a restart for every kill so far."""
    try:
        kills = sum('"kill"' in line for line in (run_dir / KILLS).read_text().splitlines())
    except FileNotFoundError:
        kills = 0
    return len(re.findall(r"^restart: ", trainer_log.read_text(errors="replace"), re.M)) >= kills


def _aims_left(run_dir, aim, trainer_pid):
    """The aimed PROCESS:PHASE pairs that trainer `trainer_pid` killed none
    in (phases it never reached, such as a self-play stage after it was
    killed): the resumed trainer takes them."""
    landed = set()
    if (run_dir / KILLS).exists():
        for line in (run_dir / KILLS).read_text().splitlines():
            item = json.loads(line)
            if item.get("trainer") == trainer_pid and "kill" in item:
                landed.add((item["kill"], item["phase"]))
    return ",".join(f"{t}:{ph}" for t, ph in sorted(parse_aim(aim) - landed)) if aim else ""


def _latest_iteration(run_dir):
    from trainer import checkpoint as ck
    latest = ck.latest_checkpoint(run_dir)
    return int(latest.stem.split("_")[1]) if latest is not None else 0


def _in_stage(run_dir):
    """Whether the run's latest checkpoint was taken in its self-play stage."""
    from trainer import checkpoint as ck
    latest = ck.latest_checkpoint(run_dir)
    try:
        state = ck.load_checkpoint(latest).get("selfplay") if latest is not None else None
    except Exception:           # noqa: BLE001 - being written: not yet
        return False
    return state is not None and not state.get("done")


def run_chaos(out_dir, iterations, rate, seed, config, sets, aim="", reference=True, kill_trainer=True,
              timeout_s=3600, log=print, kill_trainer_in="cfr"):
    """The fault-free reference run (unless `reference` is off), the chaos run
    (its trainer killed and resumed once unless `kill_trainer` is off: half
    way through CFR, or with kill_trainer_in "self-play" once its self-play
    stage has checkpointed), and the checks. `aim`: kills at the first start
    of phases (parse_aim), in the first trainer process only. Returns
    (summary line, failures, details)."""
    out_dir = Path(out_dir)
    sets = list(sets) + [f"train.iterations={iterations}", "service.max_restarts=100000"]
    ref_dir, run_dir = out_dir / "reference", out_dir / "chaos"
    parse_aim(aim)
    failures = []
    deadline = time.monotonic() + timeout_s

    def wait(proc, what):
        try:
            return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            failures.append(f"{what} did not finish in {timeout_s:.0f} s")
            return None

    if reference:
        t0 = time.monotonic()
        rc = wait(_trainer(ref_dir, config, sets, out_dir / "reference.log"), "the fault-free run")
        if rc != 0:
            failures.append(f"the fault-free run failed (exit {rc}); see {out_dir / 'reference.log'}")
            return "chaos: no reference run", failures, {}
        log(f"fault-free run: {time.monotonic() - t0:.0f} s")

    t0 = time.monotonic()
    trainer_log = out_dir / "chaos.log"
    proc = _trainer(run_dir, config, sets, trainer_log, rate=rate, seed=seed, aim=aim)
    killed_trainers = []
    if kill_trainer:
        rng = random.Random(seed + 1)
        target = max(1, iterations // 2)
        if kill_trainer_in == "self-play":
            while proc.poll() is None and not _in_stage(run_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
        while proc.poll() is None and _latest_iteration(run_dir) < target and time.monotonic() < deadline:
            time.sleep(0.1)
        # its children back up first (10 s at most), so that every phase's kill shows its restart
        settle = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < settle and not _caught_up(run_dir, trainer_log):
            time.sleep(0.1)
        if proc.poll() is None:
            time.sleep(rng.uniform(0.0, 2.0))
            children = _children_of(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            killed_trainers.append(proc.pid)
            with open(trainer_log, "a") as f:
                f.write(f"chaos: trainer pid {proc.pid} killed with SIGKILL after checkpoint "
                        f"{_latest_iteration(run_dir)}{' in its self-play stage' if _in_stage(run_dir) else ''}; "
                        f"resuming\n")
            gone_by = time.monotonic() + 15
            while time.monotonic() < gone_by and any(_service_alive(c) for c in children):
                time.sleep(0.1)
            orphans = [c for c in children if _service_alive(c)]
            if orphans:
                failures.append(f"children {orphans} outlived the killed trainer")
            proc = _trainer(run_dir, config, sets, trainer_log, rate=rate, seed=seed + 2,
                            aim=_aims_left(run_dir, aim, proc.pid))
    rc = wait(proc, "the chaos run")
    if rc != 0:
        failures.append(f"the chaos run failed (exit {rc}); see {trainer_log}")
    summary, details = check(ref_dir if reference else None, run_dir, trainer_log, iterations, failures,
                             killed_trainers, time.monotonic() - t0)
    return summary, failures, details


def check(ref_dir, run_dir, trainer_log, iterations, failures, killed_trainers=(), seconds=0.0):
    """The checks of a finished chaos run, against its fault-free reference
    where there is one (ref_dir None: against the config and the log);
    appends to `failures`, returns (summary line, details)."""
    import numpy as np

    from trainer import checkpoint as ck
    from trainer.jobs import effective_ledger
    kills, children, dirs = [], set(), set()
    if (run_dir / KILLS).exists():
        for line in (run_dir / KILLS).read_text().splitlines():
            item = json.loads(line)
            if "kill" in item:
                kills.append(item)
            else:
                children.update(item["children"])
                dirs.update(item["dirs"])
    text = trainer_log.read_text(errors="replace")
    restarted = {int(pid): phase for pid, phase in
                 re.findall(r"^restart: \S+ \(pid (\d+)\) exited with code \S+ in phase ([a-z -]+?)(?: of|;)", text, re.M)}
    requeues = [int(n) for n in re.findall(r"handed out again \(.*; (\d+) partial sample rows dropped\)", text)]

    # the run completed its iterations
    done = _latest_iteration(run_dir)
    if done != iterations:
        failures.append(f"the run's latest checkpoint is iteration {done}, not {iterations}")
    # every kill was restarted, unless it came as a trainer process ended; nothing died unkilled
    unrestarted = [k for k in kills if k["pid"] not in restarted]
    late = [k for k in unrestarted if not (k.get("trainer") in killed_trainers or k["iteration"] == iterations)]
    if late:
        failures.append(f"killed and never restarted: {late}")
    unkilled = sorted(set(restarted) - {k["pid"] for k in kills})
    if unkilled:
        failures.append(f"processes {unkilled} died without being killed")
    # the ledger: every traversal id of every phase once (and each job's rows as in the fault-free run)
    ledger = effective_ledger(run_dir / "jobs.jsonl")
    traversals = ck.load_checkpoint(run_dir)["config"]["train"]["traversals"] if done else 0
    for t in range(1, iterations + 1):
        for p in (0, 1):
            ids = sorted(i for x in ledger.get((t, p), []) for i in range(x["first"], x["first"] + x["n"]))
            if ids != list(range(p * traversals, (p + 1) * traversals)):
                failures.append(f"iteration {t} player {p}: traversal ids not each committed exactly once")
    stage = _check_selfplay(run_dir, done, failures)
    if ref_dir is not None:
        reference = effective_ledger(ref_dir / "jobs.jsonl")
        for key, lines in sorted(reference.items()):
            if sorted((x["job"], x["adv"], x["strat"]) for x in ledger.get(key, [])) != \
                    sorted((x["job"], x["adv"], x["strat"]) for x in lines):
                failures.append(f"iteration {key[0]} player {key[1]}: jobs or their rows differ from the "
                                f"fault-free run's")
    if done == iterations:
        c = ck.load_checkpoint(run_dir)
        with np.load(Path(c["path"]).parent / c["memories"]) as z:
            mem = {k: z[k] for k in z.files}
        # the memories saw the committed rows and the warm start's, no more, no fewer
        warm = sum(int(n) for n in re.findall(r"^warm start: (\d+) decisions", text, re.M)[:1])
        adv = sum(x["adv"] for lines in ledger.values() for x in lines)
        strat = sum(x["strat"] for lines in ledger.values() for x in lines)
        seen = (int(mem["adv0.seen"][0]) + int(mem["adv1.seen"][0]), int(mem["strategy.seen"][0]))
        if seen != (warm + adv, warm + strat):
            failures.append(f"the memories saw {seen} rows, the ledger and warm start hold {(warm + adv, warm + strat)}")
        if ref_dir is not None:
            r = ck.load_checkpoint(ref_dir)
            with np.load(Path(r["path"]).parent / r["memories"]) as z:
                for key in z.files:
                    if key not in mem or mem[key].shape != z[key].shape:
                        failures.append(f"memory array {key} differs from the fault-free run's")
                    elif "target" not in key:
                        if not np.array_equal(mem[key], z[key]):
                            failures.append(f"memory array {key} differs from the fault-free run's")
                    elif not np.allclose(mem[key], z[key], rtol=0, atol=TARGET_ATOL[key.split(".")[0][:3]]):
                        failures.append(f"memory array {key} differs from the fault-free run's by "
                                        f"{np.abs(mem[key] - z[key]).max():.3g}")
    # every checkpoint loads
    loaded = 0
    for path in sorted(ck.checkpoint_dir(run_dir).glob("iter_*.pt")):
        try:
            c = ck.load_checkpoint(path)
            if c.get("memories"):
                with np.load(path.parent / c["memories"]) as z:
                    [z[k] for k in z.files]
            loaded += 1
        except Exception as e:      # noqa: BLE001 - reported as a failed check
            failures.append(f"{path} does not load: {e}")
    leftovers = [f"process {p}" for p in sorted(children) if _service_alive(p)]
    leftovers += [f"directory {d}" for d in sorted(dirs) if os.path.exists(d)]
    leftovers += [f"temporary file {p}" for p in ck.checkpoint_dir(run_dir).glob("*.tmp")]
    if leftovers:
        failures.append("left behind: " + ", ".join(leftovers))
    by_proc = Counter(k["kill"] for k in kills)
    by_phase = Counter(k["phase"] for k in kills)
    phases = ", ".join(f"{ph} {by_phase[ph]}" for ph in PHASES + tuple(sorted(set(by_phase) - set(PHASES))))
    exact = not any("exactly once" in f or "jobs or their rows" in f for f in failures)
    same = not any("memory array" in f or "the memories saw" in f for f in failures)
    summary = (f"chaos: {len(kills)} kills (batcher {by_proc['batcher']}, worker {by_proc['worker']}; {phases}), "
               f"{len(killed_trainers)} trainer kill + resume, {len(restarted)} restarts, {len(requeues)} jobs "
               f"requeued, {sum(requeues)} rows dropped; {done}/{iterations} iterations, "
               f"{2 * iterations}x{traversals} traversals {'exactly once' if exact else 'NOT exactly once'}"
               f"{', memories' + (' equal to' if same else ' NOT equal to') + ' the fault-free run' if ref_dir is not None else ''}, "
               f"{stage}, "
               f"{loaded} checkpoints load; leftovers {len(leftovers)}; {seconds:.0f} s; "
               + ("all checks passed" if not failures else f"{len(failures)} checks FAILED"))
    return summary, {"kills": kills, "restarted": restarted, "requeues": requeues, "leftovers": leftovers,
                     "by_phase": by_phase, "loaded": loaded}


def _check_selfplay(run_dir, done, failures):
    """The self-play stage's ledger: waves 0..W-1, each wave's games once,
    and the final checkpoint says the stage ended. Returns its words for the summary."""
    from trainer import checkpoint as ck
    from trainer.jobs import selfplay_ledger
    if not done or not ck.load_checkpoint(run_dir)["config"]["train"]["selfplay_budget_s"]:
        return "no self-play stage"
    games = ck.load_checkpoint(run_dir)["config"]["train"]["selfplay_games"]
    waves = selfplay_ledger(run_dir / "jobs.jsonl")
    if sorted(waves) != list(range(len(waves))) or not waves:
        failures.append(f"self-play waves {sorted(waves)} are not 0..{len(waves) - 1}")
    for w, lines in sorted(waves.items()):
        if sorted(g for x in lines for g in range(x["first"], x["first"] + x["n"])) != list(range(games)):
            failures.append(f"self-play wave {w}: games not each committed exactly once")
    if ck.load_checkpoint(run_dir).get("selfplay") != {"done": True}:
        failures.append("the final checkpoint does not say the self-play stage ended")
    return f"{len(waves)} self-play waves x {games} games " + (
        "exactly once" if not any("self-play wave" in f for f in failures) else "NOT exactly once")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rate", type=float, default=0.7, help="chance of a kill at each phase entry")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default=str(ROOT / "configs" / "smoke.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="more overrides, after the small run's (SMALL)")
    ap.add_argument("--dir", default=None, help="where the runs go (default: a fresh temporary directory)")
    ap.add_argument("--aim", default="all", help="PROCESS:PHASE,... killed as each phase first starts "
                                                  "(all: both processes in every phase; '' none)")
    ap.add_argument("--no-reference", action="store_true", help="skip the fault-free run (and its comparisons)")
    ap.add_argument("--no-trainer-kill", action="store_true")
    ap.add_argument("--kill-trainer-in", choices=("cfr", "self-play"), default="cfr",
                    help="where the trainer is killed: half way through CFR, or in the self-play stage")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args(argv)
    if args.iterations < 1 or not 0.0 <= args.rate <= 1.0:
        ap.error("--iterations must be >= 1 and --rate in [0, 1]")
    out = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        parse_aim(args.aim)
    except ValueError as e:
        ap.error(str(e))
    summary, failures, _ = run_chaos(out, args.iterations, args.rate, args.seed, args.config, SMALL + args.set,
                                     aim=args.aim, reference=not args.no_reference,
                                     kill_trainer=not args.no_trainer_kill, timeout_s=args.timeout,
                                     kill_trainer_in=args.kill_trainer_in)
    for f in failures:
        print(f"FAILED: {f}")
    print(f"runs in {out}")
    print(summary)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
