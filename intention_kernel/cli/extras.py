"""``demo`` and ``outbox ...``: commands that live in other modules, mounted here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
    app.command("outbox", context_settings=_PASS_THROUGH, add_help_option=False)(outbox)


def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Keep demo.db here (default: a temporary directory)."),
    ] = None,
) -> None:
    """Run the demo: a scripted agent on the embedded store, a lost response, a reconcile.

    With --dir the store stays, so the other commands can inspect it afterwards.
    """
    from ..demo import main

    asyncio.run(main([] if directory is None else ["--dir", str(directory)]))


def outbox(ctx: typer.Context) -> None:
    """Outbox relay commands: relay, check-sink, stats, dead, requeue, prune (see --help)."""
    from ..relay.cli import relay_main

    try:
        code = relay_main(list(ctx.args))
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        code = exc.code if isinstance(exc.code, int) else 2
    raise typer.Exit(code)
