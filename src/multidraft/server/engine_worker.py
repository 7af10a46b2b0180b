"""The model thread when the server batches (serve --max-num-seqs N > 1): jobs run inside one `multidraft.Engine`.

Same contract as `ModelWorker` (worker.py) for the service: a bounded queue of waiting jobs (429 beyond it),
`withdraw` of a waiting job, events to each job's coroutine, and a job stops when its client goes away or its
deadline passes. The difference: up to max_num_seqs generations (a request's prompts x n choices each count)
run at once, each engine step being one target forward for all of them. Stops are seen between steps (each step is
one forward, a prompt is read in chunks, so a step is short) and by the token callback; a request that runs alone
inside a step (beam, superposed, pld_plus with attention rows) is checked before every decoder layer of its
forwards (`Engine.submit(check=job.check)`), so its timeout or hang-up frees the model within one layer.
"""

from __future__ import annotations

import logging
import time

from multidraft.engine import Engine
from multidraft.server.plan import Call, PlanRun
from multidraft.server.worker import Job, JobCancelled, JobQueue, JobTimedOut


log = logging.getLogger("multidraft.server")


class _Active:
    def __init__(self, run: PlanRun):
        self.run = run
        self.calls: dict[int, Call] = {}       # engine request id -> call
        self.aborted = False


class EngineWorker(JobQueue):
    def __init__(self, lm, config, metrics, artifacts, between_steps=None, prefix_cache=None):
        super().__init__(config.max_queue)
        self.lm, self.config, self.metrics = lm, config, metrics
        self.between_steps = between_steps          # called in this thread after each step (e.g. saving stores)
        self.engine = Engine(lm, max_num_seqs=config.max_num_seqs, kv_slots=config.max_batched_tokens,
                             prefill_chunk=config.prefill_chunk, artifacts=artifacts, prefix_cache=prefix_cache)
        self._active: dict[Job, _Active] = {}
        self._owner: dict[int, Job] = {}            # engine request id -> its job (aborted jobs' ids too)
        self._start_thread("multidraft-engine-worker")

    # ----- what the service reads
    @property
    def running(self) -> int:
        """Requests (jobs) being worked on."""
        return len(self._active)

    def watch_models(self, *lms) -> list:
        """No hooks of the worker's: a forward holds many jobs, so stops are seen between steps, and the engine watches
        the layers of a request that runs alone itself (see the docstring)."""
        return []

    # ----- the loop
    def _sequences(self) -> int:
        return sum(len(active.calls) for active in self._active.values())

    def _loop(self) -> None:
        while True:
            starting = []
            with self._cond:
                while not self._waiting and not self._active and not self.engine.has_work() and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._waiting and not self._active and not self.engine.has_work():
                    return
                self._drop_expired()
                while self._waiting and self._sequences() + sum(_width(j) for j in starting) < \
                        self.config.max_num_seqs:
                    starting.append(self._waiting.popleft())
            for job in starting:
                self._start(job)
            self._check_jobs()
            if self.engine.has_work():
                try:
                    finished = self.engine.step()
                except BaseException as error:         # the worker must survive anything: fail every job
                    for job in list(self._active):
                        self._abort(job, error)
                    continue
                for request_id in finished:
                    self._collect(request_id)
                if self.between_steps is not None:
                    try:
                        self.between_steps()
                    except Exception:                  # never stop the worker; the callback logs its own errors
                        log.exception("between-steps callback failed")

    def _start(self, job: Job) -> None:
        active = None
        try:
            job.check()                              # cancelled or expired while it waited
            job.started_at = time.monotonic()
            active = _Active(PlanRun(self.lm, job.plan, job, self.config, self.metrics))
            self._active[job] = active
            for call in active.run.calls:
                request_id = self.engine.submit(call.request, on_token=active.run.on_token(call), prompt_ids=call.ids,
                                                check=job.check)
                call.started = True
                active.calls[request_id] = call
                self._owner[request_id] = job
            if not active.calls:
                del self._active[job]
                job.emit("done", active.run.outcome())
        except BaseException as error:
            if active is None:
                job.emit("error", error)
            else:
                self._abort(job, error)

    def _check_jobs(self) -> None:
        now = time.monotonic()
        for job in list(self._active):
            if job.cancelled.is_set():
                self._abort(job, JobCancelled())
            elif now > job.deadline:
                self._abort(job, JobTimedOut())

    def _collect(self, request_id: int) -> None:
        job = self._owner.pop(request_id, None)
        try:
            result = self.engine.take(request_id)
        except BaseException as error:
            if job is not None and job in self._active:
                self._abort(job, error)
            return
        active = self._active.get(job)
        if active is None:                           # its job was aborted: the result goes nowhere
            return
        call = active.calls.pop(request_id)
        try:
            active.run.finish(call, result)
        except BaseException as error:
            self._abort(job, error)
            return
        if not active.calls:
            del self._active[job]
            job.emit("done", active.run.outcome())

    def _abort(self, job: Job, error: BaseException) -> None:
        """Stop every generation of `job` and answer it with `error` (once)."""
        active = self._active.pop(job, None)
        if active is None:
            return
        for request_id in active.calls:
            self.engine.cancel(request_id)           # finishes at the next step; _collect then drops it
        if isinstance(error, (JobCancelled, JobTimedOut)):
            active.run.aborted()
        job.emit("error", error)

    @property
    def batch_size(self) -> int:
        return self.engine.metrics.batch_size

    @property
    def kv_slots_used(self) -> int:
        return self.engine.arena.slots - self.engine.arena.free_slots


def _width(job: Job) -> int:
    """About how many generations a job starts (prompts x n; greedy choices share one)."""
    plan = job.plan
    return len(plan.requests) * (1 if plan.greedy or plan.spec.outputs_option else plan.n)
