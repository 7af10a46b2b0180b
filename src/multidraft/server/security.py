"""Who may talk to the server, checked before any route runs (pure ASGI, so streaming is untouched).

In order, for every HTTP request:
1. Host header in the allow-list (localhost names by default): a web page that rebinds its own domain name to
   127.0.0.1 (DNS rebinding) sends its own name as Host and is refused.
2. Origin header, when present, is this server's own origin or one listed by the operator (CORS); anything
   else is refused, so another site's page cannot drive the API even with a "simple" request. A CORS preflight
   (OPTIONS) is answered here: allowed for listed origins only.
3. API key on /v1/*: `Authorization: Bearer <key>`, compared in constant time with every accepted key; 401 like
   OpenAI's otherwise. The key matched (as a digest) is the request's client identity (suffix-store isolation).
4. POST bodies must be `application/json` (415): a cross-site form or text/plain "simple request" never
   reaches a handler.
5. Body size and pace: refused with 408 when it does not arrive within `read_timeout`; refused with 413 from Content-Length before reading, or as soon as the streamed body passes
   the limit; the body read here is handed to the app, which never sees more than the limit.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Optional
from urllib.parse import urlsplit

from multidraft.server.config import ServerConfig
from multidraft.server.schemas import ApiError

PROTECTED_PREFIX = "/v1/"
AUTHENTICATED_CLIENT = "multidraft.client"     # scope key: sha256 of the API key a request authenticated with
CORS_METHODS = "GET, POST, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type"


class SecurityMiddleware:
    def __init__(self, app, config: ServerConfig):
        self.app, self.config = app, config
        self.hosts = set(config.allowed_hosts)
        self.origins = set(config.allowed_origins)
        self.keys = [key.encode("ascii") for key in config.api_keys]     # ASCII: ServerConfig.validate checks

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        twice = _repeated(scope)
        if twice:          # which copy counts would be a guess (a proxy in front may have checked the other one)
            return await _refuse(send, ApiError(400, f"the request has more than one {twice} header; send one",
                                                code="repeated_header"))
        host = headers.get("host", "")
        if not self._host_allowed(host):
            shown = host[:80] or "(none)"
            return await _refuse(send, ApiError(400, f"Host header {shown!r} is not served here; the server answers "
                                                     f"to {', '.join(sorted(self.hosts))} (serve --allowed-hosts)",
                                                code="host_not_allowed"))
        origin = headers.get("origin")
        cors_origin = None
        if origin is not None:
            if _same_origin(origin, host):
                pass
            elif "*" in self.origins or origin.rstrip("/").lower() in self.origins:
                cors_origin = origin
            else:
                return await _refuse(send, ApiError(403, f"cross-origin requests from {origin[:80]!r} are not allowed "
                                                         f"(serve --allowed-origins)", code="origin_not_allowed"))
        if scope["method"] == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            return await self._preflight(send, cors_origin or origin)
        if self.keys and scope["path"].startswith(PROTECTED_PREFIX):
            client = self._client_of(headers)
            if client is None:
                return await _refuse(send, _unauthorized(headers), cors_origin,
                                     extra=[(b"www-authenticate", b'Bearer realm="multidraft"')])
            scope[AUTHENTICATED_CLIENT] = client
        if scope["method"] == "POST":
            content_type = headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "application/json":
                return await _refuse(send, ApiError(415, f"request bodies must be JSON with 'Content-Type: "
                                                         f"application/json', not {content_type or 'none'!r}",
                                                    code="unsupported_media_type"), cors_origin)
            try:
                async with asyncio.timeout(self.config.read_timeout):      # a body sent a byte at a time
                    body = await self._read_body(headers, receive)
            except TimeoutError:
                return await _refuse(send, ApiError(408, f"the request body did not arrive within "
                                                         f"{self.config.read_timeout:g} s (serve --read-timeout)",
                                                    code="request_timeout"), cors_origin,
                                     extra=[(b"connection", b"close")])
            if body is None:
                return await _refuse(send, ApiError(413, f"the request body is larger than this server's limit of "
                                                         f"{self.config.max_body_bytes} bytes (serve --max-body-bytes)",
                                                    code="body_too_large"), cors_origin,
                                     extra=[(b"connection", b"close")])
            receive = _replay(body, receive)
        if cors_origin is not None:
            send = _with_cors(send, cors_origin)
        await self.app(scope, receive, send)

    def _host_allowed(self, host: str) -> bool:
        if "*" in self.hosts:
            return True
        return _host_name(host) in self.hosts

    def _client_of(self, headers: dict) -> Optional[str]:
        """Which key the request holds (its sha256, never the key), or None. Every key is compared, in constant
        time, so the time taken says nothing about which key came close."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        sent = token.strip().encode("latin-1")           # the header's own bytes (_headers decoded them as latin-1)
        matched = None
        for key in self.keys:
            if hmac.compare_digest(sent, key):
                matched = key
        return None if matched is None else hashlib.sha256(matched).hexdigest()

    async def _preflight(self, send, origin: str):
        response = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                    (b"access-control-allow-methods", CORS_METHODS.encode()),
                    (b"access-control-allow-headers", CORS_HEADERS.encode()),
                    (b"access-control-max-age", b"600"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 204, "headers": response})
        await send({"type": "http.response.body", "body": b""})

    async def _read_body(self, headers: dict, receive) -> Optional[bytes]:
        """The whole body, or None once it is known to pass the limit (nothing beyond the limit is kept)."""
        limit = self.config.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    return None
            except ValueError:
                pass
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _headers(scope) -> dict[str, str]:
    """Header names lower-cased; for a repeated header the first value (a second Host is ignored)."""
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


