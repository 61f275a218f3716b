"""The turn inbox next to a direct ``agent.run`` of the same turn, on SQLite and PostgreSQL.

    .venv/bin/python bench/inbox_turns.py [--seconds 4] [--reps 3] [--stores sqlite,postgres]
        [--kinds no_step,one_read] [--clients 1,8] [--count-turns 200] [--part-calls 500]
        [--latency-turns 100] [--claims 200] [--backlog 10000] [--claim-threads 1000]
        [--no-deep] [--dsn URL]

The agent is ``bench/kernel_turns.py``'s, driven by ``ScriptedModelGateway``, with two turns:
``one_read`` (the model asks for one read capability, ``orders.lookup``, then composes) and
``no_step`` (the model asks for nothing and composes). No turn with a write: a write needs the
user's consent first, so a write turn is two turns (the question, then the answer), which would
measure consent, not the inbox.

1. **CPU per turn.** For each store, turn and 1 and 8 clients (each client its own thread),
   each repetition runs two cells back to back (order alternating), each in a fresh process:
   ``direct``, every client awaits ``agent.run`` in a loop; ``inbox``, every client
   ``agent.submit``s its next turn and waits for its commit while one in-process worker
   (``agent.worker(concurrency=clients)``, default claim ttl and polling) runs and commits it
   (the submit hands it the turn when it has a free slot: the submit is the claim). A client
   learns of the commit from an in-process event sink (the kernel hands a turn's events to it
   right after the commit, sending no statement); both sides have it.
   Client CPU: ``getrusage`` of the cell's process over the timed window; PostgreSQL server
   CPU as ``postgres_turns`` measures it (``bench/_server.py``: the backends of the bench
   database, the WAL writer, checkpointer and background writer, from ``/proc``). Ratios
   inbox / direct within a repetition, medians over repetitions. Statements per turn: on
   PostgreSQL ``pg_stat_statements`` when preloaded, else the asyncpg calls of the timed
   window; on both stores a separate run of ``--count-turns`` turns records every statement
   and names what it does (submit, claim that found a request, empty claim, progress append,
   turn open, turn commit that also marks the request done, renew, ...); on SQLite it also
   counts fsyncs (``strace -f -c``, minus a run of zero turns, when strace is installed).
   Then each inbox operation alone (``--part-calls`` submits, submits that claim, claims,
   empty claims, progress appends of a one-read turn's four items, gets, releases in a row,
   fresh process per store and repetition): client CPU and, on PostgreSQL, the bench
   database's backends' CPU per call; weighed by the calls per turn, they say how much of
   inbox - direct is the inbox's own statements and how much the rest of the worker's path.
2. **Latency at 1 client.** Per store and repetition one fresh process runs
   ``--latency-turns`` rounds of three turns, each on its own thread, order rotating: a direct
   run; a submitted turn whose commit is learnt in process (the sink); a submitted turn
   followed through ``agent.watch`` until its ``TurnCompleted`` (as the HTTP service follows
   it). Median and p95 per side; ratios to the direct run within a repetition, medians over
   repetitions.
3. **A claim with 10 vs 10,000 pending requests.** A fresh store (SQLite file, PostgreSQL
   schema) with 10 pending requests on 10 threads, then one with ``--backlog`` requests on
   ``--claim-threads`` threads (submitted round by round: the first request of every thread,
   then the second, ...), and (unless ``--no-deep``) one with ``--backlog`` requests on a
   single thread whose first request is running, then 10 on other threads. A claimer holds up
   to 4 claims, as a worker of concurrency 4 would: ``--claims`` claims, each timed
   (``store.inbox.claim``), the oldest claim given back as dead and a new request submitted on
   its thread once 4 are held (so the backlog stays the same). PostgreSQL's table is
   ``VACUUM ANALYZE``d once filled (as autovacuum would after that many rows). Then the
   claim's plan on the backlog left: PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS)`` of the claim
   statement (the store's own text, recorded) and ``auto_explain``'s plans of the statements
   the claim function runs, taken after six runs in the same session, each rolled back (a
   long-lived connection runs the plans plpgsql keeps, generic ones after five runs); SQLite
   ``EXPLAIN QUERY PLAN`` of every statement of a claim (recorded with the trace callback) and
   the VM instructions its select runs.

Every cell records the load before and after and the share of the cores other work used (a
warning is printed above ``OTHERS_LIMIT``). PostgreSQL uses its own database ``ik_bench_inbox``
(schemas ``ik_bench_inbox`` and ``ik_bench_inbox_claim``, dropped at the start); ``--dsn``
(default ``$IK_POSTGRES_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``) is the
monitoring database. Writes ``bench/results/inbox_turns.json`` and prints tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _capture import Recorder
from _inbox_measure import (
    PARTS,
    accounting,
    explain_figures,
    median,
    notice_plan,
    pg_statement_kind,
    sqlite_breakdown,
    strace_fsyncs,
    summary_ms,
)
from _measure import (
    OTHERS_LIMIT,
    cell_machine,
    cpu_seconds,
    cpu_us_per_turn,
    load_warning,
    machine,
    machine_cpu,
    others_share,
    others_warning,
    per_turn,
    ratio,
    read_proc_stat,
    self_cpu,
    table_cell,
)
from _server import Probe
from kernel_turns import AGENT, ONE_READ, compose

from intention_kernel.contracts import KernelEvent
from intention_kernel.contracts.inbox import InboxRequest
from intention_kernel.durability import open_durability
from intention_kernel.kernel import CompiledAgent, Kernel, TurnCompleted
from intention_kernel.testing import ScriptedModelGateway

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "inbox_turns.json"
DEFAULT_DSN = os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BENCH_DB = "ik_bench_inbox"
SCHEMA = "ik_bench_inbox"
CLAIM_SCHEMA = "ik_bench_inbox_claim"
KINDS: dict[str, dict[str, Any]] = {"no_step": {"intentions": []}, "one_read": ONE_READ}
TEXT = "where is 42?"
SIDES = ("direct", "inbox")
LATENCY_SIDES = ("direct", "inbox_notified", "inbox_watched")
WARM = 3
"""Untimed turns per thread before a cell's window (through the cell's own path)."""
HOLD = 4
"""Claims the claimer of part 3 holds at once (a worker of the default concurrency)."""
TURN_WAIT = 60.0
"""Seconds a client waits for its submitted turn before counting it as an error."""


def with_db(dsn: str, db: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{db}"))


def store_url(dsn: str, schema: str) -> str:
    url = with_db(dsn, BENCH_DB)
    return f"{url}{'&' if urlsplit(url).query else '?'}schema={schema}"


# ---------------------------------------------------------------- the agent


class Committed:
    """An in-process event sink: the kernel hands it a turn's events right after the commit,
    so a client waiting on ``expect`` learns of the commit without a statement."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, str], asyncio.Future[None]] = {}

    def expect(self, thread_id: str, turn_id: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[(thread_id, turn_id)] = future
        return future

    async def publish(self, events: Sequence[KernelEvent]) -> list[Any]:
        for event in events:
            future = self.waiting.pop((event.thread_id, event.turn_id), None)
            if future is not None and not future.done():
                future.set_result(None)
        return []

    async def close(self) -> None:
        return None


def make_agent(store: Any, kind: str, sink: Committed) -> tuple[CompiledAgent, Any]:
    gateway = ScriptedModelGateway({"interpret": KINDS[kind], "compose": compose})
    return Kernel(durability=store, model=gateway, sinks=[sink]).compile(AGENT), gateway


class Turns:
    """One turn through either path: ``direct`` (``agent.run``), ``inbox`` (submit, then the
    sink), ``watched`` (submit, then ``agent.watch`` until the commit)."""

    def __init__(self, agent: CompiledAgent, sink: Committed) -> None:
        self.agent = agent
        self.sink = sink

    async def direct(self, thread_id: str, turn_id: str) -> None:
        await self.agent.run(thread_id=thread_id, turn_id=turn_id, text=TEXT)

    async def inbox(self, thread_id: str, turn_id: str) -> None:
        committed = self.sink.expect(thread_id, turn_id)
        await self.agent.submit(thread_id=thread_id, turn_id=turn_id, text=TEXT)
        async with asyncio.timeout(TURN_WAIT):  # no task of its own, as a direct run has none
            await committed

    async def watched(self, thread_id: str, turn_id: str) -> None:
        await self.agent.submit(thread_id=thread_id, turn_id=turn_id, text=TEXT)
        async with asyncio.timeout(TURN_WAIT):
            watch = self.agent.watch(thread_id=thread_id, turn_id=turn_id)
            async with contextlib.aclosing(watch) as items:  # type: ignore[type-var]
                async for watched in items:
                    if isinstance(watched.item, TurnCompleted):
                        return
        raise RuntimeError("the watch ended without the turn's result")

    def path(self, side: str) -> Callable[[str, str], Awaitable[None]]:
        return {
            "direct": self.direct,
            "inbox": self.inbox,
            "inbox_notified": self.inbox,
            "inbox_watched": self.watched,
        }[side]


class SqliteTrace:
    """Records the statements of the SQLite connections opened while ``installed`` (the
    ``sqlite3`` trace callback, expanded SQL), while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.statements: list[str] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[SqliteTrace]:
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = connect(*args, **kwargs)
            conn.set_trace_callback(self._seen)
            return conn

        sqlite3.connect = traced  # type: ignore[assignment]
        try:
            yield self
        finally:
            sqlite3.connect = connect

    def _seen(self, statement: str) -> None:
        if self.active:
            self.statements.append(statement)


async def start_worker(agent: CompiledAgent, concurrency: int) -> tuple[Any, asyncio.Task[None]]:
    worker = agent.worker(concurrency=concurrency)
    return worker, asyncio.get_running_loop().create_task(worker.run())


async def stop_worker(worker: Any, task: asyncio.Task[None]) -> None:
    worker.stop()
    await asyncio.wait_for(task, 30)


# ---------------------------------------------------------------- child processes


async def child(spec: dict[str, Any]) -> None:
    """Runs in a fresh process (``--child``); ``mode`` is ``cell``, ``count`` or ``latency``."""
    postgres = spec["store"] == "postgres"
    recorder = Recorder(keep=spec["mode"] == "count")
    trace = SqliteTrace()
    with contextlib.ExitStack() as stack:
        if postgres:
            stack.enter_context(recorder.installed())
        elif spec["mode"] == "count":
            stack.enter_context(trace.installed())
        store = await open_durability(spec["url"])
        try:
            if spec["mode"] == "latency":
                await _latency_child(spec, store)
            elif spec["mode"] == "parts":
                await _parts_child(spec, store)
            else:
                await _cell_child(spec, store, recorder, trace)
        finally:
            await store.close()


async def _cell_child(
    spec: dict[str, Any], store: Any, recorder: Recorder, trace: SqliteTrace
) -> None:
    """Warm each thread, say ``ready``, wait for ``go <seconds>`` (``cell``) or run
    ``turns`` turns per thread (``count``), print the figures, wait for ``exit``."""
    sink = Committed()
    agent, gateway = make_agent(store, spec["kind"], sink)
    threads: list[str] = spec["threads"]
    side: str = spec["side"]
    one = Turns(agent, sink).path(side)
    running = await start_worker(agent, len(threads)) if side == "inbox" else None
    for n in range(WARM):
        await asyncio.gather(*(one(t, f"w{n}") for t in threads))
    gateway.reset_calls()
    counting = spec["mode"] == "count"
    if counting:
        seconds, turns = float("inf"), int(spec["turns"])
    else:
        print("ready", flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        seconds, turns = float(line.split()[1]), 0
    counts = [0] * len(threads)
    latencies: list[float] = []
    errors: list[str] = []
    started = time.monotonic()
    cpu = self_cpu()
    recorder.active = trace.active = True
    deadline = started + seconds

    async def client(slot: int, thread: str) -> None:
        n = 0
        while (n < turns) if counting else (time.monotonic() < deadline):
            n += 1
            began = time.perf_counter()
            try:
                await one(thread, f"t{n}")
            except Exception as exc:  # counted, and the cell goes on
                errors.append(type(exc).__name__)
                continue
            latencies.append(time.perf_counter() - began)
            counts[slot] = n

    await asyncio.gather(*(client(i, t) for i, t in enumerate(threads)))
    elapsed = time.monotonic() - started
    cpu = self_cpu() - cpu
    recorder.active = trace.active = False
    report: dict[str, Any] = {
        "turns": sum(counts),
        "seconds": elapsed,
        "cpu": cpu,
        "errors": errors,
        "statements": recorder.count,
        "latency": summary_ms(latencies) if latencies else None,
    }
    if counting:
        report["by_kind"] = _count_kinds(recorder, trace)
    print(json.dumps(report), flush=True)
    if running is not None:
        await stop_worker(*running)
    if not counting:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "exit"


def _count_kinds(recorder: Recorder, trace: SqliteTrace) -> dict[str, dict[str, int]]:
    if recorder.calls:
        counted = Counter(pg_statement_kind(c.query, c.result) for c in recorder.calls)
        return {k: {"statements": v, "transactions": v} for k, v in counted.items()}
    return sqlite_breakdown(trace.statements)


async def _latency_child(spec: dict[str, Any], store: Any) -> None:
    """``rounds`` rounds of one turn per side, each side on its own thread, order rotating;
    prints the latencies (seconds) per side."""
    sink = Committed()
    agent, gateway = make_agent(store, "one_read", sink)
    turns = Turns(agent, sink)
    tag: str = spec["tag"]
    worker, task = await start_worker(agent, 1)
    timings: dict[str, list[float]] = {side: [] for side in LATENCY_SIDES}
    rounds, order = int(spec["rounds"]), list(LATENCY_SIDES)
    for n in range(WARM + rounds):
        gateway.reset_calls()
        for side in order[n % 3 :] + order[: n % 3]:
            began = time.perf_counter()
            await turns.path(side)(f"{tag}-{side}", f"t{n}")
            if n >= WARM:
                timings[side].append(time.perf_counter() - began)
    await stop_worker(worker, task)
    print(json.dumps(timings), flush=True)


PROGRESS_ITEMS = [
    json.dumps(item)
    for item in (
        {"type": "attempt", "attempt": 1},
        {"type": "step_started", "step_id": "s1", "capability_id": "orders.lookup"},
        {
            "type": "step_finished",
            "step_id": "s1",
            "capability_id": "orders.lookup",
            "status": "completed",
        },
        {"type": "text", "text": "Order 42 has shipped.", "restarted": False},
    )
]
"""What a one-read turn's worker records: the attempt, the step started and finished, the
text (one batch)."""


class BackendCpu:
    """CPU seconds so far of the server processes serving ``database`` (``/proc``)."""

    def __init__(self, postmaster: int, database: str) -> None:
        self.postmaster = postmaster
        self.marker = f" {database} ".encode()

    def read(self) -> float:
        ticks = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            stat = read_proc_stat(int(entry.name))
            if stat is None or stat.ppid != self.postmaster:
                continue
            try:
                title = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if self.marker in title:
                ticks += stat.ticks
        return cpu_seconds(ticks)


async def _parts_child(spec: dict[str, Any], store: Any) -> None:
    """Each inbox operation alone, ``calls`` times in a row through ``agent.submit`` and
    ``store.inbox``: client CPU (this process) and, on PostgreSQL, the CPU of the bench
    database's backends, per call. Every thread holds one request, so a claim takes a head at
    once; the empty claims run after the claimed requests were given back (nothing open)."""
    agent, _ = make_agent(store, "one_read", Committed())
    inbox = store.inbox
    backends = BackendCpu(int(spec["postmaster"]), BENCH_DB) if spec.get("postmaster") else None
    worker = "parts-worker"
    out: dict[str, dict[str, float | None]] = {}
    for rounds, tag in ((10, f"{spec['tag']}-warm"), (int(spec["calls"]), spec["tag"])):
        keys = [(f"{tag}-{i}", "u1") for i in range(rounds)]
        held: list[InboxRequest] = []

        async def submit(i: int, keys: list[tuple[str, str]] = keys) -> None:
            await agent.submit(thread_id=keys[i][0], turn_id=keys[i][1], text=TEXT)

        async def submit_claiming(i: int, keys: list[tuple[str, str]] = keys) -> None:
            # As ``agent.submit`` does for a worker of this process with a free slot.
            await inbox.submit(
                f"{keys[i][0]}-c",
                "u1",
                text=TEXT,
                fingerprint="bench",
                claimer=worker,
                claim_ttl=3600,
            )

        async def claim(_: int, held: list[InboxRequest] = held) -> None:
            found = await inbox.claim(worker, ttl=3600)
            assert found is not None, "nothing to claim"
            held.append(found)

        async def release(i: int, held: list[InboxRequest] = held) -> None:
            done = held[i]
            await inbox.release(
                worker,
                done.thread_id,
                done.turn_id,
                retry_in=None,
                error_code="BENCH",
                error="given back by the benchmark",
            )

        async def empty(_: int) -> None:
            assert await inbox.claim(worker, ttl=3600) is None, "a claim found a request"

        async def append(i: int, keys: list[tuple[str, str]] = keys) -> None:
            await inbox.append_progress(keys[i][0], keys[i][1], PROGRESS_ITEMS)

        async def get(i: int, keys: list[tuple[str, str]] = keys) -> None:
            await inbox.get(*keys[i])

        operations: dict[str, Callable[[int], Awaitable[None]]] = {
            "submit": submit,
            "submit that claims": submit_claiming,
            "claim": claim,
            "release": release,
            "empty claim": empty,
            "progress append": append,
            "get request": get,
        }
        for name, operation in operations.items():
            server = backends.read() if backends else None
            cpu, began = self_cpu(), time.perf_counter()
            for i in range(rounds):
                await operation(i)
            wall, cpu = time.perf_counter() - began, self_cpu() - cpu
            used = None if backends is None or server is None else backends.read() - server
            out[name] = {
                "client_cpu_us": cpu_us_per_turn(cpu, rounds),
                "server_cpu_us": None if used is None else cpu_us_per_turn(used, rounds),
                "wall_ms": round(wall / rounds * 1000, 3),
            }
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------- part 1: CPU cells


async def start_child(
    spec: dict[str, Any], prefix: Sequence[str] = ()
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        __file__,
        "--child",
        json.dumps(spec),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def read_json(proc: asyncio.subprocess.Process) -> Any:
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode()
    if not line.strip():
        await proc.wait()
        raise RuntimeError(f"a benchmark process ended without its figures ({proc.returncode})")
    return json.loads(line)


async def cpu_cell(
    probe: Probe | None,
    url: str,
    store: str,
    side: str,
    kind: str,
    clients: int,
    seconds: float,
    tag: str,
) -> dict[str, Any]:
    threads = [f"{tag}-{c}" for c in range(clients)]
    spec = {"mode": "cell", "store": store, "url": url, "side": side, "kind": kind}
    proc = await start_child({**spec, "threads": threads})
    assert proc.stdout is not None and proc.stdin is not None
    ready = (await proc.stdout.readline()).decode().strip()
    if ready != "ready":
        await proc.wait()
        raise RuntimeError(f"a benchmark process did not start: {ready!r}")
    before = await probe.snapshot(BENCH_DB) if probe else None
    sampler = probe.sampler(BENCH_DB) if probe else None
    busy, mine = machine_cpu(), self_cpu()
    proc.stdin.write(f"go {seconds}\n".encode())
    await proc.stdin.drain()
    report = await read_json(proc)
    server = sampler.stop() if sampler else None  # before the connections close
    busy_after, mine = machine_cpu(), self_cpu() - mine
    proc.stdin.write(b"exit\n")
    await proc.stdin.drain()
    await proc.wait()
    turns = int(report["turns"])
    client = float(report["cpu"])
    out: dict[str, Any] = {
        "turns": turns,
        "turns_per_s": round(turns / float(report["seconds"]), 1),
        "errors": len(report["errors"]),
        "latency": report["latency"],
        "client_cpu_us_per_turn": cpu_us_per_turn(client, turns),
        "others_cpu_share": others_share(busy, busy_after, client + (server or 0.0) + mine),
    }
    if probe is not None and before is not None:
        await probe.wait_idle([BENCH_DB])
        after = await probe.snapshot(BENCH_DB)
        out.update(await probe.delta(before, after, turns, server, BENCH_DB))
        if probe.statements and out.get("statements_per_turn") is not None:
            out["statements_from"] = "pg_stat_statements"
        else:
            out["statements_per_turn"] = per_turn(int(report["statements"]), turns)
            out["statements_from"] = "client: asyncpg calls in the timed window"
        server_us = out.get("server_cpu_us_per_turn")
        out["cpu_us_per_turn"] = (
            None if server_us is None else round(out["client_cpu_us_per_turn"] + server_us, 1)
        )
    else:
        out["cpu_us_per_turn"] = out["client_cpu_us_per_turn"]
    return out


async def count_run(
    url_for: Callable[[int], str],
    store: str,
    side: str,
    kind: str,
    clients: int,
    turns: int,
    tag: str,
) -> dict[str, Any]:
    """Statements (and transactions) per turn by what they do, from a run of a fixed size; on
    SQLite also fsyncs per turn (``strace -f -c``, minus a run of zero turns), when installed."""
    per_client = max(1, turns // clients)
    spec = {"mode": "count", "store": store, "side": side, "kind": kind}
    traced = store == "sqlite" and shutil.which("strace") is not None
    fsyncs: dict[int, int] = {}
    report: dict[str, Any] = {}
    for n in (0, per_client) if traced else (per_client,):
        threads = [f"{tag}-{n}-{c}" for c in range(clients)]
        log = _scratch_file()
        prefix = ("strace", "-f", "-c", "-o", str(log), "-e", "trace=fsync,fdatasync")
        proc = await start_child(
            {**spec, "url": url_for(n), "threads": threads, "turns": n}, prefix if traced else ()
        )
        report = await read_json(proc)
        await proc.wait()
        fsyncs[n] = strace_fsyncs(await asyncio.to_thread(log.read_text))
        await asyncio.to_thread(log.unlink)
    done = int(report["turns"])
    by_kind = {
        name: {k: per_turn(v, done, 2) for k, v in figures.items()}
        for name, figures in sorted(report["by_kind"].items())
    }
    total = sum(f["statements"] for f in report["by_kind"].values())
    transactions = sum(f["transactions"] for f in report["by_kind"].values())
    return {
        "turns": done,
        "errors": len(report["errors"]),
        "statements_per_turn": per_turn(total, done, 2),
        "transactions_per_turn": per_turn(transactions, done, 2),
        "fsyncs_per_turn": per_turn(fsyncs[per_client] - fsyncs[0], done, 2) if traced else None,
        "by_kind": by_kind,
    }


def _scratch_file() -> Path:
    handle, name = tempfile.mkstemp(prefix="ik-strace-", suffix=".txt")
    os.close(handle)
    return Path(name)


def _cell_ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    inbox, direct = results["inbox"], results["direct"]
    return {
        "cpu_ratio": ratio(inbox["cpu_us_per_turn"], direct["cpu_us_per_turn"]),
        "client_cpu_ratio": ratio(
            inbox["client_cpu_us_per_turn"], direct["client_cpu_us_per_turn"]
        ),
        "server_cpu_ratio": ratio(
            inbox.get("server_cpu_us_per_turn"), direct.get("server_cpu_us_per_turn")
        ),
        "throughput_ratio": ratio(inbox["turns_per_s"], direct["turns_per_s"]),
    }


CELL_FIGURES = (
    "turns_per_s",
    "statements_per_turn",
    "xact_commit_per_turn",
    "commit_records_per_turn",
    "db_wal_bytes_per_turn",
    "client_cpu_us_per_turn",
    "server_cpu_us_per_turn",
    "cpu_us_per_turn",
)


async def part_cpu(
    args: argparse.Namespace, probe: Probe | None, directory: Path
) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    for store in args.stores:
        for kind in args.kinds:
            for clients in args.clients:
                reps: list[dict[str, Any]] = []
                for rep in range(args.reps):
                    order = list(SIDES) if rep % 2 == 0 else list(reversed(SIDES))
                    results: dict[str, dict[str, Any]] = {}
                    for side in order:
                        label = f"{store} {kind} c={clients} rep {rep + 1} {side}"
                        load = machine()
                        warning = load_warning(label, load)
                        if warning:
                            print(warning, flush=True)
                        tag = f"{side[0]}{kind[0]}{clients}r{rep}x{os.getpid()}"
                        if store == "postgres":
                            assert probe is not None
                            await probe.conn.execute("CHECKPOINT")
                            url = store_url(args.dsn, SCHEMA)
                        else:
                            url = f"sqlite:///{directory / f'{tag}-{time.monotonic_ns()}.db'}"
                        cell = await cpu_cell(
                            probe if store == "postgres" else None,
                            url,
                            store,
                            side,
                            kind,
                            clients,
                            args.seconds,
                            tag,
                        )
                        others = cell.pop("others_cpu_share")
                        cell["machine"] = cell_machine(load, machine(), others)
                        warning = others_warning(label, others)
                        if warning:
                            print(warning, flush=True)
                        results[side] = cell
                    reps.append({**results, **_cell_ratios(results)})
                    r = reps[-1]
                    print(
                        f"{store:<8} {kind:<8} c={clients} rep {rep + 1}: direct"
                        f" {r['direct']['turns_per_s']}/s {r['direct']['cpu_us_per_turn']} us,"
                        f" inbox {r['inbox']['turns_per_s']}/s {r['inbox']['cpu_us_per_turn']} us"
                        f" (cpu {r['cpu_ratio']}x, client {r['client_cpu_ratio']}x)",
                        flush=True,
                    )
                cells.append(
                    {
                        "store": store,
                        "turn": kind,
                        "clients": clients,
                        **{
                            key: median([r[key] for r in reps])
                            for key in (
                                "cpu_ratio",
                                "client_cpu_ratio",
                                "server_cpu_ratio",
                                "throughput_ratio",
                            )
                        },
                        "median": {
                            side: {k: median([r[side].get(k) for r in reps]) for k in CELL_FIGURES}
                            for side in SIDES
                        },
                        "overloaded_cells": sum(
                            r[s]["machine"]["overloaded"] for r in reps for s in SIDES
                        ),
                        "reps": reps,
                    }
                )
    return cells


def _url_for(dsn: str, store: str, directory: Path, tag: str) -> Callable[[int], str]:
    if store == "postgres":
        return lambda _: store_url(dsn, SCHEMA)
    return lambda n: f"sqlite:///{directory / f'{tag}-{n}.db'}"


async def part_counts(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for store in args.stores:
        for kind in args.kinds:
            for clients in args.clients:
                entry: dict[str, Any] = {"store": store, "turn": kind, "clients": clients}
                for side in SIDES:
                    tag = f"n{side[0]}{kind[0]}{clients}x{os.getpid()}"
                    entry[side] = await count_run(
                        _url_for(args.dsn, store, directory, tag),
                        store,
                        side,
                        kind,
                        clients,
                        args.count_turns,
                        tag,
                    )
                out.append(entry)
    return out


async def part_parts(
    args: argparse.Namespace, probe: Probe | None, directory: Path
) -> list[dict[str, Any]]:
    """Each inbox operation alone, in a fresh process per store and repetition; medians."""
    out: list[dict[str, Any]] = []
    for store in args.stores:
        reps: list[dict[str, Any]] = []
        for rep in range(args.reps):
            tag = f"part{rep}x{os.getpid()}"
            spec: dict[str, Any] = {"mode": "parts", "store": store, "tag": tag}
            spec["calls"] = args.part_calls
            if store == "postgres":
                assert probe is not None
                spec["url"] = store_url(args.dsn, SCHEMA)
                spec["postmaster"] = probe.postmaster
            else:
                spec["url"] = f"sqlite:///{directory / f'{tag}.db'}"
            load = machine()
            warning = load_warning(f"{store} inbox operations rep {rep + 1}", load)
            if warning:
                print(warning, flush=True)
            proc = await start_child(spec)
            figures = await read_json(proc)
            await proc.wait()
            figures["machine"] = cell_machine(load, machine())
            reps.append(figures)
        summary: dict[str, Any] = {"store": store, "calls": args.part_calls}
        for name in PARTS:
            summary[name] = {
                key: median([r[name][key] for r in reps])
                for key in ("client_cpu_us", "server_cpu_us", "wall_ms")
            }
        summary["reps"] = reps
        out.append(summary)
        print(
            f"{store:<8} inbox operations: "
            + ", ".join(
                f"{n} {summary[n]['client_cpu_us']}+{summary[n]['server_cpu_us']} us" for n in PARTS
            ),
            flush=True,
        )
    return out


# ---------------------------------------------------------------- part 2: latency


async def part_latency(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for store in args.stores:
        reps: list[dict[str, Any]] = []
        for rep in range(args.reps):
            tag = f"lat{rep}x{os.getpid()}"
            if store == "postgres":
                url = store_url(args.dsn, SCHEMA)
            else:
                url = f"sqlite:///{directory / f'{tag}.db'}"
            load = machine()
            warning = load_warning(f"{store} latency rep {rep + 1}", load)
            if warning:
                print(warning, flush=True)
            proc = await start_child(
                {
                    "mode": "latency",
                    "store": store,
                    "url": url,
                    "tag": tag,
                    "rounds": args.latency_turns,
                }
            )
            timings = await read_json(proc)
            await proc.wait()
            figures: dict[str, Any] = {side: summary_ms(timings[side]) for side in LATENCY_SIDES}
            for side in LATENCY_SIDES[1:]:
                figures[f"{side}_median_ratio"] = ratio(
                    figures[side]["median_ms"], figures["direct"]["median_ms"]
                )
                figures[f"{side}_p95_ratio"] = ratio(
                    figures[side]["p95_ms"], figures["direct"]["p95_ms"]
                )
            figures["machine"] = cell_machine(load, machine())
            reps.append(figures)
            print(
                f"{store:<8} latency rep {rep + 1}: "
                + ", ".join(
                    f"{s} {figures[s]['median_ms']} / {figures[s]['p95_ms']} ms"
                    for s in LATENCY_SIDES
                ),
                flush=True,
            )
        summary: dict[str, Any] = {"store": store, "rounds": args.latency_turns}
        for side in LATENCY_SIDES:
            summary[side] = {
                k: median([r[side][k] for r in reps]) for k in ("median_ms", "p95_ms", "max_ms")
            }
        for side in LATENCY_SIDES[1:]:
            for what in ("median", "p95"):
                key = f"{side}_{what}_ratio"
                summary[key] = median([r[key] for r in reps])
        summary["reps"] = reps
        out.append(summary)
    return out


# ---------------------------------------------------------------- part 3: claims vs backlog


async def submit_all(
    agent: CompiledAgent, keys: Sequence[tuple[str, str]], chunk: int = 64
) -> None:
    for start in range(0, len(keys), chunk):
        await asyncio.gather(
            *(
                agent.submit(thread_id=t, turn_id=u, text=TEXT)
                for t, u in keys[start : start + chunk]
            )
        )


async def measure_claims(
    agent: CompiledAgent, store: Any, claims: int, pinned: bool
) -> dict[str, Any]:
    """``claims`` timed claims by one claimer holding up to ``HOLD`` of them (with ``pinned``,
    the first claim is held throughout and not counted in the window)."""
    inbox = store.inbox
    worker = "bench-claimer"
    held: deque[InboxRequest] = deque()
    times: list[float] = []
    head: float | None = None
    submitted = 0
    if pinned:
        began = time.perf_counter()
        found = await inbox.claim(worker, ttl=3600)
        head = time.perf_counter() - began
        assert found is not None
    for _ in range(claims):
        began = time.perf_counter()
        found = await inbox.claim(worker, ttl=3600)
        times.append(time.perf_counter() - began)
        if found is None:
            raise RuntimeError("the claimer found nothing to claim")
        held.append(found)
        if len(held) >= HOLD:
            old = held.popleft()
            await inbox.release(
                worker,
                old.thread_id,
                old.turn_id,
                retry_in=None,
                error_code="BENCH",
                error="given back by the benchmark",
            )
            submitted += 1
            await agent.submit(thread_id=old.thread_id, turn_id=f"again{submitted}", text=TEXT)
    return {
        "claims": claims,
        **summary_ms(times),
        "first_ms": round(times[0] * 1000, 3),
        "head_ms": None if head is None else round(head * 1000, 3),
    }


async def warm_claims(agent: CompiledAgent, store: Any) -> None:
    """Two requests submitted, claimed and given back before the backlog is filled, so the
    timed claims find the store's connections and statements ready."""
    await submit_all(agent, [("warm", "r0"), ("warm", "r1")])
    for _ in range(2):
        found = await store.inbox.claim("bench-warm", ttl=3600)
        assert found is not None
        await store.inbox.release(
            "bench-warm", found.thread_id, found.turn_id, retry_in=None, error="warm-up"
        )


def _keys(threads: int, per_thread: int, prefix: str) -> list[tuple[str, str]]:
    """Round by round: request ``k`` of every thread, then ``k + 1``."""
    return [(f"{prefix}{t}", f"r{k}") for k in range(per_thread) for t in range(threads)]


def claim_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    per_thread = max(1, args.backlog // args.claim_threads)
    cases: list[dict[str, Any]] = [
        {"case": "10 pending", "keys": _keys(10, 1, "small-"), "pinned": False},
        {
            "case": f"{per_thread * args.claim_threads} pending",
            "keys": _keys(args.claim_threads, per_thread, "big-"),
            "pinned": False,
        },
    ]
    if args.deep:
        deep = [("deep", f"r{k}") for k in range(args.backlog)] + _keys(10, 1, "other-")
        cases.append(
            {
                "case": f"{args.backlog} on one thread behind a running one",
                "keys": deep,
                "pinned": True,
            }
        )
    for case in cases:
        keys = case["keys"]
        case["pending"] = len(keys)
        case["threads"] = len({t for t, _ in keys})
    return cases


async def pg_claim_case(args: argparse.Namespace, case: dict[str, Any]) -> dict[str, Any]:
    conn = await asyncpg.connect(with_db(args.dsn, BENCH_DB))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{CLAIM_SCHEMA}" CASCADE')
    finally:
        await conn.close()
    url = store_url(args.dsn, CLAIM_SCHEMA)
    store: Any = await open_durability(url, setup=True)  # with the inbox role
    try:
        agent, _ = make_agent(store, "one_read", Committed())
        await warm_claims(agent, store)
        began = time.perf_counter()
        await submit_all(agent, case["keys"])
        filled = time.perf_counter() - began
        conn = await asyncpg.connect(with_db(args.dsn, BENCH_DB))
        try:
            await conn.execute(f'VACUUM ANALYZE "{CLAIM_SCHEMA}".inbox')
        finally:
            await conn.close()
        figures = await measure_claims(agent, store, args.claims, case["pinned"])
        recorder = Recorder()
        with recorder.installed():
            recorder.active = True
            claimed = await store.inbox.claim("bench-explain", ttl=3600)
            recorder.active = False
        call = next(c for c in recorder.calls if ".inbox_claim(" in c.query)
        if claimed is not None:
            await store.inbox.release(
                "bench-explain", claimed.thread_id, claimed.turn_id, retry_in=0.0
            )
        plan = await pg_plan(args.dsn, call.query, call.args)
    finally:
        await store.close()
    return {"fill_seconds": round(filled, 1), **figures, "plan": plan}


async def pg_plan(dsn: str, query: str, args: Sequence[Any]) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the claim statement in a transaction rolled back, with
    ``auto_explain``'s plans of the statements the claim function runs (when it loads)."""
    conn = await asyncpg.connect(with_db(dsn, BENCH_DB))
    notices: list[str] = []
    conn.add_log_listener(lambda _c, message: notices.append(str(message.message)))
    nested = True
    try:
        try:
            await conn.execute("LOAD 'auto_explain'")
            for setting in (
                "auto_explain.log_min_duration = 0",
                "auto_explain.log_analyze = on",
                "auto_explain.log_buffers = on",
                "auto_explain.log_timing = on",
                "auto_explain.log_nested_statements = on",
                "auto_explain.log_level = notice",
            ):
                await conn.execute(f"SET {setting}")
        except asyncpg.PostgresError:
            nested = False
        # Six times first, each rolled back: the session plans the function's statements
        # (catalog reads are buffers too), and plpgsql then uses the plans it keeps for the
        # rest of a session (after five runs, a generic plan if it is not costlier), as the
        # store's long-lived connections do.
        for explain in (False,) * 6 + (True,):
            transaction = conn.transaction()
            await transaction.start()
            try:
                if explain:
                    await asyncio.sleep(0.05)  # the notices of the warm-up have been read
                    notices.clear()
                    rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + query, *args)
                else:
                    await conn.fetch(query, *args)
            finally:
                await transaction.rollback()
        await asyncio.sleep(0.05)  # the notices arrive with the result; let them be read
    finally:
        await conn.close()
    text = "\n".join(str(r[0]) for r in rows)
    inner = [notice_plan(n) for n in notices if "Query Text:" in n]
    return {
        "statement": " ".join(query.split()),
        "plan": text,
        **explain_figures(text),
        "nested_plans": [p for p in inner if p is not None and ".inbox_claim(" not in p["query"]]
        if nested
        else None,
    }


async def sqlite_claim_case(
    args: argparse.Namespace, case: dict[str, Any], directory: Path, index: int
) -> dict[str, Any]:
    path = directory / f"claims-{index}.db"
    trace = SqliteTrace()
    with trace.installed():
        store: Any = await open_durability(f"sqlite:///{path}")  # with the inbox role
    try:
        agent, _ = make_agent(store, "one_read", Committed())
        await warm_claims(agent, store)
        began = time.perf_counter()
        await submit_all(agent, case["keys"])
        filled = time.perf_counter() - began
        figures = await measure_claims(agent, store, args.claims, case["pinned"])
        trace.active = True
        claimed = await store.inbox.claim("bench-explain", ttl=3600)
        trace.active = False
        if claimed is not None:
            await store.inbox.release(
                "bench-explain", claimed.thread_id, claimed.turn_id, retry_in=0.0
            )
    finally:
        await store.close()
    return {
        "fill_seconds": round(filled, 1),
        **figures,
        "plan": sqlite_plan(path, trace.statements),
    }


def _step(steps: Counter[str]) -> int:
    steps["vm"] += 1
    return 0  # go on


def sqlite_plan(path: Path, statements: Sequence[str]) -> dict[str, Any]:
    """``EXPLAIN QUERY PLAN`` of each statement of one claim, and the VM instructions its
    selects run now (a progress handler called at every instruction)."""
    conn = sqlite3.connect(str(path))
    out: list[dict[str, Any]] = []
    try:
        for statement in statements:
            if statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "PRAGMA")):
                continue
            rows = conn.execute("EXPLAIN QUERY PLAN " + statement).fetchall()
            depth: dict[int, int] = {0: -1}
            lines = []
            for node, parent, _, detail in rows:
                depth[node] = depth.get(parent, -1) + 1
                lines.append("  " * depth[node] + str(detail))
            entry: dict[str, Any] = {"statement": " ".join(statement.split()), "plan": lines}
            if statement.lstrip().upper().startswith("SELECT"):
                steps = Counter[str]()
                conn.set_progress_handler(functools.partial(_step, steps), 1)
                conn.execute(statement).fetchall()
                conn.set_progress_handler(None, 1)
                entry["vm_instructions"] = steps["vm"]
            out.append(entry)
    finally:
        conn.close()
    return {"statements": out}


