"""Run one HTTP request through an ASGI app in this process and yield what it sends, as it sends it.

A `serve --ray` replica answers the requests its ingress forwards with the plain server's own app (create_app), so
every route, check, error and metric is the single server's. The request arrives whole (the ingress read and
bounded its body); the answer leaves as the app sends it, so a stream stays a stream. When the caller stops reading
(its client hung up, or the request was cancelled), the app is told `http.disconnect`, which cancels the job as a
hang-up does on the plain server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

STOP_SECONDS = 5.0      # how long an app that was told of a disconnect gets to finish before it is cancelled


@dataclass
class ForwardedRequest:
    method: str
    path: str
    query_string: bytes = b""
    headers: list = field(default_factory=list)      # [(name, value)] as bytes, as in an ASGI scope
    body: bytes = b""
    scheme: str = "http"
    client: tuple = ("127.0.0.1", 0)
    server: tuple = ("127.0.0.1", 80)


def scope_of(request: ForwardedRequest) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": request.method, "scheme": request.scheme, "path": request.path,
            "raw_path": request.path.encode("latin-1", "replace"), "root_path": "",
            "query_string": request.query_string, "headers": [(bytes(k), bytes(v)) for k, v in request.headers],
            "client": tuple(request.client), "server": tuple(request.server)}


async def call(app, request: ForwardedRequest):
    """Yield the app's ASGI messages (http.response.start, then http.response.body ones) until the last body."""
    sent: asyncio.Queue = asyncio.Queue()
    gone = asyncio.Event()
    body_given = False

    async def receive():
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def run():
        try:
            await app(scope_of(request), receive, sent.put)
        finally:
            sent.put_nowait(None)

    task = asyncio.create_task(run())
    try:
        while True:
            message = await sent.get()
            if message is None:                       # the app returned (or failed) without its last body
                break
            yield message
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                break
    finally:
        gone.set()
        if not task.done():
            done, _ = await asyncio.wait({task}, timeout=STOP_SECONDS)
            if not done:
                task.cancel()
        if task.done() and not task.cancelled():
            task.exception()                          # retrieved: the app's own handler has logged it
