"""`multidraft serve`: an OpenAI-compatible HTTP server and an autocomplete page.

    from multidraft.server import ServerConfig, create_app, ServerThread
    app = create_app(lm, ServerConfig())          # a FastAPI app; run it with uvicorn
    with ServerThread(app) as server:             # or in a background thread on a free loopback port
        print(server.url)
"""

from multidraft.server.config import ServerConfig
from multidraft.server.thread import ServerThread

__all__ = ["ServerConfig", "create_app", "ServerThread"]


def __getattr__(name):
    # create_app on first use: the app imports FastAPI (~0.25 s), which `multidraft bench`, `generate` and the
    # other commands never need (and a machine without the server's packages can still run them)
    if name == "create_app":
        from multidraft.server.app import create_app
        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
