"""A real worker process for the SQLite fault tests (run as a script, one JSON argument).

Modes:
- ``turns``: run turns on one thread, optionally with one effect calling the provider process,
  an occupancy probe (O_APPEND log of enter/exit), a pause before the effect, a hold time before
  the commit, a ``kill -9`` crash point and a start barrier (print ``ready``, wait for a line on
  stdin).
  Prints one JSON line per turn: ``{"turn", "outcome", "response"}``.
- ``reconcile``: resolve one uncertain receipt.
- ``provider``: a tiny HTTP provider counting calls per idempotency key; at every call it checks
  in the database that a ``prepared`` receipt exists (invariant I5a). Prints its port, serves
  until stdin closes or ``lifetime`` seconds pass.

With ``IK_PLANTED_BUG=prepare_after_call`` in the environment, the store carries that planted bug
(``tests.support.planted``): the crash campaign must catch it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import threading
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from intention_kernel._crashpoints import CrashPoint, kill_at, set_crash_hook
from intention_kernel.contracts import (
    DurabilityError,
    DurableTurnResult,
    EffectAuthority,
    EffectIdentity,
    EffectUncertainError,
    KernelCheckpoint,
    KernelEvent,
    TurnScope,
)
from intention_kernel.durability.sqlite import SQLiteDurability
from tests.support.planted import PrepareAfterCall

CAPABILITY = "test.call"


class PlantedSQLite(PrepareAfterCall, SQLiteDurability):
    """Calls the provider before ``prepared`` is recorded (a bug the campaign must catch)."""


def _store_class() -> type[SQLiteDurability]:
    planted = os.environ.get("IK_PLANTED_BUG")
    if planted == "prepare_after_call":
        return PlantedSQLite
    if planted:
        raise SystemExit(f"unknown planted bug {planted!r}")
    return SQLiteDurability


def _probe(path: str | None, event: str, turn: str) -> None:
    if path is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {os.getpid()} {turn} {time.monotonic_ns()}\n".encode())
    finally:
        os.close(fd)


def _call_provider(url: str, db: str, thread: str, key: str) -> Any:
    body = json.dumps({"db": db, "thread": thread, "key": key}).encode()
    request = urllib.request.Request(f"{url}/call", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["value"]


async def run_turns(spec: dict[str, Any]) -> None:
    store = await _store_class().open(
        spec["db"], lock_timeout=spec.get("lock_timeout", 30), lock_dir=spec.get("lock_dir")
    )
    thread: str = spec["thread"]
    probe: str | None = spec.get("probe")
    hold: float = spec.get("hold", 0.0)
    if spec.get("barrier"):
        print("ready", flush=True)
        sys.stdin.readline()
    if spec.get("crash"):
        set_crash_hook(kill_at(CrashPoint(spec["crash"])))
    turns: list[str] = spec.get("turns") or [spec["turn"]]
    for turn in turns:

        async def operation(scope: TurnScope, turn: str = turn) -> tuple[str, Any]:
            if scope.prior_result is not None:
                return "replayed", scope.prior_result.response
            _probe(probe, "enter", turn)
            if spec.get("pause"):
                await asyncio.sleep(spec["pause"])
            values = []
            if spec.get("key"):
                key = f"{spec['key']}:{turn}" if spec.get("key_per_turn") else spec["key"]

                async def call(authority: EffectAuthority) -> Any:
                    return await asyncio.to_thread(
                        _call_provider,
                        spec["provider"],
                        spec["db"],
                        thread,
                        authority.idempotency_key,
                    )

                done = await scope.run_effect(EffectIdentity(key, CAPABILITY), call)
                values.append(done.value)
            if hold:
                await asyncio.sleep(hold)
            revision = 1 if scope.checkpoint is None else scope.checkpoint.revision + 1
            result = DurableTurnResult(
                thread_id=thread,
                turn_id=turn,
                trace_id=f"trace-{turn}",
                response={"pid": os.getpid(), "values": values},
                checkpoint=KernelCheckpoint(revision=revision, agent_fingerprint="faults"),
            )
            event = KernelEvent(
                id=f"evt-{turn}",
                type="test.turn",
                occurred_at=datetime.now(UTC),
                thread_id=thread,
                turn_id=turn,
                sequence=0,
                correlation_id=f"trace-{turn}",
            )
            await scope.commit(result, [event])
            _probe(probe, "exit", turn)
            return "committed", result.response

        try:
            outcome, response = await store.with_turn(thread, turn, operation)
        except EffectUncertainError:
            outcome, response = "uncertain", None
        except DurabilityError as exc:
            outcome, response = f"error:{exc.code}", None
        print(json.dumps({"turn": turn, "outcome": outcome, "response": response}), flush=True)
    await store.close()


async def reconcile(spec: dict[str, Any]) -> None:
    store = await SQLiteDurability.open(spec["db"])
    receipt = await store.reconcile(
        spec["thread"],
        spec["key"],
        spec["outcome"],
        value=spec.get("value"),
        note="fault test",
        actor="tester",
    )
    print(json.dumps({"status": str(receipt.status)}), flush=True)
    await store.close()


def serve_provider(spec: dict[str, Any]) -> None:
    calls: Counter[str] = Counter()
    unprepared: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _reply(self, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = _receipt_status(request["db"], request["thread"], request["key"])
            name = f"{request['thread']}|{request['key']}"
            with lock:
                calls[name] += 1
                count = calls[name]
                if status != "prepared":
                    unprepared.append(f"{name} was {status}")
            self._reply({"value": f"{request['key']}#{count}"})

        def do_GET(self) -> None:
            with lock:
                self._reply({"calls": dict(calls), "unprepared": list(unprepared)})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    deadline = time.monotonic() + spec.get("lifetime", 900)
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)
    watcher.start()
    while watcher.is_alive() and time.monotonic() < deadline:
        watcher.join(0.2)
    server.shutdown()


def _receipt_status(db: str, thread: str, key: str) -> str | None:
    conn = sqlite3.connect(db, timeout=10)
    try:
        row = conn.execute(
            "SELECT status FROM ik_receipts WHERE thread_id = ? AND idempotency_key = ?",
            (thread, key),
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def main() -> None:
    spec = json.loads(sys.argv[1])
    mode = spec.get("mode", "turns")
    if mode == "provider":
        serve_provider(spec)
    elif mode == "reconcile":
        asyncio.run(reconcile(spec))
    else:
        asyncio.run(run_turns(spec))


if __name__ == "__main__":
    main()
