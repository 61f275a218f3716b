"""``MemoryInbox``: the ``InboxStorage`` role of the test-only memory store.

Rows are kept as the SQL stores keep them (JSON text, read back through ``decode_request``), so
a corrupt row behaves the same everywhere. The reference for the claim rule: the SQL stores
translate ``_claimable``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ...contracts.errors import CheckpointCorruptError, ErrorCode
from ...contracts.inbox import (
    InboxRequest,
    InboxStats,
    OperatorAction,
    ProgressEntry,
    RequestState,
)
from .._inbox_role import NewRequest, Submitted
from .._inbox_rows import CORRUPT_REQUEST, decode_progress, decode_request, encode_log
from .._writes import utc_now
from ._state import MemoryStore

__all__ = ["MemoryInbox", "mark_done"]

_OPEN = (RequestState.PENDING, RequestState.RUNNING)


def mark_done(
    state: MemoryStore,
    thread_id: str,
    turn_id: str,
    now: datetime,
    progress: Sequence[str] = (),
) -> None:
    """What a commit does to the turn's request and progress log (inside
    ``MemoryTurns.commit``)."""
    row = state.inbox.get((thread_id, turn_id))
    if row is not None and row["state"] != RequestState.DONE:
        row.update(state=RequestState.DONE, finished_at=now, claimed_by=None, claimed_until=None)
    if progress:
        record_progress(state, thread_id, turn_id, progress, now)


def record_progress(
    state: MemoryStore, thread_id: str, turn_id: str, items: Sequence[str], now: datetime
) -> int:
    entries = state.progress.setdefault((thread_id, turn_id), [])
    seq = entries[-1][0] if entries else 0
    for text in items:
        seq += 1
        entries.append((seq, text, now))
    return seq


class MemoryInbox:
    """``InboxStorage`` over a ``MemoryStore``."""

    def __init__(self, state: MemoryStore, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.state = state
        self.clock = clock

    def _committed(self, thread_id: str, turn_id: str) -> bool:
        return (thread_id, turn_id) in self.state.turns

    async def submit(self, request: NewRequest) -> Submitted:
        key = (request.thread_id, request.turn_id)
        row = self.state.inbox.get(key)
        if row is not None:
            return Submitted(decode_request(row))
        committed = self.state.turns.get(key)
        if committed is not None:
            return Submitted(None, committed=True, committed_fingerprint=committed.fingerprint)
        now = self.clock()
        claimed = (
            request.claimer is not None
            and request.not_before is None
            and not any(
                r["thread_id"] == request.thread_id and r["state"] in _OPEN
                for r in self.state.inbox.values()
            )
        )
        self.state.inbox_position += 1
        row = {
            "thread_id": request.thread_id,
            "turn_id": request.turn_id,
            "position": self.state.inbox_position,
            "state": RequestState.RUNNING if claimed else RequestState.PENDING,
            "text": request.text,
            "payload": request.payload,
            "fingerprint": request.fingerprint,
            "submitted_at": now,
            "not_before": request.not_before or now,
            "attempts": 1 if claimed else 0,
            "claimed_by": request.claimer if claimed else None,
            "claimed_until": now + timedelta(seconds=request.claim_ttl) if claimed else None,
            "finished_at": None,
            "error_code": None,
            "error": None,
            "operator_log": None,
        }
        self.state.inbox[key] = row
        return Submitted(decode_request(row), inserted=True)

    def _rows(self) -> list[dict[str, Any]]:
        return sorted(self.state.inbox.values(), key=lambda r: r["position"])

    def _claimable(self, row: dict[str, Any], now: datetime) -> bool:
        """The claim rule of ``contracts.inbox`` for one row."""
        if row["state"] == RequestState.PENDING:
            due = row["not_before"] <= now
        elif row["state"] == RequestState.RUNNING:
            due = row["claimed_until"] <= now
        else:
            return False
        if not due:
            return False
        for other in self.state.inbox.values():
            if other is row or other["thread_id"] != row["thread_id"]:
                continue
            if other["position"] < row["position"] and other["state"] in _OPEN:
                return False
            if other["state"] == RequestState.RUNNING and other["claimed_until"] > now:
                return False
        return True

    async def claim(self, worker_id: str, ttl: float) -> InboxRequest | None:
        now = self.clock()
        for row in self._rows():
            if not self._claimable(row, now):
                continue
            row.update(
                state=RequestState.RUNNING,
                claimed_by=worker_id,
                claimed_until=now + timedelta(seconds=ttl),
                attempts=row["attempts"] + 1,
            )
            try:
                return decode_request(row)
            except CheckpointCorruptError:
                row.update(
                    state=RequestState.DEAD,
                    claimed_by=None,
                    claimed_until=None,
                    finished_at=now,
                    error_code=str(ErrorCode.CHECKPOINT_CORRUPT),
                    error=CORRUPT_REQUEST,
                )
        return None

    def _held(self, worker_id: str, row: dict[str, Any], now: datetime) -> bool:
        return bool(
            row["state"] == RequestState.RUNNING
            and row["claimed_by"] == worker_id
            and row["claimed_until"] > now
        )

    async def renew(self, worker_id: str, ttl: float) -> list[tuple[str, str]]:
        now = self.clock()
        held = []
        for key, row in self.state.inbox.items():
            if self._held(worker_id, row, now):
                row["claimed_until"] = now + timedelta(seconds=ttl)
                held.append(key)
        return held

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
        now = self.clock()
        row = self.state.inbox.get((thread_id, turn_id))
        if row is None or not self._held(worker_id, row, now):
            return None
        row.update(claimed_by=None, claimed_until=None, error_code=error_code, error=error)
        if self._committed(thread_id, turn_id):
            row.update(state=RequestState.DONE, finished_at=now, error_code=None, error=None)
        elif retry_in is None:
            row.update(state=RequestState.DEAD, finished_at=now)
        else:
            row.update(state=RequestState.PENDING, not_before=now + timedelta(seconds=retry_in))
        return decode_request(row)

    async def mark_done(self, thread_id: str, turn_id: str) -> bool:
        if not self._committed(thread_id, turn_id) or (thread_id, turn_id) not in self.state.inbox:
            return False
        mark_done(self.state, thread_id, turn_id, self.clock())
        return True

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None:
        row = self.state.inbox.get((thread_id, turn_id))
        return None if row is None else decode_request(row)

    async def list_requests(
        self,
        state: RequestState | None,
        thread_id: str | None,
        after_position: int,
        limit: int,
    ) -> list[InboxRequest]:
        found: list[InboxRequest] = []
        for row in self._rows():
            if row["position"] <= after_position:
                continue
            if state is not None and row["state"] != state:
                continue
            if thread_id is not None and row["thread_id"] != thread_id:
                continue
            try:
                found.append(decode_request(row))
            except CheckpointCorruptError:
                continue
            if len(found) >= limit:
                break
        return found

    async def operate(
        self,
        thread_id: str,
        turn_id: str,
        expected: frozenset[RequestState],
        new_state: RequestState,
        record: OperatorAction,
    ) -> InboxRequest | None:
        row = self.state.inbox.get((thread_id, turn_id))
        if row is None or row["state"] not in expected:
            return None
        now = self.clock()
        log = (*decode_request(row).operator_log, record)
        if self._committed(thread_id, turn_id):
            row.update(state=RequestState.DONE, finished_at=now)
        elif new_state == RequestState.PENDING:
            row.update(state=new_state, not_before=now, finished_at=None, attempts=0)
        else:
            row.update(state=new_state, finished_at=now)
        row.update(claimed_by=None, claimed_until=None, operator_log=encode_log(log))
        return decode_request(row)

    async def stats(self) -> InboxStats:
        counts = dict.fromkeys(RequestState, 0)
        oldest: datetime | None = None
        for row in self.state.inbox.values():
            counts[RequestState(row["state"])] += 1
            if row["state"] == RequestState.PENDING and (
                oldest is None or row["submitted_at"] < oldest
            ):
                oldest = row["submitted_at"]
        return InboxStats(
            pending=counts[RequestState.PENDING],
            running=counts[RequestState.RUNNING],
            dead=counts[RequestState.DEAD],
            oldest_pending_at=oldest,
        )

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int:
        return record_progress(self.state, thread_id, turn_id, items, self.clock())

    async def read_progress(
        self, thread_id: str, turn_id: str, after: int, limit: int
    ) -> list[ProgressEntry]:
        entries = self.state.progress.get((thread_id, turn_id), [])
        return [decode_progress(seq, text) for seq, text, _ in entries if seq > after][:limit]

    async def prune_progress(self, older_than: datetime) -> int:
        removed = 0
        for key, entries in list(self.state.progress.items()):
            # The newest entry of a turn that has not committed stays (its seq goes on).
            last = entries[-1][0] if key not in self.state.turns else None
            kept = [e for e in entries if e[2] >= older_than or e[0] == last]
            removed += len(entries) - len(kept)
            if kept:
                self.state.progress[key] = kept
            else:
                del self.state.progress[key]
        return removed