async def part_claims(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for store in args.stores:
        for index, case in enumerate(claim_cases(args)):
            load = machine()
            label = f"{store} claims, {case['case']}"
            warning = load_warning(label, load)
            if warning:
                print(warning, flush=True)
            if store == "postgres":
                figures = await pg_claim_case(args, case)
            else:
                figures = await sqlite_claim_case(args, case, directory, index)
            entry = {
                "store": store,
                "case": case["case"],
                "pending": case["pending"],
                "threads": case["threads"],
                **figures,
                "machine": cell_machine(load, machine()),
            }
            out.append(entry)
            print(
                f"{label}: median {entry['median_ms']} ms, p95 {entry['p95_ms']} ms,"
                f" max {entry['max_ms']} ms ({case['pending']} submitted in"
                f" {entry['fill_seconds']} s)",
                flush=True,
            )
    return out


# ---------------------------------------------------------------- the run


async def setup(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", BENCH_DB):
            await conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await conn.close()
    conn = await asyncpg.connect(with_db(dsn, BENCH_DB))
    try:
        for schema in (SCHEMA, CLAIM_SCHEMA):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()
    store = await open_durability(store_url(dsn, SCHEMA), setup=True)
    await store.close()


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    started = machine()
    probe: Probe | None = None
    server: dict[str, Any] | None = None
    if "postgres" in args.stores:
        probe = await Probe.open(args.dsn)
        await setup(args.dsn)
        server = {
            "version": await probe.conn.fetchval("SHOW server_version"),
            "synchronous_commit": await probe.conn.fetchval("SHOW synchronous_commit"),
            "statements_counted_by": "pg_stat_statements"
            if probe.statements
            else "the client (pg_stat_statements not preloaded): asyncpg calls",
            "server_cpu_from": "/proc/<pid>/stat of the bench database's backends and the WAL"
            " writer, checkpointer and background writer"
            if probe.postmaster
            else "not measured (server not on this machine)",
        }
    try:
        cells = await part_cpu(args, probe, directory)
        counts = await part_counts(args, directory)
        parts = await part_parts(args, probe, directory)
        latency = await part_latency(args, directory)
        claims = await part_claims(args, directory)
    finally:
        if probe is not None:
            await probe.close()
    report: dict[str, Any] = {
        "benchmark": "inbox_turns",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.seconds < 4 or args.reps < 3,
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "server": server,
        "settings": {
            "seconds": args.seconds,
            "reps": args.reps,
            "clients": args.clients,
            "kinds": args.kinds,
            "count_turns": args.count_turns,
            "latency_turns": args.latency_turns,
            "claims": args.claims,
            "claims_held": HOLD,
            "backlog": args.backlog,
            "claim_threads": args.claim_threads,
            "inbox_worker": "in process, concurrency = clients, default claim_ttl and"
            " poll_interval; commit learnt through an in-process event sink",
            "direct": "agent.run per turn, the same sink",
            "processes": "one fresh process per cell, all clients in it",
        },
        "machine_at_start": started,
        "machine_at_end": machine(),
        "cpu": cells,
        "statements": counts,
        "parts": parts,
        "latency": latency,
        "claims": claims,
        "goals": {
            "cpu_ratio_max": 1.2,
            "latency_ratio_max": 1.3,
            "claim": "the same cost with 10 and with 10,000 pending requests",
        },
    }
    report["accounting"] = accounting(report)
    return report


def print_tables(report: dict[str, Any]) -> None:
    print("CPU per turn, inbox (submit + claim + run + commit) vs direct run; medians")
    columns = (
        ("turns/s", "turns_per_s"),
        ("stmts", "statements_per_turn"),
        ("xacts", "xact_commit_per_turn"),
        ("wal B", "db_wal_bytes_per_turn"),
        ("client us", "client_cpu_us_per_turn"),
        ("server us", "server_cpu_us_per_turn"),
        ("cpu us", "cpu_us_per_turn"),
    )
    print(
        f"{'store':<9}{'turn':<9}{'c':>2} {'side':<7}"
        + "".join(f"{t:>10}" for t, _ in columns)
        + f"{'cpu x':>8}{'client x':>9}{'turns x':>8}"
    )
    for cell in report["cpu"]:
        for side in SIDES:
            values = cell["median"][side]
            tail = ""
            if side == "inbox":
                tail = (
                    f"{table_cell(cell['cpu_ratio']):>8}{table_cell(cell['client_cpu_ratio']):>9}"
                    f"{table_cell(cell['throughput_ratio']):>8}"
                )
            print(
                f"{cell['store']:<9}{cell['turn']:<9}{cell['clients']:>2} {side:<7}"
                + "".join(f"{table_cell(values[k]):>10}" for _, k in columns)
                + tail
            )
    print(
        "cpu us = client + server (PostgreSQL), client (SQLite: the whole process); x = inbox /"
        f" direct within a repetition, median; goal cpu x <= {report['goals']['cpu_ratio_max']}"
    )
    print()
    print(
        "Statements per turn by what they do (a run of fixed size); SQLite: statements/transactions"
    )
    for entry in report["statements"]:
        for side in SIDES:
            figures = entry[side]
            parts = ", ".join(
                f"{name} {table_cell(f['statements'])}"
                + (f"/{table_cell(f['transactions'])}" if entry["store"] == "sqlite" else "")
                for name, f in figures["by_kind"].items()
            )
            fsyncs = figures.get("fsyncs_per_turn")
            print(
                f"{entry['store']:<9}{entry['turn']:<9}{entry['clients']:>2} {side:<7}"
                f" {table_cell(figures['statements_per_turn'])}: {parts}"
                + ("" if fsyncs is None else f"; fsyncs {table_cell(fsyncs)}")
            )
    print()
    print("Each inbox operation alone, per call (medians): client us + server us, wall ms")
    for entry in report["parts"]:
        print(
            f"{entry['store']:<9}"
            + ", ".join(
                f"{name} {table_cell(entry[name]['client_cpu_us'])}"
                f"+{table_cell(entry[name]['server_cpu_us'])} us"
                f" {table_cell(entry[name]['wall_ms'])} ms"
                for name in PARTS
            )
        )
    print("What the inbox's calls add to a turn (calls per turn x cost alone) vs inbox - direct")
    for entry in report["accounting"]:
        print(
            f"{entry['store']:<9}{entry['turn']:<9}{entry['clients']:>2}"
            f"  calls {entry['their_cpu_us_per_turn']} us of"
            f" {entry['measured_difference_us']} us; rest {entry['rest_us']} us"
        )
    print()
    print("Latency at 1 client, one read turn (ms; medians over repetitions)")
    print(f"{'store':<9}{'side':<16}{'median':>9}{'p95':>9}{'max':>9}{'x median':>10}{'x p95':>8}")
    for entry in report["latency"]:
        for side in LATENCY_SIDES:
            values = entry[side]
            tail = ""
            if side != "direct":
                tail = (
                    f"{table_cell(entry[f'{side}_median_ratio']):>10}"
                    f"{table_cell(entry[f'{side}_p95_ratio']):>8}"
                )
            print(
                f"{entry['store']:<9}{side:<16}{table_cell(values['median_ms']):>9}"
                f"{table_cell(values['p95_ms']):>9}{table_cell(values['max_ms']):>9}{tail}"
            )
    print(f"goal: x <= {report['goals']['latency_ratio_max']}")
    print()
    print("One claim vs the backlog (ms; claimer holding up to 4 claims)")
    print(f"{'store':<9}{'case':<44}{'median':>8}{'p95':>8}{'max':>9}{'first':>9}{'plan cost':>14}")
    for entry in report["claims"]:
        plan = entry["plan"]
        if entry["store"] == "postgres":
            cost = f"{plan['shared_hit']}+{plan['shared_read']} buf"
        else:
            steps = [s.get("vm_instructions") for s in plan["statements"]]
            cost = f"{next((s for s in steps if s is not None), '-')} vm"
        first = entry["first_ms"]
        print(
            f"{entry['store']:<9}{entry['case']:<44}{table_cell(entry['median_ms']):>8}"
            f"{table_cell(entry['p95_ms']):>8}{table_cell(entry['max_ms']):>9}"
            f"{table_cell(first):>9}{cost:>14}"
        )
    print(
        "plan cost: PostgreSQL shared buffers hit+read of EXPLAIN (ANALYZE, BUFFERS) of the claim"
        " statement; SQLite VM instructions of the claim's select; first: the first timed claim"
        " (deep case: the one after the running head, which sets the thread's backlog aside on"
        " PostgreSQL)"
    )
    start, end = report["machine_at_start"], report["machine_at_end"]
    flagged = sum(c["overloaded_cells"] for c in report["cpu"])
    total = sum(len(c["reps"]) * len(SIDES) for c in report["cpu"])
    shares = [
        r[s]["machine"]["others_cpu_share"] for c in report["cpu"] for r in c["reps"] for s in SIDES
    ]
    measured = [x for x in shares if x is not None]
    print(
        f"load {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']}"
        f" cores; other work used up to {max(measured, default=0):.0%} of the cores during a CPU"
        f" cell; {flagged} of {total} cells flagged (other work above {OTHERS_LIMIT:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    listed = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="a database for the monitoring link")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per CPU cell")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians reported")
    parser.add_argument("--stores", type=listed, default=["sqlite", "postgres"])
    parser.add_argument("--kinds", type=listed, default=list(KINDS))
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8])
    parser.add_argument("--count-turns", type=int, default=200, help="turns of a count run")
    parser.add_argument("--part-calls", type=int, default=500, help="calls per operation")
    parser.add_argument("--latency-turns", type=int, default=100, help="rounds per repetition")
    parser.add_argument("--claims", type=int, default=200, help="timed claims per case")
    parser.add_argument("--backlog", type=int, default=10_000, help="pending requests")
    parser.add_argument("--claim-threads", type=int, default=1000, help="threads of the backlog")
    parser.add_argument(
        "--no-deep", dest="deep", action="store_false", help="skip the one-thread backlog"
    )
    parser.add_argument("--dir", type=Path, help="for the SQLite files (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(json.loads(args.child)))
        return
    unknown = [k for k in args.kinds if k not in KINDS] + [
        s for s in args.stores if s not in ("sqlite", "postgres")
    ]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="ik-inbox-bench-", dir=args.dir) as tmp:
        report = asyncio.run(run(args, Path(tmp)))
    print()
    print_tables(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
