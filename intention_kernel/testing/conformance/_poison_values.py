"""Poison values: a number, type or id a store cannot read back is refused with a typed error
before anything is written (items 1, 2, 4 and 5), and the helpers the poison tests share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol, cast

import pytest
from pydantic import JsonValue

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.durability import DurabilityStore, TurnScope
from ...contracts.errors import (
    EffectUncertainError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    SerializationError,
)
from ...contracts.events import EventCategory, KernelEvent
from ...contracts.inspect import StoreInspector
from ...contracts.outbox import OutboxSource
from ...contracts.receipts import ReceiptStatus
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

__all__ = [
    "HUGE",
    "NOT_JSON",
    "Build",
    "FullStore",
    "PoisonValues",
    "assert_nothing_written",
    "commit_built",
    "event",
    "full",
    "nested",
    "unvalidated",
    "unvalidated_event",
    "unvalidated_response",
    "with_metadata",
]

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


class PoisonValues:
    """Values, events and ids a caller or a model sends: refused before any write, or read back
    equal."""

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