SINGLE_HEADERS = (b"host", b"origin", b"authorization", b"content-type")


def _repeated(scope) -> Optional[str]:
    """The first of SINGLE_HEADERS the request sends more than once, or None."""
    names = [name.lower() for name, _ in scope.get("headers", [])]
    return next((name.decode().title() for name in SINGLE_HEADERS if names.count(name) > 1), None)


def _host_name(host: str) -> str:
    """`name[:port]` or `[v6]:port` -> the name, lower-cased (brackets kept for IPv6 literals); "" when what follows
    the name is not a port (`127.0.0.1:80:x`, `[::1]x`), which no browser sends."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]") + 1
        name, port = (host[:end], host[end:]) if end else (host, "")
    else:
        name, colon, port = host.partition(":")
        name, port = name.rstrip("."), colon + port
    if port and not (port[0] == ":" and port[1:].isascii() and port[1:].isdigit()):
        return ""
    return name


def _same_origin(origin: str, host: str) -> bool:
    """Origin `scheme://name[:port]` names the Host this request was sent to (default ports ignored)."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    default = ":443" if parts.scheme == "https" else ":80"
    strip = lambda netloc: netloc.lower()[:-len(default)] if netloc.lower().endswith(default) else netloc.lower()
    return strip(parts.netloc) == strip(host.strip())


def _unauthorized(headers: dict) -> ApiError:
    if "authorization" not in headers:
        message = ("You didn't provide an API key. Send it in an Authorization header using Bearer auth "
                   "(Authorization: Bearer YOUR_KEY).")
    else:
        message = "Incorrect API key provided."
    return ApiError(401, message, code="invalid_api_key")


async def _refuse(send, error: ApiError, cors_origin: Optional[str] = None, extra=()):
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    if cors_origin is not None:
        headers += [(b"access-control-allow-origin", cors_origin.encode("latin-1")), (b"vary", b"Origin")]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive):
    """A receive() that gives the app the body read here, then passes through (disconnects)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _with_cors(send, origin: str):
    async def send_with_cors(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"access-control-allow-origin", origin.encode("latin-1")),
                                              (b"vary", b"Origin")]}
        await send(message)

    return send_with_cors
