"""``budgets usage``, ``budgets set-limit`` and ``providers`` on a SQLite store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from intention_kernel.cli._app import run
from intention_kernel.contracts.flow import BudgetLine
from intention_kernel.durability.sqlite import SQLiteDurability


async def _seed(path: Path) -> None:
    async with await SQLiteDurability.open(path) as store:
        line = BudgetLine("tenant.day", "acme", "day", 1000, None)
        reserved = (await store.counters.reserve(line, 300, 0.0)).reservation
        assert reserved is not None
        await store.counters.settle(reserved.id, 120, 0.0)
        await store.counters.cool_down("openai", 60)


def test_operators_see_usage_and_raise_a_limit_without_a_deploy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    asyncio.run(_seed(path))
    assert run(["budgets", "usage", "--store", str(path), "--json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["tokens_used"], line["tokens_limit"], line["overridden"]) == (120, 1000, False)
    argv = ["budgets", "set-limit", "tenant.day", "--store", str(path), "--key", "acme"]
    assert run([*argv, "--tokens", "5000", "--actor", "ops", "--note", "quarter end"]) == 0
    assert "tokens 5000" in capsys.readouterr().out
    assert run(["budgets", "usage", "--store", str(path), "--json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["tokens_limit"], line["overridden"]) == (5000, True)
    assert run(["providers", "--store", str(path), "--json"]) == 0
    (provider,) = json.loads(capsys.readouterr().out)
    assert provider["provider"] == "openai" and provider["cooling_until"] is not None


def test_a_zero_limit_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    asyncio.run(_seed(path))
    code = run(["budgets", "set-limit", "tenant.day", "--store", str(path), "--tokens", "0"])
    assert code != 0 and "INVALID_INPUT" in capsys.readouterr().err
    assert run(["budgets", "usage", "--store", str(path), "--json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert line["overridden"] is False
