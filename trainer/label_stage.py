"""The prior's labels on the service: the workers play and label the deals,
the trainer counts each game once.

    stage = LabelStage(server, job_config, supervise=sup_check, ledger=ledger, workers=2, log=print)
    adv, strat = heuristic_rows(game, games, seed, advantage, worlds=64, stage=stage, ...)

heuristic_rows (trainer/warmstart.py) calls `play` with the deals to label.
They are cut into label jobs (kind "label", docs/protocol.md): a few deals
each (GAMES_PER_JOB under a budget, else up to 25 and one job per worker at
least, made as they are handed out), the teacher's settings, and for an expert-iteration round the
agent's net spec and weights (raw float32 arrays, "blueprint/NAME").
Any worker takes them, local or remote, and joins whenever it says hello.
A worker plays a job's deals in order with agents.labels and streams each
few whole games' rows back ("rows" and "values" chunks); the job server
(trainer/jobs.py) commits a job's rows when its `done` comes and hands the
job of a dead or silent worker out again, its partial rows dropped. So a
game is labelled whole by one worker and counted once, and the rows,
ordered by deal seed, are those of an in-process labelling of the same
deals whatever the workers.

Under a budget every job carries the deadline: a worker starts no game
after it and drops the one in play, reporting the games it finished (a
prefix of the job's deals); the trainer hands no job out after it. The
games kept are the whole games finished in time. Each committed job is a
"label" line of the job ledger (RUN/jobs.jsonl; trainer.jobs.label_ledger
and counted_deals read them back).
"""
import time

import numpy as np

from agents.labels import ROW_COLUMNS, VALUE_COLUMNS, parts_of_chunks
from trainer.jobs import Job

GAMES_PER_JOB = 4           # deals a label job holds under a budget: the workers stay busy to the deadline
MAX_GAMES_PER_JOB = 25      # without one


