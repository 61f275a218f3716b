"""The deploy check: the served agent's check-compat report over the stored checkpoints the
operator may read (a full-store scan, so an operator's POST, logged with who ran it).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...operations import compat_report
from ._inspector import Inspector, InspectorProblem
from ._session import Session

logger = logging.getLogger("intention_kernel.http.inspector")


async def deploy(inspector: Inspector, request: Request, session: Session) -> Response:
    """The deploy check's page; the scan itself is ``POST /deploy`` (``run_deploy``)."""
    return _deploy_page(inspector, request, session, None)


async def run_deploy(inspector: Inspector, request: Request, session: Session) -> Response:
    """The check-compat report of the served agent over the stored checkpoints the operator
    may read (a full-store scan: an operator's POST, logged with who ran it)."""
    lookup = inspector.inspector
    if inspector.compat is None or lookup is None:
        raise InspectorProblem(409, "NO_AGENT", "no agent or no operator queries: nothing to run")

    async def readable(thread_id: str) -> bool:
        return await inspector.may(session, thread_id, "read")

    logger.info("deploy check run by %s", session.principal.id)
    report = await compat_report(inspector.store, lookup, inspector.compat, include=readable)
    logger.info(
        "deploy check by %s: %d checkpoint(s) scanned, %d refused",
        session.principal.id,
        report.checkpoints,
        len(report.refused),
    )
    return _deploy_page(inspector, request, session, report)


def _deploy_page(inspector: Inspector, request: Request, session: Session, report: Any) -> Response:
    return inspector.render(
        request,
        "deploy.html",
        {
            "title": "Deploy check",
            "compat": inspector.compat,
            "accepted": inspector.accepted(),
            "inspectable": inspector.inspector is not None,
            "report": report,
            "operator": session.operator,
        },
        session=session,
    )
