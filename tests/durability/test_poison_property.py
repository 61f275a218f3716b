"""Adversarial values thrown at every way in: each is refused with a typed error and nothing
written, or it reads back equal to what the caller was handed (the stored form)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intention_kernel.contracts import (
    DurabilityStore,
    DurableTurnResult,
    EffectUncertainError,
    ErrorCode,
    InvalidIdError,
    KernelCheckpoint,
    KernelError,
    ReceiptStatus,
    SerializationError,
    TurnScope,
)
from intention_kernel.contracts.codec import round_trip
from intention_kernel.contracts.events import KernelEvent
from intention_kernel.contracts.inspect import StoreInspector
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing import MemoryDurability
from intention_kernel.testing.conformance import Provider, commit_simple, effect, make_result

SPECIAL_TEXT = [
    "\u200b",
    "t\u202ex",
    "\u2066x\u2069",
    "\ufeffbom",
    "a\u2028b",
    "\u00a0",
    "\ud800",
    "x\udfff",
    "nul\x00",
    "\\u0000",
    "NaN",
    "Infinity",
    "日本語",
    '"[{',
]

texts = st.text(max_size=6) | st.sampled_from(SPECIAL_TEXT)
integers = (
    st.integers()
    | st.sampled_from([2**63 - 1, -(2**63 - 1), 2**63, -(2**63), 2**64, 10**19, -(10**30)])
    | st.sampled_from([4301, 5000]).map(lambda digits: 10**digits)  # unprintable: built late
)
not_json = (
    st.binary(max_size=3)
    | st.sets(st.integers(0, 3), max_size=2)
    | st.frozensets(st.integers(0, 3), max_size=2)
    | st.datetimes(timezones=st.just(UTC))
    | st.decimals(allow_nan=False, places=2)
    | st.just(object())
)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


leaves = st.none() | st.booleans() | integers | st.floats() | texts | not_json
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(texts | st.integers(0, 2), children, max_size=3)
    ),
    max_leaves=8,
) | st.sampled_from([63, 64, 65, 300, 5000]).map(nested)

Opener = Callable[[], Awaitable[DurabilityStore]]
_serial = itertools.count()


@pytest.fixture(params=["memory", "sqlite"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    if request.param == "memory":

        async def memory() -> DurabilityStore:
            return MemoryDurability()

        return memory

    async def sqlite() -> DurabilityStore:
        return await SQLiteDurability.open(tmp_path / f"store-{next(_serial)}.db")

    return sqlite


def inspector(store: DurabilityStore) -> StoreInspector:
    assert isinstance(store, StoreInspector)
    return store


def run(opener: Opener, body: Callable[[DurabilityStore], Awaitable[None]]) -> None:
    async def main() -> None:
        store = await opener()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(value=values, where=st.sampled_from(["response", "metadata", "event"]))
def test_commit_refuses_or_reads_back_equal(opener: Opener, value: Any, where: str) -> None:
    async def body(store: DurabilityStore) -> None:
        async def operation(scope: TurnScope) -> DurableTurnResult:
            result = make_result(scope)
            if where == "response":
                result = make_result(scope, {"v": value})
            elif where == "metadata":
                checkpoint = KernelCheckpoint(
                    revision=1, agent_fingerprint="agent-fp", metadata={"v": value}
                )
                result = result.model_copy(update={"checkpoint": checkpoint})
            events = []
            if where == "event":
                events = [
                    KernelEvent(
                        id="evt-1",
                        type="t",
                        occurred_at=datetime.now(UTC),
                        thread_id=scope.thread_id,
                        turn_id=scope.turn_id,
                        sequence=0,
                        correlation_id="c",
                        data={"v": value},
                    )
                ]
            await scope.commit(result, events)
            return result

        refused: KernelError | None = None
        try:
            result = await store.with_turn("t1", "turn-1", operation)
        except KernelError as exc:
            refused = exc
        if refused is not None:
            assert isinstance(refused, SerializationError), refused
            assert await store.get_turn("t1", "turn-1") is None
            assert await store.read_outbox() == []
            return
        stored = await store.get_turn("t1", "turn-1")
        assert stored == result
        if where == "event":
            [outbox] = await store.read_outbox()
            assert outbox.event.data == round_trip({"v": value})

    run(opener, body)


@SETTINGS
@given(value=values)
def test_effect_values_complete_exactly_or_end_uncertain(opener: Opener, value: Any) -> None:
    async def body(store: DurabilityStore) -> None:
        provider = Provider()
        key = "payments.charge:k1"
        uncertain: EffectUncertainError | None = None
        try:
            _, [done], _ = await commit_simple(
                store, "t1", "turn-1", effects=[(effect("k1"), provider.returning(value))]
            )
        except EffectUncertainError as exc:
            uncertain = exc
        except SerializationError:
            # The value was stored, but the turn's response (which repeats it) is too large.
            receipt = await store.get_receipt("t1", key)
            assert receipt is not None and receipt.status is ReceiptStatus.COMPLETED
            return
        if uncertain is not None:
            assert uncertain.code == ErrorCode.EFFECT_VALUE_NOT_STORABLE
            receipt = await store.get_receipt("t1", key)
            assert receipt is not None and receipt.status is ReceiptStatus.UNCERTAIN
            return
        assert done.value == round_trip(value)
        receipt = await store.get_receipt("t1", key)
        assert receipt is not None and receipt.value == done.value
        assert provider.total() == 1

    run(opener, body)


@SETTINGS
@given(request=values)
def test_effect_requests_are_refused_before_prepared_or_fingerprinted(
    opener: Opener, request: Any
) -> None:
    async def body(store: DurabilityStore) -> None:
        provider = Provider()

        async def operation(scope: TurnScope) -> None:
            await scope.run_effect(effect("k1"), provider.returning(1), request=request)

        try:
            await store.with_turn("t1", "turn-1", operation)
        except SerializationError:
            assert provider.total() == 0
            assert await store.get_receipt("t1", "payments.charge:k1") is None
            return
        receipt = await store.get_receipt("t1", "payments.charge:k1")
        assert receipt is not None and (receipt.request_fingerprint is None) == (request is None)

    run(opener, body)


@SETTINGS
@given(value=values)
def test_reconciled_values_are_refused_or_read_back(opener: Opener, value: Any) -> None:
    async def body(store: DurabilityStore) -> None:
        provider = Provider()
        key = "payments.charge:k1"
        with pytest.raises(EffectUncertainError):
            await commit_simple(
                store, "t1", "turn-1", effects=[(effect("k1"), provider.raising(TimeoutError()))]
            )
        try:
            receipt = await store.reconcile(
                "t1", key, "completed", value=value, note="seen", actor="ops"
            )
        except SerializationError:
            stored = await store.get_receipt("t1", key)
            assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN
            assert await store.reconciliations() == []
            return
        assert receipt.value == round_trip(value)
        stored = await store.get_receipt("t1", key)
        assert stored is not None and stored.value == receipt.value
        [record] = await store.reconciliations()
        assert record.value == receipt.value

    run(opener, body)


@SETTINGS
@given(thread_id=texts, key=texts)
def test_ids_are_refused_or_kept_exactly(opener: Opener, thread_id: str, key: str) -> None:
    async def body(store: DurabilityStore) -> None:
        provider = Provider()
        try:
            await commit_simple(
                store, thread_id, "turn-1", effects=[(effect(key), provider.returning(1))]
            )
        except InvalidIdError:
            assert await inspector(store).list_threads() == []
            assert provider.total() == 0
            return
        assert [t.thread_id for t in await inspector(store).list_threads()] == [thread_id]
        receipt = await store.get_receipt(thread_id, f"payments.charge:{key}")
        assert receipt is not None and receipt.value == 1

    run(opener, body)


@pytest.mark.parametrize(
    "value",
    [{1, 2}, b"x", datetime(2026, 1, 1, tzinfo=UTC), Decimal("1"), object(), nested(5000)],
)
def test_every_refusal_is_the_librarys_own_error(value: Any) -> None:
    """Never pydantic's ``ValidationError``, a ``ValueError`` or a ``RecursionError``."""
    with pytest.raises(SerializationError):
        KernelCheckpoint(revision=1, agent_fingerprint="f", facts=[], metadata={"v": value})
