"""``inbox list|stats|retry|cancel|notify``: the store's submitted turn requests, for operators.

Why ``retry`` and ``cancel`` need ``--actor`` and ``--note``: each is kept on the request as an
audit record (``operator_log``), as a reconciliation is. The store refuses an unknown request
(``REQUEST_NOT_FOUND``) and one in a state the action does not apply to
(``REQUEST_STATE_CONFLICT``: only a dead or pending request is retried, only a pending one is
cancelled); both are usage errors, exit 2. Listing shows each request's state and history, never
its payload (the user's text and the host context stay in the store). ``notify`` switches
PostgreSQL's NOTIFY triggers, a setting of the schema (every process shares it), so it is set
once from here rather than by each worker.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol, runtime_checkable

import typer

from ..contracts.durability import DurabilityStore
from ..contracts.errors import ErrorCode, UsageError
from ..contracts.inbox import TurnInbox
from ..operations._age import span
from ..operations._inbox import request_json, store_inbox, until
from ._common import (
    CliError,
    JsonOpt,
    StoreOpt,
    emit,
    open_store,
    out,
    print_fields,
    print_table,
    run,
)

__all__ = ["inbox_app", "register"]

inbox_app = typer.Typer(
    help="Submitted turn requests: list them, the backlog, retry or cancel one.",
    no_args_is_help=True,
)

ThreadOpt = Annotated[
    str, typer.Option("--thread", help="The request's thread.", show_default=False)
]
TurnOpt = Annotated[str, typer.Option("--turn", help="The request's turn id.", show_default=False)]
NoteOpt = Annotated[str, typer.Option("--note", help="Why (kept in the audit record).")]
ActorOpt = Annotated[str, typer.Option("--actor", help="Who decided (kept in the audit record).")]


_COLUMNS = (
    "position",
    "thread",
    "turn",
    "state",
    "age",
    "attempts",
    "not before",
    "claimed by",
    "error",
)


@runtime_checkable
class _NotifySwitch(Protocol):
    async def set_inbox_notify(self, enabled: bool) -> None: ...

    async def inbox_notify_enabled(self) -> bool: ...


class Switch(StrEnum):
    on = "on"
    off = "off"


class StateChoice(StrEnum):
    pending = "pending"
    running = "running"
    done = "done"
    dead = "dead"


def register(app: typer.Typer) -> None:
    inbox_app.command("list")(list_requests)
    inbox_app.command("stats")(stats)
    inbox_app.command("retry")(retry)
    inbox_app.command("cancel")(cancel)
    inbox_app.command("notify")(notify)
    app.add_typer(inbox_app, name="inbox")


def _inbox(store: DurabilityStore) -> TurnInbox:
    found = store_inbox(store)
    if found is None:
        raise UsageError(
            f"the {type(store).__name__} store has no turn inbox",
            code=ErrorCode.NOT_SUPPORTED,
            context={"role": "inbox"},
        )
    return found


def _claim(row: dict[str, Any]) -> str:
    if row["claimed_by"] is None or row["state"] != "running":
        return "-"
    return str(row["claimed_by"]) + (" (expired)" if row["claim_expired"] else "")


def list_requests(
    store: StoreOpt = None,
    state: Annotated[
        StateChoice | None, typer.Option("--state", help="Only requests in this state.")
    ] = None,
    thread_id: Annotated[
        str | None, typer.Option("--thread", help="Only this thread's requests.")
    ] = None,
    after: Annotated[
        int, typer.Option("--after", min=0, help="Page cursor: positions after this one.")
    ] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Requests in submission order, store-wide or of one thread; page with --after (the
    next_after of the previous page)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            rows = await _inbox(opened).list_requests(
                state=None if state is None else str(state),
                thread_id=thread_id,
                after_position=after,
                limit=limit,
            )
        now = datetime.now(UTC)
        next_after = rows[-1].position if len(rows) == limit and rows else None
        return {"requests": [request_json(r, now) for r in rows], "next_after": next_after}

    data = run(as_json, body)

    def human() -> None:
        rows = data["requests"]
        if not rows:
            which = f"{state} requests" if state else "requests"
            where = f" on thread {thread_id}" if thread_id else ""
            out.print(f"no {which}{where}", markup=False)
            return
        now = datetime.now(UTC)
        print_table(
            _COLUMNS,
            [
                (
                    str(r["position"]),
                    r["thread_id"],
                    r["turn_id"],
                    r["state"],
                    r["age"],
                    str(r["attempts"]),
                    until(r["not_before"], now) if r["state"] == "pending" else "-",
                    _claim(r),
                    r["error_code"] or "-",
                )
                for r in rows
            ],
            ids=("position", "thread", "turn", "state", "attempts", "claimed by", "error"),
        )
        if data["next_after"]:
            out.print(f"more: --after {data['next_after']}", markup=False)

    emit(as_json, data, human)


def stats(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The backlog: pending, running and dead requests, the oldest pending one's wait."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            found = await _inbox(opened).stats()
        oldest = found.oldest_pending_at
        wait = None if oldest is None else (datetime.now(UTC) - oldest).total_seconds()
        return {
            "pending": found.pending,
            "running": found.running,
            "dead": found.dead,
            "oldest_pending_at": oldest,
            "oldest_pending_age": None if wait is None else max(0.0, wait),
        }

    data = run(as_json, body)

    def human() -> None:
        wait = data["oldest_pending_age"]
        print_fields(
            [
                ("pending", data["pending"]),
                ("running", data["running"]),
                ("dead", data["dead"]),
                ("oldest pending", "-" if wait is None else f"{span(wait)} ago"),
            ]
        )

    emit(as_json, data, human)


def retry(
    thread_id: ThreadOpt,
    turn_id: TurnOpt,
    store: StoreOpt = None,
    actor: ActorOpt = "",
    note: NoteOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Make a dead (or waiting pending) request due now; a worker runs it before the thread's
    later requests. Kept as an audit record on the request."""
    _act("retry", store, thread_id, turn_id, actor, note, as_json)


