"""`multidraft serve --ray`: the server as a Ray Serve application, N engine replicas behind one OpenAI endpoint.

Why this shape:
- **One ingress, no model.** Serve's HTTP proxy hands every request to the ingress deployment, which applies the
  plain server's SecurityMiddleware (Host, Origin/CORS, API key, JSON bodies, body size and pace) and counts HTTP
  requests, once, then forwards the request whole (method, path, headers, body) to one engine replica through a
  deployment handle and passes the answer back as it comes, so streams (SSE) stay streams. /health and /metrics are
  answered here from every replica (`handle.broadcast`).
- **Engine replicas run the plain server's app.** Each loads the model once (Serve routes to a replica only after its
  constructor returned: readiness = model loaded) and answers forwarded requests with `create_app`'s own app, in
  process (server/asgi_call.py): routes, caps, errors, the bounded queue (429), timeouts and metrics are exactly the
  single server's, and nothing here re-implements them.
- **Affinity by a request router.** `AffinityRouter` (server/ray_router.py), the Serve RequestRouter of the engine
  deployment, picks the replica by rendezvous hashing of the request's session (the X-Session-Id header, else the
  body's `user`, else its API key) over the live replicas: a session reaches the same replica, and its suffix
  store, while that replica lives; a replica leaving or joining moves only the sessions that hash to it. Requests
  without a session go to the replica with the shortest known queue. Serve's own routers balance load but keep no
  sessions (power of two choices) or key on a model id (multiplexing), hence this small one.
- **Failover.** A replica that dies before an answer's first bytes reach the client costs the request nothing: the
  ingress sends it once more, to another replica (Serve starts a replacement). A stream cut after its first bytes
  ends with an error event. The dead replica's suffix stores are lost (they live in its memory), not its requests.
- **Stop and scale-down drain:** a replica leaving gets `graceful_shutdown_timeout_s` (the request timeout and a
  margin) to finish what it holds, then stops its worker.

Ray and Serve are imported only here and in ray_router.py (never by `multidraft serve` without --ray).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import logging
import os
import time
from typing import Optional

import ray
from prometheus_client.metrics_core import Metric
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

from multidraft.errors import MultidraftError
from multidraft.server.app import CLIENT_GONE, CountRequests
from multidraft.server.asgi_call import ForwardedRequest, call
from multidraft.server.config import ServerConfig
from multidraft.server.metrics import FAMILIES, merge_pages
from multidraft.server.schemas import ApiError
from multidraft.server.security import AUTHENTICATED_CLIENT, SecurityMiddleware
from multidraft.server.shipping import FileHolder, localize
from multidraft.server.streaming import sse

log = logging.getLogger("multidraft.server")

APP_NAME = "multidraft"
SESSION_HEADER = "x-session-id"            # a client's explicit session: its requests stay on one replica
REPLICA_HEADER = "x-multidraft-replica"    # on every forwarded answer: which replica gave it
PROBE_SECONDS = 10.0                       # /health and /metrics wait this long for the replicas' answers
ROUTING_SECONDS = 30.0                     # beyond the request timeout: the longest a request waits for a replica
HOLDER_NAMESPACE = "multidraft"


class DeployError(MultidraftError):
    """The application did not start: a replica could not load its model or files (Serve's message says which)."""


@dataclasses.dataclass
class ServeSpec:
    """Everything a replica needs to be the server the operator's flags describe (pickled to every replica)."""
    config: ServerConfig
    model: str
    draft: Optional[str] = None
    dtype: Optional[str] = None
    device: Optional[str] = None
    runner: str = "auto"
    threads: int = 1                         # torch threads per replica (and the CPUs Ray reserves for it)
    replicas: int = 1
    autoscale: Optional[tuple] = None        # (min, max) replicas, scaled on ongoing requests
    shipped: dict = dataclasses.field(default_factory=dict)   # kind -> {name: ShippedFile}: the operator's files
    file_holder: Optional[str] = None        # name of the FileHolder actor that can send them (None: none)
    app_name: str = APP_NAME
    log_level: str = "info"                  # Serve's logs of the replicas, the proxy and the controller

    @property
    def max_replicas(self) -> int:
        return self.autoscale[1] if self.autoscale else self.replicas

    @property
    def per_replica(self) -> int:
        """Requests one replica takes at once: those it runs and those its queue holds (one more gets its 429)."""
        return self.config.max_queue + self.config.max_num_seqs + 1


def replica_lost(exc: BaseException) -> bool:
    """The replica serving a call died or became unreachable (also when Ray wraps that in a task error)."""
    lost = (RayActorError, ReplicaUnavailableError)
    return isinstance(exc, lost) or isinstance(getattr(exc, "cause", None), lost)


# ----- routing

def session_of(scope, body: bytes) -> Optional[str]:
    """A digest of the request's session (header, else the body's `user`, else its API key or bearer token); None
    for a request that has none. Only a digest goes to the router: keys and user names stay in the ingress."""
    headers = {}
    for name, value in scope.get("headers", []):
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    identity = None
    if headers.get(SESSION_HEADER, "").strip():
        identity = "session:" + headers[SESSION_HEADER].strip()
    elif body and (user := _user_field(body)):
        identity = "user:" + user
    elif scope.get(AUTHENTICATED_CLIENT):
        identity = "key:" + scope[AUTHENTICATED_CLIENT]
    else:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():    # no authentication: the token still names a client
            identity = "bearer:" + token.strip()
    if identity is None:
        return None
    return hashlib.sha256(identity.encode("utf-8", "replace")).hexdigest()[:32]


def _user_field(body: bytes) -> Optional[str]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None                       # the replica answers the 400
    user = data.get("user") if isinstance(data, dict) else None
    return user if isinstance(user, str) and user else None


# ----- the engine replicas

def _file_reader(holder_name: Optional[str]):
    if holder_name is None:
        return None
    holder = ray.get_actor(holder_name, namespace=HOLDER_NAMESPACE)
    return lambda sha256, offset, size: ray.get(holder.read.remote(sha256, offset, size))


class EngineReplica:
    """One model and the plain server's app around it; answers the requests the ingress forwards."""

    def __init__(self, spec: ServeSpec):
        from multidraft.heap import freeze_loaded_heap
        from multidraft.paths import subdir
        from multidraft.server.app import create_app
        from multidraft.server.loading import load_served

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        config = spec.config
        if spec.shipped:
            config = dataclasses.replace(config, artifacts=localize(config.artifacts, spec.shipped,
                                                                    _file_reader(spec.file_holder), subdir("shipped")))
        lm, draft_lm, config = load_served(config, spec.model, draft=spec.draft, dtype=spec.dtype,
                                           device=spec.device, runner=spec.runner, threads=spec.threads)
        self.app = create_app(lm, config, draft_lm=draft_lm)
        freeze_loaded_heap()                     # the replica keeps its models until it exits (heap.py)
        self.service = self.app.state.service
        self.replica = serve.get_replica_context().replica_tag

    async def serve_http(self, request: ForwardedRequest, route: Optional[dict] = None):
        """Yield (replica, status, headers, first body) once the app answers, then the body's further chunks."""
        start = None
        async for message in call(self.app, request):
            if message["type"] == "http.response.start":
                start = message
            elif start is not None:
                yield self.replica, start["status"], list(start.get("headers", [])), message.get("body", b"")
                start = None
            else:
                yield message.get("body", b"")

    def health(self) -> dict:
        return {"replica": self.replica, **self.service.health()}

    def metrics(self) -> tuple[str, str]:
        return self.replica, self.service.metrics.render()

    def check_health(self) -> None:
        """Serve's periodic check: a replica whose model thread died is replaced."""
        if not self.service.worker.alive:
            raise RuntimeError("the model thread has stopped")

    def __del__(self):
        """Serve's shutdown hook, after the replica drained (graceful_shutdown_timeout_s)."""
        service, self.service = getattr(self, "service", None), None
        if service is not None:
            service.close()


# ----- the ingress

class HttpCounts:
    """The ingress's count of HTTP answers by path and status (CountRequests calls `inc`): what clients saw, refusals
    included. The replicas' own counts would add the forwarded requests twice, so they are left out of /metrics."""

    NAME = "multidraft:http_requests_total"

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def inc(self, name: str, amount: float = 1.0, **labels) -> None:
        self.counts[tuple(sorted(labels.items()))] += amount

    def family(self, model_name: str) -> Metric:
        family = Metric(self.NAME.removesuffix("_total"), FAMILIES[self.NAME][1], "counter")
        for labels, value in sorted(self.counts.items()):
            family.add_sample(self.NAME, {"model_name": model_name, **dict(labels)}, value)
        return family


class Ingress:
    """The deployment Serve's proxy sends every HTTP request to (see the module docstring)."""

    def __init__(self, engine, spec: ServeSpec):
        self.engine = engine
        self.config = spec.config.validate()
        self.counts = HttpCounts()
        self.model_name = spec.config.model_name or spec.model

    def __serve_build_asgi_app__(self):
        return CountRequests(SecurityMiddleware(self.route, config=self.config), metrics=self.counts)

    async def route(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"] == "/health":
            status, body = await self.health()
            return await _answer(send, status, json.dumps(body).encode(), b"application/json")
        if scope["method"] == "GET" and scope["path"] == "/metrics":
            return await _answer(send, 200, (await self.metrics()).encode(), b"text/plain; version=0.0.4; charset=utf-8")
        await self.forward(scope, receive, send)

    # ----- /health and /metrics: every replica's answer
    async def _broadcast(self, method: str) -> list:
        try:
            answers = await self.engine.broadcast(method).results_async(timeout_s=PROBE_SECONDS,
                                                                        return_exceptions=True)
        except (DeploymentUnavailableError, TimeoutError):
            return []
        return [a for a in answers if not isinstance(a, BaseException)]

    async def health(self) -> tuple[int, dict]:
        answers = await self._broadcast("health")
        if answers:
            self.model_name = answers[0]["model"]
        body = {"status": "ok" if answers else "unavailable", "model": self.model_name, "replicas": len(answers),
                "running": sum(a["running"] for a in answers), "waiting": sum(a["waiting"] for a in answers),
                "per_replica": {a["replica"]: {"running": a["running"], "waiting": a["waiting"]} for a in answers}}
        return (200 if answers else 503), body

    async def metrics(self) -> str:
        pages = dict(await self._broadcast("metrics"))
        ready = Metric("multidraft:replicas", "Engine replicas that answered this scrape.", "gauge")
        ready.add_sample("multidraft:replicas", {"model_name": self.model_name}, len(pages))
        return merge_pages(pages, drop=(HttpCounts.NAME,), extra=[self.counts.family(self.model_name), ready])

    # ----- everything else: one replica answers
    async def forward(self, scope, receive, send):
        body = await _read_body(receive)
        request = ForwardedRequest(scope["method"], scope["path"], scope.get("query_string", b""),
                                   list(scope.get("headers", [])), body, scope.get("scheme", "http"),
                                   tuple(scope.get("client") or ("", 0)), tuple(scope.get("server") or ("", 0)))
        session = session_of(scope, body)
        wait = self.config.request_timeout + ROUTING_SECONDS
        route: dict = {"session": session}
        first = stream = None
        try:
            for attempt in (1, 2):
                stream = self.engine.options(stream=True).serve_http.remote(request, route=route)
                try:
                    first = await asyncio.wait_for(stream.__anext__(), timeout=wait)
                    break
                except StopAsyncIteration:
                    return await _error(send, ApiError(502, "the replica ended without an answer"))
                except asyncio.TimeoutError:
                    stream.cancel()
                    return await _error(send, ApiError(504, f"no replica answered within {wait:g} s", code="timeout"))
                except Exception as exc:
                    if not replica_lost(exc):
                        raise
                    log.warning("replica %s was lost before answering (%s); %s", route.get("replica", "?"),
                                type(exc).__name__, "retrying on another" if attempt == 1 else "giving up")
                    route = {"session": session, "avoid": route.get("replica")}
            if first is None:
                return await _error(send, ApiError(503, "the replica serving this request stopped, and so did the one "
                                                        "it was retried on; retry shortly", code="replica_lost"))
            replica, status, headers, chunk = first
            headers = [*headers, (REPLICA_HEADER.encode(), replica.encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            try:
                async for chunk in stream:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except Exception as exc:         # a stream cut after its first bytes: it cannot be replayed
                if not replica_lost(exc):
                    raise
                if any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers):
                    lost = ApiError(503, "the replica serving this stream stopped", code="replica_lost")
                    await send({"type": "http.response.body", "body": sse(lost.body()) + sse("[DONE]"),
                                "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:       # the client hung up: the replica's job is cancelled with the stream
            if stream is not None:
                stream.cancel()
            scope[CLIENT_GONE] = True
            raise


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive) -> bytes:
    """The body SecurityMiddleware already read and bounded (replayed in one message), or a GET's empty one."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(send, status: int, body: bytes, content_type: bytes):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _error(send, error: ApiError):
    await _answer(send, error.status, json.dumps(error.body()).encode(), b"application/json")


# ----- the application

def application(spec: ServeSpec):
    """The Serve application (ingress bound to the engine deployment) for `serve.run` or a serve.yaml builder."""
    config = spec.config
    engine_options = dict(
        name="engine", max_ongoing_requests=spec.per_replica,
        graceful_shutdown_timeout_s=config.request_timeout + 10, max_constructor_retry_count=3,
        ray_actor_options={"num_cpus": spec.threads,
                           **({"num_gpus": 1} if (spec.device or "").startswith("cuda") else {})},
        request_router_config={"request_router_class": "multidraft.server.ray_router:AffinityRouter"})
    if spec.autoscale:
        low, high = spec.autoscale
        engine_options["autoscaling_config"] = {"min_replicas": low, "initial_replicas": low, "max_replicas": high,
                                                "target_ongoing_requests": max(1, config.max_num_seqs)}
    else:
        engine_options["num_replicas"] = spec.replicas
    engine = serve.deployment(EngineReplica).options(**engine_options).bind(spec)
    capacity = spec.max_replicas * spec.per_replica + 32        # /health and /metrics beside the requests
    ingress = serve.deployment(serve.ingress()(Ingress)).options(
        name="ingress", num_replicas=1, max_ongoing_requests=capacity, max_queued_requests=capacity,
        ray_actor_options={"num_cpus": 0})
    return ingress.bind(engine, spec)


def start_file_holder(spec: ServeSpec) -> Optional[object]:
    """The FileHolder for the spec's files, pinned to this node (None when there is nothing to ship). It lives as long
    as the calling driver: keep the returned handle."""
    files = {f.sha256: f for named in spec.shipped.values() for f in named.values()}
    if not files:
        return None
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    spec.file_holder = f"files-{spec.app_name}"
    node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    holder = ray.remote(num_cpus=0)(FileHolder).options(name=spec.file_holder, namespace=HOLDER_NAMESPACE,
                                                        scheduling_strategy=node).remote(list(files.values()))
    ray.get(holder.read.remote(next(iter(files)), 0, 0))          # it runs before a replica asks it
    return holder


def deploy(spec: ServeSpec, host: str, port: int):
    """Start Serve's proxy on host:port (this cluster's head) and the application; returns once every replica has
    loaded its model. Ray must be initialised. Returns the file holder (keep it while serving) or None."""
    holder = start_file_holder(spec)
    logging_config = {"log_level": spec.log_level.upper()}
    serve.start(http_options={"host": host, "port": port}, proxy_location="HeadOnly", logging_config=logging_config)
    try:
        serve.run(application(spec), name=spec.app_name, route_prefix="/", logging_config=logging_config)
    except RuntimeError as exc:          # Serve's "Deploying application ... failed: <the replica's error>"
        raise DeployError(str(exc)) from None
    return holder


def _interrupt(*_):
    raise KeyboardInterrupt


def run(spec: ServeSpec, address: Optional[str], host: str, port: int, announce=None) -> None:
    """`multidraft serve --ray`: deploy on a local Ray (address None) or a cluster, serve until Ctrl-C or SIGTERM, then
    drain (each replica finishes what it holds) and stop what was started here."""
    import signal

    announce = announce or (lambda line: print(line, flush=True))
    started_here = not ray.is_initialized()
    if started_here:
        if address is None:
            ray.init(num_cpus=max(os.cpu_count() or 1, spec.max_replicas * spec.threads), include_dashboard=False,
                     configure_logging=False)
        else:
            ray.init(address=address, configure_logging=False)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        holder = deploy(spec, host, port)      # noqa: F841  (kept alive while serving)
        shape = (f"{spec.autoscale[0]}..{spec.autoscale[1]} replicas (autoscaled)" if spec.autoscale
                 else f"{spec.replicas} replica{'s' if spec.replicas != 1 else ''}")
        announce(f"multidraft: serving {spec.model} on http://{host}:{port}/ with {shape} on Ray Serve "
                 f"({spec.threads} thread{'s' if spec.threads != 1 else ''} each; page at /, API at /v1)")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        announce("multidraft: stopping (replicas finish the requests they hold)")
    finally:
        try:
            serve.delete(spec.app_name)
            if started_here:
                serve.shutdown()
        finally:
            if started_here:
                ray.shutdown()
