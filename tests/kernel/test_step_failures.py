"""An exception from a capability is a failed step, not a crashed turn.

The turn commits an answer in the kernel's words with a ``retryable`` flag, the step's event
names the exception's type (never its message), and the thread goes on. Errors of the turn
itself (the store, a lost lease, a cancellation) still leave it uncommitted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import (
    DurabilityError,
    DurabilityStore,
    ErrorCode,
    KernelEvent,
    LeaseLostError,
    ReceiptStatus,
)
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    ErrorClassifier,
    KernelLimits,
    StepError,
    TurnCompleted,
    TurnResult,
    define_capability,
)
from intention_kernel.kernel._failures import CONFLICT, INTERNAL, TRY_AGAIN
from intention_kernel.kernel._pipeline._outcomes import APPLIED_UNFINISHED, TOO_LONG

from .support import FaqAnswer, World, make_world, support_agent
from .writes import CHARGE, REFUND, Charge, Payments, accept

KEY = "payments.charge:order:42"
SECRET = "postgres://bank:hunter2-s3cret@10.0.0.7/accounts"


class BalanceQuery(BaseModel):
    account: str


class Balance(BaseModel):
    account: str
    eur: int


class Backend:
    """The host's accounts backend; ``fail`` is raised by the next call (then cleared)."""

    def __init__(self) -> None:
        self.fail: BaseException | None = None
        self.calls = 0

    async def balance(self, account: str) -> int:
        self.calls += 1
        failure, self.fail = self.fail, None
        if failure is not None:
            raise failure
        return 120


async def _balance(context: CapabilityContext, query: BalanceQuery) -> Completed:
    eur = await context.ports["accounts"].balance(query.account)
    return Completed(
        output=Balance(account=query.account, eur=eur),
        text=f"Account {query.account} holds {eur} EUR.",
    )


BALANCE = define_capability(
    id="accounts.balance",
    version="1.0.0",
    description="Tell the balance of an account.",
    input=BalanceQuery,
    output=Balance,
    effect="read",
    execute=_balance,
)


async def _charge_then_mail(context: CapabilityContext, charge: Charge) -> Completed:
    """Charges, then a mail server that is down raises: the write went through."""
    payments: Payments = context.ports["payments"]
    await context.run_effect(
        f"order:{charge.order_id}",
        lambda authority: payments.charge(authority, charge.order_id, charge.amount),
    )
    raise ConnectionRefusedError(f"smtp login failed for {SECRET}")


CHARGE_AND_MAIL = define_capability(
    id="payments.charge_and_mail",
    version="1.0.0",
    description="Charge an order and mail the receipt.",
    input=Charge,
    output=FaqAnswer,
    effect="write",
    confirmation="required",
    execute=_charge_then_mail,
)


async def _check_then_charge(context: CapabilityContext, charge: Charge) -> Completed:
    """Checks the card with the backend first; it raises before any write."""
    await context.ports["accounts"].balance(charge.order_id)
    raise AssertionError("the backend raises first")


CHECK_THEN_CHARGE = define_capability(
    id="payments.checked",
    version="1.0.0",
    description="Check the card, then charge.",
    input=Charge,
    output=FaqAnswer,
    effect="write",
    confirmation="required",
    execute=_check_then_charge,
)


async def _nested(context: CapabilityContext, charge: Charge) -> Completed:
    payments: Payments = context.ports["payments"]

    async def outer(authority: Any) -> Any:
        return await context.run_effect(
            "inner", lambda inner: payments.charge(inner, charge.order_id, charge.amount)
        )

    await context.run_effect(f"order:{charge.order_id}", outer)
    return Completed(output=FaqAnswer(answer="-"))


NESTED = define_capability(
    id="payments.nested",
    version="1.0.0",
    description="A write that runs a write inside its write.",
    input=Charge,
    output=FaqAnswer,
    effect="write",
    confirmation="required",
    execute=_nested,
)


def bank_world(
    durability: DurabilityStore,
    classify_error: ErrorClassifier | None = None,
    backend: Backend | None = None,
    limits: KernelLimits | None = None,
) -> tuple[World, Backend, Payments]:
    backend, payments = backend or Backend(), Payments()
    world = make_world(
        durability,
        agent=support_agent([BALANCE, CHARGE, REFUND, CHARGE_AND_MAIL, CHECK_THEN_CHARGE, NESTED]),
        ports={"accounts": backend, "payments": payments},
        classify_error=classify_error,
        limits=limits,
    )
    world.say("balance?", [{"capability": "accounts.balance", "input": {"account": "A-1"}}])
    world.say("charge 42", [{"capability": "payments.charge", "input": _order(5)}])
    world.say("charge 42 for 500", [{"capability": "payments.charge", "input": _order(500)}])
    world.say("charge and mail", [{"capability": "payments.charge_and_mail", "input": _order(5)}])
    world.say("checked charge", [{"capability": "payments.checked", "input": _order(5)}])
    world.say("nested", [{"capability": "payments.nested", "input": _order(5)}])
    world.say("yes", [], answer="yes")
    return world, backend, payments


