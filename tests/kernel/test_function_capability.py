"""``@capability``: a capability from a typed async function, the same contract as the long form.

The input schema comes from the parameters after the context (with the docstring's ``Args:``
descriptions), the output from the return annotation, the id from the name; a plain return
value completes the step, a ``CapabilityResult`` passes through, an exception fails the step;
writes are held for consent and replays run nothing; what cannot be derived is a compile
problem, listed with the others.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from intention_kernel import capability as top_level_capability
from intention_kernel.contracts import AgentCompilationError, DurabilityStore
from intention_kernel.kernel import (
    CapabilityContext,
    Completed,
    Failed,
    Kernel,
    StepStatus,
    capability,
    define_agent,
    define_capability,
)
from intention_kernel.kernel._function_capability import OUTPUT_FIELD
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import make_world, support_agent
from .writes import Payments, accept


class Receipt(BaseModel):
    charge_id: str
    amount: int


@capability(id="payments.charge", effect="write", confirmation="required")
async def charge(context: CapabilityContext, order_id: str, amount: int = 5) -> Receipt:
    """Charge the customer for an order.

    Args:
        order_id: The order to charge.
        amount: What to charge, in whole euros,
            at most the order's total.
    """
    payments: Payments = context.ports["payments"]
    effect = await context.run_effect(
        f"order:{order_id}", lambda authority: payments.charge(authority, order_id, amount)
    )
    value = effect.value
    assert isinstance(value, dict)
    return Receipt(charge_id=str(value["charge_id"]), amount=amount)


class ChargeInput(BaseModel):
    order_id: str = Field(description="The order to charge.")
    amount: int = Field(5, description="What to charge, in whole euros, at most the order's total.")


async def _charge_long(context: CapabilityContext, charge: ChargeInput) -> Completed:
    raise AssertionError("never run: only the manifest is compared")


CHARGE_LONG = define_capability(
    id="payments.charge",
    version="1.0.0",
    description="Charge the customer for an order.",
    input=ChargeInput,
    output=Receipt,
    effect="write",
    confirmation="required",
    execute=_charge_long,
)


@capability
async def count_items(context: CapabilityContext, words: list[str]) -> int:
    """Count the items of a list."""
    return len(words)


@capability(id="orders.cancel")
async def cancel(context: CapabilityContext, order_id: str) -> Receipt | Failed:
    """Cancel an order (it may have shipped)."""
    if order_id == "shipped":
        return Failed("Order shipped already.")
    return Receipt(charge_id=f"cancel-{order_id}", amount=0)


@capability
async def explode(context: CapabilityContext, why: str) -> str:
    """Always raises."""
    raise ConnectionRefusedError(f"secret-host down: {why}")


def _composed(world: Any) -> list[Any]:
    """The step outputs the last compose call was shown."""
    compose: Any = [c for c in world.gateway.calls if c.task == "compose"][-1].input
    return [o["output"] for o in compose["outcomes"]]


def _world(durability: DurabilityStore, *caps: Any) -> Any:
    world = make_world(durability, agent=support_agent(list(caps)), ports={"payments": Payments()})
    world.say("yes", [], answer="yes")
    return world


def test_the_input_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert charge.id == "payments.charge" and charge.version == "1.0.0"
    assert charge.description == "Charge the customer for an order."
    schema = charge.input_schema.model_json_schema()
    assert schema["title"] == "ChargeInput"
    assert schema["required"] == ["order_id"]
    props = schema["properties"]
    assert props["order_id"] == {
        "description": "The order to charge.",
        "title": "Order Id",
        "type": "string",
    }
    assert props["amount"]["default"] == 5
    assert props["amount"]["description"].endswith("in whole euros, at most the order's total.")
    assert charge.output_schema is Receipt


def test_the_id_is_the_function_name_and_a_plain_return_type_is_wrapped() -> None:
    assert count_items.id == "count_items"
    assert list(count_items.output_schema.model_fields) == [OUTPUT_FIELD]
    assert count_items.output_schema.model_json_schema()["title"] == "CountItemsOutput"
    assert top_level_capability is capability


def test_field_descriptions_from_annotated_and_sphinx_docstrings() -> None:
    async def rate(
        context: CapabilityContext,
        stars: Annotated[int, Field(ge=1, le=5, description="From 1 to 5.")],
        note: str = "",
    ) -> bool:
        """Rate an order.

        :param note: A remark for the shop.
        """
        return True

    cap = capability(rate, id="orders.rate", version="2.1.0")
    props = cap.input_schema.model_json_schema()["properties"]
    assert props["stars"]["description"] == "From 1 to 5."
    assert props["stars"]["maximum"] == 5
    assert props["note"]["description"] == "A remark for the shop."
    assert cap.version == "2.1.0" and cap.id == "orders.rate"


async def test_the_manifest_and_fingerprint_equal_the_long_forms() -> None:
    def compiled(cap: Any) -> Any:
        agent = define_agent(id="shop", version="1.0.0", description="A shop.", capabilities=[cap])
        kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway({}))
        return kernel.compile(agent)

    short, long = compiled(charge), compiled(CHARGE_LONG)
    assert short.manifest == long.manifest
    assert short.fingerprint == long.fingerprint
    changed = capability(charge_fn_for_version, id="payments.charge", version="1.0.1")
    assert compiled(changed).fingerprint != long.fingerprint  # the version is in the contract


async def charge_fn_for_version(context: CapabilityContext, order_id: str) -> Receipt:
    """Charge the customer for an order."""
    return Receipt(charge_id="-", amount=0)


async def test_a_plain_value_completes_the_step(durability: DurabilityStore) -> None:
    world = _world(durability, count_items)
    world.say("count", [{"capability": "count_items", "input": {"words": ["a", "b", "c"]}}])
    result = await world.run("turn-1", "count")
    [step] = result.response.steps
    assert step.status == StepStatus.COMPLETED
    assert _composed(world) == [{OUTPUT_FIELD: 3}]


async def test_a_returned_result_passes_through(durability: DurabilityStore) -> None:
    world = _world(durability, cancel)
    world.say("cancel a", [{"capability": "orders.cancel", "input": {"order_id": "a"}}])
    world.say("cancel s", [{"capability": "orders.cancel", "input": {"order_id": "shipped"}}])
    done = await world.run("turn-1", "cancel a")
    assert [s.status for s in done.response.steps] == [StepStatus.COMPLETED]
    failed = await world.run("turn-2", "cancel s")
    [step] = failed.response.steps
    assert step.status == StepStatus.FAILED
    assert step.reason == "Order shipped already." and step.retryable is None  # as returned


async def test_a_value_that_is_not_the_output_fails_the_step(durability: DurabilityStore) -> None:
    @capability
    async def wrong(context: CapabilityContext, n: int) -> int:
        """Returns the wrong type."""
        value: Any = {"not": "a number"}
        return value  # type: ignore[no-any-return]

    world = _world(durability, wrong)
    world.say("wrong", [{"capability": "wrong", "input": {"n": 1}}])
    result = await world.run("turn-1", "wrong")
    [step] = result.response.steps
    assert step.status == StepStatus.FAILED
    assert step.reason == "the capability's output did not match its declared schema"


async def test_raising_fails_the_step_not_the_turn(durability: DurabilityStore) -> None:
    world = _world(durability, explode)
    world.say("boom", [{"capability": "explode", "input": {"why": "x"}}])
    result = await world.run("turn-1", "boom")
    [step] = result.response.steps
    assert step.status == StepStatus.FAILED
    assert step.retryable is True  # an OSError, classified as any raising execute's is
    assert "secret-host" not in result.response.model_dump_json()
    assert result.checkpoint.revision == 1  # the turn committed


async def test_a_write_is_held_for_consent_and_a_replay_runs_nothing(
    durability: DurabilityStore,
) -> None:
    world = _world(durability, charge)
    payments: Payments = world.kernel.ports["payments"]
    world.say("charge 42", [{"capability": "payments.charge", "input": {"order_id": "42"}}])
    held = await world.run("turn-1", "charge 42")
    assert payments.calls == []
    assert held.checkpoint.interaction is not None
    done = await world.run("turn-2", "", selection=accept(held))
    assert [s.status for s in done.response.steps] == [StepStatus.COMPLETED]
    assert len(payments.calls) == 1
    again = await world.run("turn-2", "", selection=accept(held))
    assert again.replayed and len(payments.calls) == 1
    assert _composed(world)[-1] == {"charge_id": "ch-1", "amount": 5}


async def test_a_write_without_a_consent_mode_is_refused_at_compile() -> None:
    async def pay(context: CapabilityContext, amount: int) -> int:
        """Pay."""
        return amount

    problems = _problems(capability(pay, effect="write"))
    assert ("write_without_confirmation", "capability 'pay'") in problems


def _problems(*caps: Any) -> list[tuple[str, str]]:
    agent = define_agent(id="shop", version="1.0.0", description="A shop.", capabilities=caps)
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway({}))
    with pytest.raises(AgentCompilationError) as caught:
        kernel.compile(agent)
    return [(p["code"], p["where"]) for p in caught.value.context["problems"]]


def test_bad_definitions_are_listed_at_compile() -> None:
    def not_async(context: CapabilityContext, a: int) -> int:
        """Not awaited."""
        return a

    async def untyped(context: CapabilityContext, a) -> int:  # type: ignore[no-untyped-def]
        """Missing an annotation."""
        return 1

    async def reserved(context: CapabilityContext, model_dump: int, _x: int = 0) -> int:
        """Shadows the model."""
        return 1

    async def no_context(a: int) -> int:
        """No context first."""
        return a

    async def no_return(context: CapabilityContext, a: int):  # type: ignore[no-untyped-def]
        """No output."""

    async def only_results(context: CapabilityContext, a: int) -> Completed | Failed:
        """Nothing to name the output by."""
        return Failed("-")

    async def variadic(context: CapabilityContext, *args: int) -> int:
        """Variadic."""
        return 1

    async def undocumented(context: CapabilityContext, a: int) -> int:
        return a

    caps = [
        capability(not_async),  # type: ignore[arg-type]
        capability(untyped),
        capability(reserved),
        capability(no_context),
        capability(no_return),
        capability(only_results),
        capability(variadic),
        capability(undocumented),
    ]
    problems = _problems(*caps)
    for expected in [
        ("not_async", "capability 'not_async'"),
        ("missing_annotation", "capability 'untyped'"),
        ("reserved_parameter", "capability 'reserved'"),
        ("missing_context", "capability 'no_context'"),
        ("missing_annotation", "capability 'no_return'"),
        ("missing_output", "capability 'only_results'"),
        ("variadic_parameter", "capability 'variadic'"),
        ("empty_description", "capability 'undocumented'"),
    ]:
        assert expected in problems, expected
    assert [code for code, where in problems if where == "capability 'reserved'"] == [
        "reserved_parameter",
        "reserved_parameter",
    ]


def test_an_unresolvable_annotation_is_a_problem_not_a_crash() -> None:
    async def later(context: CapabilityContext, a: NotDefinedAnywhere) -> int:  # type: ignore[name-defined]  # noqa: F821
        """Refers to a missing class."""
        return 1

    assert ("unresolved_annotation", "capability 'later'") in _problems(capability(later))


def test_a_local_class_in_an_annotation_resolves() -> None:
    class Local(BaseModel):
        n: int

    @capability
    async def use_local(context: CapabilityContext, item: Local) -> Local:
        """Echo."""
        return item

    assert use_local.problems == ()
    assert use_local.input_schema.model_json_schema()["properties"]["item"]["$ref"]


def test_input_name_names_the_input_model_as_a_long_form_would() -> None:
    class Query(BaseModel):
        order_id: str = Field(description="The order to charge.")
        amount: int = Field(5, description="What to charge, in whole euros.")

    async def charge_named(context: CapabilityContext, order_id: str, amount: int = 5) -> Receipt:
        """Charge the customer for an order.

        Args:
            order_id: The order to charge.
            amount: What to charge, in whole euros.
        """
        return Receipt(charge_id="-", amount=amount)

    named = capability(charge_named, id="payments.charge", input_name="Query")
    assert named.input_schema.model_json_schema() == Query.model_json_schema()
    assert _problems(capability(charge_named, input_name="not-a-name")) == [
        ("invalid_input_name", "capability 'charge_named'")
    ]
