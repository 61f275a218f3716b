"""``PostgresInbox``: the ``InboxStorage`` role of the PostgreSQL store (tables of migration 6).

**The claim** is one call of the schema's ``inbox_claim`` function, so one short transaction in
one round trip. It walks ``inbox_ready`` (open requests by ``ready_at``, then position) from its
start and takes the first due head of a thread without a live claim. What it does not walk:
requests not due yet (a later ``not_before``, a live claim: past the walk's end), done and dead
ones (in none of the claim's indexes), and requests set aside behind their predecessor. A
request the walk finds not to be the head of its thread is set aside (``held_by`` its nearest
open predecessor, which is marked ``holds_back``) and is walked again once that predecessor has
finished: a finished request that ``holds_back`` is in the small ``inbox_finished_holders``
index, and every claim first gives the requests held by those back to the walk. A thread with
a deep backlog behind a running request so costs each of its requests a few row writes once,
not every claim a walk over the backlog; a claim costs the candidates it looks at.

A statement in READ COMMITTED sees the snapshot taken when it started, and a row lock refreshes
only the locked row: a check of the *other* requests of a thread could be stale by the time the
candidate is locked (a submit of the thread, an operator's retry or another claim committing
meanwhile), and two claimers could then each take a request of one thread. So the claim takes
the thread's transaction-level advisory lock (``pg_try_advisory_xact_lock``: a thread another
claim is working on is skipped, never awaited), and checks the rule again in a new statement
(plpgsql gives each statement a fresh snapshot) that sees everything committed before the lock
was taken; the candidate itself is locked there ``FOR UPDATE SKIP LOCKED``, and its own state
rechecked on its newest version. Everything that can hold a thread back more takes the same lock
(blocking): ``submit`` (its position is taken under it, so a thread's positions follow the order
its submits commit in), ``operate`` (a retry makes an earlier request open again) and ``renew``
(which reads the claim's expiry on the clock after the lock). What lets a thread go (a commit,
a release, ``mark_done``) needs no lock: a claim that does not see it yet only holds back.
Setting a request aside locks its predecessor ``FOR SHARE`` in the same transaction (one being
changed at that moment is passed over for the one before it): the predecessor is open and
cannot finish before the mark is committed, so whoever sees it finished sees what it holds back.

The two-key lock is ``(hashtext(quoted schema), hashtext(thread_id))``: two threads whose ids
hash alike share it, which can only make a claim skip one of them while the other is claimed.

**Order.** Among due heads, the claim takes the one that became due first (``ready_at``), then
the earliest position. For requests due when submitted that is submission order; a request
that became due later (a retry, a ``not_before``, an expired claim) is taken after the requests
that were already waiting (a request given back to the walk keeps its ``ready_at``). Within a
thread the order is always submission order.

**Done if committed.** The commit statement marks the turn's request done (``_sql``). A submit
that races a direct run of the same id (neither sees the other's row) can leave a pending
request of a committed turn: its worker replays the turn and ``mark_done`` closes it.

A claimed row that cannot be read back is dead-lettered (``CHECKPOINT_CORRUPT``) by the next
statement and the claim goes on. Progress appends are not waited for (``synchronous_commit``
off); the committed turn is the truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from ...contracts.errors import CheckpointCorruptError, DurabilityError, ErrorCode, KernelError
from ...contracts.inbox import (
    InboxRequest,
    InboxStats,
    OperatorAction,
    ProgressEntry,
    RequestState,
)
from .._inbox_role import NewRequest, Submitted
from .._inbox_rows import CORRUPT_REQUEST, decode_progress, decode_request, encode_log
from ._batch import Batch
from ._connection import PgConnection
from ._handoff import HandedLeases
from ._inbox_sql import InboxStatements
from ._replica import settled_first

__all__ = ["PostgresInbox"]


@dataclass(frozen=True, slots=True)
class _Claiming:
    """A submit that claims, with the lease owner and ttl its statement takes the lease for."""

    request: NewRequest
    owner: str
    lease_ttl: float


_ATTEMPTS = 5
"""Rounds of a compare-and-set or of a submit that met a concurrent one before giving up."""


class PostgresInbox:
    """``InboxStorage`` over the ``inbox`` and ``progress`` tables (the facade has checked the
    arguments). With a read pool (``_replica``), a finished request and a committed turn's
    progress are read there first (a watch of a committed turn); the rest on the primary,
    listings too: a service decides on them (a thread busy with a pending request)."""

    def __init__(
        self,
        db: PgConnection,
        sql: InboxStatements,
        handed: HandedLeases,
        reads: PgConnection | None = None,
    ) -> None:
        self._db = db
        self._reads = db if reads is None else reads
        self._inbox_sql = sql
        self._handed = handed
        # Submits that claim and queue up together go as one statement (``_batch``), as
        # the turns' opens and commits do: each row keeps its own checks.
        self.claiming: Batch[_Claiming] = Batch(
            thread_of=lambda one: one.request.thread_id,
            send_one=self._submit_claimed,
            send_many=self._submit_claimed_group,
            one_by_one=lambda exc: isinstance(exc, KernelError) and not exc.retryable,
        )

    async def close(self) -> None:
        """Wait for the submits in flight (each caller is waiting for its answer anyway)."""
        await self.claiming.close()

    # ---------------------------------------------------------------- requests

    async def submit(self, request: NewRequest) -> Submitted:
        if request.claimer is not None and request.not_before is None:
            row = await self._handed.submit(
                lambda owner, lease_ttl: self.claiming.send(_Claiming(request, owner, lease_ttl)),
                request.thread_id,
                request.turn_id,
            )
            if row is not None:
                return Submitted(decode_request(row), inserted=True)
            # The id is taken: what is stored is answered as for any submit.
        for _ in range(_ATTEMPTS):
            row = await self._db.fetchrow(
                self._inbox_sql.submit,
                request.thread_id,
                request.turn_id,
                request.text,
                request.payload,
                request.fingerprint,
                request.not_before,
            )
            if row["position"] is not None:
                return Submitted(decode_request(row), inserted=row["inserted"])
            if row["committed"]:
                return Submitted(
                    None, committed=True, committed_fingerprint=row["committed_fingerprint"]
                )
            # A concurrent submit of this id committed after this statement's snapshot.
        raise _busy("the turn request kept changing while it was submitted", request)

    async def _submit_claimed(self, one: _Claiming) -> Any:
        request = one.request
        return await self._db.fetchrow(
            self._inbox_sql.submit_claimed,
            request.thread_id,
            request.turn_id,
            request.text,
            request.payload,
            request.fingerprint,
            request.claimer,
            request.claim_ttl,
            one.owner,
            one.lease_ttl,
        )

    async def _submit_claimed_group(self, group: Sequence[_Claiming]) -> list[Any]:
        requests = [one.request for one in group]
        rows = await self._db.fetch(
            self._inbox_sql.submit_claimed_group,
            [r.thread_id for r in requests],
            [r.turn_id for r in requests],
            [r.text for r in requests],
            [r.payload for r in requests],
            [r.fingerprint for r in requests],
            [r.claimer for r in requests],
            [r.claim_ttl for r in requests],
            [one.owner for one in group],
            group[0].lease_ttl,  # the store's lease ttl, the same for every submit
        )
        # A request taken under its id has no row of its own (as ``submit_claimed`` answers).
        return [None if row["position"] is None else row for row in rows]

    async def claim(self, worker_id: str, ttl: float) -> InboxRequest | None:
        while True:
            row = await self._db.fetchrow(self._inbox_sql.claim, worker_id, ttl)
            if row is None:
                return None
            try:
                return decode_request(row)
            except CheckpointCorruptError:
                await self._db.execute_status(
                    self._inbox_sql.kill_unreadable,
                    row["position"],
                    worker_id,
                    str(ErrorCode.CHECKPOINT_CORRUPT),
                    CORRUPT_REQUEST,
                )

    async def renew(self, worker_id: str, ttl: float) -> list[tuple[str, str]]:
        rows = await self._db.fetch(self._inbox_sql.renew, worker_id, ttl)
        return [(r["thread_id"], r["turn_id"]) for r in rows]

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
        row = await self._db.fetchrow(
            self._inbox_sql.release, worker_id, thread_id, turn_id, retry_in, error_code, error
        )
        return None if row is None else decode_request(row)

    async def mark_done(self, thread_id: str, turn_id: str) -> bool:
        row = await self._db.fetchrow(self._inbox_sql.mark_done, thread_id, turn_id)
        return bool(row["committed"])

    async def get(self, thread_id: str, turn_id: str) -> InboxRequest | None:
        row = await settled_first(
            self._reads,
            self._db,
            lambda db: db.fetchrow(
                self._inbox_sql.get if db is self._db else self._inbox_sql.get_settled,
                thread_id,
                turn_id,
            ),
            _settled_request,
        )
        if row is None or row["position"] is None:  # no request (the read pool's NULL row)
            return None
        return decode_request(row)

    async def list_requests(
        self,
        state: RequestState | None,
        thread_id: str | None,
        after_position: int,
        limit: int,
    ) -> list[InboxRequest]:
        sql = self._inbox_sql.list_requests[(state is not None, thread_id is not None)]
        filters = [str(v) for v in (state, thread_id) if v is not None]
        found: list[InboxRequest] = []
        while True:
            wanted = limit - len(found)
            rows = await self._db.fetch(sql, after_position, wanted, *filters)
            for row in rows:
                try:
                    found.append(decode_request(row))
                except CheckpointCorruptError:
                    continue  # skipped; the page is filled from the rows after it
            if len(rows) < wanted or len(found) >= limit:
                return found
            after_position = rows[-1]["position"]

    async def operate(
        self,
        thread_id: str,
        turn_id: str,
        expected: frozenset[RequestState],
        new_state: RequestState,
        record: OperatorAction,
    ) -> InboxRequest | None:
        states = sorted(str(s) for s in expected)
        for _ in range(_ATTEMPTS):
            row = await self._db.fetchrow(self._inbox_sql.get, thread_id, turn_id)
            if row is None or row["state"] not in states:
                return None
            log = encode_log((*decode_request(row).operator_log, record))
            changed = await self._db.fetchrow(
                self._inbox_sql.operate,
                thread_id,
                turn_id,
                states,
                str(new_state),
                log,
                row["operator_log"],
            )
            if changed is not None:
                return decode_request(changed)
            # Its state or operator log changed since it was read: read it again.
        raise DurabilityError(
            "the turn request kept changing while an operator changed it",
            code=ErrorCode.STORE_BUSY,
            retryable=True,
            context={"thread_id": thread_id, "turn_id": turn_id},
        )

    async def stats(self) -> InboxStats:
        row = await self._db.fetchrow(self._inbox_sql.stats)
        return InboxStats(
            pending=row["pending"],
            running=row["running"],
            dead=row["dead"],
            oldest_pending_at=row["oldest_pending_at"],
        )

    # ---------------------------------------------------------------- progress

    async def append_progress(self, thread_id: str, turn_id: str, items: list[str]) -> int:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                row = await self._db.fetchrow(
                    self._inbox_sql.append_progress, thread_id, turn_id, items
                )
            except DurabilityError as exc:
                # Another append to this turn took the same numbers first: number again.
                if not isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                    raise
                if attempt == _ATTEMPTS:
                    raise
                continue
            return int(row["seq"])
        raise AssertionError("unreachable")  # pragma: no cover

    async def read_progress(
        self, thread_id: str, turn_id: str, after: int, limit: int
    ) -> list[ProgressEntry]:
        rows = await settled_first(
            self._reads,
            self._db,
            lambda db: db.fetch(
                self._inbox_sql.read_progress
                if db is self._db
                else self._inbox_sql.read_progress_settled,
                thread_id,
                turn_id,
                after,
                limit,
            ),
            lambda found: bool(found) and bool(found[0]["committed"]),
        )
        return [decode_progress(r["seq"], r["item"]) for r in rows if r["seq"] is not None]

    async def prune_progress(self, older_than: datetime) -> int:
        return await self._db.execute_status(self._inbox_sql.prune_progress, older_than)


def _settled_request(row: Any) -> bool:
    """A read pool's answer holds: the request is done, or the turn committed without one."""
    if row is None:  # no answer
        return False
    if row["position"] is None:
        return bool(row["committed"])
    return bool(row["state"] == str(RequestState.DONE))


def _busy(message: str, request: NewRequest) -> DurabilityError:
    return DurabilityError(
        message,
        code=ErrorCode.STORE_BUSY,
        retryable=True,
        context={"thread_id": request.thread_id, "turn_id": request.turn_id},
    )