def cancel(
    thread_id: ThreadOpt,
    turn_id: TurnOpt,
    store: StoreOpt = None,
    actor: ActorOpt = "",
    note: NoteOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Give up a pending request: it becomes dead and the thread's later requests go on
    without it. Kept as an audit record on the request."""
    _act("cancel", store, thread_id, turn_id, actor, note, as_json)


def _act(
    action: str,
    store: str | None,
    thread_id: str,
    turn_id: str,
    actor: str,
    note: str,
    as_json: bool,
) -> None:
    async def body() -> dict[str, Any]:
        if not note.strip() or not actor.strip():
            raise CliError("AUDIT_REQUIRED", "give --note (why) and --actor (who)")
        async with open_store(store) as opened:
            inbox = _inbox(opened)
            if action == "retry":
                changed = await inbox.retry(thread_id, turn_id, actor=actor, note=note)
            else:
                changed = await inbox.cancel(thread_id, turn_id, actor=actor, note=note)
        return {"action": action, "request": request_json(changed)}

    data = run(as_json, body)
    request = data["request"]
    previous = request["operator_log"][-1]["previous_state"] if request["operator_log"] else "?"
    if action == "retry":
        what = "due now: a worker runs it before the thread's later requests"
    else:
        what = "it will not run; the thread's later requests go on without it"
    emit(
        as_json,
        data,
        lambda: out.print(
            f"{action} of {turn_id} on {thread_id}: was {previous}, now {request['state']}"
            f" ({what})",
            markup=False,
        ),
    )


def notify(
    switch: Annotated[
        Switch | None,
        typer.Argument(
            help="on or off; without it, whether the triggers are on.", metavar="[on|off]"
        ),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """PostgreSQL: install (on) or drop (off) the triggers that NOTIFY workers and watchers of
    other processes (stores opened with ?listen=1) of submits, finished requests and progress.
    Off by default: a notifying commit serializes with the others (docs/postgres.md)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            if not isinstance(opened, _NotifySwitch):
                raise UsageError(
                    f"the {type(opened).__name__} store has no NOTIFY triggers (PostgreSQL only;"
                    " other stores' workers and watchers poll)",
                    code=ErrorCode.NOT_SUPPORTED,
                    context={"role": "inbox notify"},
                )
            if switch is not None:
                await opened.set_inbox_notify(switch is Switch.on)
            return {"inbox_notify": await opened.inbox_notify_enabled()}

    data = run(as_json, body)
    state = "on" if data["inbox_notify"] else "off"
    emit(as_json, data, lambda: out.print(f"inbox notify: {state}", markup=False))
