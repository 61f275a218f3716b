"""Seeds real SQLite stores through real turns, and runs the CLI on them."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from typer.testing import CliRunner, Result

from intention_kernel.cli._app import app
from intention_kernel.contracts import (
    DurabilityError,
    DurabilityStore,
    DurableTurnResult,
    EffectAuthority,
    EffectIdentity,
    EffectUncertainError,
    ErrorCode,
    KernelCheckpoint,
    KernelEvent,
    Message,
    TurnScope,
)
from intention_kernel.contracts.checkpoint import AgendaItem, FactRecord, Interaction
from intention_kernel.durability.sqlite import SQLiteDurability
from intention_kernel.testing.conformance import turn_storage

__all__ = [
    "Provider",
    "cli",
    "cli_json",
    "commit_turn",
    "interrupted_turn",
    "open_sqlite",
    "uncertain_turn",
]

_runner = CliRunner()


def cli(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
    return _runner.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})}, input=input)


def cli_json(*args: str, code: int = 0) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == code, (result.stdout, result.stderr)
    return json.loads(result.stdout)


async def open_sqlite(path: Path) -> SQLiteDurability:
    return await SQLiteDurability.open(path)


class Provider:
    """A payment provider that counts calls and can lose its response."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lose = False

    async def __call__(self, authority: EffectAuthority) -> JsonValue:
        self.calls[authority.idempotency_key] += 1
        if self.lose:
            raise ConnectionResetError("response lost")
        return {"charge_id": f"ch_{self.calls[authority.idempotency_key]}"}


async def commit_turn(
    store: DurabilityStore,
    thread_id: str,
    turn_id: str,
    *,
    text: str = "hello",
    fingerprint: str = "agent@1",
    charge: tuple[str, Provider] | None = None,
    interaction: bool = False,
    events: int = 1,
) -> DurableTurnResult:
    """One committed turn: a user message, a fact, optional charge and pending confirmation."""

    async def operation(scope: TurnScope) -> DurableTurnResult:
        if scope.prior_result is not None:
            return scope.prior_result
        response: dict[str, JsonValue] = {"reply": f"re: {text}"}
        if charge is not None:
            key, provider = charge
            done = await scope.run_effect(
                EffectIdentity(f"payments.charge:{key}", "payments.charge"), provider
            )
            response["charge"] = done.value
        revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
        agenda = []
        pending = None
        if interaction:
            agenda = [
                AgendaItem(
                    id="ag-1",
                    capability_id="payments.refund",
                    status="awaiting_confirmation",
                    created_turn_id=turn_id,
                )
            ]
            pending = Interaction(
                id="ix-1",
                kind="confirmation",
                prompt="Refund 42 EUR?",
                options=["yes", "no"],
                agenda_item_id="ag-1",
                turn_id=turn_id,
            )
        checkpoint = KernelCheckpoint(
            revision=revision,
            agent_fingerprint=fingerprint,
            messages=[
                Message(role="user", text=text, turn_id=turn_id),
                Message(role="assistant", text=f"re: {text}", turn_id=turn_id),
            ],
            facts=[FactRecord(id="f-1", type="order", version=1, value={"id": 1}, turn_id=turn_id)],
            agenda=agenda,
            interaction=pending,
        )
        result = DurableTurnResult(
            thread_id=thread_id,
            turn_id=turn_id,
            trace_id=f"trace-{turn_id}",
            response=response,
            checkpoint=checkpoint,
        )
        outbox = [
            KernelEvent(
                id=f"ev-{turn_id}-{n}",
                type="turn.committed",
                occurred_at=checkpoint.messages[0].at or _now(),
                thread_id=thread_id,
                turn_id=turn_id,
                sequence=n,
                correlation_id=f"trace-{turn_id}",
            )
            for n in range(events)
        ]
        await scope.commit(result, outbox)
        return result

    return await store.with_turn(thread_id, turn_id, operation)


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


async def uncertain_turn(
    store: DurabilityStore, thread_id: str, turn_id: str, key: str, provider: Provider
) -> None:
    """A turn whose charge loses its response: the receipt becomes uncertain, nothing commits."""
    provider.lose = True
    try:
        await commit_turn(store, thread_id, turn_id, charge=(key, provider))
    except EffectUncertainError:
        pass
    else:  # pragma: no cover
        raise AssertionError("expected an uncertain effect")
    finally:
        provider.lose = False


async def interrupted_turn(
    store: DurabilityStore, thread_id: str, turn_id: str, key: str, provider: Provider
) -> None:
    """A turn whose charge is made but whose ``completed`` write is lost (the store keeps
    failing): the turn raises, nothing commits and the receipt stays ``prepared``."""
    patched: Any = store
    turns = turn_storage(store)

    async def lost(*args: object) -> None:
        raise DurabilityError("connection lost", code=ErrorCode.STORE_UNAVAILABLE, retryable=True)

    turns.finish_effect = lost
    patched.record_retry_seconds = 0.05
    try:
        await commit_turn(store, thread_id, turn_id, charge=(key, provider))
    except (DurabilityError, EffectUncertainError):
        pass
    else:  # pragma: no cover
        raise AssertionError("expected the turn to fail")
    finally:
        del turns.finish_effect


def sql(path: Path, statement: str, args: Sequence[Any] = ()) -> list[Any]:
    """Direct SQL on the store file (to age records or mark deliveries in tests)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(statement, tuple(args)).fetchall()
    finally:
        conn.close()
