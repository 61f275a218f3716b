"""The bounded fault campaign (cancellation, timeouts, lost writes) on SQLite and PostgreSQL.

CI injects at least 1,000 faults (``IK_FAULT_SCALE`` multiplies them; the long run is
``python -m tests.support.campaign --faults 10000``) and requires no violation.
"""

from __future__ import annotations

import asyncio
import os

from tests.support.campaign import run_campaign, summary
from tests.support.postgres import require_postgres

from .kit import fault_scale


def test_bounded_campaign_on_sqlite_and_postgres() -> None:
    dsn = require_postgres()
    seed = int(os.environ.get("IK_FAULT_SEED", "0"))
    faults = 1000 * fault_scale()
    reports = asyncio.run(run_campaign(("sqlite", "postgres"), faults=faults, seed=seed, dsn=dsn))
    print(summary(reports))
    assert sum(r.injected for r in reports) >= faults
    assert all(r.faults[kind] > 0 for r in reports for kind in ("cancel", "timeout"))
    violations = [v for r in reports for v in r.violations]
    assert violations == [], "\n".join(violations[:20])
