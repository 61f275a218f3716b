"""``serve`` and ``hash-token``: the HTTP service of an agent, and the tokens it accepts.

Why ``serve`` refuses to start without tokens: an agent that books and charges must not be
reachable by anyone who finds the port; ``--allow-anonymous`` says so explicitly (a trial on
loopback). The tokens file holds only digests (``principal sha256:<hex> [role,role]``), made
by ``hash-token``, so it hands out no secret. ``--inspector`` adds the operators' web pages,
where a principal logs in with the same token (roles ``viewer`` and ``operator``); its queue
shows the key the provider received, from the served agent's ``provider_key``. On a store with
a turn inbox the process also runs ``--workers`` workers for the turns it (or any instance)
submits; ``--busy`` says what a turn for a busy thread does.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ._agent import load_served_agent
from ._common import CliError, StoreOpt, err, open_store, run

__all__ = ["register"]

_HTTP_HINT = "the HTTP service needs its extra: pip install 'intention-kernel[http]'"


class Busy(StrEnum):
    """What a turn for a thread with a turn in progress does (``create_app(busy=...)``)."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    WAIT = "wait"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("hash-token")(hash_token_command)


def serve(
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="module:attribute of a factory called with the opened store that returns a"
            " CompiledAgent (e.g. intention_kernel.examples.travel_desk:compile_desk).",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = 8000,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            envvar="IK_TOKENS",
            help="File of 'principal sha256:<hex>' lines (see hash-token; env IK_TOKENS).",
            show_default=False,
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool, typer.Option("--allow-anonymous", help="Serve without authentication.")
    ] = False,
    turn_timeout: Annotated[
        float,
        typer.Option(
            "--turn-timeout",
            min=0.1,
            help="Seconds a request follows its turn (with --busy wait: a turn may run).",
        ),
    ] = 60.0,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            "--shutdown-grace", min=0, max=3600, help="Seconds running turns get at SIGTERM."
        ),
    ] = 20.0,
    pool_size: Annotated[
        int, typer.Option("--pool-size", min=1, max=200, help="PostgreSQL connections.")
    ] = 10,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=0,
            max=64,
            help="In-process workers running submitted turns (each runs up to 4 at once); 0:"
            " none, other processes run them. Only on a store with a turn inbox.",
        ),
    ] = 1,
    busy: Annotated[
        Busy,
        typer.Option(
            "--busy",
            help="A turn for a busy thread: enqueue (run after the thread's earlier turns),"
            " reject (409 THREAD_BUSY) or wait (run in the request, waiting for the thread).",
        ),
    ] = Busy.ENQUEUE,
    inspector: Annotated[
        bool,
        typer.Option(
            "--inspector",
            help="Also serve the operators' web inspector at /inspect (docs/inspector.md).",
        ),
    ] = False,
    session_secret_file: Annotated[
        Path | None,
        typer.Option(
            "--session-secret-file",
            envvar="IK_SESSION_SECRET_FILE",
            help="File holding the secret (32 bytes or more) that signs the inspector's login"
            " form; without it, one is made per process (env IK_SESSION_SECRET_FILE).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the agent over HTTP until SIGTERM or SIGINT (docs/http.md).

    POST /v1/threads/{thread_id}/turns with the turn id as Idempotency-Key: a retry with the
    same key returns the same answer and runs nothing. On a store with a turn inbox the turn is
    submitted and run by a worker, whatever happens to the request. At SIGTERM readiness
    answers 503, running turns get --shutdown-grace seconds, then are cancelled.
    """

    async def body() -> None:
        try:
            from ..http import BearerTokens, Server, create_app, server_config
        except ImportError:
            raise CliError("MISSING_EXTRA", _HTTP_HINT) from None
        if tokens is None and not allow_anonymous:
            raise CliError(
                "UNAUTHENTICATED_SERVICE",
                "give --tokens FILE (lines 'principal sha256:<hex>', see hash-token), or"
                " --allow-anonymous to serve without authentication",
                context={"setting": "--tokens"},
            )
        authenticate = None if tokens is None else BearerTokens.from_file(tokens)
        if inspector and authenticate is None:
            raise CliError(
                "UNAUTHENTICATED_SERVICE",
                "the inspector needs --tokens: operators log in with their token",
                context={"setting": "--inspector"},
            )
        secret: bytes | None = None
        if session_secret_file is not None:
            try:
                secret = session_secret_file.read_bytes().strip()
            except OSError as exc:
                raise CliError(
                    "INVALID_SECRET",
                    f"cannot read the session secret file: {type(exc).__name__}",
                    context={"setting": "--session-secret-file"},
                ) from None
        async with open_store(store, pool_size=pool_size) as opened:
            served = await load_served_agent(agent, opened)
            app = create_app(
                served,
                store=opened,
                authenticate=authenticate,
                allow_anonymous=authenticate is None,
                turn_timeout=turn_timeout,
                shutdown_grace=shutdown_grace,
                inspector=inspector,
                session_secret=secret,
                busy=str(busy),
                workers=workers,
            )
            server = Server(server_config(app, host=host, port=port))
            await server.serve()

    run(False, body)


def hash_token_command(
    principal: Annotated[str, typer.Argument(help="Who the token belongs to.")],
) -> None:
    """Read a token on stdin and print its tokens-file line: 'principal sha256:<hex>'
    (append ' operator' or ' viewer' for the inspector's roles)."""
    if sys.stdin.isatty():
        token = typer.prompt("token", hide_input=True)
    else:
        token = sys.stdin.readline().rstrip("\r\n")

    async def body() -> str:
        try:
            from ..http._auth import Principal, hash_token
        except ImportError:
            raise CliError("MISSING_EXTRA", _HTTP_HINT) from None
        if len(token) < 8:
            raise CliError("INVALID_TOKEN", "a bearer token must be at least 8 characters")
        return f"{Principal(principal).id} {hash_token(token)}"

    print(run(False, body))
    err.print("keep the token itself secret; the line holds only its digest", markup=False)
