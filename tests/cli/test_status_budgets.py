"""``status`` with budgets: the exhausted lines and the most used ones, bounded, and the
providers cooling down; a store without budget counters says so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.cli._flow_status import SHOWN_USED, flow_status, print_flow_status
from intention_kernel.contracts.errors import ErrorCode, UsageError
from intention_kernel.contracts.flow import BudgetLine
from intention_kernel.durability.sqlite import SQLiteDurability

from .support import cli, cli_json

TENANTS = 30
EXHAUSTED = ("t-003", "t-011")


async def _seed(path: Path) -> None:
    async with await SQLiteDurability.open(path) as store:
        for n in range(TENANTS):
            key = f"t-{n:03d}"
            line = BudgetLine("tenant.day", key, "day", 1000, None)
            reserved = (await store.counters.reserve(line, 500, 0.0)).reservation
            assert reserved is not None
            used = 1000 if key in EXHAUSTED else 10 * n
            await store.counters.settle(reserved.id, used, 0.0)
        await store.counters.set_limit(
            "tenant.day", "t-029", tokens=100_000, actor="ops", note="big tenant"
        )
        await store.counters.cool_down("openai", 600)


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = tmp_path / "store.db"
    asyncio.run(_seed(path))
    return str(path)


def test_status_lists_exhausted_then_most_used_lines_and_cooling_providers(store: str) -> None:
    data = cli_json("status", "--store", store)
    flow = data["budgets"]
    assert (flow["current"], flow["exhausted"], flow["complete"]) == (TENANTS, 2, True)
    keys = [u["key"] for u in flow["lines"]]
    # exhausted first, then the most used share of the limit (t-029 has the operator's limit)
    assert keys == ["t-003", "t-011", "t-028", "t-027", "t-026", "t-025", "t-024"]
    assert len(keys) == len(EXHAUSTED) + SHOWN_USED
    assert flow["more"] == TENANTS - len(keys)
    first = flow["lines"][0]
    assert (first["tokens_used"], first["tokens_limit"], first["tokens_left"]) == (1000, 1000, 0)
    assert first["exhausted"] is True and first["window"] == "day"
    assert first["window_end"] is not None and first["tokens_reserved"] == 0
    assert flow["lines"][2]["tokens_left"] == 720 and flow["lines"][2]["exhausted"] is False
    [cooling] = flow["cooling_providers"]
    assert cooling["provider"] == "openai"
    assert data["threads"] == 0  # the store's counts are still there

    human = cli("status", "--store", store)
    assert human.exit_code == 0, human.stderr
    text = human.stdout
    assert "30 line(s) in their current window, 2 exhausted" in text
    assert "t-003" in text and "t-024" in text and "t-005" not in text
    assert f"and {TENANTS - len(keys)} more line(s)" in text
    assert "budgets usage" in text
    assert "cooling providers  openai until" in text


def test_status_without_budget_lines_or_cool_downs(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    assert cli("migrate", "--store", str(path)).exit_code == 0
    flow = cli_json("status", "--store", str(path))["budgets"]
    assert flow["lines"] == [] and flow["current"] == 0 and flow["cooling_providers"] == []
    human = cli("status", "--store", str(path))
    assert "0 line(s) in their current window, 0 exhausted" in human.stdout
    assert "cooling providers  none" in human.stdout


class WithoutCounters:
    """A store as one built without the flow role answers (``NOT_SUPPORTED``)."""

    @property
    def counters(self) -> Any:
        raise UsageError("this store has no flow storage", code=ErrorCode.NOT_SUPPORTED)


def test_a_store_without_counters_shows_that_and_does_not_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert asyncio.run(flow_status(WithoutCounters())) is None
    assert asyncio.run(flow_status(object())) is None
    print_flow_status(None)
    assert "this store keeps no budget counters" in capsys.readouterr().out
