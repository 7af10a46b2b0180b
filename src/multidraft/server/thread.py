"""Run an app with uvicorn on a background thread (tests, notebooks, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time


class ServerThread:
    """`with ServerThread(app) as server: server.url` serves on a free loopback port until the block ends.

    The socket is bound before uvicorn starts, so the port is known and no other process can take it.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.app, self.host, self.requested_port, self.log_level = app, host, port, log_level
        self.port = None
        self._server = None
        self._thread = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.requested_port))
        self.port = sock.getsockname()[1]
        from multidraft.server.connections import uvicorn_config
        self._server = uvicorn.Server(uvicorn_config(self.app, log_level=self.log_level, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="multidraft-uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
