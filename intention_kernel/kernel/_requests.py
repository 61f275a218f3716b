"""Submitting a turn to the store's inbox (``CompiledAgent.submit``).

A request is checked exactly as ``run`` checks it (so a worker never finds one it cannot run),
plus what storing it needs: ``host_context`` must be JSON, ``not_before`` timezone-aware. Its
fingerprint is ``run``'s, so a submitted turn and a direct ``run`` of the same id are one turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from ..contracts.durability import Durability
from ..contracts.errors import ErrorCode, UsageError
from ..contracts.ids import validate_thread_id, validate_turn_id
from ..contracts.inbox import InboxRequest, TurnInbox
from ..telemetry import current_traceparent
from ._limits import KernelLimits
from ._validation import validate_host_context, validate_selection, validate_text

__all__ = ["has_inbox", "inbox_of", "submit_request"]


def inbox_of(durability: Durability) -> TurnInbox:
    """The store's inbox, or ``NOT_SUPPORTED`` for a store without one."""
    try:
        inbox = getattr(durability, "inbox", None)
    except UsageError:  # a ``DurableStore`` built without the role
        inbox = None
    if not isinstance(inbox, TurnInbox):
        raise UsageError(
            "this store has no inbox storage",
            code=ErrorCode.NOT_SUPPORTED,
            context={"role": "inbox"},
        )
    return inbox


def has_inbox(durability: Durability) -> TurnInbox | None:
    """The store's inbox if it has one (a store without the role answers ``NOT_SUPPORTED``)."""
    try:
        return inbox_of(durability)
    except UsageError:
        return None


async def submit_request(
    durability: Durability,
    limits: KernelLimits,
    fingerprint: Callable[[str, Mapping[str, JsonValue] | None], str],
    *,
    thread_id: str,
    turn_id: str,
    text: str,
    selection: Mapping[str, JsonValue] | None,
    host_context: Mapping[str, Any] | None,
    not_before: datetime | None,
) -> InboxRequest:
    validate_thread_id(thread_id)
    validate_turn_id(turn_id)
    chosen = validate_selection(selection, limits)
    validate_text(text, limits, chosen is not None)
    context = validate_host_context(host_context)
    inbox = inbox_of(durability)
    return await inbox.submit(
        thread_id,
        turn_id,
        text=text,
        fingerprint=fingerprint(text, chosen),
        selection=chosen,
        host_context=dict(context) if context else None,
        not_before=not_before,
        traceparent=current_traceparent(),
    )
