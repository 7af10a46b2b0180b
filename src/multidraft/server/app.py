"""The FastAPI app: OpenAI-compatible completions, health, models, Prometheus metrics and the page.

Requests are parsed and checked on the event loop, then queued for the single model worker; the
coroutine waits for the worker's events (or streams them as server-sent events) and cancels the job
if its client disconnects or its deadline passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from multidraft.server.config import ServerConfig
from multidraft.server.metrics import Metrics
from multidraft.server.plan import Outcome
from multidraft.server.schemas import ApiError, ChatRequest, CompletionRequest, parse_body
from multidraft.server.security import AUTHENTICATED_CLIENT, SecurityMiddleware
from multidraft.server.service import GenerationService, _internal_error
from multidraft.server.streaming import sse
from multidraft.server.worker import Job, JobCancelled

log = logging.getLogger("multidraft.server")


class CountRequests:
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
            if not counted and not scope.get(CLIENT_GONE):      # the app failed before answering
                self.metrics.inc("multidraft:http_requests_total", path=path, status="500")


CLIENT_GONE = "multidraft.client_gone"       # scope flag: the client disconnected, send nothing
_KNOWN_PATHS = {"/", "/health", "/metrics", "/config", "/v1/models", "/v1/completions", "/v1/chat/completions"}


def create_app(lm, config: ServerConfig | None = None, draft_lm=None) -> FastAPI:
    """An app serving `lm` (a loaded `multidraft.LM`); `draft_lm` feeds methods that take a draft model. The routes
    below are thin: the work is the GenerationService's (server/service.py)."""
    config = (config or ServerConfig()).validate()
    service = GenerationService(lm, config, draft_lm)
    metrics, worker = service.metrics, service.worker

    @asynccontextmanager
    async def lifespan(_app):
        yield
        service.close()

    app = FastAPI(title="multidraft", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.worker, app.state.metrics, app.state.config, app.state.lm = worker, metrics, config, lm
    app.state.suffix_stores, app.state.service = service.suffix_stores, service
    app.add_middleware(SecurityMiddleware, config=config)
    app.add_middleware(CountRequests, metrics=metrics)     # outermost: refusals are counted too
    static = resources.files("multidraft.server") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    _add_error_handlers(app)
    _add_info_routes(app, service, static)
    _add_generation_routes(app, service)
    return app


def _add_error_handlers(app: FastAPI) -> None:
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


def _add_info_routes(app: FastAPI, service: GenerationService, static) -> None:
    @app.api_route("/health", methods=["GET", "HEAD"])        # HEAD: load balancers' and uptime checkers' probe
    async def health():
        return service.health()

    @app.get("/v1/models")
    async def models():
        return service.models()

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/config")
    async def page_config():
        return service.page_config()

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))


def _add_generation_routes(app: FastAPI, service: GenerationService) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _answer(service, request, CompletionRequest)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _answer(service, request, ChatRequest)


async def _answer(service: GenerationService, request: Request, model_cls):
    """An unexpected error is a 500 answered here: left to the handler of Exception, Starlette's outermost middleware
    answers it, then re-raises, so uvicorn logs a second traceback and drops the client's keep-alive connection."""
    try:
        return await _generate(service, request, model_cls)
    except ApiError:
        raise
    except Exception as exc:
        log.exception("unexpected error")
        return JSONResponse(_internal_error(exc).body(), status_code=500)


async def _generate(service: GenerationService, request: Request, model_cls):
    arrived = time.monotonic()
    body = parse_body(await request.body(), model_cls)
    plan = service.plan(body, request.scope.get(AUTHENTICATED_CLIENT))
    job = service.submit(plan, arrived)
    chat = model_cls is ChatRequest
    reply = _Reply(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", int(time.time()),
                   service.model_name, chat, plan.method)
    watcher = asyncio.create_task(_watch_disconnect(request, lambda: service.cancel(job)))
    handed_over = False              # the stream owns the job and the watcher from then on
    ended = False                    # the worker is done with the job (its last event came)
    try:
        # Wait for the first event even when streaming: an error found when the job starts (prompt too long
        # for the context, bad option) is then a real 4xx status, not a 200 followed by an error event.
        event = await service.next_event(job)
        while True:
            kind, *payload = event
            ended = kind in ("done", "error")
            if kind == "error":
                if isinstance(payload[0], JobCancelled):
                    request.scope[CLIENT_GONE] = True
                    return JSONResponse({}, status_code=499)      # never sent: see CountRequests
                raise service.translate(payload[0])
            if plan.stream:
                handed_over = True
                usage = bool((body.stream_options or {}).get("include_usage"))
                stream = _stream(service, job, reply, plan.n * len(plan.requests), arrived, event, watcher, usage)
                return StreamingResponse(stream, media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            if kind == "done":
                service.metrics.observe_latency(time.monotonic() - arrived)
                return JSONResponse(reply.full(payload[0]))
            event = await service.next_event(job)
    finally:
        if not handed_over:
            watcher.cancel()
            if not ended:
                service.cancel(job)


async def _stream(service: GenerationService, job: Job, reply: "_Reply", num_choices: int, arrived: float, first,
                  watcher, usage: bool):
    """The chunks, then (with stream_options.include_usage, as OpenAI) one without choices holding usage and decode
    stats: sent to every stream, it broke clients that read chunk.choices[0]."""
    done = False
    try:
        if reply.chat:
            for index in range(num_choices):
                yield sse(reply.chunk(index, {"role": "assistant", "content": ""}))
        pending = [first]
        while True:
            try:
                kind, *payload = pending.pop() if pending else await service.next_event(job)
            except ApiError as exc:                     # the worker did not stop in time
                done = True
                yield sse(exc.body())
                yield sse("[DONE]")
                return
            if kind == "delta":
                yield sse(reply.chunk(payload[0], payload[1]))
            elif kind == "finish":
                yield sse(reply.chunk(payload[0], None, finish_reason=payload[1]))
            elif kind in ("done", "error"):
                done = True
                if kind == "done":
                    service.metrics.observe_latency(time.monotonic() - arrived)
                    if usage:
                        yield sse(reply.summary(payload[0]))
                else:
                    yield sse(service.translate(payload[0]).body())
                yield sse("[DONE]")
                return
    finally:
        watcher.cancel()
        if not done:
            service.cancel(job)


async def _watch_disconnect(request: Request, on_disconnect) -> None:
    """Call `on_disconnect` when the client hangs up (the body is already read, so receive() waits for that)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


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
        """The last streamed chunk when the request asks for usage: no choices, usage and decode stats."""
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
