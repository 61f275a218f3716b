"""The telemetry package: the same public names as ever (and the inbox's gauges), small
modules, and the store's own ``db.system.name`` on every turn (its class says it; nothing is
guessed from a class name)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from intention_kernel import telemetry
from intention_kernel.durability.memory import MemoryDurability
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.telemetry import db_system

from .conftest import Traced, make_desk

PACKAGE = Path(telemetry.__file__).parent

EXPORTED = [
    "AVAILABLE",
    "FlowMetrics",
    "InboxBacklog",
    "RelayTelemetry",
    "Telemetry",
    "UncertainReceipts",
    "continued_trace",
    "current_traceparent",
    "db_system",
    "effect_span",
    "key_hash",
    "model_span",
    "plan_span",
    "step_span",
]


def test_the_package_exports_the_same_names() -> None:
    assert telemetry.__all__ == EXPORTED
    namespace: dict[str, object] = {}
    exec("from intention_kernel.telemetry import *", namespace)
    assert [name for name in EXPORTED if name not in namespace] == []
    # Names a host or a test reached before the split still answer.
    assert telemetry.SCOPE == "intention_kernel"
    assert (
        telemetry.Telemetry(enabled=False).turn(
            agent_id="a", agent_version="1", fingerprint="f", thread_id="t", turn_id="1", store=None
        )
        is telemetry.NULL
    )


def test_no_telemetry_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert len(sizes) > 1, "telemetry is a package of several modules"
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_its_modules_are_private_to_the_package() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert modules and all(m.startswith("_") for m in modules), modules
    for module in modules:
        importlib.import_module(f"intention_kernel.telemetry.{module}")


class NamedStore(MemoryDurability):
    """A store of another kind, which names its system as the conventions do."""

    telemetry_system = "mariadb"


class SQLiteLookalike(MemoryDurability):
    """A store whose class name mentions SQLite, which names no system of its own."""

    telemetry_system = None


class Mistyped(MemoryDurability):
    """A store whose ``telemetry_system`` is not text: no name rather than a wrong one."""

    telemetry_system = 42  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (SQLiteDurability, "sqlite"),
        (PostgresDurability, "postgresql"),
        (MemoryDurability, None),
        (NamedStore, "mariadb"),
        (SQLiteLookalike, None),
        (Mistyped, None),
    ],
)
def test_a_store_names_its_own_system(store: type, expected: str | None) -> None:
    assert db_system(object.__new__(store)) == expected


async def test_the_turn_span_carries_the_name_the_store_gives(traced: Traced) -> None:
    store = NamedStore()
    desk = make_desk(store, traced)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    [turn] = [s for s in traced.spans() if s.name == "ik.turn"]
    assert (turn.attributes or {}).get("db.system.name") == "mariadb"
    await store.close()


async def test_a_store_that_names_none_gets_no_attribute(traced: Traced) -> None:
    store = SQLiteLookalike()
    desk = make_desk(store, traced)
    await desk.say("1", "Find me a hotel in Lisbon for 2 nights")
    [turn] = [s for s in traced.spans() if s.name == "ik.turn"]
    assert "db.system.name" not in (turn.attributes or {})
    await store.close()
