"""The root ``intention-kernel`` application: mounts each command group."""

from __future__ import annotations

import typer

from . import compat, diagnose, extras, maintenance, outbox, receipts, threads

__all__ = ["app", "run"]

app = typer.Typer(
    name="intention-kernel",
    help="Operate an intention-kernel store: inspect, reconcile, check compatibility, migrate,"
    " relay the outbox."
    " Exit codes: 0 ok, 1 findings, 2 usage or input error, 3 store error.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (threads, diagnose, receipts, compat, maintenance, outbox, extras):
    module.register(app)


def run(argv: list[str]) -> int:
    """Run ``app`` on ``argv`` and return its exit code instead of exiting."""
    try:
        app(args=argv, prog_name="intention-kernel", standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return 0