class LabelStage:
    """Label jobs on the workers of `server` (trainer.jobs.JobServer).
    job_config: the dict every job carries (trainer.jobs.phase_config: the
    game). supervise(): called about every 0.2 s while the jobs run
    (restarts dead local workers; the trainer's Supervisor.check without a
    weight push). workers: the local workers (the live ones count too)."""

    def __init__(self, server, job_config, supervise=None, ledger=None, workers=1, log=None):
        self.server = server
        self.job_config = job_config
        self.supervise = supervise
        self.ledger = ledger
        self.workers = int(workers)
        self.log = log

    def play(self, game, seeds, worlds, explore, deadline, progress, blueprint, topk, round):
        """heuristic_rows' play: the deals `seeds` labelled on the workers.
        Returns ([part], the deals of the games kept, ascending)."""
        T, A = game.information_state_tensor_size(), game.num_distinct_actions()
        workers = max(1, self.workers, self.server.live_workers())
        size = max(1, min(MAX_GAMES_PER_JOB if deadline is None else GAMES_PER_JOB, len(seeds) // workers))
        fields, arrays = _job_fields(worlds, explore, deadline, blueprint, topk, round)
        starts = iter(range(0, len(seeds), size))
        made = [0]

        def more(n):
            """Up to n more jobs, in deal order."""
            jobs = []
            if n <= 0:
                return jobs
            for i in starts:
                deals = np.asarray(seeds[i:i + size], dtype=np.int64)
                jobs.append(Job(made[0], ids=deals, kind="label", fields=fields, arrays={"seeds": deals, **arrays},
                                kinds=("rows", "values"), check=_chunk_check(deals, T, A)))
                made[0] += 1
                if len(jobs) >= n:
                    break
            return jobs

        rows, values, kept = [], [], []

        def commit(job, row_chunks, value_chunks):
            deals = [int(d) for d in job.ids[:job.finished]]
            got = {int(d) for c in row_chunks for d in np.unique(c["game"])}
            if got != set(deals):
                raise RuntimeError(f"label job {job.job_id}: the worker reported {job.finished} games finished "
                                   f"but sent rows of deals {sorted(got)}")
            rows.extend(row_chunks)
            values.extend(value_chunks)
            kept.extend(deals)
            if self.ledger is not None:
                self.ledger.commit_label(job, round, sum(len(c["game"]) for c in row_chunks),
                                         sum(len(c["game"]) for c in value_chunks))

        if self.log is not None:
            self.log(f"labels: {len(seeds)} deals in {-(-len(seeds) // size)} jobs of up to {size} for the workers "
                     f"at {self.server.endpoint} ({self.workers} local)")
        self._run_jobs(more, commit, workers, deadline, progress)
        return [parts_of_chunks(rows, values, T, A)], sorted(kept)

    def _run_jobs(self, more, commit, workers, deadline, progress):
        """Run the label phase until every job handed out is committed.
        more(n): up to n more jobs; commit: the job server's commit."""
        # jobs are made as they are handed out (a budget's cap may be far more deals than it lets through):
        # one waiting for each worker the server knows, beside those under way
        self.server.start_phase(more(2 * workers), self.job_config, commit, log=self.log)
        closed = False
        while True:
            complete = self.server.pump(200, supervise=self.supervise, progress=progress)
            if not closed and deadline is not None and time.time() >= deadline:
                self.server.close_phase()       # no job starts after the deadline; those under way end at it
                closed = True
            if not closed:
                jobs = more(max(workers, len(self.server.workers)) - self.server.pending_jobs())
                if jobs:
                    self.server.add_jobs(jobs)
                    complete = False
            if complete:
                return


def _job_fields(worlds, explore, deadline, blueprint, topk, round):
    """(fields, arrays) every label job of a labelling carries: the teacher's
    settings and the deadline, and for an expert-iteration round the agent's
    net spec and its weights as raw float32 arrays ("blueprint/NAME")."""
    fields = {"round": int(round), "worlds": int(worlds), "explore": float(explore), "topk": int(topk),
              "deadline": deadline}
    arrays = {}
    if blueprint is not None:
        fields["net_spec"] = dict(blueprint["net_spec"])
        arrays = {f"blueprint/{n}": np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v,
                                               dtype=np.float32) for n, v in blueprint["state"].items()}
    return fields, arrays


def _chunk_check(deals, width, actions):
    """A label job's check of a chunk (trainer.jobs.Job.check): its columns,
    their dtypes and widths, and deals of the job only."""
    allowed = set(int(d) for d in deals)
    dtypes = {"info": "uint8", "mask": "uint8", "act": "int64", "outcome": "float32", "game": "int64",
              "player": "int8", "seq": "int32", "points": "float32", "kind": "int8"}

    def check(kind, arrays):
        columns = ROW_COLUMNS if kind == "rows" else VALUE_COLUMNS
        if set(arrays) != set(columns):
            raise ValueError(f"columns {sorted(arrays)}, expected {sorted(columns)}")
        for name in columns:
            a = arrays[name]
            if str(a.dtype) != dtypes[name]:
                raise ValueError(f"column {name!r} is {a.dtype}, expected {dtypes[name]}")
            want = {"info": width, "mask": actions}.get(name)
            if a.ndim != (1 if want is None else 2) or (want is not None and a.shape[1] != want):
                raise ValueError(f"column {name!r} has shape {list(a.shape)}, expected "
                                 f"{'[n]' if want is None else f'[n, {want}]'}")
        stray = set(np.unique(arrays["game"]).tolist()) - allowed
        if stray:
            raise ValueError(f"rows of deals {sorted(stray)[:3]} that are not the job's")
        if not np.isin(arrays["player"], (0, 1)).all():
            raise ValueError("a player other than 0 and 1")

    return check


def label_stage(cfg, server, sup, ledger=None, log=None):
    """The LabelStage of a training run of config `cfg`: its local workers
    (service.workers or service.label_workers, the more), restarted by its
    Supervisor `sup` when they die (without a weight push: the batcher
    gets the nets once the warm start has trained them)."""
    from trainer.jobs import phase_config
    return LabelStage(server, phase_config(cfg), supervise=lambda: sup.check(push=False), ledger=ledger,
                      workers=max(cfg.service.workers, cfg.service.label_workers), log=log)