def _order(amount: int) -> dict[str, Any]:
    return {"order_id": "42", "amount": amount}


async def _events(durability: DurabilityStore, turn_id: str) -> list[KernelEvent]:
    return [e.event for e in await durability.read_outbox(thread_id="t1", turn_id=turn_id)]


async def _failed_event(durability: DurabilityStore, turn_id: str) -> KernelEvent:
    [event] = [e for e in await _events(durability, turn_id) if e.type == "step.failed"]
    return event


async def _no_secret_anywhere(world: World, result: TurnResult) -> None:
    """The exception's message is in no committed or published byte of the turn."""
    stored = await world.durability.get_turn("t1", result.turn_id)
    assert stored is not None
    checkpoint = await world.durability.load_checkpoint("t1")
    assert checkpoint is not None
    texts = [
        result.response.model_dump_json(),
        result.checkpoint.model_dump_json(),
        stored.model_dump_json(),
        checkpoint.model_dump_json(),
        *[e.model_dump_json() for e in await _events(world.durability, result.turn_id)],
        *[e.model_dump_json() for e in world.collector.events],
    ]
    for text in texts:
        assert "hunter2" not in text and "s3cret" not in text and "10.0.0.7" not in text


async def test_a_confirmed_write_whose_key_was_used_for_another_input_fails_its_step(
    durability: DurabilityStore,
) -> None:
    world, _, payments = bank_world(durability)
    await world.run("turn-1", "charge 42")
    first = await world.run("turn-2", "yes")
    assert [s.status for s in first.response.steps] == ["completed"]

    proposed = await world.run("turn-3", "charge 42 for 500")
    assert proposed.checkpoint.interaction is not None
    composed = world.gateway.count("compose")
    accepted = await world.run("turn-4", "", selection=accept(proposed))

    [step] = accepted.response.steps
    assert step.status == "failed" and step.reason == CONFLICT and step.retryable is False
    assert accepted.response.kind == "fallback"
    assert accepted.response.text == f"I could not complete that: {CONFLICT}"
    assert world.gateway.count("compose") == composed  # the kernel's words, no model
    assert payments.calls == [KEY]  # the provider was called once, for the first charge
    stored = await durability.get_receipt("t1", KEY)
    assert stored is not None and stored.status is ReceiptStatus.COMPLETED
    # The confirmation is answered and gone: nothing waits, nothing asks again.
    assert accepted.checkpoint.interaction is None
    assert accepted.checkpoint.agenda == []
    assert accepted.checkpoint.revision == proposed.checkpoint.revision + 1
    event = await _failed_event(durability, "turn-4")
    assert event.data["error"] == {
        "type": "intention_kernel.contracts.errors.EffectConflictError",
        "retryable": False,
        "code": "EFFECT_REQUEST_MISMATCH",
    }
    assert event.data["reason"] == CONFLICT and "approval_digest" in event.data
    assert "confirmation.accepted" in [e.type for e in await _events(durability, "turn-4")]

    # The turn delivered again replays; the thread goes on.
    again = await world.run("turn-4", "", selection=accept(proposed))
    assert again.replayed and again.response == accepted.response
    later = await world.run("turn-5", "yes")
    assert later.response.kind == "clarification" and not later.response.steps
    balance = await world.run("turn-6", "balance?")
    assert balance.response.text == "Account A-1 holds 120 EUR."
    assert payments.calls == [KEY]


async def test_a_read_whose_backend_is_unreachable_commits_a_retryable_failure(
    durability: DurabilityStore,
) -> None:
    world, backend, _ = bank_world(durability)
    backend.fail = ConnectionError(f"could not connect to {SECRET}")
    result = await world.run("turn-1", "balance?")

    assert not result.replayed and result.checkpoint.revision == 1
    [step] = result.response.steps
    assert step.status == "failed" and step.reason == TRY_AGAIN and step.retryable is True
    assert result.response.kind == "fallback"
    assert result.response.text == f"I could not complete that: {TRY_AGAIN}"
    assert world.gateway.count("compose") == 0
    event = await _failed_event(durability, "turn-1")
    assert event.data["error"] == {"type": "builtins.ConnectionError", "retryable": True}
    assert event.category == "audit"
    await _no_secret_anywhere(world, result)
    # Stored as the answer was given: the same turn replays it; a new one runs again.
    assert (await world.run("turn-1", "balance?")).response == result.response
    retry = await world.run("turn-2", "balance?")
    assert retry.response.text == "Account A-1 holds 120 EUR." and backend.calls == 2


