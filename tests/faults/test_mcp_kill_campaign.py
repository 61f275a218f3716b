"""The MCP kill campaign: ``kill -9`` workers whose write is a real MCP server's tool.

The notes server (``tests/mcp/notes_server.py``) runs for the whole campaign as its own
process over streamable HTTP on 127.0.0.1 and records every execution of ``add_note`` with
the ``_meta`` idempotency key it was sent. Turns (per thread: ``add note T``, then ``yes``)
are submitted through the inbox; worker processes (``mcp_worker``: the tool imported with
``capabilities_from_mcp``) run them, and a random one is ``kill -9``ed at random moments and
replaced (``mcp_campaign``, the inbox campaign's run). A killed worker's claim, taken by
another worker, is the redelivery: every turn is driven to its commit.

Checked afterwards (``mcp_checks``): the server executed each key at most once, every call
followed its ``prepared`` row, every receipt is ``completed`` (after exactly one execution) or
``uncertain``; an ``uncertain`` one is a write a kill cut between the start of its step and
its recorded outcome and, when the server executed it, between its call and its record, told
to the user as "being verified"; and the inbox campaign's store invariants (I1-I4, I8, I9).

CI runs 120 kills (60 per store). The long run is the fault command of the README,
``IK_FAULT_SCALE=20 .venv/bin/pytest tests/faults -s`` (2,400 kills here); ``IK_FAULT_SEED``
picks the kill moments. The last test plants a blind retry of an ``uncertain`` call outside
the ledger and requires the campaign to report the server's second execution.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

from intention_kernel.durability.sqlite import SQLiteDurability

from .inbox_campaign import Target
from .kit import Report, fault_scale
from .mcp_campaign import campaign, notes_server

KILLS = 60
"""Kills per store in CI (``IK_FAULT_SCALE`` multiplies them)."""


@contextlib.contextmanager
def sqlite_target(tmp: Path, planted: str | None = None) -> Iterator[Target]:
    db = tmp / "mcp.db"

    async def create() -> None:
        await (await SQLiteDurability.open(db)).close()

    asyncio.run(create())
    (state := tmp / "server").mkdir()
    with notes_server(state) as url:
        yield Target(
            "sqlite",
            f"sqlite:///{db}",
            {"lock_timeout": 30},
            {"mcp": url, "state": str(state)},
            dict,
            db=db,
            planted=planted,
        )


def _passed(report: Report, kills: int) -> None:
    assert report.injections["kill -9"] >= kills, "the plan ran out of work before the kills"
    assert report.total == 0, "violations (printed above)"
    assert report.figures["server_executions"] > 0


def test_sqlite_mcp_writes_survive_kills(tmp_path: Path) -> None:
    kills = KILLS * fault_scale()
    with sqlite_target(tmp_path) as target:
        report = campaign(target, kills=kills)
    _passed(report, kills)


def test_postgres_mcp_writes_survive_kills(dsn: str, schema: str, tmp_path: Path) -> None:
    kills = KILLS * fault_scale()
    with notes_server(tmp_path) as url:
        target = Target(
            "postgres",
            f"{dsn}?schema={schema}",
            {"lease_ttl": 2.0, "lock_timeout": 30, "min_size": 0, "max_size": 4},
            {"mcp": url, "state": str(tmp_path)},
            dict,
        )
        report = campaign(target, kills=kills)
    _passed(report, kills)


def test_the_campaign_catches_a_blind_retry_outside_the_ledger(tmp_path: Path) -> None:
    """With the planted bug, a kill after the server executed a note and before its record
    leaves it ``uncertain``; the redelivered turn calls the tool again and the server executes
    it twice: the campaign reports it (a few short rounds, as a kill must land there)."""
    found: list[str] = []
    for round_ in range(5):
        (tmp := tmp_path / f"round-{round_}").mkdir()
        with sqlite_target(tmp, planted="mcp_blind_retry") as target:
            report = campaign(target, kills=15, seed=round_)
        found = [v for v in report.violations["I5b"] if v.endswith(" times")]
        if found:
            break
    assert found, "the planted bug went unnoticed"
