"""``thread diagnose``: why a thread is blocked or waiting, each reason with its fix.

Why in plain words: a stuck thread is found by an operator under pressure; a held lease, a
pending confirmation, an uncertain write and an incompatible checkpoint look alike from outside,
and each has a different remedy. An uncertain write holds only its own key (a turn that calls
it again fails closed), not the thread: it is reported as such, with an exit code of its own.
Each remedy is a command line that runs as printed (the store as the operator gave it, or
nothing when it came from ``IK_STORE``), with any password hidden. The reasoning lives in
``operations.diagnosis``, shared with the web inspector.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..operations.diagnosis import diagnose_thread
from ._agent import load_compatibility
from ._common import (
    ExitCode,
    JsonOpt,
    StoreOpt,
    emit,
    inspector,
    open_store,
    out,
    require_thread,
    run,
    store_argument,
)
from ._threads import thread_app

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    thread_app.command("diagnose")(diagnose)


def diagnose(
    thread_id: Annotated[str, typer.Argument(metavar="ID")],
    store: StoreOpt = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="module:attribute, to check checkpoint compatibility."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Explain what blocks a thread or one of its writes.

    Exit 0 when nothing does, 1 when the thread is blocked or waits on the user, 4 when only
    writes await reconciliation (the thread goes on; turns that call those keys fail closed).
    """

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            checkpoint = await require_thread(opened, thread_id)
            found = await diagnose_thread(
                opened,
                inspector(opened),
                thread_id,
                checkpoint,
                compat=(
                    None
                    if agent is None or checkpoint is None
                    else await load_compatibility(agent, opened)
                ),
                store_arg=store_argument(store),
            )
        return {
            "thread_id": thread_id,
            "revision": found.revision,
            "lease": found.lease,
            "blocked": found.blocked,
            "blocked_keys": found.blocked_keys,
            "findings": [f.as_dict() for f in found.findings],
        }

    data = run(as_json, body)

    def human() -> None:
        state = "BLOCKED" if data["blocked"] else "not blocked"
        keys = data["blocked_keys"]
        if keys:
            state += (
                f"; {len(keys)} write(s) held until reconciled (a turn that calls one fails"
                f" closed): {', '.join(keys)}"
            )
        out.print(f"thread {thread_id}: {state}", markup=False)
        for f in data["findings"]:
            out.print(f"- {f['kind']}: {f['detail']}", markup=False)
            out.print(f"  resolve: {f['resolve']}", markup=False)
        if not data["blocked"]:
            out.print("nothing blocks the next turn")

    emit(as_json, data, human)
    if data["blocked"] or any(f["kind"] == "pending_interaction" for f in data["findings"]):
        raise typer.Exit(int(ExitCode.FINDINGS))
    if data["blocked_keys"]:
        raise typer.Exit(int(ExitCode.WRITES_HELD))