@pytest.mark.parametrize(
    ("failure", "retryable"),
    [
        (TimeoutError("read timed out"), True),
        (OSError(104, "connection reset by peer"), True),
        (RuntimeError("a bug"), False),
        (KeyError("account"), False),
    ],
    ids=["timeout", "oserror", "runtime", "keyerror"],
)
async def test_the_default_classification(
    durability: DurabilityStore, failure: BaseException, retryable: bool
) -> None:
    world, backend, _ = bank_world(durability)
    backend.fail = failure
    [step] = (await world.run("turn-1", "balance?")).response.steps
    assert step.status == "failed" and step.retryable is retryable
    event = await _failed_event(durability, "turn-1")
    assert event.data["error"] == {
        "type": f"builtins.{type(failure).__name__}",
        "retryable": retryable,
    }


class BankClosed(Exception):
    """A host's own exception: the bank's batch window."""


async def test_the_hosts_classifier_decides_and_a_broken_one_falls_back(
    durability: DurabilityStore,
) -> None:
    def classify(exc: Exception) -> StepError | None:
        if isinstance(exc, BankClosed):
            return StepError(retryable=True, code="BANK_CLOSED")
        if isinstance(exc, ZeroDivisionError):
            raise ValueError("the classifier has a bug")
        return None

    world, backend, _ = bank_world(durability, classify)
    backend.fail = BankClosed(f"closed until 6, see {SECRET}")
    result = await world.run("turn-1", "balance?")
    [step] = result.response.steps
    assert step.retryable is True and step.reason == TRY_AGAIN
    event = await _failed_event(durability, "turn-1")
    assert event.data["error"] == {
        "type": f"{__name__}.BankClosed",
        "retryable": True,
        "code": "BANK_CLOSED",
    }
    await _no_secret_anywhere(world, result)
    backend.fail = ConnectionError("down")  # None: the default
    [step] = (await world.run("turn-2", "balance?")).response.steps
    assert step.retryable is True
    backend.fail = ZeroDivisionError()  # the classifier raises: the default, not a crash
    [step] = (await world.run("turn-3", "balance?")).response.steps
    assert step.status == "failed" and step.retryable is False and step.reason == INTERNAL
    with pytest.raises(ValueError, match="short identifier"):
        StepError(retryable=True, code="not a code")


async def test_a_write_that_raises_before_run_effect_fails_and_writes_nothing(
    durability: DurabilityStore,
) -> None:
    world, backend, payments = bank_world(durability)
    proposed = await world.run("turn-1", "checked charge")
    backend.fail = ConnectionResetError(SECRET)
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "failed" and step.retryable is True
    assert payments.calls == [] and result.checkpoint.receipts == []
    assert result.checkpoint.interaction is None and result.checkpoint.agenda == []
    await _no_secret_anywhere(world, result)


async def test_a_write_that_raises_after_its_write_completed_is_applied_never_failed(
    durability: DurabilityStore,
) -> None:
    world, _, payments = bank_world(durability)
    proposed = await world.run("turn-1", "charge and mail")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "applied" and step.reason == APPLIED_UNFINISHED
    assert step.retryable is None
    assert result.response.kind == "fallback" and "went through" in result.response.text
    [receipt] = result.checkpoint.receipts
    assert receipt.status is ReceiptStatus.COMPLETED
    [event] = [e for e in await _events(durability, "turn-2") if e.type == "step.applied"]
    assert event.data["error"] == {"type": "builtins.ConnectionRefusedError"}
    await _no_secret_anywhere(world, result)
    # Asking again replays the stored charge: the provider was called once.
    again = await world.run("turn-3", "charge and mail")
    await world.run("turn-4", "", selection=accept(again))
    assert payments.calls == ["payments.charge_and_mail:order:42"]


async def test_a_nested_write_is_a_failed_step_and_calls_nothing(
    durability: DurabilityStore,
) -> None:
    world, _, payments = bank_world(durability)
    proposed = await world.run("turn-1", "nested")
    result = await world.run("turn-2", "", selection=accept(proposed))
    [step] = result.response.steps
    assert step.status == "failed" and step.reason == INTERNAL and step.retryable is False
    assert payments.calls == []
    outer = await durability.get_receipt("t1", "payments.nested:order:42")
    assert outer is not None and outer.status is ReceiptStatus.FAILED
    event = await _failed_event(durability, "turn-2")
    assert event.data["error"] == {
        "type": "intention_kernel.contracts.errors.UsageError",
        "retryable": False,
        "code": str(ErrorCode.EFFECT_NESTED),
    }
    assert result.checkpoint.interaction is None


