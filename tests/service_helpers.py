"""Fault injection for the job server's tests: SIGKILL a worker in the
middle of a job, from inside the trainer's own message handling."""
import os
import signal
from contextlib import contextmanager


@contextmanager
def kill_a_worker_when(staged):
    """While the block runs, SIGKILL the first worker whose job satisfies
    staged(job) (e.g. a chunk of it is staged) as the job server reads a
    message; yields a dict that gets the worker's "pid" and the "job" id."""
    from trainer import jobs
    original = jobs.JobServer._handle
    killed = {}

    def handle_and_kill(self, frames, by_id, done, job_config, progress):
        original(self, frames, by_id, done, job_config, progress)
        for w in self.workers.values():
            job = w["job"]
            if not killed and job is not None and job.staged and staged(job):
                killed.update(pid=w["pid"], job=job.job_id)
                os.kill(w["pid"], signal.SIGKILL)

    jobs.JobServer._handle = handle_and_kill
    try:
        yield killed
    finally:
        jobs.JobServer._handle = original
