"""The payloads every turn benchmark writes, sized like the reference turn.

A turn stores a ~4 KB checkpoint state, a ~2 KB result and three outbox events of ~200 bytes; a
one-effect turn also records one effect (a small request and the provider's response). The
PostgreSQL, SQLite and peer benchmarks all use these, so every side writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue

from intention_kernel import DurableTurnResult, EffectIdentity, KernelCheckpoint, TurnScope
from intention_kernel.contracts import EffectAuthority, KernelEvent

WORDS = [
    *("agent", "turn", "payment", "refund", "ticket", "order", "review", "update", "schedule"),
    *("note", "account", "memory", "customer", "invoice", "shipping", "status", "reply"),
    *("draft", "meeting", "calendar"),
]


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


STATE: dict[str, JsonValue] = {f"k{i:03d}": words(10, i) for i in range(53)}
"""The checkpoint's application state: ~4 KB of JSON."""

REPLY: dict[str, JsonValue] = {
    "reply": words(220, 1),
    "tool_calls": [{"name": "send_email", "args": {"to": "a@example.com", "body": words(80, 2)}}],
}
"""The turn's result: ~2 KB of JSON."""

EVENTS: tuple[tuple[str, str], ...] = (
    ("turn.completed", words(25, 3)),
    ("message.created", words(25, 4)),
    ("effect.completed", words(25, 5)),
)
"""Three outbox events (type, body)."""

EFFECT_REQUEST: dict[str, JsonValue] = {"to": "a@example.com", "subject": "hello"}
EFFECT_RESPONSE: dict[str, JsonValue] = {"provider_id": "msg_123", "status": 202}


async def provider(authority: EffectAuthority) -> JsonValue:
    """The external write of a one-effect turn: answers at once."""
    return dict(EFFECT_RESPONSE)


def result_for(scope: TurnScope, effect_value: JsonValue = None) -> DurableTurnResult:
    revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
    return DurableTurnResult(
        thread_id=scope.thread_id,
        turn_id=scope.turn_id,
        trace_id=f"trace-{scope.turn_id}",
        response={**REPLY, "effect": effect_value},
        checkpoint=KernelCheckpoint(revision=revision, agent_fingerprint="bench@1", metadata=STATE),
    )


def events_for(scope: TurnScope) -> list[KernelEvent]:
    now = datetime.now(UTC)
    return [
        KernelEvent(
            id=f"evt-{scope.thread_id}-{scope.turn_id}-{i}",
            type=kind,
            occurred_at=now,
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            sequence=i,
            correlation_id=f"trace-{scope.turn_id}",
            data={"body": body},
        )
        for i, (kind, body) in enumerate(EVENTS)
    ]


Operation = Callable[[TurnScope], Awaitable[None]]


def operation(effects: int) -> Operation:
    """A turn with ``effects`` external writes (0 or 1), then one commit; a replay runs nothing."""

    async def run(scope: TurnScope) -> None:
        if scope.prior_result is not None:
            return
        value: JsonValue = None
        for i in range(effects):
            key = f"send_email:{scope.turn_id}:{i}"
            done = await scope.run_effect(EffectIdentity(key, "send_email"), provider)
            value = done.value
        await scope.commit(result_for(scope, value), events_for(scope))

    return run


class Failed(Exception):
    """Raised by ``failing`` to end a turn without a commit."""


async def failing(scope: TurnScope) -> Any:
    raise Failed
