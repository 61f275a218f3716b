"""``Server``: uvicorn, told to drain the service as soon as it is asked to stop.

Why a subclass: an ASGI application hears of shutdown only after the server waited for every
open request, so a turn that hangs would hold the process forever. This server starts the
service's drain first (readiness 503, running turns get the grace, then are cancelled), then
stops as uvicorn does; ``timeout_graceful_shutdown`` is a backstop past the grace. SIGTERM and
SIGINT stop it without being raised again afterwards, so the caller closes its store and the
process exits with status 0 after a graceful stop.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import socket
import threading
from collections.abc import Generator

import uvicorn
from starlette.applications import Starlette

from ..contracts.errors import ConfigurationError
from ._service import SERVICE_STATE, Service

__all__ = ["Server", "server_config"]

_PARSER = "httptools"
"""uvicorn's HTTP/1.1 implementation the service runs with: llhttp refuses a request that
declares both ``Content-Length`` and ``Transfer-Encoding`` (and closes its connection), where
h11, uvicorn's fallback, reads it as chunked and serves what follows as another request."""


def server_config(app: Starlette, *, host: str, port: int, **options: object) -> uvicorn.Config:
    """A uvicorn configuration for ``app`` with a shutdown backstop past its grace, parsing
    HTTP/1.1 with httptools (``_PARSER``; another ``http=`` is the caller's choice)."""
    service: Service = getattr(app.state, SERVICE_STATE)
    options.setdefault("timeout_graceful_shutdown", int(service.shutdown_grace) + 10)
    options.setdefault("http", _PARSER)
    if options["http"] == _PARSER and importlib.util.find_spec("httptools") is None:
        raise ConfigurationError(
            "the HTTP service parses requests with httptools: pip install 'intention-kernel[http]'",
            context={"setting": "http"},
        )
    options.setdefault("log_level", "info")
    return uvicorn.Config(app, host=host, port=port, lifespan="on", **options)  # type: ignore[arg-type]


class Server(uvicorn.Server):
    """``uvicorn.Server`` that drains the service before it stops listening."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        service = getattr(getattr(app, "state", None), SERVICE_STATE, None)
        if isinstance(service, Service):
            service.begin_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose for port 0)."""
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.config.port)
