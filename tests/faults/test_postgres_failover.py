"""Failover to a synchronous standby loses no turn and repeats no write; the asynchronous
control run reports what asynchronous replication loses.

A primary and a streaming standby of the test's own (``tests.support.pg_cluster``: ``initdb``,
``pg_basebackup``, free loopback ports), the standby synchronous (``synchronous_standby_names``,
``synchronous_commit=on``). The store URL names both servers with
``target_session_attrs=read-write``, so the driver connects to whichever is the primary. Turns
(0-2 writes each, the inbox campaign's plan) are submitted through the inbox and run by 4
worker processes; at a random moment the network between the primary and the standby is cut
(the standby streams through a forwarder of the test's), a second later the primary is killed
with ``kill -9``, and the standby is promoted (``pg_ctl promote``). Nothing is resubmitted:
the workers' own retries of a store that is unavailable are the only recovery.

Checked afterwards with the campaign's checks (``inbox_checks``, I1-I9): every request done,
done iff committed, each turn committed once, per-thread commit order, every write reached the
provider at most once and after its committed ``prepared`` receipt.

The control run is the same with an asynchronous standby: the commits the standby had not
received when the primary died (the second after the cut) are lost, and the checks report what
that cost; it must find turns committed twice (the loss is real, so the synchronous run's
clean report means something) and still settle (I8, I9). CI runs 120 turns each;
``IK_FAULT_SCALE`` of 5 or more runs 500 (the README's fault command).
"""

from __future__ import annotations

import asyncio
import math
import random
import tempfile
import time

import pytest

from intention_kernel.durability.factory import open_durability
from tests.support.pg_cluster import failover_url, primary_and_standby

from .inbox_campaign import WORKER_SETTINGS, Target, Workers, _open_requests, _submit, plan
from .inbox_checks import check
from .kit import ProviderProcess, Report, fault_scale, read_log, reporting

WORKERS = 4
THREADS = 12
SETTLE = 120.0
PARTITION = 1.0
"""Seconds between the cut of the replication link and the primary's death."""


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
def test_failover_to_a_standby(synchronous: bool) -> None:
    """Synchronous: nothing lost, nothing repeated. Asynchronous (the control run): what the
    standby had not received is lost, and the report says what that cost (a committed turn
    run again, a ``prepared`` receipt gone, a write repeated); the workers still settle."""
    turns = 500 if fault_scale() >= 5 else 120
    rng = random.Random()
    kind = "synchronous" if synchronous else "asynchronous"
    with primary_and_standby(synchronous=synchronous) as (primary, standby, link):
        url = failover_url(primary, standby, "ik_failover")
        dsn = url.rsplit("&schema=", 1)[0]

        async def create() -> None:
            await (await open_durability(url, setup=True)).close()

        asyncio.run(create())
        with (
            ProviderProcess(dsn, "ik_failover") as provider,
            reporting(Report(f"postgres-failover-{kind}")) as report,
            tempfile.TemporaryDirectory(prefix="ik-failover-") as logs,
        ):
            target = Target(
                "failover",
                url,
                {"lease_ttl": 2.0, "lock_timeout": 30, "min_size": 0, "max_size": 4},
                {"socket": provider.socket},
                provider.stats,
            )
            planned = plan(rng, THREADS, math.ceil(turns / THREADS))
            asyncio.run(_submit(target, planned))
            log = f"{logs}/log.jsonl"
            spec = {
                "url": url,
                "options": target.options,
                "provider": {**target.provider, "latency": 0.02},
                "log": log,
                "env": {},
                "worker": WORKER_SETTINGS,
            }
            workers = Workers(spec, rng)
            try:
                for _ in range(WORKERS):
                    workers.start()
                failover_after = rng.uniform(0.2, 0.6) * len(planned)
                deadline = time.monotonic() + SETTLE
                while asyncio.run(_open_requests(target)) > len(planned) - failover_after:
                    assert time.monotonic() < deadline, "the turns did not start"
                    time.sleep(0.05)
                # The network between the two fails first: a synchronous primary waits for
                # its standby, an asynchronous one commits on alone; then the primary dies.
                link.cut()
                time.sleep(PARTITION)
                failed_over = time.monotonic()
                primary.kill()  # the primary's machine dies mid-run
                standby.promote()
                promoted = time.monotonic()
                report.figures["promoted_after_seconds"] = round(promoted - failed_over, 2)
                deadline = time.monotonic() + SETTLE
                while (open_ := asyncio.run(_open_requests(target))) and (
                    time.monotonic() < deadline
                ):
                    workers.reap(report)
                    time.sleep(0.2)
                if open_:
                    report.add("I9", f"{open_} requests still open {SETTLE:.0f} s after failover")
                workers.drain(report)
            finally:
                workers.close()
            asyncio.run(
                check(
                    report,
                    url=url,
                    options=target.options,
                    db=None,
                    planned=planned,
                    records=read_log(log),
                    kills={},
                    provider=provider.stats(),
                    outage=(failed_over, promoted),
                )
            )
            report.figures["turns"] = len(planned)
            report.injections["kill -9 of the primary"] = 1
            report.figures["seconds_to_settle"] = round(time.monotonic() - failed_over, 1)
        if synchronous:
            assert report.figures["requests_done"] == len(planned), report.figures
            assert report.total == 0, "violations (printed above)"
        else:  # losses are the control run's finding; hangs and crashes are not
            assert report.violations["I1"], "the asynchronous standby lost nothing: no partition"
            assert not report.violations["I8"] and not report.violations["I9"], report.figures
