"""Poison data: nothing a caller, a model or a stored row sends can brick a thread or hide an
outcome. Every value is refused with a typed error before anything is written, or it reads back
equal; one unreadable stored row stays its own thread's problem."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol, cast

import pytest
from pydantic import JsonValue

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import (
    CheckpointCorruptError,
    EffectConflictError,
    EffectUncertainError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    SerializationError,
)
from ...contracts.events import EventCategory, KernelEvent
from ...contracts.inspect import StoreInspector
from ...contracts.outbox import OutboxSource
from ...contracts.receipts import EffectAuthority, ReceiptStatus
from ...contracts.turns import DurableTurnResult
from ._support import (
    ConformanceHarness,
    Provider,
    commit_simple,
    conformance_test,
    effect,
    make_events,
    make_result,
)

__all__ = ["PoisonData"]

HUGE = 10**5000
"""More digits than Python's JSON decoder reads back (4300)."""

NOT_JSON: list[Any] = [
    {1, 2},
    frozenset({"a"}),
    b"bytes",
    bytearray(b"x"),
    datetime(2026, 1, 1, tzinfo=UTC),
    Decimal("1.5"),
    object(),
]


class FullStore(DurabilityStore, StoreInspector, OutboxSource, Protocol):
    """A store that is also an operator inspector and an outbox source (as ours all are)."""


async def full(harness: ConformanceHarness) -> FullStore:
    return cast(FullStore, await harness.open())


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def event(
    scope: TurnScope, sequence: int, *, event_id: str | None = None, data: Any = None
) -> KernelEvent:
    return KernelEvent(
        id=event_id if event_id is not None else f"evt-{scope.turn_id}-{sequence}",
        type="test.event",
        occurred_at=datetime.now(UTC),
        thread_id=scope.thread_id,
        turn_id=scope.turn_id,
        sequence=sequence,
        correlation_id=f"trace-{scope.turn_id}",
        category=EventCategory.INTEGRATION,
        data={} if data is None else data,
    )


Build = Callable[[TurnScope], tuple[DurableTurnResult, Sequence[KernelEvent]]]


async def commit_built(store: DurabilityStore, thread_id: str, turn_id: str, build: Build) -> None:
    async def operation(scope: TurnScope) -> None:
        result, events = build(scope)
        await scope.commit(result, events)

    await store.with_turn(thread_id, turn_id, operation)


async def assert_nothing_written(store: DurabilityStore, thread_id: str, turn_id: str) -> None:
    assert await store.get_turn(thread_id, turn_id) is None
    assert await store.read_outbox(thread_id=thread_id, turn_id=turn_id) == []


def unvalidated_response(scope: TurnScope, value: Any) -> DurableTurnResult:
    return make_result(scope).model_copy(update={"response": [value]})


def unvalidated_event(scope: TurnScope, value: Any) -> KernelEvent:
    return make_events(scope, 1)[0].model_copy(update={"data": {"k": value}})


def unvalidated(value: Any) -> list[Build]:
    """Turns that put ``value`` where pydantic did not validate it."""
    return [
        lambda s: (unvalidated_response(s, value), []),
        lambda s: (make_result(s), [unvalidated_event(s, value)]),
    ]


def with_metadata(scope: TurnScope, metadata: dict[str, Any]) -> DurableTurnResult:
    """A result whose checkpoint holds ``metadata`` without validation (``model_construct``
    skips it: the store must still refuse what it cannot read back)."""
    result = make_result(scope)
    checkpoint = result.checkpoint.model_copy(update={"metadata": metadata})
    return result.model_copy(update={"checkpoint": checkpoint})


