"""The web inspector for operators: threads, the uncertain-writes queue, reconciliation with
confirmation and audit, the turn inbox's requests (retry, cancel), operators' answers to a
pending confirmation (approve, approve with edits, decline), and the deploy check, as
server-rendered pages (``docs/inspector.md``).

``create_inspector(store, authenticate=...)`` builds it alone (mount it where you like);
``create_app(agent, ..., inspector=True)`` mounts it at ``/inspect`` of the HTTP service.
"""

from __future__ import annotations

from ._app import ProviderKey, create_inspector
from ._session import OPERATOR, VIEWER, inspector_role

__all__ = ["OPERATOR", "VIEWER", "ProviderKey", "create_inspector", "inspector_role"]
