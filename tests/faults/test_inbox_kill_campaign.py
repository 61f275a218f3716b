"""The inbox kill campaign (F2 for submitted turns): ``kill -9`` workers, no client retries.

Turns (20 per kill, in threads of up to 100, 0-2 writes each, deterministic texts) are
submitted up front through the inbox. Worker processes (``inbox_worker``: ``agent.worker``
with a 1 s claim) run them; a killer ``kill -9``s a random worker at random moments and starts
a replacement, for a bounded number of kills; then the workers finish what is left and are
drained (``inbox_campaign``). Nobody resubmits or reruns anything: a dead worker's expired
claim, taken by another worker, is the only retry.

Checked afterwards (``inbox_checks``), through the store's API, the provider process's counts
and the workers' O_APPEND log (RELIABILITY.md b.1):

- every request ends ``done`` or ``dead`` within a bound (I9); a dead one carries a typed code,
  and only our kills and drains end a worker (I8); SQLite passes ``integrity_check`` (I8);
- ``done`` if and only if committed, outbox events exactly for committed turns, a committed
  write's receipts final (I4); every turn committed once (I1);
- per thread, the commit order (checkpoint revisions, ``list_turns``) is the submission order
  of the done requests, revisions 1..n, the head at n (I3); one lease holder at a time, a
  killed one until its kill (I2);
- every key reached the provider at most once, after its ``prepared`` row (I5a, I5b), a
  ``completed`` receipt after exactly one call; ``uncertain`` receipts only for writes a kill
  interrupted, each in a turn that committed "being verified" (or whose request is dead), none
  left ``prepared`` unless its request is dead (I5c).

A variant has the workers submit the plan themselves (each its share of the threads, again
from the start after a kill: a submit is idempotent), so turns are handed to the submitter's
own worker (the submit is the claim, and on PostgreSQL takes the lease) and kills land between
such a submit and the turn's commit too; the same checks hold.

CI runs 120 kills (60 per store) in about a minute and a half, and 50 more in the variant.
The long run is the README's fault command, ``IK_FAULT_SCALE=20 .venv/bin/pytest tests/faults
-s`` (``IK_FAULT_SCALE=10`` already reaches 1,200 kills); ``IK_FAULT_SEED`` picks the plan and
the kill moments. The last test plants "done marked outside the commit transaction" and
requires the campaign to report it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

from intention_kernel.durability.sqlite import SQLiteDurability

from .fault_support import provider_process
from .inbox_campaign import Target, campaign
from .kit import ProviderProcess, Report, fault_scale

KILLS = 60
"""Kills per store in CI (``IK_FAULT_SCALE`` multiplies them)."""
SUBMITTING_KILLS = 25
"""Kills per store in CI of the variant whose workers submit the plan themselves."""


@contextlib.contextmanager
def sqlite_target(tmp: Path, planted: str | None = None) -> Iterator[Target]:
    """A SQLite file store and the SQLite kit's provider process (it checks ``prepared``
    in the file at every call)."""
    db = tmp / "inbox.db"

    async def create() -> None:
        await (await SQLiteDurability.open(db)).close()

    asyncio.run(create())
    with provider_process() as provider:
        yield Target(
            "sqlite",
            f"sqlite:///{db}",
            {"lock_timeout": 30},
            {"http": provider.url, "db": str(db)},
            provider.stats,
            db=db,
            planted=planted,
        )


@contextlib.contextmanager
def postgres_target(dsn: str, schema: str) -> Iterator[Target]:
    """A scratch schema and the PostgreSQL kit's provider process. A 2 s lease: a killed
    holder's thread is taken over soon, a live one under load keeps it."""
    with ProviderProcess(dsn, schema) as provider:
        yield Target(
            "postgres",
            f"{dsn}?schema={schema}",
            {"lease_ttl": 2.0, "lock_timeout": 30, "min_size": 0, "max_size": 4},
            {"socket": provider.socket},
            provider.stats,
        )


def _passed(report: Report, kills: int) -> None:
    assert report.injections["kill -9"] >= kills, "the plan ran out of work before the kills"
    assert report.total == 0, "violations (printed above)"


def test_sqlite_inbox_survives_kills_without_client_retries(tmp_path: Path) -> None:
    kills = KILLS * fault_scale()
    with sqlite_target(tmp_path) as target:
        report = campaign(target, kills=kills)
    _passed(report, kills)


def test_postgres_inbox_survives_kills_without_client_retries(dsn: str, schema: str) -> None:
    kills = KILLS * fault_scale()
    with postgres_target(dsn, schema) as target:
        report = campaign(target, kills=kills)
    _passed(report, kills)


def test_sqlite_inbox_survives_kills_of_workers_that_submit(tmp_path: Path) -> None:
    kills = SUBMITTING_KILLS * fault_scale()
    with sqlite_target(tmp_path) as target:
        report = campaign(target, kills=kills, submitting=True)
    _passed(report, kills)
    assert report.figures["handed_over"] > 0, "no turn was handed to its submitter's worker"


def test_postgres_inbox_survives_kills_of_workers_that_submit(dsn: str, schema: str) -> None:
    kills = SUBMITTING_KILLS * fault_scale()
    with postgres_target(dsn, schema) as target:
        report = campaign(target, kills=kills, submitting=True)
    _passed(report, kills)
    assert report.figures["handed_over"] > 0, "no turn was handed to its submitter's worker"


def test_the_campaign_catches_done_marked_outside_the_commit(tmp_path: Path) -> None:
    """With the planted bug a kill between the early ``done`` and the commit leaves a done
    request whose turn never committed: the campaign reports it (a few short rounds, as the
    kill must land in that window)."""
    found: list[str] = []
    for round_ in range(5):
        (tmp := tmp_path / f"round-{round_}").mkdir()
        with sqlite_target(tmp, planted="done_before_commit") as target:
            report = campaign(target, kills=30, seed=round_)
        found = [v for v in report.violations["I4"] if "is done and not committed" in v]
        if found:
            break
    assert found, "the planted bug went unnoticed"


def test_the_submitting_campaign_catches_a_claim_of_a_busy_thread(tmp_path: Path) -> None:
    """With a submit that claims whatever its thread holds, a thread's requests run out of
    submission order (and side by side): the variant whose workers submit reports it."""
    with sqlite_target(tmp_path, planted="claims_busy_threads") as target:
        report = campaign(target, kills=SUBMITTING_KILLS, submitting=True)
    assert any("submission order" in v for v in report.violations["I3"]), report.violations
