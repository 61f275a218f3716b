"""Fault-test kit: worker processes, a provider process counting calls, invariant checks.

Workers are forked processes that run real turns against PostgreSQL and can be killed,
stopped or have their connections terminated. The provider is a separate process that counts
calls per ``(thread, key)`` and checks that the call's receipt was committed ``prepared``
before it (RELIABILITY.md I5a). ``check_invariants`` reads the store and reports violations
per invariant.

The check reads the receipt after the call arrived, and while the server restarts that read
waits: by then the worker may have moved the receipt on (its lease lost mid-call, the turn
cancelled: ``uncertain``; a redelivery found it interrupted: ``uncertain``). So the check
holds the receipt's id, which the call carries: a row with that id that is ``prepared`` - or
in a state only a committed ``prepared`` of that id leads to (``uncertain``, ``completed``) -
proves it; a missing row, another id (the ``prepared`` was lost and written again) or
``failed`` (recorded as not applied while called) is a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import asyncpg

from intention_kernel._crashpoints import CrashPoint, kill_at, set_crash_hook
from intention_kernel.contracts import TurnScope
from intention_kernel.contracts.errors import KernelError, LeaseLostError
from intention_kernel.contracts.receipts import EffectAuthority
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.postgres._sql import Statements
from intention_kernel.durability.postgres._turns import PostgresTurns
from intention_kernel.durability.store import DurableStore
from intention_kernel.testing.conformance import effect, make_events, make_result

__all__ = [
    "EVENTS",
    "ProviderProcess",
    "Report",
    "TurnSpec",
    "check_invariants",
    "fault_scale",
    "run_worker",
    "start_worker",
    "wait_stopped",
]

EVENTS = 3
CTX = multiprocessing.get_context("fork")
WORKER_OPTIONS: dict[str, Any] = {}
"""Adapter options every new ``WorkerSpec`` gets (e.g. ``statement_cache_size=0`` for PgBouncer)."""


def fault_scale() -> int:
    return max(1, int(os.environ.get("IK_FAULT_SCALE", "1")))


# ---------------------------------------------------------------- provider process


class ProviderProcess:
    """A separate process standing in for an external API; counts calls per key."""

    def __init__(
        self, dsn: str, schema: str, *, check_prepared: bool = True, check_delay: float = 0.0
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="ik-provider-")
        self.socket = os.path.join(self.dir, "provider.sock")
        self._process = CTX.Process(
            target=_provider_main,
            args=(self.socket, dsn, schema, check_prepared, check_delay),
            daemon=True,
        )

    def __enter__(self) -> ProviderProcess:
        self._process.start()
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline:
                raise RuntimeError("provider process did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            os.kill(self._process.pid or 0, signal.SIGTERM)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()

    async def _ask(self, line: str) -> str:
        reader, writer = await asyncio.open_unix_connection(self.socket)
        writer.write(line.encode() + b"\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        return answer.decode()

    def _request(self, line: str) -> str:
        return asyncio.run(self._ask(line))

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self._request("STATS"))
        return data

    async def astats(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(await self._ask("STATS"))
        return data


# States a receipt reaches only from a committed ``prepared`` (of the same id), for a call in
# flight: the worker's own ``uncertain`` (cancelled mid-call), a redelivery's ``uncertain``
# (interrupted), an operator's ``completed``. ``failed`` would say "not applied": never true
# of a call that arrived.
_AFTER_PREPARED = ("prepared", "uncertain", "completed")


def _provider_main(
    path: str, dsn: str, schema: str, check_prepared: bool, check_delay: float
) -> None:
    calls: Counter[str] = Counter()
    unprepared: list[str] = []
    checked = [0]

    async def main() -> None:
        state: dict[str, Any] = {"conn": None}
        stop = asyncio.Event()
        one_at_a_time = asyncio.Lock()  # calls arrive concurrently; the connection is one

        async def seen(thread_id: str, key: str) -> tuple[str | None, str | None] | None:
            """``(status, receipt id)`` of the key's receipt; ``None`` if it cannot be read."""
            await asyncio.sleep(check_delay)
            async with one_at_a_time:
                return await read(thread_id, key)

        async def read(thread_id: str, key: str) -> tuple[str | None, str | None] | None:
            for _ in range(100):  # keep checking while the server restarts
                try:
                    if state["conn"] is None or state["conn"].is_closed():
                        state["conn"] = await asyncpg.connect(dsn, statement_cache_size=0)
                    row = await state["conn"].fetchrow(
                        f'SELECT status, id FROM "{schema}".receipts'
                        " WHERE thread_id = $1 AND idempotency_key = $2",
                        thread_id,
                        key,
                    )
                    return (None, None) if row is None else (row["status"], row["id"])
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    if state["conn"] is not None:
                        state["conn"].terminate()
                    state["conn"] = None
                    await asyncio.sleep(0.2)
            return None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            line = (await reader.readline()).decode().rstrip("\n")
            if line == "STATS":
                body = {"calls": dict(calls), "unprepared": unprepared, "checked": checked[0]}
                writer.write(json.dumps(body).encode())
            elif line == "STOP":
                stop.set()
            else:
                thread_id, key, receipt_id = line.split("\t")
                calls[f"{thread_id}\t{key}"] += 1
                found = await seen(thread_id, key) if check_prepared else None
                if found is not None and not (
                    found[0] in _AFTER_PREPARED and found[1] == receipt_id
                ):
                    status, stored_id = found
                    unprepared.append(
                        f"{thread_id}\t{key} (receipt {receipt_id}: stored {status} {stored_id})"
                    )
                checked[0] += 1
                writer.write(b"ok")
            with contextlib.suppress(ConnectionError):  # the caller was killed mid-call
                await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(handle, path)
        async with server:
            await stop.wait()

    asyncio.run(main())


