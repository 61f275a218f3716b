"""One message to one submit, for every broker: decode it, submit it (an unavailable store is
tried again in place, the message held), and say whether to acknowledge or drop it."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import JsonValue

from ..contracts.errors import KernelError
from ._message import decode_turn
from ._stats import IngressStats

__all__ = ["Delivery", "SubmitTurn", "pause", "submit_message"]

log = logging.getLogger("intention_kernel.ingress")

SubmitTurn = Callable[..., Awaitable[object]]
"""``agent.submit`` (keyword arguments ``thread_id``, ``turn_id``, ``text``, ``selection``,
``host_context``)."""


class Delivery(enum.Enum):
    SUBMITTED = "submitted"
    """Durable in the inbox: acknowledge the message."""
    REFUSED = "refused"
    """Refused on every delivery: drop the message (logged, counted)."""
    STOPPED = "stopped"
    """Stopping before it was submitted: leave it unacknowledged, delivered again later."""


async def pause(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less when ``stopping`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()


async def submit_message(
    submit: SubmitTurn,
    body: bytes,
    turn_id: str | None,
    where: dict[str, JsonValue],
    stats: IngressStats,
    stopping: asyncio.Event,
    *,
    retry: float,
    holding: Callable[[], Awaitable[Any]] | None = None,
) -> Delivery:
    """Submit the message's turn. A retryable failure is tried again every ``retry`` seconds
    (``holding`` tells the broker the message is still being worked on) until it succeeds or
    ``stopping`` is set; any other refusal is final."""
    try:
        turn = decode_turn(body, turn_id)
        context = {**turn.host_context, "ingress": where}
        while True:
            try:
                await submit(
                    thread_id=turn.thread_id,
                    turn_id=turn.turn_id,
                    text=turn.text,
                    selection=turn.selection,
                    host_context=context,
                )
                break
            except KernelError as exc:
                if not exc.retryable:
                    raise
                stats.retried += 1
                log.warning("submit of %s failed, retrying: [%s]", where, exc.code)
                if stopping.is_set():
                    return Delivery.STOPPED
                if holding is not None:
                    with contextlib.suppress(Exception):
                        await holding()
                await pause(stopping, retry)
    except KernelError as exc:
        stats.refused += 1
        log.error("message %s refused, dropped: [%s] %s", where, exc.code, exc.message)
        return Delivery.REFUSED
    stats.submitted += 1
    return Delivery.SUBMITTED
