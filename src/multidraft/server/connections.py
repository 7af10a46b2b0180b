"""Connections that hold a socket without sending a request are closed after `ServerConfig.read_timeout`.

uvicorn times out idle keep-alive connections between requests, but not a connection that never sends a request
or sends its headers a byte at a time (slowloris): each holds a socket and a file descriptor for ever. This wraps
uvicorn's HTTP protocol: from the moment a connection opens, and again after each response, the client has
`read_timeout` seconds to complete its next request's headers, or the connection is closed. (The body then has
the same time: security.py reads it under that limit; answering may take as long as the request's own timeout.)

The same wrapper keeps the server's error shape below the app: a request whose headers pass MAX_HEADER_BYTES gets
a 431, and one uvicorn cannot parse (Content-Length: -1, an unknown verb) a 400, both in OpenAI's JSON error shape
instead of uvicorn's plain text, and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json

MAX_HEADER_BYTES = 16 * 1024     # a request line and headers longer than this are refused (431), as nginx does


def error_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP response holding an error in OpenAI's shape, for the protocol layer (no app to answer)."""
    from multidraft.server.schemas import ApiError

    body = json.dumps(ApiError(status, message).body()).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


def timed_protocol(base: type, seconds: float, max_header_bytes: int = MAX_HEADER_BYTES) -> type:
    """A subclass of uvicorn's HTTP protocol class `base` that closes connections idle for `seconds`, refuses
    headers over `max_header_bytes` and answers unparsable requests in OpenAI's error shape."""

    class TimedProtocol(base):
        _idle_timer = None
        _header_bytes = 0               # bytes of the current request's head so far; None once it is complete
        _tail = b""                     # the last bytes seen, to find the head's end across reads

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_idle_timer()

        def on_response_complete(self):
            super().on_response_complete()
            self._header_bytes, self._tail = 0, b""     # the next request's head is counted afresh
            self._arm_idle_timer()              # the next request's headers get the same time

        def data_received(self, data):
            if self._header_bytes is not None:
                seen = self._tail + data
                end = seen.find(b"\r\n\r\n")
                self._header_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
                if self._header_bytes > max_header_bytes:
                    self._refuse(431, "Request Header Fields Too Large",
                                 f"the request's headers are over {max_header_bytes} bytes")
                    return
                if end >= 0:
                    self._header_bytes = None
                self._tail = seen[-3:]
            super().data_received(data)

        def send_400_response(self, msg):        # uvicorn's answer to a request it cannot parse
            self._refuse(400, "Bad Request", "malformed HTTP request (" + msg.rstrip(".") + ")")

        def _refuse(self, status, reason, message):
            if not self.transport.is_closing():
                self.transport.write(error_response(status, reason, message))
                self.transport.close()

        def connection_lost(self, exc):
            self._cancel_idle_timer()
            super().connection_lost(exc)

        def _arm_idle_timer(self):
            self._cancel_idle_timer()
            if not self.transport.is_closing():
                self._idle_timer = asyncio.get_running_loop().call_later(seconds, self._close_if_idle)

        def _cancel_idle_timer(self):
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

        def _close_if_idle(self):
            self._idle_timer = None
            cycle = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                return                          # a request arrived and is being answered
            if not self.transport.is_closing():
                self.transport.close()

    TimedProtocol.__name__ = f"Timed{base.__name__}"
    return TimedProtocol


def uvicorn_config(app, **kwargs):
    """uvicorn.Config for an app made by create_app, with the idle-connection limit of its ServerConfig."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    config = getattr(getattr(app, "state", None), "config", None)
    if config is not None:
        kwargs.setdefault("http", timed_protocol(AutoHTTPProtocol, config.read_timeout))
    return uvicorn.Config(app, **kwargs)
