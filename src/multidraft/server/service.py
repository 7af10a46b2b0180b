"""The generation service behind the HTTP routes: one model, its worker, its metrics and what requests may name.

It owns what the routes share (the worker and its queue, the metrics, the suffix stores, the loaded artifacts) and
does the non-HTTP work of a request: check it into a `Plan`, queue it as a `Job`, wait for the job's events, cancel
it, and turn a library error into an `ApiError`. The caller's `ServerConfig` is never rewritten: the artifacts
requests may name (the operator's, with the --draft model as the default draft) are this object's own mapping.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, Optional

from multidraft.artifacts import Artifacts
from multidraft.errors import (CorruptCacheError, DataNotFoundError, InvalidOptionError, ModelNotFoundError,
                              MultidraftError, NumericalError)
from multidraft.methods import available_methods
from multidraft.prefix_cache import PrefixCache
from multidraft.server.config import ServerConfig
from multidraft.server.engine_worker import EngineWorker
from multidraft.server.metrics import Metrics
from multidraft.server.options import http_options
from multidraft.server.plan import Plan, build_plan, run_plan, suggestion_defaults
from multidraft.server.schemas import ApiError
from multidraft.server.worker import Job, JobCancelled, JobTimedOut, ModelWorker, QueueFullError

log = logging.getLogger("multidraft.server")
GRACE_SECONDS = 2.0      # how long past its deadline a coroutine waits for a worker stuck inside one forward
SAVE_EVERY_SECONDS = 60.0   # with --suffix-store-path: the most often a changed store is written during serving


class GenerationService:
    def __init__(self, lm, config: ServerConfig, draft_lm=None):
        from multidraft.suffix.registry import StoreRegistry

        self.lm, self.config, self.draft_lm = lm, config, draft_lm
        self.named: dict[str, dict[str, Any]] = {kind: dict(named) for kind, named in config.artifacts.items()}
        if draft_lm is not None:                 # the --draft model is the default one, and may be named
            self.named["draft_model"] = {draft_lm.name: draft_lm, **self.named.get("draft_model", {})}
        self.model_name = config.model_name or lm.name
        self.metrics = Metrics(self.model_name)
        self.artifacts = Artifacts()       # the n-gram files, heads, models requests name: loaded once, here
        self.prefix_cache = None
        if config.prefix_cache_mb:         # a runner that cannot reuse keys/values exactly stops the start here
            self.prefix_cache = PrefixCache(config.prefix_cache_mb)
            self.prefix_cache.check(lm)
            self.metrics.set_gauge_source("multidraft:prefix_cache_bytes", lambda: self.prefix_cache.nbytes)
            self.metrics.set_gauge_source("multidraft:prefix_cache_tokens", lambda: self.prefix_cache.num_tokens)
            self.metrics.set_gauge_source("multidraft:prefix_cache_hit_tokens", lambda: self.prefix_cache.reused_tokens)
        self.worker = self._worker()
        # Every model the worker may run is checked for the job's deadline/cancellation inside each forward.
        loaded = [lm, *[v for named in self.named.values() for v in named.values() if hasattr(v, "model")]]
        self.hooks = self.worker.watch_models(*{id(m): m for m in loaded}.values())
        self.metrics.set_gauge_source("vllm:num_requests_running", lambda: self.worker.running)
        self.metrics.set_gauge_source("vllm:num_requests_waiting", lambda: self.worker.waiting)
        self.started = int(time.time())
        self.suggest = suggestion_defaults(config, lm)     # once: it may fingerprint the tokenizer the worker uses
        self.suffix_stores = StoreRegistry(config.suffix_store_tokens, config.suffix_isolation)
        self.saved_version, self.saved_at = (), time.monotonic()
        if config.suffix_store_path:        # a damaged file stops the start here, with the file's name
            self.suffix_stores.load(config.suffix_store_path, lm)
            self.saved_version = self.suffix_stores.version()
        self.metrics.set_gauge_source("multidraft:suffix_store_bytes", self.suffix_stores.memory_bytes)
        self.metrics.set_gauge_source("multidraft:suffix_store_tokens", self.suffix_stores.num_tokens)
        if isinstance(self.worker, EngineWorker):
            self.metrics.set_gauge_source("multidraft:batch_size", lambda: self.worker.batch_size)
            self.metrics.set_gauge_source("multidraft:kv_slots_used", lambda: self.worker.kv_slots_used)

    def _worker(self):
        """The model thread: one request at a time, or (max_num_seqs > 1) the engine's continuous batching; a model
        the engine cannot batch (sliding-window attention...) is served one at a time, with one warning."""
        if self.config.max_num_seqs > 1:
            try:
                # between steps, in the engine's thread: no request is changing a suffix store meanwhile
                return EngineWorker(self.lm, self.config, self.metrics, self.artifacts,
                                    between_steps=self.save_suffix_stores, prefix_cache=self.prefix_cache)
            except InvalidOptionError as exc:
                log.warning("serving one request at a time: %s", exc)
        return ModelWorker(self.config.max_queue)

    def close(self) -> None:
        self.worker.stop()
        for handle in self.hooks:
            handle.remove()
        self.save_suffix_stores(force=True)

    def save_suffix_stores(self, force: bool = False) -> None:
        """With --suffix-store-path: write the stores if they changed since the last save, at most every
        SAVE_EVERY_SECONDS unless `force`d. A failed write is logged, never a failed request (each file is written
        atomically, so the old one stays)."""
        if not self.config.suffix_store_path:
            return
        version = self.suffix_stores.version()
        if version == self.saved_version or (not force and time.monotonic() - self.saved_at < SAVE_EVERY_SECONDS):
            return
        try:
            self.suffix_stores.save(self.config.suffix_store_path)
            self.saved_version = version
        except OSError as exc:
            log.error("could not save the suffix stores to %s: %s", self.config.suffix_store_path, exc)
        self.saved_at = time.monotonic()

    def _run(self, plan: Plan, job: Job):
        try:
            return run_plan(self.lm, plan, job, self.config, self.metrics, self.artifacts, self.prefix_cache)
        finally:                # in the worker thread, between jobs: no request is changing a store meanwhile
            if plan.method == "suffix":
                self.save_suffix_stores()

    # ----- what the routes answer
    def health(self) -> dict:
        return {"status": "ok", "model": self.model_name, "running": self.worker.running,
                "waiting": self.worker.waiting}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.started,
                                            "owned_by": "multidraft", "max_model_len": self.lm.context_length}]}

    def page_config(self) -> dict:
        methods = {name: {"lossless": m.lossless, "description": m.description,
                          "options": {k: v for k, v in m.options.items() if _jsonable(v)},
                          "request_options": sorted(http_options(m))}
                   for name, m in sorted(available_methods().items())}
        return {"model": self.model_name, "suggest": self.suggest, "methods": methods,
                "limits": {"max_n": self.config.max_n, "max_tokens": self.config.max_tokens},
                "auth": bool(self.config.api_keys),
                "artifacts": {kind: ["default", *named] for kind, named in self.named.items()}}

    # ----- one request
    def plan(self, body, client: Optional[str]) -> Plan:
        """The checked plan of a request; `client` is the API key it authenticated with (None: no authentication)."""
        if body.model is not None and body.model not in (self.model_name, self.lm.name):
            raise ApiError(404, f"model {body.model!r} is not served here; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")
        plan = build_plan(body, self.config, self.draft_lm, named=self.named, suffix_stores=self.suffix_stores,
                          client=client)
        self.metrics.inc("multidraft:method_requests_total", method=plan.method)
        return plan

    def submit(self, plan: Plan, arrived: float) -> Job:
        job = Job(lambda job: self._run(plan, job),
                  arrived + self.config.request_timeout, asyncio.get_running_loop(), plan=plan)
        try:
            self.worker.submit(job)
        except QueueFullError:
            self.metrics.inc("multidraft:requests_rejected_total")
            raise ApiError(429, f"the server is busy ({self.worker.waiting} requests waiting, the most it queues is "
                                f"{self.config.max_queue}); retry shortly", code="queue_full") from None
        return job

    async def next_event(self, job: Job):
        """The job's next event; ApiError(504) when the deadline passes while the job still waits in the queue (it
        leaves the queue then), or when the worker overruns the deadline by GRACE_SECONDS."""
        while True:
            queued = job.started_at is None
            wait = job.deadline + (0 if queued else GRACE_SECONDS) - time.monotonic()
            try:
                return await asyncio.wait_for(job.events.get(), timeout=max(wait, 0.01))
            except asyncio.TimeoutError:
                if queued and not self.worker.withdraw(job):
                    continue                # the worker took it meanwhile: it gets the grace period
                job.cancelled.set()
                self.metrics.inc("multidraft:requests_timed_out_total")
                raise self.timeout_error() from None

    def cancel(self, job: Job) -> None:
        if not job.cancelled.is_set():
            job.cancelled.set()
            self.metrics.inc("multidraft:requests_cancelled_total")
        self.worker.withdraw(job)       # still queued: its slot is free now, not when the model reaches it

    def timeout_error(self) -> ApiError:
        return ApiError(504, f"the request did not finish within the server's limit of "
                             f"{self.config.request_timeout:g} s (queueing included; serve --timeout)", code="timeout")

    def translate(self, exc: BaseException) -> ApiError:
        if isinstance(exc, ApiError):              # a check on the worker thread (the prompt's encoded length)
            return exc
        if isinstance(exc, JobTimedOut):
            self.metrics.inc("multidraft:requests_timed_out_total")
            return self.timeout_error()
        if isinstance(exc, JobCancelled):
            return ApiError(499, "the request was cancelled", code="cancelled")
        if isinstance(exc, (NumericalError, CorruptCacheError)):     # the server's model or files are at fault
            log.error("generation failed: %s", exc)
            return ApiError(500, _without_paths(str(exc)))
        if isinstance(exc, (ModelNotFoundError, DataNotFoundError)):    # a default n-gram file or heads missing
            return ApiError(400, "this server lacks a file the method needs (a client cannot give it; choose "
                                 f"another method); for its operator: {_without_paths(str(exc))}",
                            code="missing_artifact")
        if isinstance(exc, MultidraftError):        # bad options, prompt, missing n-gram data for the options...
            return ApiError(400, _without_paths(str(exc)), param=_param_of(exc))
        log.error("generation failed", exc_info=exc)
        return _internal_error(exc)


def _jsonable(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


_REQUEST_FIELDS = {"prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed", "method",
                   *(name for method in available_methods().values() for name in http_options(method))}


def _param_of(exc: BaseException):
    """The request field a library error is about: its `param` attribute, else the field its message starts
    with ("temperature must be ...", "option 'x' ..."), when that is a field a request can set."""
    param = getattr(exc, "param", None)
    if isinstance(param, str):
        return param
    match = re.match(r"(?:option )?'?([a-z_]+)'?[ =]", str(exc))
    return match.group(1) if match and match.group(1) in _REQUEST_FIELDS else None


# An absolute or home-relative path inside a library message (not a URL path of this API, not "tokens/s").
_PATH = re.compile(r"(?<![\w.:/~-])(?:~/|/(?!v1/))[^\s'\"`,;()]+")


def _without_paths(message: str) -> str:
    """A library message for a client: the server's paths (cache folders, the operator's files) go to the log only,
    so a request cannot map the server's disk."""
    return _PATH.sub("<server path>", message)


def _internal_error(exc: BaseException) -> ApiError:
    # The details (paths, library internals) go to the server log, not to the client.
    return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details")
