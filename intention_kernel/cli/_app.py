"""The root ``intention-kernel`` application: mounts each command group.

Usage errors (an unknown option, a value out of range, a missing argument) are reported like
every other error: one ``error: [USAGE_ERROR] ...`` line, or one JSON document with ``--json``,
and exit code 2.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ..__version__ import __version__
from . import _budgets as budgets
from . import _compat as compat
from . import _diagnose as diagnose
from . import _extras as extras
from . import _inbox as inbox
from . import _ingress as ingress
from . import _maintenance as maintenance
from . import _outbox as outbox
from . import _receipts as receipts
from . import _schedules as schedules
from . import _serve as serve
from . import _threads as threads
from . import _worker as worker
from ._common import ExitCode, report_error

__all__ = ["app", "run"]


def _usage_error(exc: typer.TyperException, as_json: bool) -> int:
    # Typer itself tells "no arguments: show the help" apart by the class name (its class is
    # not public); the help is the useful answer there.
    if type(exc).__name__ == "NoArgsIsHelpError":
        text = exc.format_message()  # empty when typer printed the help itself
        if text.strip():
            print(text)
        return int(ExitCode.USAGE)
    ctx: Any = getattr(exc, "ctx", None)
    hint = f"Try '{ctx.command_path} --help' for help." if ctx is not None else ""
    context = {} if ctx is None else {"command": ctx.command_path}
    report_error(as_json, "USAGE_ERROR", exc.format_message(), context, hint)
    return int(ExitCode.USAGE)


class _Root(TyperGroup):
    """Runs the command line without click's own error printing (see the module docstring)."""

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            result = super().main(
                args=argv,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = result if isinstance(result, int) else 0
        except typer.TyperException as exc:
            code = _usage_error(exc, "--json" in argv)
        except typer.Abort:
            report_error("--json" in argv, "ABORTED", "stopped before finishing", {})
            code = int(ExitCode.FINDINGS)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="intention-kernel",
    cls=_Root,
    help="Operate an intention-kernel store: inspect, reconcile, check compatibility, migrate,"
    " relay the outbox, run submitted turns, serve an agent over HTTP."
    " Exit codes: 0 ok, 1 findings, 2 usage or input error, 3 store error.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        print(f"intention-kernel {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_show_version
        ),
    ] = False,
) -> None:
    """Operate an intention-kernel store."""


for module in (
    threads,
    diagnose,
    receipts,
    compat,
    maintenance,
    budgets,
    outbox,
    inbox,
    schedules,
    worker,
    ingress,
    extras,
    serve,
):
    module.register(app)


def run(argv: list[str]) -> int:
    """Run ``app`` on ``argv`` and return its exit code instead of exiting."""
    try:
        app(args=argv, prog_name="intention-kernel", standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return 0
