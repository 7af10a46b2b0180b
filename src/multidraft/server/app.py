"""The FastAPI app: OpenAI-compatible completions, health, models, Prometheus metrics and the page.

Requests are parsed and checked on the event loop, then queued for the single model worker; the
coroutine waits for the worker's events (or streams them as server-sent events) and cancels the job
if its client disconnects or its deadline passes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from multidraft.artifacts import Artifacts
from multidraft.errors import CorruptCacheError, MultidraftError, NumericalError
from multidraft.methods import available_methods
from multidraft.server.config import ServerConfig
from multidraft.server.metrics import Metrics
from multidraft.server.options import http_options
from multidraft.server.plan import Outcome, build_plan, run_plan, suffix_store_for, suggestion_defaults
from multidraft.server.schemas import ApiError, ChatRequest, CompletionRequest, parse_body
from multidraft.server.security import SecurityMiddleware
from multidraft.server.streaming import sse
from multidraft.server.worker import Job, JobCancelled, JobTimedOut, ModelWorker, QueueFullError

log = logging.getLogger("multidraft.server")
GRACE_SECONDS = 2.0      # how long past its deadline a coroutine waits for a worker stuck inside one forward


class _CountRequests:
    """Pure ASGI middleware (BaseHTTPMiddleware would interfere with streaming and disconnects)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"] if scope["path"] in _KNOWN_PATHS else "other"
        counted = False

        async def send_and_count(message):
            nonlocal counted
            if scope.get(CLIENT_GONE):
                # The client hung up before its answer: nothing is sent, and it is counted once, in
                # multidraft:requests_cancelled_total, not as an HTTP status nobody received.
                counted = True
                return
            if message["type"] == "http.response.start":       # count before the client can see the answer
                counted = True
                self.metrics.inc("multidraft:http_requests_total", path=path, status=str(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            if not counted:                                     # the app failed before answering
                self.metrics.inc("multidraft:http_requests_total", path=path, status="500")


CLIENT_GONE = "multidraft.client_gone"       # scope flag: the client disconnected, send nothing
_KNOWN_PATHS = {"/", "/health", "/metrics", "/config", "/v1/models", "/v1/completions", "/v1/chat/completions"}


def create_app(lm, config: ServerConfig | None = None, draft_lm=None) -> FastAPI:
    """An app serving `lm` (a loaded `multidraft.LM`); `draft_lm` feeds methods that take a draft model."""
    config = (config or ServerConfig()).validate()
    if draft_lm is not None:                 # the --draft model is the default one, and may be named
        config.artifacts = {**config.artifacts, "draft_model": {draft_lm.name: draft_lm,
                                                                **config.artifacts.get("draft_model", {})}}
    model_name = config.model_name or lm.name
    metrics = Metrics(model_name)
    worker = ModelWorker(config.max_queue)
    # Every model the worker may run is checked for the job's deadline/cancellation inside each forward.
    loaded_models = [lm, *[v for named in config.artifacts.values() for v in named.values() if hasattr(v, "model")]]
    hooks = worker.watch_models(*{id(m): m for m in loaded_models}.values())
    metrics.set_gauge_source("vllm:num_requests_running", lambda: worker.running)
    metrics.set_gauge_source("vllm:num_requests_waiting", lambda: worker.waiting)
    started = int(time.time())
    suggest = suggestion_defaults(config, lm)       # once: it may fingerprint the tokenizer the worker uses
    from multidraft.suffix.registry import StoreRegistry
    suffix_stores = StoreRegistry(config.suffix_store_tokens, config.suffix_isolation)
    artifacts = Artifacts()          # the n-gram files, heads, models requests name: loaded once, by this app

    @asynccontextmanager
    async def lifespan(_app):
        yield
        worker.stop()
        for handle in hooks:
            handle.remove()

    app = FastAPI(title="multidraft", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.worker, app.state.metrics, app.state.config, app.state.lm = worker, metrics, config, lm
    app.state.suffix_stores = suffix_stores
    app.add_middleware(SecurityMiddleware, config=config)
    app.add_middleware(_CountRequests, metrics=metrics)     # outermost: refusals are counted too
    static = resources.files("multidraft.server") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.exception_handler(ApiError)
    async def api_error(_request, exc: ApiError):
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, exc: StarletteHTTPException):
        return JSONResponse(ApiError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_request, exc: Exception):
        log.exception("unexpected error")
        return JSONResponse(_internal_error(exc).body(), status_code=500)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_name, "running": worker.running, "waiting": worker.waiting}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": started,
                                            "owned_by": "multidraft", "max_model_len": lm.context_length}]}

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/config")
    async def page_config():
        methods = {name: {"lossless": m.lossless, "description": m.description,
                          "options": {k: v for k, v in m.options.items() if _jsonable(v)},
                          "request_options": sorted(http_options(m))}
                   for name, m in sorted(available_methods().items())}
        return {"model": model_name, "suggest": suggest, "methods": methods,
                "limits": {"max_n": config.max_n, "max_tokens": config.max_tokens},
                "auth": config.api_key is not None,
                "artifacts": {kind: ["default", *named] for kind, named in config.artifacts.items()}}

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _generate(request, CompletionRequest)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _generate(request, ChatRequest)

    async def _generate(request: Request, model_cls):
        arrived = time.monotonic()
        body = parse_body(await request.body(), model_cls)
        if body.model is not None and body.model not in (model_name, lm.name):
            raise ApiError(404, f"model {body.model!r} is not served here; this server serves {model_name!r}",
                           param="model", code="model_not_found")
        store = suffix_store_for(body.method or config.default_method, suffix_stores,
                                 request.headers.get("authorization"))
        plan = build_plan(body, config, draft_lm, store)
        metrics.inc("multidraft:method_requests_total", method=plan.method)
        job = Job(lambda job: run_plan(lm, plan, job, config, metrics, artifacts), arrived + config.request_timeout,
                  asyncio.get_running_loop())
        try:
            worker.submit(job)
        except QueueFullError:
            metrics.inc("multidraft:requests_rejected_total")
            raise ApiError(429, f"the server is busy ({worker.waiting} requests waiting, the most it queues is "
                                f"{config.max_queue}); retry shortly", code="queue_full") from None
        chat = model_cls is ChatRequest
        reply = _Reply(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", int(time.time()), model_name,
                       chat, plan.method)
        watcher = asyncio.create_task(_watch_disconnect(request, lambda: _cancel(job)))
        handed_over = False              # the stream owns the job and the watcher from then on
        ended = False                    # the worker is done with the job (its last event came)
        try:
            # Wait for the first event even when streaming: an error found when the job starts (prompt too long
            # for the context, bad option) is then a real 4xx status, not a 200 followed by an error event.
            event = await _next_event(job)
            while True:
                kind, *payload = event
                ended = kind in ("done", "error")
                if kind == "error":
                    if isinstance(payload[0], JobCancelled):
                        request.scope[CLIENT_GONE] = True
                        return JSONResponse({}, status_code=499)      # never sent: see _CountRequests
                    raise _translate(payload[0])
                if plan.stream:
                    handed_over = True
                    stream = _stream(job, reply, plan.n * len(plan.requests), arrived, event, watcher)
                    return StreamingResponse(stream, media_type="text/event-stream",
                                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
                if kind == "done":
                    metrics.observe_latency(time.monotonic() - arrived)
                    return JSONResponse(reply.full(payload[0]))
                event = await _next_event(job)
        finally:
            if not handed_over:
                watcher.cancel()
                if not ended:
                    _cancel(job)

    async def _stream(job: Job, reply: "_Reply", num_choices: int, arrived: float, first, watcher):
        done = False
        try:
            if reply.chat:
                for index in range(num_choices):
                    yield sse(reply.chunk(index, {"role": "assistant", "content": ""}))
            pending = [first]
            while True:
                try:
                    kind, *payload = pending.pop() if pending else await _next_event(job)
                except ApiError as exc:                     # the worker did not stop in time
                    done = True
                    yield sse(exc.body())
                    yield sse("[DONE]")
                    return
                if kind == "delta":
                    yield sse(reply.chunk(payload[0], payload[1]))
                elif kind == "finish":
                    yield sse(reply.chunk(payload[0], None, finish_reason=payload[1]))
                elif kind == "done":
                    done = True
                    metrics.observe_latency(time.monotonic() - arrived)
                    yield sse(reply.summary(payload[0]))
                    yield sse("[DONE]")
                    return
                elif kind == "error":
                    done = True
                    error = _translate(payload[0])
                    yield sse(error.body())
                    yield sse("[DONE]")
                    return
        finally:
            watcher.cancel()
            if not done:
                _cancel(job)

    async def _next_event(job: Job):
        """The job's next event; ApiError(504) if the worker overruns the deadline by GRACE_SECONDS."""
        wait = job.deadline + GRACE_SECONDS - time.monotonic()
        try:
            return await asyncio.wait_for(job.events.get(), timeout=max(wait, 0.01))
        except asyncio.TimeoutError:
            job.cancelled.set()
            metrics.inc("multidraft:requests_timed_out_total")
            raise _timeout_error() from None

    def _cancel(job: Job) -> None:
        if not job.cancelled.is_set():
            job.cancelled.set()
            metrics.inc("multidraft:requests_cancelled_total")

    def _timeout_error() -> ApiError:
        return ApiError(504, f"the request did not finish within the server's limit of {config.request_timeout:g} s "
                             f"(queueing included; serve --timeout)", code="timeout")

    def _translate(exc: BaseException) -> ApiError:
        if isinstance(exc, JobTimedOut):
            metrics.inc("multidraft:requests_timed_out_total")
            return _timeout_error()
        if isinstance(exc, JobCancelled):
            return ApiError(499, "the request was cancelled", code="cancelled")
        if isinstance(exc, (NumericalError, CorruptCacheError)):     # the server's model or files are at fault
            return ApiError(500, str(exc))
        if isinstance(exc, MultidraftError):        # bad options, prompt, missing n-gram data for the options...
            return ApiError(400, str(exc), param=_param_of(exc))
        log.error("generation failed", exc_info=exc)
        return _internal_error(exc)

    return app


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


def _internal_error(exc: BaseException) -> ApiError:
    # The details (paths, library internals) go to the server log, not to the client.
    return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details")


async def _watch_disconnect(request: Request, on_disconnect) -> None:
    """Call `on_disconnect` when the client hangs up (the body is already read, so receive() waits for that)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


def _jsonable(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


class _Reply:
    """OpenAI response and chunk shapes for one request."""

    def __init__(self, request_id: str, created: int, model: str, chat: bool, method: str):
        self.id, self.created, self.model, self.chat, self.method = request_id, created, model, chat, method

    def _envelope(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def chunk(self, index: int, content, finish_reason=None) -> dict:
        if self.chat:
            delta = content if isinstance(content, dict) else ({} if content is None else {"content": content})
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**self._envelope("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": index, "text": content or "", "logprobs": None, "finish_reason": finish_reason}
        return {**self._envelope("text_completion"), "choices": [choice]}

    def _usage(self, outcome: Outcome) -> dict:
        completion = sum(len(c.token_ids) for c in outcome.choices)
        return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": completion,
                "total_tokens": outcome.prompt_tokens + completion}

    def _stats(self, outcome: Outcome) -> dict:
        return {**outcome.stats.to_dict(), "generate_calls": outcome.calls}

    def summary(self, outcome: Outcome) -> dict:
        """The last streamed chunk: no choices, usage and decode stats (like OpenAI's include_usage chunk)."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._envelope(kind), "choices": [], "usage": self._usage(outcome), "method": self.method,
                "stats": self._stats(outcome)}

    def full(self, outcome: Outcome) -> dict:
        choices = []
        for c in sorted(outcome.choices, key=lambda c: c.index):
            if self.chat:
                choices.append({"index": c.index, "message": {"role": "assistant", "content": c.text},
                                "logprobs": None, "finish_reason": c.finish_reason})
            else:
                choices.append({"index": c.index, "text": c.text, "logprobs": None, "finish_reason": c.finish_reason})
        kind = "chat.completion" if self.chat else "text_completion"
        return {**self._envelope(kind), "choices": choices, "usage": self._usage(outcome), "method": self.method,
                "stats": self._stats(outcome)}
