"""Agents for the check-compat gate: the deployed definition and a changed one."""

from __future__ import annotations

from typing import Any

from tests.kernel.support import support_agent

current = support_agent()
changed = support_agent(version="2.0.0")


def factory() -> Any:
    return support_agent()


not_an_agent = 42


def failing_factory() -> Any:
    raise RuntimeError("the agent factory needs a database")


def store_factory(store: Any) -> Any:
    """What ``serve`` needs: a factory of the opened store, as ``compile_desk(store)``."""
    from intention_kernel.kernel import Kernel
    from intention_kernel.testing import ScriptedModelGateway

    assert callable(getattr(store, "with_turn", None)), "called with the opened store"
    return Kernel(durability=store, model=ScriptedModelGateway()).compile(support_agent())


async def async_store_factory(store: Any) -> Any:
    return store_factory(store)


def _invalid() -> Any:
    from tests.kernel.test_compile import _cap

    return support_agent(
        [_cap(id="bad.description", description=""), _cap(id="bad.version", version="1.0")]
    )


invalid = _invalid()


def invalid_factory(store: Any) -> Any:
    from intention_kernel.kernel import Kernel
    from intention_kernel.testing import ScriptedModelGateway

    return Kernel(durability=store, model=ScriptedModelGateway()).compile(invalid)


def _desk() -> Any:
    from intention_kernel.examples.travel_desk import compile_desk
    from intention_kernel.testing import MemoryDurability

    return compile_desk(MemoryDurability())


desk = _desk()
"""A compiled agent bound to a store of its own: ``serve`` runs it on the store it opened."""
