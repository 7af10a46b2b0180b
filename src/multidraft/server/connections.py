"""Connections that hold a socket without sending a request are closed after `ServerConfig.read_timeout`.

uvicorn times out idle keep-alive connections between requests, but not a connection that never sends a request
or sends its headers a byte at a time (slowloris): each holds a socket and a file descriptor for ever. This wraps
uvicorn's HTTP protocol: from the moment a connection opens, and again after each response, the client has
`read_timeout` seconds to complete its next request's headers, or the connection is closed. (The body then has
the same time: security.py reads it under that limit; answering may take as long as the request's own timeout.)
"""

from __future__ import annotations

import asyncio


def timed_protocol(base: type, seconds: float) -> type:
    """A subclass of uvicorn's HTTP protocol class `base` that closes connections idle for `seconds`."""

    class TimedProtocol(base):
        _idle_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_idle_timer()

        def on_response_complete(self):
            super().on_response_complete()
            self._arm_idle_timer()              # the next request's headers get the same time

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
