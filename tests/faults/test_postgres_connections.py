"""F3/F4/F23: connections terminated mid-turn and mid-commit, ambiguous commit, and no
transaction left open while a provider call is parked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from intention_kernel._crashpoints import AnyCrashPoint, CrashPoint, crash_hook
from intention_kernel.contracts import TurnScope
from intention_kernel.contracts.errors import DurabilityError, ErrorCode, TurnConflictError
from intention_kernel.contracts.ids import new_id
from intention_kernel.contracts.receipts import EffectAuthority
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import effect, make_events, make_result

from .kit import EVENTS, ProviderProcess, Report, TurnSpec, call_provider, check_invariants

Operation = Callable[[TurnScope], Awaitable[dict[str, Any]]]


@contextlib.asynccontextmanager
async def opened(dsn: str, schema: str, **options: Any) -> AsyncIterator[PostgresDurability]:
    app = new_id("ikapp")[:40]
    store = await PostgresDurability.open(
        dsn, schema=schema, application_name=app, max_size=3, **options
    )
    try:
        yield store
    finally:
        await store.close()


def app_of(store: PostgresDurability) -> str:
    return str(store.pool._connect_kwargs["server_settings"]["application_name"])


def turn_op(
    store: PostgresDurability,
    provider: str,
    thread: str,
    keys: list[str],
    before_commit: Callable[[], Awaitable[None]] | None = None,
) -> Operation:
    async def operation(scope: TurnScope) -> dict[str, Any]:
        if scope.prior_result is not None:
            return {"outcome": "replayed", "response": scope.prior_result.response}
        values = []
        for key in keys:
            done = await scope.run_effect(effect(key), lambda a: call_provider(provider, thread, a))
            values.append(done.value)
        result = make_result(scope, {"effects": values, "turn": scope.turn_id})
        if before_commit is not None:
            await before_commit()
        await scope.commit(result, make_events(scope, EVENTS))
        return {"outcome": "committed", "response": result.response}

    return operation


async def backends(observer: Any, app: str, state: str | None = None) -> list[Any]:
    rows = await observer.fetch(
        "SELECT pid, state, wait_event_type, query FROM pg_stat_activity"
        " WHERE application_name = $1",
        app,
    )
    return [r for r in rows if state is None or (r["state"] or "").startswith(state)]


async def wait_for_lock_wait(observer: Any, app: str, table: str) -> int:
    """The backend whose statement on ``table`` waits for the lease row lock."""
    for _ in range(200):
        for row in await backends(observer, app):
            if row["wait_event_type"] == "Lock" and f".{table} " in row["query"]:
                return int(row["pid"])
        await asyncio.sleep(0.02)
    raise AssertionError("the statement never waited on the lease row")


async def test_no_transaction_stays_open_while_a_provider_call_is_parked(
    dsn: str, schema: str
) -> None:
    report = Report("idle-in-transaction")
    async with opened(dsn, schema, lease_ttl=0.6, heartbeat_interval=0.1) as store:
        observer = await asyncpg.connect(dsn)
        parked, release = asyncio.Event(), asyncio.Event()
        seen: list[str] = []

        async def provider(authority: EffectAuthority) -> str:
            parked.set()
            await release.wait()
            return "done"

        async def operation(scope: TurnScope) -> None:
            await scope.run_effect(effect("k"), provider)
            await scope.commit(make_result(scope))

        task = asyncio.create_task(store.with_turn("t1", "turn-1", operation))
        await parked.wait()
        for _ in range(15):  # across several heartbeats (1.5 s, longer than the TTL)
            report.runs += 1
            rows = await observer.fetch(
                "SELECT state, xact_start IS NOT NULL AS in_xact FROM pg_stat_activity"
                " WHERE application_name = $1",
                app_of(store),
            )
            seen += [r["state"] for r in rows]
            for r in rows:
                if r["state"].startswith("idle in transaction") or (
                    r["state"] == "idle" and r["in_xact"]
                ):
                    report.add("I2", f"connection {r['state']} while the provider call is parked")
            await asyncio.sleep(0.1)
        release.set()
        await task
        await observer.close()
    report.figures["states_seen"] = sorted(set(seen))
    report.print()
    assert report.total == 0


@pytest.mark.parametrize("moment", ["before_commit", "commit", "prepare"])
async def test_terminated_connections(dsn: str, schema: str, moment: str) -> None:
    """pg_terminate_backend mid-turn, and while the commit / the prepared write runs."""
    report = Report(f"terminate-{moment}")
    thread = f"term-{moment}"
    with ProviderProcess(dsn, schema) as provider:
        async with opened(dsn, schema) as store:
            observer = await asyncpg.connect(dsn)
            blocker = await asyncpg.connect(dsn)
            app = app_of(store)
            outcomes: list[dict[str, Any]] = []
            gate = asyncio.Event()

            async def hold_lease_row() -> None:
                await blocker.execute("BEGIN")
                await blocker.execute(
                    f'SELECT 1 FROM "{schema}".leases WHERE thread_id = $1 FOR UPDATE', thread
                )
                gate.set()

            async def terminate_all() -> None:
                for row in await backends(observer, app):
                    await observer.execute("SELECT pg_terminate_backend($1)", row["pid"])
                    report.injections["pg_terminate_backend"] += 1

            op = turn_op(store, provider.socket, thread, ["k"])
            first = turn_op(
                store,
                provider.socket,
                thread,
                ["k"],
                before_commit={
                    "before_commit": terminate_all,
                    "commit": hold_lease_row,
                    "prepare": None,
                }[moment],
            )

            async def hooked(scope: TurnScope) -> dict[str, Any]:
                if moment == "prepare":
                    await hold_lease_row()
                return await first(scope)

            task = asyncio.create_task(store.with_turn(thread, "turn-1", hooked))
            if moment in ("commit", "prepare"):
                # The statement waits on the lease row lock: terminate it mid-statement.
                await gate.wait()
                table = "heads" if moment == "commit" else "receipts"
                pid = await wait_for_lock_wait(observer, app, table)
                await observer.execute("SELECT pg_terminate_backend($1)", pid)
                report.injections["pg_terminate_backend"] += 1
                await blocker.execute("ROLLBACK")
            try:
                outcomes.append({"thread": thread, "turn": "turn-1", **await task})
            except DurabilityError as exc:
                report.figures["typed_error"] = f"{exc.code} retryable={exc.retryable}"
                if exc.code != ErrorCode.STORE_UNAVAILABLE or not exc.retryable:
                    report.add("I8", f"unexpected error {exc!r}")
            with contextlib.suppress(Exception):
                await blocker.execute("ROLLBACK")
            report.runs += 1
            # Redelivery finishes the turn exactly once.
            outcomes.append(
                {"thread": thread, "turn": "turn-1", **await store.with_turn(thread, "turn-1", op)}
            )
            await observer.close()
            await blocker.close()
        await check_invariants(
            report,
            dsn,
            schema,
            await provider.astats(),
            outcomes,
            planned=[TurnSpec(thread, "turn-1", ("k",))],
        )
    report.print()
    assert report.total == 0
    assert report.figures["turns_committed"] == 1
    if moment == "prepare":
        assert report.figures["provider_calls"] == 1  # never called before prepared committed


async def test_ambiguous_commit_is_recognised_on_retry(dsn: str, schema: str) -> None:
    """CP9: COMMIT applied but the caller saw a connection error: the retry replays."""
    report = Report("ambiguous-commit")
    with ProviderProcess(dsn, schema) as provider:
        async with opened(dsn, schema) as store:
            op = turn_op(store, provider.socket, "amb", ["k"])

            def lost_ack(point: AnyCrashPoint, info: dict[str, Any]) -> None:
                if point is CrashPoint.AFTER_COMMIT:
                    raise ConnectionResetError("connection lost after COMMIT")

            outcomes: list[dict[str, Any]] = []
            for i in range(5):
                turn = f"turn-{i}"
                with crash_hook(lost_ack), pytest.raises(ConnectionResetError):
                    await store.with_turn("amb", turn, op, request_fingerprint=f"fp-{i}")
                report.injections["lost_ack"] += 1
                again = await store.with_turn("amb", turn, op, request_fingerprint=f"fp-{i}")
                if again["outcome"] != "replayed":
                    report.add("I1", f"{turn}: retry did not replay: {again['outcome']}")
                outcomes.append({"thread": "amb", "turn": turn, **again})
                with pytest.raises(TurnConflictError) as caught:
                    await store.with_turn("amb", turn, op, request_fingerprint="other")
                assert caught.value.code == ErrorCode.TURN_ID_REUSED
                report.runs += 1
            report.figures["retries_that_found_their_commit"] = sum(
                o["outcome"] == "replayed" for o in outcomes
            )
        await check_invariants(
            report,
            dsn,
            schema,
            await provider.astats(),
            outcomes,
            planned=[TurnSpec("amb", f"turn-{i}", ("k",)) for i in range(5)],
        )
    report.print()
    assert report.total == 0
