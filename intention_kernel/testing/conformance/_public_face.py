"""Every public method of a store behaves the same on every store: a closed store refuses each
one with ``SCOPE_CLOSED``, and a bad argument to each one is a typed error before any read or
write. The tables name every method, so a new method without a row is a failing test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from ...contracts.errors import ErrorCode, InvalidInputError, KernelError, UsageError
from ._support import ConformanceHarness, commit_simple, conformance_test, effect

__all__ = ["STORE_METHODS", "PublicFace"]

Call = Callable[[Any], Awaitable[Any]]

NOW = datetime(2026, 1, 1, tzinfo=UTC)

VALID_CALLS: dict[str, Call] = {
    "load_checkpoint": lambda s: s.load_checkpoint("t1"),
    "get_turn": lambda s: s.get_turn("t1", "turn-1"),
    "list_turns": lambda s: s.list_turns("t1"),
    "get_receipt": lambda s: s.get_receipt("t1", "k1"),
    "list_receipts": lambda s: s.list_receipts(),
    "reconcile": lambda s: s.reconcile("t1", "k1", "not_applied", note="n", actor="ops"),
    "reconciliations": lambda s: s.reconciliations(),
    "read_outbox": lambda s: s.read_outbox(),
    "claim": lambda s: s.claim("relay-1", limit=10, lease=30),
    "mark_delivered": lambda s: s.mark_delivered("relay-1", [1]),
    "record_failure": lambda s: s.record_failure(
        "relay-1", 1, error="boom", retry_in=1, max_attempts=3
    ),
    "release": lambda s: s.release("relay-1", [1]),
    "requeue": lambda s: s.requeue(),
    "dead_letters": lambda s: s.dead_letters(),
    "prune": lambda s: s.prune(3600),
    "outbox_stats": lambda s: s.outbox_stats(),
    "list_threads": lambda s: s.list_threads(),
    "store_status": lambda s: s.store_status(),
    "schema_info": lambda s: s.schema_info(),
    "lease_info": lambda s: s.lease_info("t1"),
    "prune_records": lambda s: s.prune_records(older_than=NOW, dry_run=True),
    "with_turn": lambda s: s.with_turn("t1", "turn-2", _never),
}
"""One valid call of each public method of a store (``DurabilityStore``, ``OutboxSource``,
``StoreInspector``)."""

STORE_METHODS = sorted(VALID_CALLS)

BAD_CALLS: dict[str, list[Call]] = {
    "load_checkpoint": [lambda s: s.load_checkpoint(""), lambda s: s.load_checkpoint(7)],
    "get_turn": [lambda s: s.get_turn("t1", None), lambda s: s.get_turn("\x00", "turn-1")],
    "list_turns": [
        lambda s: s.list_turns("t1", after_revision=-1),
        lambda s: s.list_turns("t1", after_revision="0"),
        lambda s: s.list_turns("t1", limit=0),
        lambda s: s.list_turns("t1", limit=True),
        lambda s: s.list_turns("t1", limit=10**6),
    ],
    "get_receipt": [lambda s: s.get_receipt("t1", ""), lambda s: s.get_receipt(None, "k1")],
    "list_receipts": [
        lambda s: s.list_receipts(status="lost"),
        lambda s: s.list_receipts(thread_id=""),
        lambda s: s.list_receipts(limit=-5),
    ],
    "reconcile": [
        lambda s: s.reconcile("t1", "k1", "maybe", note="n", actor="ops"),
        lambda s: s.reconcile("t1", "k1", "not_applied", value=1, note="n", actor="ops"),
        lambda s: s.reconcile("t1", "k1", "completed", value=1, note=" ", actor="ops"),
        lambda s: s.reconcile("t1", "k1", "completed", value=1, note="n", actor=""),
        lambda s: s.reconcile("t1", "k1", "completed", note="n", actor="ops"),
        lambda s: s.reconcile("t1", "k1", "completed", value=2**64, note="n", actor="ops"),
        lambda s: s.reconcile("", "k1", "completed", note="n", actor="ops"),
    ],
    "reconciliations": [
        lambda s: s.reconciliations(thread_id=""),
        lambda s: s.reconciliations(idempotency_key=3),
    ],
    "read_outbox": [
        lambda s: s.read_outbox(thread_id=""),
        lambda s: s.read_outbox(turn_id="\x00"),
        lambda s: s.read_outbox(after_position=-1),
        lambda s: s.read_outbox(limit=0),
    ],
    "claim": [
        lambda s: s.claim("", limit=10, lease=30),
        lambda s: s.claim("relay-1", limit=0, lease=30),
        lambda s: s.claim("relay-1", limit=10, lease=-1),
        lambda s: s.claim("relay-1", limit=10, lease=float("nan")),
    ],
    "mark_delivered": [
        lambda s: s.mark_delivered("relay-1", "12"),
        lambda s: s.mark_delivered("relay-1", [0]),
        lambda s: s.mark_delivered("relay-1", [True]),
        lambda s: s.mark_delivered(None, [1]),
    ],
    "record_failure": [
        lambda s: s.record_failure("relay-1", 0, error="e", retry_in=1, max_attempts=3),
        lambda s: s.record_failure("relay-1", 1, error=None, retry_in=1, max_attempts=3),
        lambda s: s.record_failure("relay-1", 1, error="e", retry_in=-1, max_attempts=3),
        lambda s: s.record_failure("relay-1", 1, error="e", retry_in=1, max_attempts=0),
        lambda s: s.record_failure(
            "relay-1", 1, error="e", retry_in=1, max_attempts=3, permanent="yes"
        ),
    ],
    "release": [lambda s: s.release("relay-1", [-3]), lambda s: s.release("", [1])],
    "requeue": [lambda s: s.requeue(["1"]), lambda s: s.requeue(thread_id="")],
    "dead_letters": [lambda s: s.dead_letters(limit=0)],
    "prune": [lambda s: s.prune(-1), lambda s: s.prune("7d")],
    "outbox_stats": [],
    "list_threads": [
        lambda s: s.list_threads(limit=0),
        lambda s: s.list_threads(prefix=3),
        lambda s: s.list_threads(after=b"x"),
    ],
    "store_status": [],
    "schema_info": [],
    "lease_info": [lambda s: s.lease_info("")],
    "prune_records": [
        lambda s: s.prune_records(older_than=datetime(2026, 1, 1)),
        lambda s: s.prune_records(older_than="2026-01-01"),
        lambda s: s.prune_records(older_than=NOW, dry_run="no"),
    ],
    "with_turn": [
        lambda s: s.with_turn("", "turn-1", _never),
        lambda s: s.with_turn("t1", "turn-1", "not callable"),
    ],
}


async def _never(scope: Any) -> None:
    raise AssertionError("must not run")


class PublicFace:
    def test_every_store_method_has_a_bad_argument_row(self) -> None:
        assert sorted(BAD_CALLS) == STORE_METHODS

    @conformance_test
    async def test_a_closed_store_refuses_every_method(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        await store.close()
        await store.close()  # idempotent
        for name, call in VALID_CALLS.items():
            with pytest.raises(UsageError) as caught:
                await call(store)
            assert caught.value.code is ErrorCode.SCOPE_CLOSED, name

    @conformance_test
    async def test_an_open_store_answers_every_method(self, harness: ConformanceHarness) -> None:
        store = await harness.open()
        for name, call in VALID_CALLS.items():
            if name in ("reconcile", "with_turn"):
                continue  # no receipt to reconcile; with_turn is the rules' subject
            await call(store)  # no error: the valid calls of the tables are valid

    @conformance_test
    async def test_bad_arguments_to_every_method_are_typed_errors_and_write_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        store = await harness.open()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), _value)])
        before = await _snapshot(store)
        for name, calls in BAD_CALLS.items():
            for index, call in enumerate(calls):
                with pytest.raises(KernelError) as caught:
                    await call(store)
                error = caught.value
                assert isinstance(error, InvalidInputError), (name, index, error)
                assert error.retryable is False, (name, index)
        assert await _snapshot(store) == before


async def _value(authority: Any) -> str:
    return "ok"


async def _snapshot(store: Any) -> tuple[Any, ...]:
    return (
        await store.list_turns("t1"),
        await store.list_receipts(),
        await store.reconciliations(),
        await store.read_outbox(),
        replace(await store.outbox_stats(), oldest_pending_age=None),  # the age moves on
    )
