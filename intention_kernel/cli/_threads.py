"""``threads``, ``thread show``, ``turns`` and ``events``: reading a store's threads back."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ..contracts.checkpoint import KernelCheckpoint
from ..operations._history import turn_answer, turn_input
from ._common import (
    JsonOpt,
    StoreOpt,
    age,
    emit,
    inspector,
    open_store,
    out,
    print_table,
    require_thread,
    run,
)
from ._receipts import interrupted_keys, status_label

__all__ = ["register", "thread_app"]

thread_app = typer.Typer(help="One thread: show its checkpoint or diagnose why it is blocked.")


def register(app: typer.Typer) -> None:
    app.command("threads")(threads)
    app.command("turns")(turns)
    app.command("events")(events)
    thread_app.command("show")(show)
    app.add_typer(thread_app, name="thread")


def threads(
    store: StoreOpt = None,
    prefix: Annotated[str | None, typer.Option(help="Only ids starting with this.")] = None,
    after: Annotated[str | None, typer.Option(help="Page cursor: ids after this one.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    fingerprint: Annotated[
        str | None, typer.Option(help="Only threads whose checkpoint has this fingerprint.")
    ] = None,
    uncertain: Annotated[
        bool,
        typer.Option(help="Only threads with uncertain (or interrupted prepared) receipts."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List threads in id order; page with --after (the next_after of the previous page)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            rows = await inspector(opened).list_threads(prefix=prefix, after=after, limit=limit)
        full = len(rows) == limit
        next_after = rows[-1].thread_id if full and rows else None
        chosen = [
            r
            for r in rows
            if (fingerprint is None or r.fingerprint == fingerprint)
            and (not uncertain or r.uncertain_receipts)
        ]
        return {"threads": chosen, "next_after": next_after}

    data = run(as_json, body)

    def human() -> None:
        print_table(
            ("thread", "revision", "head turn", "turns", "last commit", "uncertain"),
            [
                (
                    r.thread_id,
                    str(r.revision),
                    (r.head_turn_id or "-") + (" (corrupt)" if r.corrupt else ""),
                    str(r.turns),
                    age(r.last_commit_at) + " ago" if r.last_commit_at else "-",
                    str(r.uncertain_receipts),
                )
                for r in data["threads"]
            ],
            ids=("thread", "head turn"),
        )
        if data["next_after"]:
            out.print(f"more: --after {data['next_after']}", markup=False)

    emit(as_json, data, human)


def _checkpoint_json(checkpoint: KernelCheckpoint) -> dict[str, Any]:
    return {
        "revision": checkpoint.revision,
        "schema_version": checkpoint.schema_version,
        "agent_fingerprint": checkpoint.agent_fingerprint,
        "messages": len(checkpoint.messages),
        "omitted_messages": checkpoint.omitted_messages,
        "facts": [
            {"id": f.id, "type": f.type, "version": f.version, "revision": f.revision}
            for f in checkpoint.facts
        ],
        "agenda": [
            {"id": a.id, "capability_id": a.capability_id, "status": a.status, "reason": a.reason}
            for a in checkpoint.agenda
        ],
        "interaction": None
        if checkpoint.interaction is None
        else {
            "id": checkpoint.interaction.id,
            "kind": checkpoint.interaction.kind,
            "prompt": checkpoint.interaction.prompt,
            "options": checkpoint.interaction.options,
            "agenda_item_id": checkpoint.interaction.agenda_item_id,
        },
        "receipts": [
            {"idempotency_key": r.idempotency_key, "status": str(r.status)}
            for r in checkpoint.receipts
        ],
    }


def show(
    thread_id: Annotated[str, typer.Argument(metavar="ID")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Checkpoint summary: revision, fingerprint, messages, facts, agenda, interaction."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            checkpoint = await require_thread(opened, thread_id)
            receipts = await opened.list_receipts(thread_id=thread_id, limit=1000)
            interrupted = await interrupted_keys(opened, receipts)
        return {
            "thread_id": thread_id,
            "checkpoint": None if checkpoint is None else _checkpoint_json(checkpoint),
            "receipts": [
                {
                    "idempotency_key": r.idempotency_key,
                    "capability_id": r.capability_id,
                    "status": str(r.status),
                    "interrupted": (r.thread_id, r.idempotency_key) in interrupted,
                    "turn_id": r.turn_id,
                    "updated_at": r.updated_at,
                }
                for r in receipts
            ],
        }

    data = run(as_json, body)

    def human() -> None:
        cp = data["checkpoint"]
        out.print(f"thread {thread_id}", markup=False)
        if cp is None:
            out.print("  no committed turn yet")
        else:
            out.print(
                f"  revision {cp['revision']}  schema {cp['schema_version']}"
                f"  fingerprint {cp['agent_fingerprint']}",
                markup=False,
            )
            out.print(f"  messages {cp['messages']} (+{cp['omitted_messages']} omitted)")
            for f in cp["facts"]:
                contract = f"{f['type']}@{f['version']}"
                name = contract if f["id"] == contract else f"{f['id']}: {contract}"
                out.print(f"  fact {name} r{f['revision']}", markup=False)
            for a in cp["agenda"]:
                out.print(f"  agenda {a['id']}: {a['capability_id']} [{a['status']}]", markup=False)
            if cp["interaction"]:
                i = cp["interaction"]
                out.print(f"  waiting on {i['kind']}: {i['prompt']}", markup=False)
        for r in data["receipts"]:
            out.print(
                f"  receipt {r['idempotency_key']}"
                f" [{status_label(r['status'], r['interrupted'])}] turn {r['turn_id']}",
                markup=False,
            )

    emit(as_json, data, human)


def _brief(response: Any, width: int = 160) -> str:
    """A kernel response by its text; anything else as JSON, cut to ``width``."""
    if isinstance(response, dict) and isinstance(response.get("text"), str):
        text = str(response["text"])
    else:
        text = json.dumps(response, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _shown_input(turn: dict[str, Any]) -> str:
    """The input cell: what was said or chosen, and who answered when the host said so."""
    answer = turn["answer"]
    actor = answer.get("actor") if isinstance(answer, dict) else None
    said = turn["input"] or "-"
    return f"{said} (by {actor})" if actor else said


def turns(
    thread_id: Annotated[str, typer.Argument(metavar="ID")],
    store: StoreOpt = None,
    after_revision: Annotated[int, typer.Option(min=0, help="Page cursor.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Committed turns of a thread in commit order, with input and response; a button press
    shows what was chosen (``accepted: Please confirm: ...``) and who answered."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            await require_thread(opened, thread_id)
            rows = await opened.list_turns(thread_id, after_revision=after_revision, limit=limit)
        return {
            "thread_id": thread_id,
            "turns": [
                {
                    "turn_id": r.turn_id,
                    "revision": r.checkpoint.revision,
                    "trace_id": r.trace_id,
                    "input": turn_input(r),
                    "answer": turn_answer(r),
                    "response": r.response,
                }
                for r in rows
            ],
        }

    data = run(as_json, body)

    def human() -> None:
        print_table(
            ("revision", "turn", "input", "response"),
            [
                (str(t["revision"]), t["turn_id"], _shown_input(t), _brief(t["response"]))
                for t in data["turns"]
            ],
            ids=("turn",),
        )

    emit(as_json, data, human)


def events(
    store: StoreOpt = None,
    thread: Annotated[str | None, typer.Option("--thread", help="Only this thread.")] = None,
    turn: Annotated[str | None, typer.Option("--turn", help="Only this turn.")] = None,
    after: Annotated[int, typer.Option(min=0, help="Page cursor: positions after this.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Outbox events with their delivery state (pending, delivered, dead). An unknown --thread
    is an error (THREAD_NOT_FOUND), as for turns."""

    async def body() -> list[dict[str, Any]]:
        async with open_store(store) as opened:
            if thread is not None:
                await require_thread(opened, thread)
            rows = await opened.read_outbox(
                thread_id=thread, turn_id=turn, after_position=after, limit=limit
            )
        return [
            {
                "position": r.position,
                "thread_id": r.event.thread_id,
                "turn_id": r.event.turn_id,
                "type": r.event.type,
                "event_id": r.event.id,
                "state": "dead" if r.dead else "delivered" if r.delivered_at else "pending",
                "attempts": r.attempts,
                "delivered_at": r.delivered_at,
                "last_error": r.last_error,
            }
            for r in rows
        ]

    data = run(as_json, body)

    def human() -> None:
        print_table(
            ("position", "thread", "turn", "type", "state", "attempts"),
            [
                (
                    str(e["position"]),
                    e["thread_id"],
                    e["turn_id"],
                    e["type"],
                    e["state"],
                    str(e["attempts"]),
                )
                for e in data
            ],
            ids=("thread", "turn", "type"),
        )

    emit(as_json, {"events": data}, human)