async def call_provider(socket: str, thread_id: str, authority: EffectAuthority) -> str:
    reader, writer = await asyncio.open_unix_connection(socket)
    try:
        line = f"{thread_id}\t{authority.idempotency_key}\t{authority.receipt_id}\n"
        writer.write(line.encode())
        await writer.drain()
        answer = await reader.read()
    finally:  # also when the turn gives up on the call (cancelled)
        writer.close()
    return f"charged:{authority.idempotency_key}:{answer.decode()}"


# ---------------------------------------------------------------- workers


@dataclass(frozen=True)
class TurnSpec:
    thread_id: str
    turn_id: str
    keys: tuple[str, ...] = ()
    retries: int = 0
    """Redeliver the same turn on retryable errors (with a short pause) this many times."""


@dataclass
class WorkerSpec:
    dsn: str
    schema: str
    provider: str
    turns: list[TurnSpec]
    log: str
    crash_point: str | None = None
    crash_signal: int = signal.SIGKILL
    lease_ttl: float = 1.0
    lock_timeout: float = 20.0
    hold_in_turn: float = 0.0
    deadline: float | None = None
    """``time.monotonic()`` after which no new turn starts (retries of the current one go on)."""
    options: dict[str, Any] = field(default_factory=lambda: dict(WORKER_OPTIONS))
    env: dict[str, str] = field(default_factory=dict)
    unfenced: bool = False
    """Run the deliberately broken store without fencing (the fault tests must catch it)."""


def _append(path: str, record: dict[str, Any]) -> None:
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def run_worker(spec: WorkerSpec) -> None:
    """Process body: run the turns, logging outcomes and handler occupancy to ``spec.log``."""
    os.environ.update(spec.env)
    if spec.crash_point is not None:
        set_crash_hook(kill_at(CrashPoint(spec.crash_point), spec.crash_signal))
    asyncio.run(_worker(spec))


def unfenced(store: PostgresDurability) -> DurableStore[Any]:
    """A deliberately broken store over ``store``'s connection: its turns' writes skip the
    lease check and a lost lease goes unnoticed (``PostgresTurns`` over statements rendered
    without fencing). Fault tests run it to prove they would catch a missing fence."""
    turns = PostgresTurns(
        store.connection,
        Statements.render(store.schema, fencing=False),
        store.head_texts,
        lease_settings=store.lease_settings,
        lock_timeout=store.lock_timeout,
        json_limits=store.json_limits,
    )
    roles = store.roles
    return DurableStore(
        turns,
        history=roles.history,
        outbox=roles.outbox,
        inspection=roles.inspection,
        lock_timeout=store.lock_timeout,
        json_limits=store.json_limits,
    )


