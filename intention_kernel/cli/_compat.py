"""``check-compat``: the deployment gate over every stored checkpoint.

Why scan every thread: a new agent definition refuses checkpoints it was not declared
compatible with, so a deploy that strands live threads should fail in CI, not at the next turn.
Migrations run in memory only; nothing is written. The scan lives in
``operations.compat_report``, shared with the web inspector.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.progress import Progress

from ..operations.compat_report import compat_report
from ._agent import load_compatibility
from ._common import ExitCode, JsonOpt, StoreOpt, emit, err, inspector, open_store, out, run

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("check-compat")(check_compat)


def check_compat(
    agent: Annotated[str, typer.Option("--agent", help="package.module:attribute")],
    store: StoreOpt = None,
    compatible_with: Annotated[
        list[str] | None,
        typer.Option("--compatible-with", help="Extra fingerprint to accept (repeatable)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Exit 1 when the agent would refuse any stored checkpoint (a deploy gate)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            compat = await load_compatibility(agent, opened, compatible_with or ())
            inspect = inspector(opened)
            total = (await inspect.store_status()).threads
            with Progress(console=err, transient=True, disable=as_json) as progress:
                task = progress.add_task("checking checkpoints", total=total)
                report = await compat_report(
                    opened, inspect, compat, advance=lambda: progress.advance(task)
                )
        return report.as_dict()

    data = run(as_json, body)

    def human() -> None:
        out.print(f"agent fingerprint {data['agent_fingerprint']}", markup=False)
        out.print(f"checkpoints scanned: {data['checkpoints']}")
        for version, count in data["schema_versions"].items():
            out.print(f"  schema version {version}: {count}")
        for fingerprint, count in data["fingerprints"].items():
            mark = "" if fingerprint == data["agent_fingerprint"] else "  (other definition)"
            out.print(f"  fingerprint {fingerprint}: {count}{mark}", markup=False)
        if data["refused"]:
            out.print(f"REFUSED: {len(data['refused'])} thread(s) could not be loaded:")
            for item in data["refused"]:
                out.print(f"  {item['thread_id']}: {item['reason']}", markup=False)
        else:
            out.print("ok: every stored checkpoint loads under this agent")

    emit(as_json, data, human)
    if data["refused"]:
        raise typer.Exit(int(ExitCode.FINDINGS))
