"""Schedules: each schedule the store keeps, with its cron, zone, last and next run.

Read-only: a schedule is defined in the agent's code and registered by its workers
(``docs/schedules.md``); its occurrences are inbox requests, shown on the requests pages. A
schedule is shown to whoever may read its thread (``authorize``), as its requests are; one
whose stored definition cannot be read (no thread to ask about) to operators only.
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from ...contracts.errors import ErrorCode, UsageError
from ...contracts.inbox import ScheduleInfo
from ...operations._schedules import store_schedules
from ._inspector import Inspector
from ._session import Session

__all__ = ["schedules"]


async def schedules(inspector: Inspector, request: Request, session: Session) -> Response:
    """Every schedule whose thread the session may read, by id."""
    now = datetime.now(UTC)
    try:
        found = [
            info
            for info in await store_schedules(inspector.store, now)
            if await _readable(inspector, session, info)
        ]
        kept = True
    except UsageError as exc:
        if exc.code is not ErrorCode.NOT_SUPPORTED:
            raise
        found, kept = [], False
    return inspector.render(
        request,
        "schedules.html",
        {"title": "Schedules", "kept": kept, "rows": found, "now": now},
        session=session,
    )


async def _readable(inspector: Inspector, session: Session, info: ScheduleInfo) -> bool:
    if not info.thread_id:
        return session.role == "operator"
    return await inspector.may(session, info.thread_id, "read")
