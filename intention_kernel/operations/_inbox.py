"""A thread's submitted turn requests as an operator reads them: what holds the thread back.

Why the head of the thread: workers run a thread's requests one at a time in submission order
(``contracts.inbox``), so the thread's earliest ``pending`` or ``running`` request decides when
its later ones run. It holds them back when its claim expired (its worker died: it waits for a
worker to claim it again), or when it waits for a time (a retry after failures, or a
``not_before`` in the future). A ``dead`` request no longer holds its thread back: the later
requests ran or run without it, which the operator should know too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..contracts.durability import DurabilityStore
from ..contracts.errors import KernelError
from ..contracts.inbox import InboxRequest, RequestState, TurnInbox
from ._age import span

__all__ = ["InboxFacts", "inbox_facts", "request_json", "store_inbox", "until"]

_PAGE = 1000
DEAD_SHOWN = 10
"""Dead requests named one by one; a thread with more says how many."""


def store_inbox(store: DurabilityStore) -> TurnInbox | None:
    """The store's turn inbox, or ``None`` for a store without one."""
    try:
        found = getattr(store, "inbox", None)
    except KernelError:  # a store built without the inbox role answers NOT_SUPPORTED
        return None
    return found if isinstance(found, TurnInbox) else None


def until(moment: datetime | None, now: datetime) -> str:
    """``in 3m 10s`` for a moment after ``now``, ``due`` for one before (``-`` for none)."""
    if moment is None:
        return "-"
    if moment <= now:
        return "due"
    return f"in {span((moment - now).total_seconds())}"


def request_json(request: InboxRequest, now: datetime | None = None) -> dict[str, Any]:
    """A request as operators see it: its state and history, not its payload (the user's text
    and the host context stay in the store)."""
    now = now or datetime.now(UTC)
    return {
        "position": request.position,
        "thread_id": request.thread_id,
        "turn_id": request.turn_id,
        "state": str(request.state),
        "submitted_at": request.submitted_at,
        "age": span((now - request.submitted_at).total_seconds()),
        "attempts": request.attempts,
        "not_before": request.not_before,
        "claimed_by": request.claimed_by,
        "claimed_until": request.claimed_until,
        "claim_expired": (
            request.state is RequestState.RUNNING
            and request.claimed_until is not None
            and request.claimed_until <= now
        ),
        "finished_at": request.finished_at,
        "error_code": request.error_code,
        "error": request.error,
        "operator_log": [
            {
                "action": a.action,
                "actor": a.actor,
                "note": a.note,
                "at": a.at,
                "previous_state": str(a.previous_state),
            }
            for a in request.operator_log
        ],
    }


@dataclass(frozen=True, slots=True)
class InboxFacts:
    """One thread's requests: how many are open or dead, its head (the earliest ``pending`` or
    ``running`` request), and the dead requests earlier than its last open one (skipped: the
    later ones went on without them)."""

    pending: int
    running: int
    dead: int
    head: InboxRequest | None
    now: datetime
    dead_before: list[InboxRequest] = field(default_factory=list)

    @property
    def claim_expired(self) -> bool:
        """The head is running but its worker stopped renewing the claim (it died or hangs)."""
        head = self.head
        return (
            head is not None
            and head.state is RequestState.RUNNING
            and head.claimed_until is not None
            and head.claimed_until <= self.now
        )

    @property
    def waiting(self) -> bool:
        """The head is pending and waits: retried after failures, or not due yet."""
        head = self.head
        return (
            head is not None
            and head.state is RequestState.PENDING
            and (head.attempts > 0 or head.not_before > self.now)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "pending": self.pending,
            "running": self.running,
            "dead": self.dead,
            "head": None if self.head is None else request_json(self.head, self.now),
            "dead_before": [request_json(r, self.now) for r in self.dead_before[:DEAD_SHOWN]],
        }


async def _every(inbox: TurnInbox, state: RequestState, thread_id: str) -> list[InboxRequest]:
    found: list[InboxRequest] = []
    after = 0
    while True:
        page = await inbox.list_requests(
            state=state, thread_id=thread_id, after_position=after, limit=_PAGE
        )
        found.extend(page)
        if len(page) < _PAGE:
            return found
        after = page[-1].position


async def inbox_facts(store: DurabilityStore, thread_id: str) -> InboxFacts | None:
    """The thread's requests, or ``None`` when the store has no inbox."""
    inbox = store_inbox(store)
    if inbox is None:
        return None
    pending = await _every(inbox, RequestState.PENDING, thread_id)
    running = await _every(inbox, RequestState.RUNNING, thread_id)
    dead = await _every(inbox, RequestState.DEAD, thread_id)
    open_requests = sorted(pending + running, key=lambda r: r.position)
    head = open_requests[0] if open_requests else None
    last = open_requests[-1].position if open_requests else 0
    return InboxFacts(
        pending=len(pending),
        running=len(running),
        dead=len(dead),
        head=head,
        now=datetime.now(UTC),
        dead_before=[r for r in dead if r.position < last],
    )
