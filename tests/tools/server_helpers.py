"""A live `corral serve` for the tests: uvicorn on 127.0.0.1 and a free port, in a thread of the
test process, stopped when the `with` block ends."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import uvicorn
from corral.tools.batch import Engine
from corral.tools.server import Server, ServerConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(model, config: ServerConfig):
    """Yield `(base_url, server)` of a running server over `model`; fails loudly if it does not
    start within 30 s."""
    server = Server(Engine(model, config.model_name), config)
    port = free_port()
    uv = uvicorn.Server(
        uvicorn.Config(server.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
