"""``CompiledAgent.watch``: follow a submitted turn from any process, and rejoin by cursor.

Why from the store: the turn runs in a worker, maybe in another process, and a client that
drops its connection must be able to come back (on any instance) and see what it missed. The
recorded progress is advisory; the watch always ends with the committed ``TurnResult`` read
from the store (or the request's error if it went dead), and the text deltas it yielded are
settled to add up to that result's text exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..contracts.durability import Durability
from ..contracts.errors import ErrorCode, InvalidInputError, KernelError, UsageError
from ..contracts.ids import validate_thread_id, validate_turn_id
from ..contracts.inbox import RequestState, TurnInbox
from ..contracts.turns import DurableTurnResult
from ._progress_log import ATTEMPT, decode_item
from ._requests import inbox_of
from ._response import Response, TurnResult
from .streaming import StreamItem, TextDelta, TurnCompleted

__all__ = ["Watched", "make_cursor", "parse_cursor", "watch_turn"]


@dataclass(frozen=True, slots=True)
class Watched:
    """One item of a watched turn and the cursor to rejoin after it (``watch(after=...)``)."""

    cursor: str
    item: StreamItem


def _tag(thread_id: str, turn_id: str) -> str:
    return hashlib.sha256(f"{thread_id}\0{turn_id}".encode()).hexdigest()[:12]


def make_cursor(thread_id: str, turn_id: str, seq: int) -> str:
    return f"{seq}.{_tag(thread_id, turn_id)}"


def parse_cursor(cursor: object, thread_id: str, turn_id: str) -> int:
    """The position a cursor of this turn names; ``INVALID_CURSOR`` for anything else (a
    cursor of another turn included)."""
    if cursor is None:
        return 0
    if isinstance(cursor, str) and len(cursor) <= 64:
        seq, _, tag = cursor.partition(".")
        if seq.isdigit() and tag == _tag(thread_id, turn_id):
            return int(seq)
    raise InvalidInputError(
        "the cursor does not belong to this turn",
        code=ErrorCode.INVALID_CURSOR,
        context={"field": "after", "thread_id": thread_id, "turn_id": turn_id},
    )


async def _committed(durability: Durability, thread_id: str, turn_id: str) -> TurnResult | None:
    get_turn = getattr(durability, "get_turn", None)
    if get_turn is None:
        raise UsageError(
            "watching needs a store that reads back turns",
            code=ErrorCode.NOT_SUPPORTED,
            context={"role": "history"},
        )
    stored: DurableTurnResult | None = await get_turn(thread_id, turn_id)
    if stored is None:
        return None
    return TurnResult(
        response=Response.model_validate(stored.response),
        checkpoint=stored.checkpoint,
        thread_id=stored.thread_id,
        turn_id=stored.turn_id,
        trace_id=stored.trace_id,
        replayed=True,
    )


async def _shown_up_to(inbox: TurnInbox, thread_id: str, turn_id: str, seq: int) -> str:
    """The text a watcher that stopped at ``seq`` was shown (a rejoin settles from there)."""
    shown, after = "", 0
    while after < seq:
        entries = await inbox.read_progress(thread_id, turn_id, after=after, limit=1000)
        for entry in entries:
            if entry.seq > seq:
                return shown
            after = entry.seq
            if entry.item.get("type") == ATTEMPT:
                shown = ""
            elif isinstance(item := decode_item(entry.item), TextDelta):
                shown = ("" if item.restarted else shown) + item.text
        if len(entries) < 1000:
            break
    return shown


async def watch_turn(
    durability: Durability,
    thread_id: str,
    turn_id: str,
    *,
    after: str | None,
    poll_interval: float,
) -> AsyncIterator[Watched]:
    validate_thread_id(thread_id)
    validate_turn_id(turn_id)
    if (
        isinstance(poll_interval, bool)
        or not isinstance(poll_interval, int | float)
        or not 0 < poll_interval <= 60
    ):
        raise InvalidInputError(
            "poll_interval must be a number of seconds in (0, 60]",
            context={"field": "poll_interval"},
        )
    seq = parse_cursor(after, thread_id, turn_id)
    inbox = inbox_of(durability)
    shown = await _shown_up_to(inbox, thread_id, turn_id, seq)
    first = True
    while True:
        mark = inbox.progressed.mark()
        # Request state before progress, progress before the result: whatever is read last
        # is at least as new as what was read before it. The result is read only once the
        # request says done (its commit marked it) or there is none (a turn run directly).
        request = await inbox.get(thread_id, turn_id)
        entries = await inbox.read_progress(thread_id, turn_id, after=seq, limit=1000)
        for entry in entries:
            seq = entry.seq
            cursor = make_cursor(thread_id, turn_id, seq)
            if entry.item.get("type") == ATTEMPT:
                if shown:
                    shown = ""
                    yield Watched(cursor, TextDelta("", restarted=True))
                continue
            item = decode_item(entry.item)
            if item is None:
                continue
            if isinstance(item, TextDelta):
                shown = ("" if item.restarted else shown) + item.text
            yield Watched(cursor, item)
        if len(entries) == 1000:
            continue
        settled = request is None or request.state is RequestState.DONE
        result = await _committed(durability, thread_id, turn_id) if settled else None
        if result is not None:
            cursor = make_cursor(thread_id, turn_id, seq)
            text = result.response.text
            if text != shown:
                delta = (
                    TextDelta(text[len(shown) :])
                    if text.startswith(shown)
                    else TextDelta(text, restarted=True)
                )
                yield Watched(cursor, delta)
            yield Watched(cursor, TurnCompleted(result))
            return
        if request is None and first:
            raise UsageError(
                "no such turn: it was neither submitted nor committed",
                code=ErrorCode.REQUEST_NOT_FOUND,
                context={"thread_id": thread_id, "turn_id": turn_id},
            )
        if request is not None and request.state is RequestState.DEAD:
            raise KernelError(
                "the turn request is dead: an operator may retry it",
                code=ErrorCode.REQUEST_DEAD,
                context={
                    "thread_id": thread_id,
                    "turn_id": turn_id,
                    "error_code": request.error_code,
                },
            )
        first = False
        await inbox.progressed.wait(mark, poll_interval)
