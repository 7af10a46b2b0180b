"""`multidraft serve`: an OpenAI-compatible HTTP server and an autocomplete page.

    from multidraft.server import ServerConfig, create_app, ServerThread
    app = create_app(lm, ServerConfig())          # a FastAPI app; run it with uvicorn
    with ServerThread(app) as server:             # or in a background thread on a free loopback port
        print(server.url)
"""

from multidraft.server.config import ServerConfig
from multidraft.server.app import create_app
from multidraft.server.thread import ServerThread

__all__ = ["ServerConfig", "create_app", "ServerThread"]
