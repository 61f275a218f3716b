"""The HTTP service (the ``http`` extra: Starlette and uvicorn).

``create_app(agent, authenticate=BearerTokens(...))`` is an ASGI application: ``POST
/v1/threads/{thread_id}/turns`` with the turn id as ``Idempotency-Key`` (submitted to the
store's turn inbox and run by in-process workers, so it does not depend on its connection), a
turn's state and events (rejoined with ``Last-Event-ID``), thread reads, health, readiness and
an OpenAPI document; ``Server`` runs it with uvicorn and drains running turns at shutdown. See
``docs/http.md``.
"""

from __future__ import annotations

from ._app import create_app
from ._auth import Authenticator, Authorizer, BearerTokens, Principal, hash_token
from ._server import Server, server_config

__all__ = [
    "Authenticator",
    "Authorizer",
    "BearerTokens",
    "Principal",
    "Server",
    "create_app",
    "hash_token",
    "server_config",
]
