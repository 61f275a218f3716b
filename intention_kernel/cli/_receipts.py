"""``receipts`` and ``reconcile``: find uncertain writes and record what really happened.

Why the operator must say ``--completed --value`` or ``--not-applied``: only someone who looked
at the provider knows; the next turn then replays the value or retries once. ``--completed``
needs the value (``--value null`` when the provider returned nothing): a forgotten value would
be replayed as the provider's result. ``reconcile`` shows what it will record and asks before
writing (``--yes`` for scripts).

A ``prepared`` receipt whose turn is not running any more (no live holder of the thread's lease)
was interrupted before its outcome was recorded: the store lists it among the uncertain ones, as
stored, and this command shows it as ``prepared (interrupted)`` (JSON: ``"interrupted": true``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
from pydantic import JsonValue

from ..contracts.durability import DurabilityStore
from ..contracts.receipts import (
    EffectReceipt,
    ReceiptStatus,
    ReconcileOutcome,
    ReconciliationRecord,
)
from ._common import (
    CliError,
    ExitCode,
    JsonOpt,
    StoreOpt,
    age,
    emit,
    err,
    open_store,
    out,
    print_table,
    require_thread,
    run,
)

__all__ = ["interrupted_keys", "register", "status_label"]


async def interrupted_keys(
    store: DurabilityStore, receipts: Sequence[EffectReceipt], *, listed_uncertain: bool = False
) -> set[tuple[str, str]]:
    """``(thread_id, key)`` of the ``prepared`` receipts among ``receipts`` whose turn was
    interrupted: those the store lists as uncertain (``listed_uncertain``: ``receipts`` is such
    a listing already), one listing per thread otherwise."""
    prepared = [r for r in receipts if r.status is ReceiptStatus.PREPARED]
    if listed_uncertain:
        return {(r.thread_id, r.idempotency_key) for r in prepared}
    found: set[tuple[str, str]] = set()
    for thread_id in sorted({r.thread_id for r in prepared}):
        listed = await store.list_receipts(
            status=ReceiptStatus.UNCERTAIN, thread_id=thread_id, limit=1000
        )
        found |= {(r.thread_id, r.idempotency_key) for r in listed}
    return found


def status_label(status: str, interrupted: bool) -> str:
    return f"{status} (interrupted)" if interrupted else status


class StatusChoice(StrEnum):
    uncertain = "uncertain"
    prepared = "prepared"
    completed = "completed"
    failed = "failed"
    all = "all"


def register(app: typer.Typer) -> None:
    app.command("receipts")(receipts)
    app.command("reconcile")(reconcile)


def receipts(
    store: StoreOpt = None,
    status: Annotated[StatusChoice, typer.Option(help="Receipt status.")] = StatusChoice.uncertain,
    thread: Annotated[str | None, typer.Option("--thread", help="Only this thread.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    history: Annotated[
        bool, typer.Option("--history", help="Show the reconciliation audit log instead.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Receipts across threads, oldest first (default: the uncertain ones to reconcile, with
    prepared ones whose turn was interrupted)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            if thread is not None:
                await require_thread(opened, thread)
            if history:
                return {"reconciliations": await opened.reconciliations(thread_id=thread)}
            wanted = None if status is StatusChoice.all else ReceiptStatus(status.value)
            rows = await opened.list_receipts(status=wanted, thread_id=thread, limit=limit)
            interrupted = await interrupted_keys(
                opened, rows, listed_uncertain=wanted is ReceiptStatus.UNCERTAIN
            )
        return {
            "receipts": [
                {
                    "thread_id": r.thread_id,
                    "idempotency_key": r.idempotency_key,
                    "capability_id": r.capability_id,
                    "turn_id": r.turn_id,
                    "status": str(r.status),
                    "interrupted": (r.thread_id, r.idempotency_key) in interrupted,
                    "receipt_id": r.id,
                    "attempts": r.attempts,
                    "error": r.error,
                    "updated_at": r.updated_at,
                    "age": age(r.updated_at),
                }
                for r in rows
            ]
        }

    data = run(as_json, body)

    def human() -> None:
        where = "" if thread is None else f" on thread {thread}"
        if history and not data["reconciliations"]:
            out.print(f"no reconciliations{where}", markup=False)
            return
        if history:
            print_table(
                ("recorded", "thread", "key", "outcome", "actor", "note"),
                [
                    (
                        rec.recorded_at.isoformat(timespec="seconds"),
                        rec.thread_id,
                        rec.idempotency_key,
                        rec.outcome,
                        rec.actor,
                        rec.note,
                    )
                    for rec in data["reconciliations"]
                ],
                ids=("thread", "key"),
            )
            return
        if not data["receipts"]:
            kind = "" if status is StatusChoice.all else f" {status.value}"
            out.print(f"no{kind} receipts{where}", markup=False)
            return
        print_table(
            ("age", "thread", "capability", "key", "turn", "status"),
            [
                (
                    r["age"],
                    r["thread_id"],
                    r["capability_id"],
                    r["idempotency_key"],
                    r["turn_id"],
                    status_label(r["status"], r["interrupted"]),
                )
                for r in data["receipts"]
            ],
            ids=("thread", "capability", "key", "turn"),
        )

    emit(as_json, data, human)


_AWAITING = (ReceiptStatus.UNCERTAIN, ReceiptStatus.PREPARED)
"""Receipts a reconciliation resolves (others are refused by the store, with nothing to ask)."""


def parse_value(text: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(text)
    except RecursionError:
        raise CliError("INVALID_JSON", "--value is nested too deeply") from None
    except ValueError as exc:
        raise CliError("INVALID_JSON", f"--value is not valid JSON: {exc}") from None
    return value


def _confirm(
    receipt: EffectReceipt,
    outcome: ReconcileOutcome,
    value: JsonValue,
    note: str,
    actor: str,
    replaces: ReconciliationRecord | None = None,
) -> None:
    """Show exactly what will be recorded, on stderr (stdout may be JSON), and ask."""
    effect = (
        "the next turn replays this value as the provider's result"
        if outcome == "completed"
        else "the receipt becomes failed and the next turn may call the provider once more"
    )
    lines = [
        f"thread {receipt.thread_id}, receipt {receipt.idempotency_key}"
        f" ({receipt.capability_id}, turn {receipt.turn_id}, now {receipt.status})",
        f"  outcome: {outcome}: {effect}",
    ]
    if outcome == "completed":
        lines.append(f"  value:   {json.dumps(value, ensure_ascii=False, sort_keys=True)}")
    lines += [f"  note:    {note}", f"  actor:   {actor}"]
    if replaces is not None:
        earlier = f"  corrects the reconciliation {replaces.id} by {replaces.actor}"
        earlier += f" ({replaces.recorded_at.isoformat(timespec='seconds')}): {replaces.outcome}"
        if replaces.outcome == "completed":
            earlier += f", value {json.dumps(replaces.value, ensure_ascii=False, sort_keys=True)}"
        lines.append(earlier)
    err.print("\n".join(lines), markup=False)
    try:
        confirmed = typer.confirm("Record this in the audit log?", default=False, err=True)
    except typer.Abort:  # no answer (stdin closed): the same as no
        confirmed = False
    if not confirmed:
        raise CliError(
            "NOT_CONFIRMED",
            "nothing was recorded (--yes records without asking)",
            ExitCode.FINDINGS,
        )


def reconcile(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD")],
    key: Annotated[str, typer.Argument(metavar="KEY", help="The receipt's idempotency key.")],
    store: StoreOpt = None,
    completed: Annotated[
        bool, typer.Option("--completed", help="The write happened (give --value).")
    ] = False,
    not_applied: Annotated[
        bool, typer.Option("--not-applied", help="The write did not happen (a retry may run).")
    ] = False,
    value: Annotated[
        str | None,
        typer.Option(
            "--value",
            help="The provider's result, as JSON (required with --completed; 'null' for none).",
        ),
    ] = None,
    note: Annotated[str, typer.Option("--note", help="Evidence: what you checked.")] = "",
    actor: Annotated[str, typer.Option("--actor", help="Who decided (audit log).")] = "",
    correct: Annotated[
        bool,
        typer.Option(
            "--correct",
            help="Correct this receipt's last reconciliation (a new audit record supersedes it).",
        ),
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Record without asking (for scripts).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resolve an uncertain (or interrupted prepared) receipt, or --correct a reconciliation;
    recorded in the audit log (see receipts --history). Shows what will be recorded and asks
    first, unless --yes. A prepared receipt is resolved holding the thread's lease: while a turn
    still runs it, this waits for the store's lock timeout, then fails (LOCK_TIMEOUT)."""

    async def body() -> dict[str, Any]:
        if completed == not_applied:
            raise CliError("INVALID_OUTCOME", "give exactly one of --completed or --not-applied")
        if not_applied and value is not None:
            raise CliError("INVALID_OUTCOME", "--value goes with --completed only")
        if completed and value is None:
            raise CliError(
                "VALUE_REQUIRED",
                "--completed needs --value: the provider's result as JSON, replayed by the"
                " next turn (--value null if it returned nothing)",
            )
        if not note.strip() or not actor.strip():
            raise CliError("AUDIT_REQUIRED", "give --note (the evidence) and --actor (who)")
        outcome: ReconcileOutcome = "completed" if completed else "not_applied"
        parsed = None if value is None else parse_value(value)
        async with open_store(store) as opened:
            current = await opened.get_receipt(thread_id, key)
            if correct:
                history = await opened.reconciliations(thread_id=thread_id, idempotency_key=key)
                if not yes and current is not None and history:
                    _confirm(current, outcome, parsed, note, actor, history[-1])
            elif not yes and current is not None and current.status in _AWAITING:
                _confirm(current, outcome, parsed, note, actor)
            receipt = await opened.reconcile(
                thread_id, key, outcome, value=parsed, note=note, actor=actor, correct=correct
            )
        return {"receipt": receipt, "outcome": outcome}

    data = run(as_json, body)
    emit(
        as_json,
        data,
        lambda: out.print(
            f"{key} on {thread_id}: now {data['receipt'].status}"
            f" ({'the next turn replays the value' if completed else 'a retry may run once'})",
            markup=False,
        ),
    )
