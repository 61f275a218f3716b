"""``InboxStorage``: the optional storage role of the turn inbox (see ``contracts.inbox``).

Every member is one short transaction on the store's clock. The role's one obligation that
lives elsewhere: ``TurnStorage.commit`` marks the turn's request ``done`` in the commit's own
transaction, so a request is done if and only if its turn committed. For the same reason
``release`` and ``operate`` never leave a request of a committed turn anything but ``done``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ..contracts.inbox import (
    InboxRequest,
    InboxStats,
    OperatorAction,
    ProgressEntry,
    RequestState,
)

__all__ = ["InboxStorage", "NewRequest", "Submitted"]


@dataclass(frozen=True, slots=True)
class NewRequest:
    """A checked request to record: ``payload`` is the codec's JSON text of
    ``{"selection": ..., "host_context": ...}``; ``not_before`` ``None`` means due now.

    ``claimer``: a worker of the submitting process with a free slot. A request due now whose
    thread has no open request is then stored already claimed by it (``running``, attempt 1,
    for ``claim_ttl`` seconds): the submit is also the claim, one write instead of two."""

    thread_id: str
    turn_id: str
    text: str
    payload: str
    fingerprint: str
    not_before: datetime | None
    claimer: str | None = None
    claim_ttl: float = 0.0


@dataclass(frozen=True, slots=True)
class Submitted:
    """What ``submit`` found or wrote: the stored request (``inserted`` when this call wrote
    it), or no request but a committed turn with the fingerprint it was run with."""

    request: InboxRequest | None
    inserted: bool = False
    committed: bool = False
    committed_fingerprint: str | None = None


class InboxStorage(Protocol):
    """The storage side of ``Inbox``: requests, claims, and the progress log of turns."""

    async def submit(self, request: NewRequest) -> Submitted:
        """Insert the request unless a request or a committed turn has its id (atomically:
        two submits of one id insert one row); return what is stored. With a ``claimer``, a
        due request is inserted claimed by it when no request of its thread is open (checked
        under the same exclusion as a claim's, so a thread's order holds)."""
        ...

    async def claim(self, worker_id: str, ttl: float) -> InboxRequest | None:
        """The next request by the claim rule (``contracts.inbox``), now ``running``, claimed
        by ``worker_id`` for ``ttl`` seconds, its ``attempts`` counted. A row that cannot be
        read back is made ``dead`` (``CHECKPOINT_CORRUPT``) and the claim goes on."""
        ...

    async def renew(self, worker_id: str, ttl: float) -> list[tuple[str, str]]:
        """Extend every live claim ``worker_id`` holds by ``ttl`` seconds (one statement for
        all of them); the ``(thread_id, turn_id)`` keys still held."""
        ...

    async def release(
        self,
        worker_id: str,
        thread_id: str,
        turn_id: str,
        *,
        retry_in: float | None,
        error_code: str | None,
        error: str | None,
    ) -> InboxRequest | None:
        """While ``worker_id`` holds the claim: ``pending`` again, due in ``retry_in`` seconds,
        or ``dead`` when ``retry_in`` is ``None``; ``done`` instead if the turn committed.
        ``None`` if the claim was not held (expired and taken, or already done)."""
        ...

    async def mark_done(self, thread_id: str, turn_id: str) -> bool:
        """Mark the request ``done`` if its turn committed (after a replay); whether it was."""
        ...

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None:
        """The stored request (``CHECKPOINT_CORRUPT`` if its row cannot be read back)."""
        ...

    async def list_requests(
        self,
        state: RequestState | None,
        thread_id: str | None,
        after_position: int,
        limit: int,
    ) -> list[InboxRequest]:
        """Requests after ``after_position`` in position order, filtered by the arguments
        that are not ``None``; rows that cannot be read back are skipped."""
        ...

    async def operate(
        self,
        thread_id: str,
        turn_id: str,
        expected: frozenset[RequestState],
        new_state: RequestState,
        record: OperatorAction,
    ) -> InboxRequest | None:
        """If the request is in one of ``expected``: move it to ``new_state`` (``pending`` due
        now with its ``attempts`` back to 0, so a request that ran out of attempts runs again;
        or ``dead``), append ``record`` to its operator log (``done`` instead if its turn
        committed); else ``None``."""
        ...

    async def stats(self) -> InboxStats:
        """Counts of pending, running and dead requests, and the oldest pending one."""
        ...

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int:
        """Append JSON items to the turn's progress log without waiting for durability;
        returns the last ``seq`` written."""
        ...

    async def read_progress(
        self, thread_id: str, turn_id: str, after: int, limit: int
    ) -> list[ProgressEntry]:
        """The turn's progress entries with ``seq > after``, in order, at most ``limit``."""
        ...

    async def prune_progress(self, older_than: datetime) -> int:
        """Delete progress entries written before ``older_than``; how many."""
        ...
