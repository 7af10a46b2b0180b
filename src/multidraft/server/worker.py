"""The one thread that owns the model, fed by a bounded queue.

Every model forward (and every tokenizer call, which is not safe to share across threads) runs here, one
job at a time, so concurrent requests never interleave inside a decode. Jobs report back to the asyncio
event loop of the request that made them; the request cancels a job by setting `cancelled` (client gone)
and the job's own deadline stops it (timeout). Both are checked between tokens via `Job.check()`, and
inside every model forward: `watch_models` hooks each decoder layer, so a timeout or a hang-up stops even a
long prefill or a wide beam step within one layer, and the model is free for the next request.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Optional

from multidraft.forward_watch import watch_layers
from multidraft.openmp_wait import release_thread_pool


class JobCancelled(BaseException):
    """The client went away; nothing is sent back. (BaseException, like asyncio.CancelledError, so that no
    `except Exception` in the decoding code can turn a stop into an error.)"""


class JobTimedOut(BaseException):
    """The job passed its deadline (queueing time included)."""


class QueueFullError(Exception):
    """The bounded queue is full: answer 429."""


class Job:
    """A unit of work for the worker: `fn(job)` runs on the worker thread; events go to `events`. `plan`: the
    checked request (server.plan.Plan) the engine worker batches; ModelWorker runs `fn` instead."""

    def __init__(self, fn: Callable[["Job"], Any], deadline: float, loop: asyncio.AbstractEventLoop,
                 plan: Any = None):
        self.fn = fn
        self.plan = plan
        self.deadline = deadline
        self.loop = loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.started_at: Optional[float] = None

    def emit(self, *event) -> None:
        """Hand an event to the request's coroutine (thread-safe; dropped once the loop is closed)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:
            pass

    def check(self) -> None:
        """Raise if the job must stop now. Called from the token callback, so a decode ends within a token."""
        if self.cancelled.is_set():
            raise JobCancelled()
        if time.monotonic() > self.deadline:
            raise JobTimedOut()


class JobQueue:
    """The bounded queue of waiting jobs a model thread takes its work from (ModelWorker here, EngineWorker in
    engine_worker.py). A waiting job whose client hung up (`withdraw`) or whose deadline passed leaves the queue at
    once, so its slot is free for the next request instead of being held until the model reaches it. Subclasses
    start their `_loop` with `_start_thread`."""

    def __init__(self, max_queue: int):
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self.max_queue = max_queue
        self._waiting: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    @property
    def alive(self) -> bool:
        """The model thread is running (a health check: a dead thread would leave every request waiting)."""
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def waiting(self) -> int:
        with self._cond:
            self._drop_expired()
            return len(self._waiting)

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._stopping:
                raise QueueFullError("the server is shutting down")
            self._drop_expired()
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError()
            self._waiting.append(job)
            self._cond.notify()

    def withdraw(self, job: Job) -> bool:
        """Take a job that is still waiting out of the queue (its client went away); False if it already started
        (it then stops at its next check) or finished."""
        with self._cond:
            try:
                self._waiting.remove(job)
            except ValueError:
                return False
        job.emit("error", JobCancelled())
        return True

    def _drop_expired(self) -> None:
        """(lock held) Waiting jobs already cancelled or past their deadline never run: answer them now."""
        now = time.monotonic()
        for job in [j for j in self._waiting if j.cancelled.is_set() or now > j.deadline]:
            self._waiting.remove(job)
            job.emit("error", JobCancelled() if job.cancelled.is_set() else JobTimedOut())

    def _start_thread(self, name: str) -> None:
        """The model thread, running `self._loop`. The forwards run on it from now on: the thread that built the
        worker (it loaded the model) lets its OpenMP workers go first (openmp_wait.py)."""
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        release_thread_pool()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)


class ModelWorker(JobQueue):
    """A daemon thread running jobs in arrival order, one at a time, from a queue of at most `max_queue` waiting
    jobs."""

    def __init__(self, max_queue: int):
        super().__init__(max_queue)
        self.running = 0
        self.current: Optional[Job] = None      # the job on the model now (read by the forward hooks)
        self._start_thread("multidraft-model-worker")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if not self._waiting:
                    return                        # stopping, and every queued job has run
                job = self._waiting.popleft()
                self.running = 1
                self.current = job
            try:
                self._run(job)
            finally:
                with self._cond:
                    self.current = None
                    self.running = 0

    def check_current(self) -> None:
        """Stop the running job if it is cancelled or late; a no-op outside jobs (or on other threads)."""
        job = self.current
        if job is not None and threading.current_thread() is self._thread:
            job.check()

    def watch_models(self, *lms) -> list:
        """Check the running job before every forward of these models and of each of their decoder layers.
        Returns the hook handles (remove() them to undo)."""
        return watch_layers(lms, self.check_current)

    @staticmethod
    def _run(job: Job) -> None:
        try:
            job.check()                          # cancelled or expired while it waited
            job.started_at = time.monotonic()
            result = job.fn(job)
        except BaseException as exc:             # report everything: the worker must survive any job
            job.emit("error", exc)
        else:
            job.emit("done", result)
