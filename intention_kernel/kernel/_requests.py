"""Submitting a turn to the store's inbox (``CompiledAgent.submit``).

A request is checked exactly as ``run`` checks it (so a worker never finds one it cannot run),
plus what storing it needs: ``host_context`` must be JSON, ``not_before`` timezone-aware. Its
fingerprint is ``run``'s, so a submitted turn and a direct ``run`` of the same id are one turn.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from ..contracts.durability import Durability
from ..contracts.errors import ErrorCode, UsageError
from ..contracts.ids import validate_thread_id, validate_turn_id
from ..contracts.inbox import InboxRequest, TurnInbox
from ..telemetry import continued_trace, current_traceparent
from ._limits import KernelLimits
from ._response import TurnResult
from ._validation import validate_host_context, validate_selection, validate_text
from ._worker import Worker
from .streaming import Progress

__all__ = ["has_inbox", "inbox_of", "request_fingerprint", "run_request", "submit_request"]


def request_fingerprint(text: str, selection: Mapping[str, JsonValue] | None) -> str:
    """Same turn id + different request = ``TURN_ID_REUSED`` (host context is not part of it).

    Equal to ``codec.fingerprint`` of ``{"text", "selection"}``; both parts were already checked
    by the codec's rules in ``validation``, so the canonical JSON is hashed directly.
    """
    payload = {"selection": None if selection is None else dict(selection), "text": text}
    canonical = json.dumps(
        payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def inbox_of(durability: Durability) -> TurnInbox:
    """The store's inbox, or ``NOT_SUPPORTED`` for a store without one."""
    try:
        inbox = getattr(durability, "inbox", None)
    except UsageError:  # a ``DurableStore`` built without the role
        inbox = None
    if not isinstance(inbox, TurnInbox):
        raise _no_inbox()
    return inbox


def _no_inbox() -> UsageError:
    return UsageError(
        "this store has no inbox storage", code=ErrorCode.NOT_SUPPORTED, context={"role": "inbox"}
    )


def has_inbox(durability: Durability) -> TurnInbox | None:
    """The store's inbox if it has one (a store without the role answers ``NOT_SUPPORTED``)."""
    try:
        return inbox_of(durability)
    except UsageError:
        return None


async def submit_request(
    inbox: TurnInbox | None,
    workers: Iterable[Worker],
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
    """Check and record the request; a worker of this process with a free slot takes it at
    once when its thread has nothing open (the submit is also the claim: see ``Worker.slot``)."""
    validate_thread_id(thread_id)
    validate_turn_id(turn_id)
    chosen = validate_selection(selection, limits)
    validate_text(text, limits, chosen is not None)
    context = validate_host_context(host_context)
    if inbox is None:
        raise _no_inbox()
    worker = None if not_before is not None else next((w for w in workers if w.can_take()), None)
    with contextlib.nullcontext(None) if worker is None else worker.slot() as claimer:
        request = await inbox.submit(
            thread_id,
            turn_id,
            text=text,
            fingerprint=fingerprint(text, chosen),
            selection=chosen,
            host_context=dict(context) if context else None,
            not_before=not_before,
            traceparent=current_traceparent(),
            claimer=claimer,
            claim_ttl=30.0 if worker is None else worker.settings.claim_ttl,
        )
        if worker is not None:
            worker.adopt(request)
    return request


async def run_request(
    run: Callable[..., Awaitable[TurnResult]],
    request: InboxRequest,
    timeout: float | None,  # noqa: ASYNC109 - the turn's own deadline, as run's
    progress: Progress,
) -> TurnResult:
    """A worker's run of a request: the agent's ``run`` path with the request's ids and
    input, in the submitter's trace (carried across the inbox)."""
    carrier = {} if request.traceparent is None else {"traceparent": request.traceparent}
    with continued_trace(carrier):
        return await run(
            request.thread_id,
            request.turn_id,
            request.text,
            request.selection,
            request.host_context,
            timeout,
            progress,
        )