@pytest.mark.parametrize(
    "failure",
    [
        DurabilityError("store down", code=ErrorCode.STORE_UNAVAILABLE, retryable=True),
        DurabilityError("lock wait", code=ErrorCode.LOCK_TIMEOUT, retryable=True),
        LeaseLostError(),
    ],
    ids=["store-unavailable", "lock-timeout", "lease-lost"],
)
async def test_store_errors_from_a_step_still_fail_the_turn(
    durability: DurabilityStore, failure: DurabilityError
) -> None:
    world, backend, _ = bank_world(durability)
    backend.fail = failure
    with pytest.raises(type(failure)) as caught:
        await world.run("turn-1", "balance?")
    assert caught.value is failure
    assert await durability.load_checkpoint("t1") is None
    assert await durability.get_turn("t1", "turn-1") is None
    assert await durability.read_outbox(thread_id="t1") == []


async def test_a_cancelled_turn_is_still_cancelled_whatever_the_capability_raises(
    durability: DurabilityStore,
) -> None:
    entered = asyncio.Event()

    class Hanging(Backend):
        async def balance(self, account: str) -> int:
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                raise RuntimeError("gave up") from None  # hides the cancellation
            return 0

    world, _, _ = bank_world(durability, backend=Hanging())
    task = asyncio.create_task(world.run("turn-1", "balance?"))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises((asyncio.CancelledError, RuntimeError)):
        await task
    assert await durability.load_checkpoint("t1") is None
    assert await durability.get_turn("t1", "turn-1") is None


class Fanout(Backend):
    """Asks two replicas at once; ``fail`` is raised by both."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure

    async def balance(self, account: str) -> int:
        async def replica() -> None:
            await asyncio.sleep(0)
            raise self.failure

        async with asyncio.TaskGroup() as group:
            group.create_task(replica())
            group.create_task(replica())
        return 0


async def test_a_capabilitys_own_task_group_is_classified_by_what_it_holds(
    durability: DurabilityStore,
) -> None:
    world, _, _ = bank_world(durability, backend=Fanout(ConnectionError(SECRET)))
    result = await world.run("turn-1", "balance?")
    [step] = result.response.steps
    assert step.status == "failed" and step.retryable is True
    event = await _failed_event(durability, "turn-1")
    assert event.data["error"] == {"type": "builtins.ExceptionGroup", "retryable": True}
    await _no_secret_anywhere(world, result)

    store_down = DurabilityError("down", code=ErrorCode.STORE_UNAVAILABLE, retryable=True)
    world, _, _ = bank_world(durability, backend=Fanout(store_down))
    with pytest.raises(ExceptionGroup) as caught:
        await world.run("turn-1", "balance?", thread_id="t2")
    assert caught.value.subgroup(DurabilityError) is not None
    assert await durability.load_checkpoint("t2") is None


async def test_a_stream_ends_with_the_committed_failed_step(durability: DurabilityStore) -> None:
    world, backend, _ = bank_world(durability)
    backend.fail = ConnectionError(SECRET)
    items = [
        item async for item in world.agent.stream(thread_id="t1", turn_id="turn-1", text="balance?")
    ]
    assert [type(i).__name__ for i in items] == [
        "StepStarted",
        "StepFinished",
        "TextDelta",
        "TurnCompleted",
    ]
    done = items[-1]
    assert isinstance(done, TurnCompleted)
    [step] = done.result.response.steps
    assert step.status == "failed" and step.retryable is True
    await _no_secret_anywhere(world, done.result)


class ClientTimeout(Exception):
    """A client library's own timeout error, raised from ``TimeoutError``."""


class Slow(Backend):
    """Gives up after its own short timeout (``own``), or hides the step's cancellation."""

    def __init__(self, *, own: bool) -> None:
        super().__init__()
        self.own = own

    async def balance(self, account: str) -> int:
        if self.own:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(5)
            except TimeoutError as exc:
                raise ClientTimeout("gave up") from exc
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            raise RuntimeError("interrupted") from None
        return 0


async def test_a_capabilitys_own_timeout_or_a_hidden_step_timeout_fails_only_the_step(
    durability: DurabilityStore,
) -> None:
    world, _, _ = bank_world(durability, backend=Slow(own=True))
    [step] = (await world.run("turn-1", "balance?")).response.steps
    assert step.status == "failed" and step.retryable is False  # the host may classify it
    event = await _failed_event(durability, "turn-1")
    assert event.data["error"] == {"type": f"{__name__}.ClientTimeout", "retryable": False}

    limits = KernelLimits(step_timeout=0.2)
    world, _, _ = bank_world(durability, backend=Slow(own=False), limits=limits)
    [step] = (await world.run("turn-1", "balance?", thread_id="t2")).response.steps
    assert step.status == "failed" and step.reason == TOO_LONG and step.retryable is True
