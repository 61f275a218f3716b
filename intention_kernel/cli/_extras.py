"""``demo``: the scripted demo, which lives in ``intention_kernel.demo``, mounted here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import run

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Keep demo.db here (default: a temporary directory)."),
    ] = None,
) -> None:
    """Run the demo: a scripted agent on the embedded store, a lost response, a reconcile, a
    worker killed mid-turn.

    With --dir the store stays, so the other commands can inspect it afterwards.
    """
    from ..demo import main

    async def body() -> None:
        await main([] if directory is None else ["--dir", str(directory)])

    run(False, body)
