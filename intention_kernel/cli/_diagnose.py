"""``thread diagnose``: why a thread is blocked or waiting, each reason with its fix.

Why in plain words: a stuck thread is found by an operator under pressure; a held lease, a
pending confirmation, an uncertain write and an incompatible checkpoint look alike from outside,
and each has a different remedy. An uncertain write holds only its own key (a turn that calls
it again fails closed), not the thread: it is reported as such, with an exit code of its own.
Each remedy is a command line that runs as printed (the store as the operator gave it, or
nothing when it came from ``IK_STORE``), with any password hidden. The reasoning lives in
``operations.diagnosis``, shared with the web inspector. A thread known only by its submitted
turn requests (none committed yet) is diagnosed as well: its head request may be what holds it.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..contracts.checkpoint import KernelCheckpoint
from ..contracts.durability import DurabilityStore
from ..operations._inbox import store_inbox
from ..operations.diagnosis import diagnose_thread
from ._agent import load_compatibility
from ._common import (
    CliError,
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


async def _thread(store: DurabilityStore, thread_id: str) -> KernelCheckpoint | None:
    """The thread's checkpoint; a thread with only submitted requests has none."""
    try:
        return await require_thread(store, thread_id)
    except CliError as exc:
        inbox = store_inbox(store)
        if exc.code != "THREAD_NOT_FOUND" or inbox is None:
            raise
        if not await inbox.list_requests(thread_id=thread_id, limit=1):
            raise
        return None


def _inbox_line(inbox: dict[str, Any]) -> str:
    line = f"inbox: {inbox['pending']} pending, {inbox['running']} running, {inbox['dead']} dead"
    head = inbox["head"]
    if head is not None:
        line += f"; next: turn {head['turn_id']} ({head['state']}, attempt {head['attempts']}"
        if head["claimed_by"]:
            line += f", claimed by {head['claimed_by']}"
        line += ")"
    return line


def diagnose(
    thread_id: Annotated[str, typer.Argument(metavar="ID")],
    store: StoreOpt = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="module:attribute, to check checkpoint compatibility."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Explain what blocks a thread or one of its writes (a held lease, a submitted turn that
    holds the thread's later ones back, an uncertain write, a pending confirmation ...).

    Exit 0 when nothing does, 1 when the thread is blocked or waits on the user, 4 when only
    writes await reconciliation (the thread goes on; turns that call those keys fail closed).
    """

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            checkpoint = await _thread(opened, thread_id)
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
            "inbox": None if found.inbox is None else found.inbox.as_dict(),
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
        inbox = data["inbox"]
        if inbox is not None and (inbox["pending"] or inbox["running"] or inbox["dead"]):
            out.print(_inbox_line(inbox), markup=False)
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