async def _worker(spec: WorkerSpec) -> None:
    pid = os.getpid()
    opened = await PostgresDurability.open(
        spec.dsn,
        schema=spec.schema,
        lease_ttl=spec.lease_ttl,
        lock_timeout=spec.lock_timeout,
        min_size=0,
        max_size=3,
        **spec.options,
    )
    store: DurableStore[Any] = unfenced(opened) if spec.unfenced else opened
    try:
        for turn in spec.turns:
            if spec.deadline is not None and time.monotonic() > spec.deadline:
                break
            for attempt in range(turn.retries + 1):
                record = await _one_turn(store, spec, turn, pid)
                _append(spec.log, record)
                if not record.get("retryable") or attempt == turn.retries:
                    break
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
    finally:
        with contextlib.suppress(Exception):
            await store.close()


async def _one_turn(
    store: DurableStore[Any], spec: WorkerSpec, turn: TurnSpec, pid: int
) -> dict[str, Any]:
    async def operation(scope: TurnScope) -> dict[str, Any]:
        if scope.prior_result is not None:
            return {"outcome": "replayed", "response": scope.prior_result.response}
        _append(spec.log, {"enter": time.monotonic(), "pid": pid, "thread": turn.thread_id})
        exited = False

        def leave() -> None:
            nonlocal exited
            if not exited:
                exited = True
                _append(spec.log, {"exit": time.monotonic(), "pid": pid, "thread": turn.thread_id})

        try:
            values = []
            for key in turn.keys:
                done = await scope.run_effect(
                    effect(key),
                    lambda a: call_provider(spec.provider, turn.thread_id, a),
                )
                values.append(done.value)
            if spec.hold_in_turn:
                await asyncio.sleep(spec.hold_in_turn)
            result = make_result(scope, {"effects": values, "turn": turn.turn_id})
            # The commit releases the lease in its own statement: the handler's exclusive
            # part ends with it. The next holder can enter only once it has committed, and
            # after it this handler can write nothing (every write is refused: RELIABILITY
            # I2's "fenced"), so the probe logs the exit as the commit is sent.
            leave()
            await scope.commit(result, make_events(scope, EVENTS))
            return {"outcome": "committed", "response": result.response}
        finally:
            leave()

    base = {"thread": turn.thread_id, "turn": turn.turn_id, "pid": pid}
    try:
        out = await store.with_turn(turn.thread_id, turn.turn_id, operation)
        return {**base, **out}
    except KernelError as exc:
        return {
            **base,
            "outcome": "error",
            "code": str(exc.code),
            "error": type(exc).__name__,
            "retryable": exc.retryable,
            "lease_lost": isinstance(exc, LeaseLostError),
            "reason": str(exc.context.get("reason")),
            "cause": type(exc.__cause__).__name__ if exc.__cause__ else None,
        }
    except Exception as exc:  # an untyped error is an I8 violation, reported by the checker
        return {**base, "outcome": "untyped", "error": type(exc).__name__}


def start_worker(spec: WorkerSpec) -> BaseProcess:
    process = CTX.Process(target=run_worker, args=(spec,), daemon=True)
    process.start()
    return process


