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
import queue
import threading
import time
from typing import Any, Callable, Optional


class JobCancelled(BaseException):
    """The client went away; nothing is sent back. (BaseException, like asyncio.CancelledError, so that no
    `except Exception` in the decoding code can turn a stop into an error.)"""


class JobTimedOut(BaseException):
    """The job passed its deadline (queueing time included)."""


class QueueFullError(Exception):
    """The bounded queue is full: answer 429."""


class Job:
    """A unit of work for the worker: `fn(job)` runs on the worker thread; events go to `events`."""

    def __init__(self, fn: Callable[["Job"], Any], deadline: float, loop: asyncio.AbstractEventLoop):
        self.fn = fn
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


class ModelWorker:
    """A daemon thread running jobs in arrival order from a queue of at most `max_queue` waiting jobs."""

    def __init__(self, max_queue: int):
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")   # Queue(maxsize=0) would be unbounded
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._lock = threading.Lock()
        self.running = 0
        self.current: Optional[Job] = None      # the job on the model now (read by the forward hooks)
        self._thread = threading.Thread(target=self._loop, name="multidraft-model-worker", daemon=True)
        self._stopping = False
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise QueueFullError("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError() from None

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self.running = 1
            self.current = job
            try:
                self._run(job)
            finally:
                self.current = None
                with self._lock:
                    self.running = 0

    def check_current(self) -> None:
        """Stop the running job if it is cancelled or late; a no-op outside jobs (or on other threads)."""
        job = self.current
        if job is not None and threading.current_thread() is self._thread:
            job.check()

    def watch_models(self, *lms) -> list:
        """Check the running job before every forward of these models and of each of their decoder layers.
        Returns the hook handles (remove() them to undo)."""
        handles = []
        for lm in lms:
            model = getattr(lm, "model", None)
            if model is None or not hasattr(model, "register_forward_pre_hook"):
                continue
            layers = lm._find_layers() if hasattr(lm, "_find_layers") else None   # the LM knows where its layers are
            modules = [model, *(layers or [])]
            for module in modules:
                handles.append(module.register_forward_pre_hook(lambda _module, _args: self.check_current()))
        return handles

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
