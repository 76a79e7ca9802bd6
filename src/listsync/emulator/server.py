"""Run the emulator under uvicorn: in the foreground (the CLI) or in a background thread (tests)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from listsync.emulator.app import create_app
from listsync.emulator.config import EmulatorConfig

STARTUP_TIMEOUT_SECONDS = 10.0


def _uvicorn_server(app: FastAPI, log_level: str) -> uvicorn.Server:
    # No lifespan: the app has no startup work, and skipping it keeps start-up short.
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False))


@contextmanager
def serve_in_thread(
    config: EmulatorConfig | FastAPI, host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """Serve an emulator on a live socket; yield its base URL (``http://127.0.0.1:<port>``).

    :param config: a config, or an app made by ``create_app`` when the caller wants its
        ``app.state.emulator`` handle (or a custom clock).
    :param port: 0 picks a free port.

    The server stops, and its thread ends, when the ``with`` block exits.
    """
    app = config if isinstance(config, FastAPI) else create_app(config)
    # Binding here, not in uvicorn, tells us the port before the server thread starts.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = _uvicorn_server(app, "warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the emulator did not start")
            time.sleep(0.005)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_TIMEOUT_SECONDS)
        sock.close()


def serve_forever(config: EmulatorConfig, host: str, port: int) -> None:
    """Serve in the foreground until interrupted (Ctrl-C or SIGTERM)."""
    server = _uvicorn_server(create_app(config), "info")
    server.config.host = host
    server.config.port = port
    server.run()
