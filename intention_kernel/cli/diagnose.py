"""``thread diagnose``: why a thread is blocked or waiting, each reason with its fix.

Why in plain words: a stuck thread is found by an operator under pressure; a held lease, a
pending confirmation, an uncertain write and an incompatible checkpoint look alike from outside
(the next turn fails or waits), and each has a different remedy. Each remedy is a command line
that runs as printed (the store as the operator gave it, or nothing when it came from
``IK_STORE``), with any password hidden.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import typer

from ..contracts.errors import CheckpointIncompatibleError
from ..contracts.receipts import ReceiptStatus
from ..durability.factory import redact
from ..kernel.compat import admit_checkpoint
from ._agent import load_compatibility
from ._common import (
    ExitCode,
    JsonOpt,
    StoreOpt,
    emit,
    inspector,
    open_store,
    out,
    run,
    store_argument,
)
from .threads import require_thread, thread_app

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    thread_app.command("diagnose")(diagnose)


def _finding(kind: str, blocking: bool, detail: str, resolve: str) -> dict[str, Any]:
    # A holder's command line or a stored text may carry a password as well.
    return {
        "kind": kind,
        "blocking": blocking,
        "detail": redact(detail),
        "resolve": redact(resolve),
    }


def diagnose(
    thread_id: Annotated[str, typer.Argument(metavar="ID")],
    store: StoreOpt = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="module:attribute, to check checkpoint compatibility."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Explain what blocks a thread; exit 1 when something does, 0 when it is free."""
    q = shlex.quote

    async def body() -> dict[str, Any]:
        findings: list[dict[str, Any]] = []
        store_arg = store_argument(store)
        async with open_store(store) as opened:
            checkpoint = await require_thread(opened, thread_id)
            lease = await inspector(opened).lease_info(thread_id)
            receipts = await opened.list_receipts(thread_id=thread_id, limit=1000)
            undelivered: list[int] = []
            dead: list[int] = []
            after = 0
            while True:
                page = await opened.read_outbox(thread_id=thread_id, after_position=after)
                for stored in page:
                    if stored.dead:
                        dead.append(stored.position)
                    elif stored.delivered_at is None:
                        undelivered.append(stored.position)
                if len(page) < 1000:
                    break
                after = page[-1].position
        if lease.held:
            who = lease.holder or "another process"
            since = f" since {lease.since.isoformat()}" if lease.since else ""
            expires = (
                f"expires at {lease.expires_at.isoformat()}"
                if lease.expires_at
                else "it has no deadline: it is released when the holder finishes or exits"
            )
            findings.append(
                _finding(
                    "lease_held",
                    True,
                    f"the thread's lease is held by {who}{since} (epoch {lease.epoch}); {expires}."
                    " A turn is running now, or its process hangs.",
                    "wait for the running turn; if the holder hangs, stop that process"
                    + (f" (kill {who.split()[1]})" if who.startswith("pid ") else ""),
                )
            )
        for r in receipts:
            base = f"intention-kernel reconcile {q(thread_id)} {q(r.idempotency_key)}"
            resolve = (
                f"check the provider, then: {base} --completed --value JSON"
                f" --note TEXT --actor NAME{store_arg}  (or --not-applied)"
            )
            if r.status is ReceiptStatus.UNCERTAIN:
                findings.append(
                    _finding(
                        "uncertain_receipt",
                        True,
                        f"the write {r.idempotency_key} ({r.capability_id}, turn {r.turn_id})"
                        " may or may not have happened; every turn that needs it fails closed.",
                        resolve,
                    )
                )
            elif r.status is ReceiptStatus.PREPARED and not lease.held:
                # No turn runs it: the turn ended before recording the outcome (interrupted).
                findings.append(
                    _finding(
                        "prepared_receipt",
                        True,
                        f"the write {r.idempotency_key} ({r.capability_id}, turn {r.turn_id})"
                        " was interrupted: its turn ended before recording the outcome, so it"
                        " may or may not have happened; every turn that needs it fails closed.",
                        resolve,
                    )
                )
        if checkpoint is not None and checkpoint.interaction is not None:
            i = checkpoint.interaction
            findings.append(
                _finding(
                    "pending_interaction",
                    False,
                    f"waiting on a {i.kind} from turn {i.turn_id}: {i.prompt!r}"
                    + (f" (agenda item {i.agenda_item_id})" if i.agenda_item_id else ""),
                    "the user answers it in the next turn of this thread",
                )
            )
        if checkpoint is not None and agent is not None:
            try:
                admit_checkpoint(checkpoint, load_compatibility(agent))
            except CheckpointIncompatibleError as exc:
                findings.append(
                    _finding(
                        "incompatible_checkpoint",
                        True,
                        f"{exc.message} (stored fingerprint {checkpoint.agent_fingerprint},"
                        f" schema {checkpoint.schema_version})",
                        "compile the agent with compatible_with=["
                        f"{checkpoint.agent_fingerprint!r}] or register a migration from it",
                    )
                )
        if dead:
            findings.append(
                _finding(
                    "dead_events",
                    False,
                    f"{len(dead)} outbox event(s) were given up after repeated failures"
                    f" (positions {dead[:10]}); later events of this thread wait behind them.",
                    f"fix the sink, then: intention-kernel outbox requeue{store_arg}"
                    f" --thread-id {q(thread_id)}",
                )
            )
        if undelivered:
            findings.append(
                _finding(
                    "undelivered_events",
                    False,
                    f"{len(undelivered)} outbox event(s) are not delivered yet.",
                    f"run a relay: intention-kernel outbox relay{store_arg} --sink URL",
                )
            )
        return {
            "thread_id": thread_id,
            "revision": None if checkpoint is None else checkpoint.revision,
            "lease": lease,
            "blocked": any(f["blocking"] for f in findings),
            "findings": findings,
        }

    data = run(as_json, body)

    def human() -> None:
        state = "BLOCKED" if data["blocked"] else "not blocked"
        out.print(f"thread {thread_id}: {state}", markup=False)
        for f in data["findings"]:
            out.print(f"- {f['kind']}: {f['detail']}", markup=False)
            out.print(f"  resolve: {f['resolve']}", markup=False)
        if not data["blocked"]:
            out.print("nothing blocks the next turn")

    emit(as_json, data, human)
    if data["blocked"] or any(f["kind"] == "pending_interaction" for f in data["findings"]):
        raise typer.Exit(int(ExitCode.FINDINGS))
