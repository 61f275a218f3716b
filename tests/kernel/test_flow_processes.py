"""Budgets and provider limits across worker processes, measured at a fake provider.

8 processes on one PostgreSQL schema (3 on one SQLite file) run lookups against a token
budget: the provider reports the tokens it answered with; their total passes the budget by at
most one call's reservation, and once the budget is used up no process makes another call
(every further turn is refused). 8 processes under ``Limit(concurrent=4)`` never have more than
4 calls in flight at the provider; one ``429`` with ``Retry-After: 2`` stops every process's
calls to it for 2 s, then they resume.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from intention_kernel.durability.factory import open_durability
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.kernel._flow import GUIDE_ALLOWANCE
from tests.support.postgres import drop_schema, require_postgres, scratch_schema

from ._flow_provider import FakeProvider
from ._flow_worker import main as worker_main

ROOT = Path(__file__).resolve().parents[2]
RESERVATION_BOUND = 4096 + GUIDE_ALLOWANCE + 50
"""More than any one call reserves here: its prompt's bytes (under 4 KiB), the allowance and
``max_tokens``."""


def run_workers(specs: list[dict[str, Any]], timeout: float = 60.0) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.kernel._flow_worker", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for spec in specs
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        outcome = json.loads(out.strip().splitlines()[-1])
        assert outcome["errors"] == [], outcome["errors"][:3]
        outcomes.append(outcome)
    return outcomes


@pytest.fixture
def postgres_url() -> Any:
    dsn = require_postgres()
    schema = scratch_schema("ik_flowp")

    async def setup() -> None:
        async with PostgresDurability.open(dsn, schema=schema, setup=True):
            pass

    asyncio.run(setup())
    yield dsn, {"schema": schema}
    asyncio.run(drop_schema(dsn, schema))


async def _usage(url: str, options: dict[str, Any], name: str) -> Any:
    store: Any = await open_durability(url, **options)
    try:
        (usage,) = await store.counters.usage(budget=name)
        return usage
    finally:
        await store.close()


def check_budget(url: str, options: dict[str, Any], processes: int) -> None:
    budget = 6000  # about 25 turns of two calls, 120 tokens each
    with FakeProvider(delay=0.01, usage=(100, 20)) as fake:
        spec = {
            "url": url,
            "options": options,
            "provider": fake.url,
            "budget": budget,
            "name": "shared",
            "turns": 40,
            "tasks": 2,
            "refusals": 4,
        }
        outcomes = run_workers([{**spec, "prefix": f"w{n}"} for n in range(processes)])
        assert all(o["refused"] >= 4 for o in outcomes)  # every process was refused ...
        # A process refused while others' calls still held reservations may stop with a
        # little left: use it up here, one turn at a time, until a turn is refused.
        for top in range(20):
            if asyncio.run(worker_main({**spec, "prefix": f"top{top}", "turns": 1}))["refused"]:
                break
        calls_at_exhaustion = len(fake.arrivals)
        assert budget <= fake.tokens <= budget + RESERVATION_BOUND
        # ... and made no call after; a process started now is refused outright too.
        again = asyncio.run(worker_main({**spec, "prefix": "again", "turns": 3}))
        assert len(fake.arrivals) == calls_at_exhaustion
        assert (again["runs"], again["refused"]) == (0, 3)
    usage = asyncio.run(_usage(url, options, "shared"))
    assert usage.tokens_used == fake.tokens and usage.tokens_reserved == 0
    assert usage.calls == calls_at_exhaustion


def test_eight_postgres_processes_hold_one_token_budget(postgres_url: Any) -> None:
    dsn, options = postgres_url
    check_budget(dsn, options, processes=8)


def test_three_sqlite_processes_hold_one_token_budget(tmp_path: Path) -> None:
    check_budget(f"sqlite:///{tmp_path / 'flow.db'}", {}, processes=3)


def test_eight_processes_share_four_slots_and_one_cool_down(postgres_url: Any) -> None:
    dsn, options = postgres_url
    with FakeProvider(delay=0.05, throttle_at=40, retry_after=2) as fake:
        spec = {
            "url": dsn,
            "options": options,
            "provider": fake.url,
            "concurrent": 4,
            "turns": 6,
            "tasks": 2,
        }
        outcomes = run_workers([{**spec, "prefix": f"w{n}"} for n in range(8)])
    assert sum(o["runs"] for o in outcomes) == 48
    assert fake.most_inside == 4  # the cap held, and was reached
    (throttled_at,) = [t for t, status in fake.answered if status == 429]
    # Calls already granted a slot when the 429 was answered may still arrive (the cool-down
    # is being recorded): a short grace. Then nothing until its end, then the calls resume.
    quiet = [t - throttled_at for t in fake.arrivals if 0.5 < t - throttled_at < 2.0]
    assert quiet == [], quiet
    assert any(t - throttled_at >= 2.0 for t in fake.arrivals)
