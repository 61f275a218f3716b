"""``Inbox``: the public face of a store's turn inbox (``store.inbox``).

Each method checks its arguments, then that the store is open, then makes one call to the
store's ``InboxStorage`` role. It also carries the in-process wake-ups: a submit wakes this
process's workers at once and a progress append or a commit wakes its watchers, so a worker or
a watcher in the same process never waits for its polling interval (other processes poll, or
are woken by the backend's own notifications).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..contracts import codec
from ..contracts.codec import JsonLimits
from ..contracts.errors import ErrorCode, InvalidInputError, SerializationError, UsageError
from ..contracts.ids import validate_id, validate_thread_id, validate_turn_id
from ..contracts.inbox import (
    InboxRequest,
    InboxStats,
    OperatorAction,
    ProgressEntry,
    RequestState,
)
from . import _arguments as check
from . import _turns
from ._inbox_role import InboxStorage, NewRequest
from ._inbox_rows import encode_payload
from ._writes import utc_now

__all__ = ["Inbox", "Signal"]

MAX_PROGRESS_ITEMS = _turns.MAX_PROGRESS_ITEMS


class Signal:
    """A wake-up for waiters in this process: ``wait`` returns when ``fire`` was called after
    the waiter's ``mark``, or after its timeout."""

    def __init__(self) -> None:
        self._generation = 0
        self._event = asyncio.Event()
        self._callbacks: list[Callable[[], None]] = []

    def mark(self) -> int:
        return self._generation

    def fire(self) -> None:
        self._generation += 1
        self._event.set()
        self._event = asyncio.Event()
        for callback in self._callbacks:
            callback()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` at every ``fire`` until the returned function is called."""
        self._callbacks = [*self._callbacks, callback]
        return lambda: self._unsubscribe(callback)

    def _unsubscribe(self, callback: Callable[[], None]) -> None:
        self._callbacks = [c for c in self._callbacks if c is not callback]

    async def wait(self, mark: int, timeout: float) -> None:  # noqa: ASYNC109 - a poll bound
        if self._generation != mark:
            return
        event = self._event
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return


class Inbox:
    """Durable turn requests of one store, claimed and run by workers (``contracts.inbox``)."""

    def __init__(
        self,
        storage: InboxStorage,
        *,
        json_limits: JsonLimits,
        check_open: Callable[[], None],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.storage = storage
        self.json_limits = json_limits
        self._check_open = check_open
        self._clock = clock
        self.submitted = Signal()
        """Fired by every submit, retry and release in this process (wakes its workers)."""
        self.progressed = Signal()
        """Fired by every progress append and request change in this process (wakes watchers)."""

    def wake(self, *, workers: bool, watchers: bool) -> None:
        """Fire the wake-ups for a write another process made, as the backend heard of it
        (PostgreSQL's ``LISTEN``), so this process's workers and watchers need not poll."""
        if workers:
            self.submitted.fire()
        if watchers:
            self.progressed.fire()

    # ---------------------------------------------------------------- requests

    async def submit(
        self,
        thread_id: str,
        turn_id: str,
        *,
        text: str,
        fingerprint: str,
        selection: Mapping[str, Any] | None = None,
        host_context: Mapping[str, Any] | None = None,
        not_before: datetime | None = None,
        traceparent: str | None = None,
        claimer: str | None = None,
        claim_ttl: float = 30.0,
    ) -> InboxRequest:
        """Record a turn request (idempotent on its ids); ``TURN_ID_REUSED`` if the id was
        submitted or committed with another request. Returns what is stored: for a turn that
        committed without a request row, a ``done`` request at position 0.

        ``claimer``: a worker of this process with a free slot; a request due now on a thread
        with nothing open comes back ``running``, claimed by it for ``claim_ttl`` seconds
        (the worker runs it without a claim of its own)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        if not isinstance(fingerprint, str) or not fingerprint or len(fingerprint) > 256:
            raise InvalidInputError(
                "fingerprint must be a non-empty string of at most 256 characters",
                context={"field": "fingerprint"},
            )
        checked = fingerprint
        if not isinstance(text, str):
            raise InvalidInputError("text must be a string", context={"field": "text"})
        if len(text.encode("utf-8", "surrogatepass")) > self.json_limits.max_bytes:
            raise InvalidInputError("text is too long to store", context={"field": "text"})
        codec.check(text, limits=self.json_limits, what="text")
        if not_before is not None and (
            not isinstance(not_before, datetime) or not_before.tzinfo is None
        ):
            raise InvalidInputError(
                "not_before must be a timezone-aware datetime", context={"field": "not_before"}
            )
        parts = (("selection", selection), ("host_context", host_context))
        for field, value in parts:
            if value is not None and not isinstance(value, Mapping):
                raise InvalidInputError(f"{field} must be a mapping", context={"field": field})
        if traceparent is not None and (
            not isinstance(traceparent, str) or not 0 < len(traceparent) <= 256
        ):
            raise InvalidInputError(
                "traceparent must be text of at most 256 characters",
                context={"field": "traceparent"},
            )
        try:
            payload = encode_payload(selection, host_context, traceparent, self.json_limits)
        except SerializationError:
            for field, value in parts:  # the error again, naming the part that has it
                if value is not None:
                    codec.check(dict(value), limits=self.json_limits, what=field)
            raise
        if len(payload.encode("utf-8")) > self.json_limits.max_bytes:
            raise InvalidInputError(
                "the request is too large to store", context={"field": "request"}
            )
        if claimer is not None:
            claimer = validate_id(claimer, "claimer")
            claim_ttl = _ttl(claim_ttl)
        self._check_open()
        found = await self.storage.submit(
            NewRequest(thread_id, turn_id, text, payload, checked, not_before, claimer, claim_ttl)
        )
        if found.request is not None:
            _turns.check_fingerprint(
                found.request.fingerprint, checked, thread_id=thread_id, turn_id=turn_id
            )
            if found.inserted and found.request.state is RequestState.PENDING:
                self.submitted.fire()  # a request its claimer runs needs no other worker
            return found.request
        _turns.check_fingerprint(
            found.committed_fingerprint, checked, thread_id=thread_id, turn_id=turn_id
        )
        now = self._clock()
        return InboxRequest(
            thread_id=thread_id,
            turn_id=turn_id,
            position=0,
            state=RequestState.DONE,
            text=text,
            selection=None if selection is None else dict(selection),
            host_context=None if host_context is None else dict(host_context),
            fingerprint=checked,
            submitted_at=now,
            not_before=now,
            finished_at=now,
        )

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None:
        """The stored request, or ``None`` (a turn run directly has none)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        return await self.storage.get(thread_id, turn_id)

    async def list_requests(
        self,
        *,
        state: RequestState | str | None = None,
        thread_id: str | None = None,
        after_position: int = 0,
        limit: int = 100,
    ) -> list[InboxRequest]:
        """Requests in submission order, after the cursor ``after_position``."""
        chosen = _state(state)
        thread_id = check.check_optional_thread_id(thread_id)
        after_position = check.check_revision(after_position, "after_position")
        limit = check.check_limit(limit)
        self._check_open()
        return await self.storage.list_requests(chosen, thread_id, after_position, limit)

    async def stats(self) -> InboxStats:
        """The backlog: pending, running and dead requests, the oldest pending one."""
        self._check_open()
        return await self.storage.stats()

    # ---------------------------------------------------------------- workers

    async def claim(self, worker_id: str, *, ttl: float) -> InboxRequest | None:
        """The next request by the claim rule, now ``running`` for ``ttl`` seconds."""
        worker_id = validate_id(worker_id, "worker_id")
        seconds = _ttl(ttl)
        self._check_open()
        return await self.storage.claim(worker_id, seconds)

    async def renew(self, worker_id: str, *, ttl: float) -> list[tuple[str, str]]:
        """Extend every live claim of ``worker_id``; the keys it still holds."""
        worker_id = validate_id(worker_id, "worker_id")
        seconds = _ttl(ttl)
        self._check_open()
        return await self.storage.renew(worker_id, seconds)

    async def release(
        self,
        worker_id: str,
        thread_id: str,
        turn_id: str,
        *,
        retry_in: float | None,
        error_code: str | None = None,
        error: str | None = None,
    ) -> InboxRequest | None:
        """Give back a claim: pending again after ``retry_in`` seconds, or dead (``None``)."""
        worker_id = validate_id(worker_id, "worker_id")
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        seconds = None if retry_in is None else check.check_seconds(retry_in, "retry_in")
        if error_code is not None:
            error_code = check.check_text(error_code, "error_code", maximum=64)
        if error is not None:
            error = check.check_text(error, "error", maximum=check.MAX_ERROR_LENGTH)
        self._check_open()
        released = await self.storage.release(
            worker_id, thread_id, turn_id, retry_in=seconds, error_code=error_code, error=error
        )
        if released is not None:
            self.submitted.fire()
            self.progressed.fire()
        return released

    async def mark_done(self, thread_id: str, turn_id: str) -> bool:
        """After a replay: the request of a committed turn is ``done``."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        self._check_open()
        done = await self.storage.mark_done(thread_id, turn_id)
        if done:
            self.progressed.fire()
        return done

    # ---------------------------------------------------------------- operators

    async def retry(self, thread_id: str, turn_id: str, *, actor: str, note: str) -> InboxRequest:
        """A dead (or waiting pending) request is due again now, its attempts counted from 0
        again; kept as an audit record (which names the state it was in)."""
        return await self._operate(
            thread_id,
            turn_id,
            "retry",
            frozenset({RequestState.DEAD, RequestState.PENDING}),
            RequestState.PENDING,
            actor,
            note,
        )

    async def cancel(self, thread_id: str, turn_id: str, *, actor: str, note: str) -> InboxRequest:
        """A pending request will not run (it becomes dead); kept as an audit record."""
        return await self._operate(
            thread_id,
            turn_id,
            "cancel",
            frozenset({RequestState.PENDING}),
            RequestState.DEAD,
            actor,
            note,
        )

    async def _operate(
        self,
        thread_id: str,
        turn_id: str,
        action: str,
        expected: frozenset[RequestState],
        new_state: RequestState,
        actor: str,
        note: str,
    ) -> InboxRequest:
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        validate_id(actor, "actor")
        if not isinstance(note, str) or not note.strip() or len(note) > 4000:
            raise InvalidInputError(
                "note must be non-blank text of at most 4000 characters", context={"field": "note"}
            )
        self._check_open()
        current = await self.storage.get(thread_id, turn_id)
        if current is None:
            raise UsageError(
                "no such turn request",
                code=ErrorCode.REQUEST_NOT_FOUND,
                context={"thread_id": thread_id, "turn_id": turn_id},
            )
        record = OperatorAction(action, actor, note, self._clock(), current.state)
        changed = (
            await self.storage.operate(thread_id, turn_id, expected, new_state, record)
            if current.state in expected
            else None
        )
        if changed is None:
            raise UsageError(
                f"only a {' or '.join(sorted(expected))} request can be given a {action}",
                code=ErrorCode.REQUEST_STATE_CONFLICT,
                context={"thread_id": thread_id, "turn_id": turn_id, "state": str(current.state)},
            )
        self.submitted.fire()
        self.progressed.fire()
        return changed

    # ---------------------------------------------------------------- progress

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int:
        """Append JSON items to the turn's progress log (not durable; see the module)."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_PROGRESS_ITEMS:
            raise InvalidInputError(
                f"items must be a list of 1 to {MAX_PROGRESS_ITEMS} JSON texts",
                context={"field": "items"},
            )
        self._check_open()
        seq = await self.storage.append_progress(thread_id, turn_id, items)
        self.progressed.fire()
        return seq

    async def read_progress(
        self, thread_id: str, turn_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[ProgressEntry]:
        """The turn's progress entries after ``after``, in order."""
        validate_thread_id(thread_id)
        validate_turn_id(turn_id)
        after = check.check_revision(after, "after")
        limit = check.check_limit(limit, maximum=10_000)
        self._check_open()
        return await self.storage.read_progress(thread_id, turn_id, after, limit)

    async def prune_progress(self, *, older_than: datetime) -> int:
        """Delete progress entries written before ``older_than``; how many."""
        older_than = check.check_cutoff(older_than)
        self._check_open()
        return await self.storage.prune_progress(older_than)


def _state(value: Any) -> RequestState | None:
    if value is None:
        return None
    try:
        return RequestState(value)
    except ValueError:
        raise InvalidInputError(
            "state must be one of pending, running, done, dead", context={"field": "state"}
        ) from None


def _ttl(value: Any) -> float:
    seconds = check.check_seconds(value, "ttl")
    if seconds <= 0:
        raise InvalidInputError("ttl must be more than 0 seconds", context={"field": "ttl"})
    return seconds