class PoisonData:
    # ------------------------------------------------------------ values (items 1 and 2)

    @conformance_test
    async def test_poison_integers_out_of_range_are_refused_at_commit(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        builds: list[Build] = [
            lambda s: (make_result(s, {"n": HUGE}), []),
            lambda s: (make_result(s, [2**63]), []),
            lambda s: (with_metadata(s, {"n": -(2**63)}), []),
            lambda s: (make_result(s), [event(s, 0, data={"n": HUGE})]),
            lambda s: (make_result(s), [event(s, 0, data={"n": [2**64]})]),
        ]
        for n, build in enumerate(builds):
            with pytest.raises(SerializationError) as caught:
                await commit_built(store, "t1", f"turn-{n}", build)
            assert caught.value.code == ErrorCode.INTEGER_OUT_OF_RANGE
            assert caught.value.context["path"].startswith("$")
            await assert_nothing_written(store, "t1", f"turn-{n}")
        # The thread is not bricked: the largest stored integers read back exactly.
        edge: dict[str, JsonValue] = {"max": 2**63 - 1, "min": -(2**63 - 1)}
        await commit_built(store, "t1", "turn-ok", lambda s: (make_result(s, edge), []))
        stored = await store.get_turn("t1", "turn-ok")
        assert stored is not None and stored.response == edge
        assert (await store.outbox_stats()).pending == 0
        assert [t.thread_id for t in await store.list_threads()] == ["t1"]

    @conformance_test
    async def test_poison_non_json_types_are_serialization_errors_with_a_path(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        checkpoint = KernelCheckpoint(revision=1, agent_fingerprint="agent-fp")
        for bad in [*NOT_JSON, nested(5000)]:
            # Built by the model: the library's typed error, naming where the value is.
            with pytest.raises(SerializationError) as caught:
                DurableTurnResult(
                    thread_id="t1",
                    turn_id="turn-1",
                    trace_id="x",
                    response={"items": [0, bad]},
                    checkpoint=checkpoint,
                )
            assert caught.value.context["path"].startswith("$.items[1]")
            with pytest.raises(SerializationError):
                KernelCheckpoint(revision=1, agent_fingerprint="f", metadata={"k": bad})
            # The parts that arrive without validation (``model_construct``, the kernel's
            # events) are checked again at commit: refused, nothing written.
            for build in unvalidated(bad):
                with pytest.raises(SerializationError) as refused:
                    await commit_built(store, "t1", "turn-1", build)
                assert "path" in refused.value.context or refused.value.code in (
                    ErrorCode.VALUE_TOO_DEEP,
                    ErrorCode.NOT_SERIALIZABLE,
                )
                await assert_nothing_written(store, "t1", "turn-1")

    @conformance_test
    async def test_poison_tuples_are_json_arrays_everywhere(
        self, harness: ConformanceHarness
    ) -> None:
        """One rule: a tuple is accepted as a JSON array and handed back as a list, by the
        models, ``run_effect`` and ``reconcile`` alike (a first run equals a replay)."""
        store = await full(harness)
        provider = Provider()

        async def body(scope: TurnScope) -> list[Any]:
            tuples: Any = (1, (2, 3))
            done = await scope.run_effect(effect("k1"), provider.returning(tuples))
            result = make_result(scope, {"t": (1, 2)})  # type: ignore[dict-item]
            assert result.response == {"t": [1, 2]}
            await scope.commit(result, [event(scope, 0, data={"t": (3,)})])
            return [done.value, result.response]

        value, response = await store.with_turn("t1", "turn-1", body)
        assert value == [1, [2, 3]] and response == {"t": [1, 2]}
        stored = await store.get_turn("t1", "turn-1")
        assert stored is not None and stored.response == {"t": [1, 2]}
        [outbox] = await store.read_outbox(thread_id="t1")
        assert outbox.event.data == {"t": [3]}
        replay = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("x"))]
        )
        assert replay[1][0].value == [1, [2, 3]] and provider.total() == 1

    @conformance_test
    async def test_poison_effect_value_out_of_range_ends_uncertain_never_raw(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for n, value in enumerate([HUGE, 2**64, {"amount": Decimal("5")}, nested(500)]):
            key = f"k{n}"
            with pytest.raises(EffectUncertainError) as caught:
                await commit_simple(
                    store, "t1", f"turn-{n}", effects=[(effect(key), provider.returning(value))]
                )
            assert caught.value.code == ErrorCode.EFFECT_VALUE_NOT_STORABLE
            receipt = await store.get_receipt("t1", f"payments.charge:{key}")
            assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
        assert provider.total() == 4
        assert len(await store.list_receipts(status=ReceiptStatus.UNCERTAIN)) == 4

    @conformance_test
    async def test_poison_reconcile_value_out_of_range_writes_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store,
                "t1",
                "turn-1",
                effects=[(effect("k1"), provider.raising(TimeoutError("gateway")))],
            )
        bads: list[Any] = [HUGE, 2**63, {1, 2}, float("nan")]
        for bad in bads:
            with pytest.raises(SerializationError):
                await store.reconcile(
                    "t1", "payments.charge:k1", "completed", value=bad, note="n", actor="ops"
                )
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
        assert await store.reconciliations() == []

    # ------------------------------------------------------------ events and ids (4 and 5)

    @conformance_test
    async def test_poison_event_ids_and_sequences_are_checked_before_any_write(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        cases: list[tuple[Build, type[Exception], ErrorCode | None]] = [
            (lambda s: (make_result(s), [event(s, 0, event_id="")]), InvalidIdError, None),
            (lambda s: (make_result(s), [event(s, 0, event_id="e" * 300)]), InvalidIdError, None),
            (lambda s: (make_result(s), [event(s, 0, event_id="\u200b")]), InvalidIdError, None),
            (
                lambda s: (make_result(s), [event(s, 0, event_id="a"), event(s, 1, event_id="a")]),
                InvalidInputError,
                ErrorCode.DUPLICATE_EVENT,
            ),
            (
                lambda s: (make_result(s), [event(s, 3, event_id="a"), event(s, 3, event_id="b")]),
                InvalidInputError,
                ErrorCode.DUPLICATE_EVENT,
            ),
            (
                lambda s: (make_result(s), [event(s, 2, event_id="a"), event(s, 1, event_id="b")]),
                InvalidInputError,
                None,
            ),
            (lambda s: (make_result(s), [event(s, 2**31)]), InvalidInputError, None),
        ]
        for build, error, code in cases:
            with pytest.raises(error) as caught:
                await commit_built(store, "t1", "turn-1", build)
            if code is not None:
                assert caught.value.code == code  # type: ignore[attr-defined]
            await assert_nothing_written(store, "t1", "turn-1")
        await commit_built(store, "t1", "turn-1", lambda s: (make_result(s), make_events(s, 2)))
        assert len(await store.read_outbox(thread_id="t1")) == 2

    @conformance_test
    async def test_poison_one_turn_cannot_commit_more_outbox_than_the_limit(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        chunk = "x" * (3 * 1024 * 1024)  # each event is under 4 MiB; three are over 8 MiB

        def build(scope: TurnScope) -> tuple[DurableTurnResult, list[KernelEvent]]:
            return make_result(scope), [event(scope, n, data={"blob": chunk}) for n in range(3)]

        with pytest.raises(SerializationError) as caught:
            await commit_built(store, "t1", "turn-1", build)
        assert caught.value.code == ErrorCode.PAYLOAD_TOO_LARGE
        assert caught.value.context["what"] == "outbox events"
        await assert_nothing_written(store, "t1", "turn-1")

    @conformance_test
    async def test_poison_invisible_and_bidi_characters_are_refused_in_ids(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)

        async def never(scope: TurnScope) -> None:
            raise AssertionError("must not run")

        for bad in ["\u200b", "t\u202ex", "\ufeffthread", "a\u2028b", "a\u2029b", "\u00a0"]:
            with pytest.raises(InvalidIdError):
                await store.with_turn(bad, "turn-1", never)
            with pytest.raises(InvalidIdError):
                await store.get_receipt("t1", bad)
        await commit_simple(store, "tëst-ünïcode-日本", "turn-1")
        assert [t.thread_id for t in await store.list_threads()] == ["tëst-ünïcode-日本"]

    # ------------------------------------------------------------ effects (items 6 and 7)

    @conformance_test
    async def test_poison_same_key_with_another_request_is_refused_without_a_call(
        self, harness: ConformanceHarness
    ) -> None:
        """B5: a charge of 5 then a charge of 500 under one key must not replay the 5."""
        store = await full(harness)
        provider = Provider()

        async def charge(turn_id: str, amount: int) -> JsonValue:
            async def body(scope: TurnScope) -> JsonValue:
                done = await scope.run_effect(
                    effect("k1"),
                    provider.returning(f"charged {amount}"),
                    request={"amount": amount},
                )
                await scope.commit(make_result(scope))
                return done.value

            return await store.with_turn("t1", turn_id, body)

        assert await charge("turn-1", 5) == "charged 5"
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.request_fingerprint is not None
        with pytest.raises(EffectConflictError) as caught:
            await charge("turn-2", 500)
        assert caught.value.code == ErrorCode.EFFECT_REQUEST_MISMATCH
        assert caught.value.context["stored_fingerprint"] == receipt.request_fingerprint
        assert provider.total() == 1
        assert await charge("turn-3", 5) == "charged 5"  # the same request replays
        assert provider.total() == 1

    @conformance_test
    async def test_poison_receipts_without_a_fingerprint_keep_replaying(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])

        async def body(scope: TurnScope) -> JsonValue:
            done = await scope.run_effect(effect("k1"), provider.returning(2), request={"a": 1})
            return done.value

        assert await store.with_turn("t1", "turn-2", body) == 1
        assert provider.total() == 1

    @conformance_test
    async def test_poison_a_request_that_is_not_json_is_refused_before_prepared(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for bad in [{"amount": {1, 2}}, {"amount": HUGE}, {"n": float("nan")}]:

            async def body(scope: TurnScope, request: Any = bad) -> None:
                await scope.run_effect(effect("k1"), provider.returning(1), request=request)

            with pytest.raises(SerializationError):
                await store.with_turn("t1", "turn-1", body)
        assert provider.total() == 0
        assert await store.get_receipt("t1", "payments.charge:k1") is None

    @conformance_test
    async def test_poison_a_synchronous_provider_is_called_once_and_its_value_kept(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        calls: list[str] = []

        def charge(authority: EffectAuthority) -> JsonValue:
            calls.append(authority.idempotency_key)
            return {"charge": "ch_1"}

        async def body(scope: TurnScope) -> JsonValue:
            done = await scope.run_effect(effect("k1"), charge)
            await scope.commit(make_result(scope))
            return done.value

        assert await store.with_turn("t1", "turn-1", body) == {"charge": "ch_1"}
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
        assert receipt.value == {"charge": "ch_1"} and calls == ["payments.charge:k1"]

    # ------------------------------------------------------------ reconciliation (item 8)

    @conformance_test
    async def test_poison_a_completed_reconciliation_needs_an_explicit_value(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for key in ("k1", "k2"):
            with pytest.raises(EffectUncertainError):
                await commit_simple(
                    store,
                    "t1",
                    f"turn-{key}",
                    effects=[(effect(key), provider.raising(TimeoutError("gateway")))],
                )
        with pytest.raises(InvalidInputError) as caught:
            await store.reconcile("t1", "payments.charge:k1", "completed", note="n", actor="ops")
        assert caught.value.context == {"field": "value"}
        assert await store.reconciliations() == []
        receipt = await store.reconcile(
            "t1", "payments.charge:k1", "completed", value=None, note="null, on purpose", actor="a"
        )
        assert receipt.status is ReceiptStatus.COMPLETED and receipt.value is None
        failed = await store.reconcile(
            "t1", "payments.charge:k2", "not_applied", note="n", actor="a"
        )
        assert failed.status is ReceiptStatus.FAILED

    @conformance_test
    async def test_poison_a_reconciliation_can_be_corrected_with_its_audit_trail(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        key = "payments.charge:k1"
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store,
                "t1",
                "turn-1",
                effects=[(effect("k1"), provider.raising(TimeoutError("gateway")))],
            )
        await store.reconcile("t1", key, "completed", value=None, note="typo", actor="ops")
        fixed = await store.reconcile(
            "t1", key, "completed", value={"charge": "ch_9"}, note="fix", actor="ops2", correct=True
        )
        assert fixed.status is ReceiptStatus.COMPLETED and fixed.value == {"charge": "ch_9"}
        first, second = await store.reconciliations(idempotency_key=key)
        assert (first.value, first.supersedes) == (None, None)
        assert (second.value, second.supersedes, second.actor) == (
            {"charge": "ch_9"},
            first.id,
            "ops2",
        )
        assert second.previous_status is ReceiptStatus.COMPLETED
        # Without ``correct`` a reconciled receipt is still refused.
        with pytest.raises(EffectConflictError) as refused:
            await store.reconcile("t1", key, "completed", value=3, note="n", actor="a")
        assert refused.value.code == ErrorCode.RECEIPT_NOT_UNCERTAIN
        # It can be corrected again, to not_applied: then a retry may run once.
        again = await store.reconcile(
            "t1", key, "not_applied", note="refunded", actor="ops", correct=True
        )
        assert again.status is ReceiptStatus.FAILED
        _, executions, _ = await commit_simple(
            store, "t1", "turn-2", effects=[(effect("k1"), provider.returning("ch_10"))]
        )
        assert executions[0].value == "ch_10" and provider.total() == 2
        # Now completed by the provider, not by a reconciliation: not correctable.
        with pytest.raises(EffectConflictError) as late:
            await store.reconcile(
                "t1", key, "completed", value=1, note="n", actor="a", correct=True
            )
        assert late.value.code == ErrorCode.RECEIPT_NOT_RECONCILED
        assert len(await store.reconciliations(idempotency_key=key)) == 3

    @conformance_test
    async def test_poison_a_receipt_never_reconciled_cannot_be_corrected(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        await commit_simple(store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(1))])
        for key in ("payments.charge:k1", "payments.charge:none"):
            with pytest.raises(EffectConflictError):
                await store.reconcile(
                    "t1", key, "completed", value=2, note="n", actor="a", correct=True
                )
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and receipt.value == 1
        assert await store.reconciliations() == []

    # ------------------------------------------------------------ corrupt rows (item 3)

    @conformance_test
    async def test_poison_a_corrupt_head_is_listed_on_its_own_thread(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        for thread in ("t1", "t2", "t3"):
            await commit_simple(store, thread, "turn-1")
        await harness.corrupt_turn("t1", "turn-1", '{"thread_id": "t1", "checkpoint": {"rev')
        await harness.corrupt_turn("t3", "turn-1", '{"n": ' + "1" * 5000 + "}")
        threads = {t.thread_id: t for t in await store.list_threads()}
        assert sorted(threads) == ["t1", "t2", "t3"]
        assert threads["t1"].corrupt is not None and threads["t1"].fingerprint is None
        assert threads["t2"].corrupt is None and threads["t2"].fingerprint == "agent-fp"
        assert threads["t3"].corrupt is not None
        assert (await store.store_status()).corrupt_threads == 2
        with pytest.raises(CheckpointCorruptError):
            await store.load_checkpoint("t1")
        assert (await store.load_checkpoint("t2")) is not None
        await commit_simple(store, "t2", "turn-2")  # other threads carry on

    @conformance_test
    async def test_poison_a_corrupt_receipt_does_not_hide_the_others(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        provider = Provider()
        for thread in ("t1", "t2"):
            with pytest.raises(EffectUncertainError):
                await commit_simple(
                    store,
                    thread,
                    "turn-1",
                    effects=[(effect("k1"), provider.raising(TimeoutError("gateway")))],
                )
        await harness.corrupt_receipt("t1", "payments.charge:k1", "{not json")
        listed = await store.list_receipts(status=ReceiptStatus.UNCERTAIN)
        assert [(r.thread_id, r.error is not None) for r in listed] == [
            ("t1", True),
            ("t2", True),
        ]
        broken = next(r for r in listed if r.thread_id == "t1")
        assert broken.error is not None and broken.error.startswith("unreadable")
        assert len(await store.list_receipts()) == 2
        with pytest.raises(CheckpointCorruptError):
            await store.get_receipt("t1", "payments.charge:k1")
        assert (await store.store_status()).threads == 2

    @conformance_test
    async def test_poison_an_unreadable_outbox_row_is_dead_lettered_on_its_thread_only(
        self, harness: ConformanceHarness
    ) -> None:
        store = await full(harness)
        for thread in ("t1", "t2"):
            await commit_simple(store, thread, "turn-1")  # three events each
        first = min(e.position for e in await store.read_outbox(thread_id="t1"))
        stored = await store.read_outbox(thread_id="t1", limit=1)
        text = json.dumps(stored[0].event.model_dump(mode="json"))
        # The issue's case: valid JSON the decoder refuses (an integer of 5000 digits).
        await harness.corrupt_event(first, text[:-1] + ', "x": ' + "7" * 5000 + "}")
        outbox = store
        stats = await outbox.outbox_stats()
        assert stats.pending == 6
        listed = await store.read_outbox(thread_id="t1")
        assert listed[0].corrupt is not None and listed[0].event.thread_id == "t1"
        batch = await outbox.claim("relay-1", limit=100, lease=30)
        assert {e.event.thread_id for e in batch} == {"t2"} and len(batch) == 3
        [dead] = await outbox.dead_letters()
        assert dead.position == first and dead.dead and dead.corrupt is not None
        assert dead.last_error is not None and dead.last_error.startswith("unreadable")
        after = await outbox.outbox_stats()
        assert (after.dead, after.blocked_threads) == (1, 1)
        assert await outbox.mark_delivered("relay-1", [e.position for e in batch]) == 3
        assert await outbox.claim("relay-2", limit=100, lease=30) == []  # t1 stays held back
        assert (await store.store_status()).dead_events == 1