def wait_stopped(pid: int, timeout: float = 20) -> bool:
    """Wait until ``pid`` is stopped by a signal (state ``T`` in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("T", "t"):
                return True
        time.sleep(0.02)
    return False


def read_log(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


# ---------------------------------------------------------------- invariants

INVARIANTS = ("I1", "I2", "I3", "I4", "I5a", "I5b", "I5c", "I8", "I9")


@dataclass
class Report:
    name: str
    runs: int = 0
    injections: Counter[str] = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=lambda: {i: [] for i in INVARIANTS})
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, invariant: str, detail: str) -> None:
        self.violations[invariant].append(detail)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def print(self) -> None:
        counts = " ".join(f"{k}={len(v)}" for k, v in self.violations.items())
        injected = ", ".join(f"{k}={v}" for k, v in sorted(self.injections.items()))
        print(f"\n[{self.name}] runs={self.runs} injections: {injected or '-'}")
        print(f"[{self.name}] figures: {json.dumps(self.figures, sort_keys=True)}")
        print(f"[{self.name}] violations: {counts} (total {self.total})")
        for invariant, details in self.violations.items():
            for detail in details[:5]:
                print(f"[{self.name}]   {invariant}: {detail}")


@contextlib.contextmanager
def reporting(report: Report) -> Iterator[Report]:
    try:
        yield report
    finally:
        report.print()


async def check_invariants(
    report: Report,
    dsn: str,
    schema: str,
    provider: dict[str, Any],
    outcomes: list[dict[str, Any]],
    *,
    planned: list[TurnSpec],
) -> None:
    """Read the store back and record violations of RELIABILITY.md b.1 in ``report``."""
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        s = f'"{schema}"'
        turns = await conn.fetch(f"SELECT thread_id, turn_id, revision, result FROM {s}.turns")
        heads = {
            r["thread_id"]: (r["revision"], r["turn_id"])
            for r in await conn.fetch(f"SELECT * FROM {s}.heads")
        }
        outbox = Counter(
            (r["thread_id"], r["turn_id"])
            for r in await conn.fetch(f"SELECT thread_id, turn_id FROM {s}.outbox")
        )
        receipts = {
            (r["thread_id"], r["idempotency_key"]): r["status"]
            for r in await conn.fetch(
                f"SELECT thread_id, idempotency_key, status FROM {s}.receipts"
            )
        }
        not_applied = Counter(
            (r["thread_id"], r["idempotency_key"])
            for r in await conn.fetch(
                f"SELECT thread_id, idempotency_key FROM {s}.reconciliations"
                ' WHERE record LIKE \'%"outcome":"not_applied"%\''
            )
        )
    finally:
        await conn.close()

    committed = {(r["thread_id"], r["turn_id"]): r for r in turns}
    # I1: one commit per turn (primary key) and every answer equals the stored result.
    for o in outcomes:
        if o.get("outcome") in ("committed", "replayed"):
            row = committed.get((o["thread"], o["turn"]))
            if row is None:
                report.add("I1", f"{o['thread']}/{o['turn']} answered but not stored")
            elif json.loads(row["result"])["response"] != o["response"]:
                report.add("I1", f"{o['thread']}/{o['turn']} answer differs from stored")
    commits = Counter((o["thread"], o["turn"]) for o in outcomes if o.get("outcome") == "committed")
    for key, n in commits.items():
        if n > 1:
            report.add("I1", f"{key} committed {n} times")
    # I3: a linear chain per thread.
    by_thread: dict[str, list[int]] = {}
    for (thread_id, _), row in committed.items():
        by_thread.setdefault(thread_id, []).append(row["revision"])
    for thread_id, revisions in by_thread.items():
        if sorted(revisions) != list(range(1, len(revisions) + 1)):
            report.add("I3", f"{thread_id} revisions {sorted(revisions)}")
        head = heads.get(thread_id)
        if head is None or head[0] != len(revisions):
            report.add("I3", f"{thread_id} head {head} vs {len(revisions)} turns")
    # I4: all or nothing per turn.
    for key in committed:
        if outbox[key] != EVENTS:
            report.add("I4", f"{key} has {outbox[key]} outbox events")
    for key in outbox:
        if key not in committed:
            report.add("I4", f"{key} has outbox events but no turn")
    for spec in planned:
        if (spec.thread_id, spec.turn_id) in committed:
            for k in spec.keys:
                status = receipts.get((spec.thread_id, effect(k).idempotency_key))
                if status != "completed":
                    report.add("I4", f"{spec.thread_id}/{spec.turn_id} committed, {k} {status}")
    # I5: prepared before the call, at most one call per key, uncertainty surfaced.
    for item in provider.get("unprepared", []):
        report.add("I5a", f"provider called without a prepared receipt: {item}")
    for item, n in provider.get("calls", {}).items():
        thread_id, key = item.split("\t")
        allowed = 1 + not_applied[(thread_id, key)]
        if n > allowed:
            report.add("I5b", f"{item} called {n} times (allowed {allowed})")
        status = receipts.get((thread_id, key))
        if status not in ("completed", "uncertain", "failed"):
            report.add("I5c", f"{item} was called; receipt is {status}")
    for (thread_id, key), status in receipts.items():
        if status == "prepared":
            report.add("I5c", f"{thread_id}/{key} left prepared after redelivery")
    report.figures["uncertain"] = sum(1 for s in receipts.values() if s == "uncertain")
    report.figures["turns_committed"] = len(committed)
    report.figures["provider_calls"] = sum(provider.get("calls", {}).values())
    # I8: typed errors only.
    for o in outcomes:
        if o.get("outcome") == "untyped":
            report.add("I8", f"untyped error {o.get('error')} for {o['thread']}/{o['turn']}")
