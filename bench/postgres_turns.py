"""PostgreSQL turn throughput, side by side with pgbench in one run (not a timed test).

    .venv/bin/python bench/postgres_turns.py [--dsn URL] [--seconds 10] [--reps 3]

For a turn without effects and a turn with one effect, at 1 and 8 clients, each repetition
runs four cells one after the other, each in a fresh process:

- ours: the store through its public API (``open_durability``, ``with_turn``, ``run_effect``,
  ``commit``), one thread per client, clients spread over up to one process per core;
- asyncpg: the Python floor, a bare asyncpg client sending the statements the store sent for
  one turn on one dedicated connection per client, in the same processes layout (see
  ``_floor``): what any asyncio client of asyncpg costs here;
- same SQL: pgbench sending the statements the store sent for one turn (recorded from the
  store in this run, same parameters, see ``_capture``);
- reference: pgbench running ``turn_1c.sql`` / ``turn_3c.sql`` from the reference directory.

Ratios (turns/s, and CPU per turn) are taken within each repetition and the medians reported.
Every cell records, from the server, per turn: transactions (``pg_stat_database``), WAL records,
full-page images, bytes and fsyncs (``pg_stat_wal``; of the cell's database with
``pg_walinspect``), commit records (``pg_walinspect``), statements (``pg_stat_statements`` when
preloaded, else counted on the client: the asyncpg calls of the timed window for ours, the
script's statements for pgbench), server CPU (``/proc`` of the cell's backends), client CPU
(``getrusage``), the load before and after and the share of the cores other work used during
the cell (a warning is printed when the 1-minute load before a cell exceeds the cores, or other
work took more than a quarter of them). Then: a replay (statements and WAL, expected
one statement and no WAL) and the per-turn time on a thread of 10 turns vs 10,000.

Writes ``bench/results/postgres_turns.json`` and prints a table. Loopback only; each cell ends
after ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pickle
import re
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _capture import Call, Recorder, Script, build_script
from _floor import Replayer
from _measure import (
    OTHERS_LIMIT,
    cell_machine,
    children_cpu,
    cpu_us_per_turn,
    load_warning,
    machine,
    machine_cpu,
    others_share,
    others_warning,
    per_turn,
    ratio,
    script_statements,
    self_cpu,
    table_cell,
)
from _payloads import STATE, Failed, failing, operation
from _server import Probe

from intention_kernel import KernelError
from intention_kernel.durability import open_durability

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "postgres_turns.json"
REFERENCE = Path(os.environ.get("IK_BENCH_REFERENCE", "/work/shared/bench/reference"))
DEFAULT_DSN = os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BENCH_DB = "ik_bench"
REF_DB = "ik_bench_ref"
SCHEMA = "ik_bench"
CPUS = os.cpu_count() or 1
KINDS = ((0, "no effect", "turn_1c.sql"), (1, "one effect", "turn_3c.sql"))
SIDES = ("ours", "asyncpg", "same_sql", "reference")


def with_db(dsn: str, db: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{db}"))


def store_url(dsn: str) -> str:
    url = with_db(dsn, BENCH_DB)
    return f"{url}{'&' if urlsplit(url).query else '?'}schema={SCHEMA}"


def _since(before: dict[int, int], now: dict[int, int]) -> dict[int, int]:
    """Statements by size sent since ``before`` (a store's group counters)."""
    return {
        size: count - before.get(size, 0)
        for size, count in now.items()
        if count > before.get(size, 0)
    }


def _summed(reports: list[dict[str, Any]], key: str) -> dict[int, int]:
    """The benchmark processes' statements by size, added up."""
    total: dict[int, int] = {}
    for report in reports:
        for size, count in report.get(key, {}).items():
            total[int(size)] = total.get(int(size), 0) + int(count)
    return dict(sorted(total.items()))


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------- ours: one child process


async def child(spec: dict[str, Any]) -> None:
    """Runs in a fresh process: seed each thread with one turn, say ``ready``, wait for ``go``,
    run turns for the given seconds, print the counts, the statements sent (asyncpg calls
    counted during the timed window) and this process's CPU."""
    if spec.get("floor"):
        await _floor_child(spec)
        return
    recorder = Recorder(keep=False)
    with recorder.installed():
        await _child(spec, recorder)


async def _child(spec: dict[str, Any], recorder: Recorder) -> None:
    store = await open_durability(spec["url"])
    op = operation(spec["effects"])
    threads: list[str] = spec["threads"]
    await asyncio.gather(*(store.with_turn(t, "seed", op) for t in threads))
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    seconds = float(line.split()[1])
    counts = [0] * len(threads)
    errors: list[str] = []
    groups_before = dict(store.commit_groups)  # type: ignore[attr-defined]
    acquires_before = dict(store.acquire_groups)  # type: ignore[attr-defined]
    started = time.monotonic()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    recorder.active = True
    deadline = started + seconds

    async def client(slot: int, thread: str) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                await store.with_turn(thread, f"t{n}", op)
            except KernelError as exc:
                errors.append(type(exc).__name__)
            counts[slot] = n

    await asyncio.gather(*(client(i, t) for i, t in enumerate(threads)))
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(resource.getrusage(resource.RUSAGE_SELF)) - cpu_seconds(usage)
    recorder.active = False
    groups = _since(groups_before, store.commit_groups)  # type: ignore[attr-defined]
    acquires = _since(acquires_before, store.acquire_groups)  # type: ignore[attr-defined]
    report = {"turns": sum(counts), "seconds": elapsed, "cpu": cpu, "errors": errors}
    counted = {"statements": recorder.count, "groups": groups, "acquires": acquires}
    print(json.dumps({**report, **counted}))
    sys.stdout.flush()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "exit"
    await store.close()


async def _floor_child(spec: dict[str, Any]) -> None:
    """The asyncpg floor in a fresh process, with the same protocol as ``child``."""
    calls, captured = pickle.loads(await asyncio.to_thread(Path(spec["calls"]).read_bytes))
    replayer = Replayer(calls, **captured)
    threads: list[str] = spec["threads"]
    conns = [await asyncpg.connect(spec["url"]) for _ in threads]
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    deadline = time.monotonic() + float(line.split()[1])
    counts = [0] * len(threads)
    started = time.monotonic()
    usage = resource.getrusage(resource.RUSAGE_SELF)

    async def client(slot: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1  # the thread holds its seed turn and turns t1 .. t(n-1): it loads n
            await replayer.turn(conns[slot], threads[slot], n)
            counts[slot] = n

    await asyncio.gather(*(client(i) for i in range(len(threads))))
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(resource.getrusage(resource.RUSAGE_SELF)) - cpu_seconds(usage)
    # Every replayed turn must have committed (a statement that silently did nothing would make
    # the floor look cheap): each thread holds its seed turn and the turns counted.
    stored = await conns[0].fetchval(
        f'SELECT count(*) FROM "{SCHEMA}".turns WHERE thread_id = ANY($1::text[])', threads
    )
    if stored != sum(counts) + len(threads):
        raise RuntimeError(f"the floor committed {stored} turns, expected {sum(counts)} + seeds")
    report = {"turns": sum(counts), "seconds": elapsed, "cpu": cpu, "errors": []}
    print(json.dumps({**report, "statements": len(calls) * sum(counts)}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "exit"
    for conn in conns:
        await conn.close()


async def ours_cell(
    probe: Probe,
    dsn: str,
    effects: int,
    clients: int,
    seconds: float,
    tag: str,
    floor: str | None = None,
) -> dict[str, Any]:
    """The store's cell, or with ``floor`` (the recorded calls' file) the asyncpg floor's."""
    procs = min(clients, CPUS)
    threads = [f"{tag}-{c}" for c in range(clients)]
    children = []
    for p in range(procs):
        spec = {"url": store_url(dsn), "effects": effects, "threads": threads[p::procs]}
        if floor is not None:
            spec = {"url": with_db(dsn, BENCH_DB), "threads": threads[p::procs], "floor": 1}
            spec["calls"] = floor
        children.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--child",
                json.dumps(spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        )
    for proc in children:
        assert proc.stdout is not None
        ready = (await proc.stdout.readline()).decode().strip()
        if ready != "ready":
            raise RuntimeError(f"a benchmark process did not start: {ready!r}")
    before = await probe.snapshot(BENCH_DB)
    sampler = probe.sampler(BENCH_DB)
    busy, mine = machine_cpu(), self_cpu()
    for proc in children:
        assert proc.stdin is not None
        proc.stdin.write(f"go {seconds}\n".encode())
        await proc.stdin.drain()
    reports = []
    for proc in children:
        assert proc.stdout is not None
        reports.append(json.loads(await proc.stdout.readline()))
    cell_cpu = sampler.stop() if sampler else None  # before the connections close
    busy_after, mine = machine_cpu(), self_cpu() - mine
    for proc in children:
        assert proc.stdin is not None
        proc.stdin.write(b"exit\n")
        await proc.stdin.drain()
        await proc.wait()
    await probe.wait_idle([BENCH_DB])
    after = await probe.snapshot(BENCH_DB)
    turns = sum(int(r["turns"]) for r in reports)
    elapsed = max(float(r["seconds"]) for r in reports)
    errors = [e for r in reports for e in r["errors"]]
    groups, acquires = _summed(reports, "groups"), _summed(reports, "acquires")
    out: dict[str, Any] = {
        "turns": turns,
        "turns_per_s": round(turns / elapsed, 1),
        "processes": procs,
        **({"commit_statements_by_size": groups} if groups else {}),
        **({"acquire_statements_by_size": acquires} if acquires else {}),
        "errors": len(errors),
        "client_cpu_us_per_turn": cpu_us_per_turn(sum(float(r["cpu"]) for r in reports), turns),
        "client_cpu_from": "getrusage(RUSAGE_SELF) of each benchmark process, timed window",
        "client_statements_per_turn": per_turn(sum(int(r["statements"]) for r in reports), turns),
        "client_statements_from": "asyncpg calls counted in the benchmark processes"
        if floor is None
        else "recorded statements sent per turn",
    }
    client = sum(float(r["cpu"]) for r in reports)
    ours = None if cell_cpu is None else client + cell_cpu + mine
    out["others_cpu_share"] = others_share(busy, busy_after, ours)
    out.update(await probe.delta(before, after, turns, cell_cpu, BENCH_DB))
    return out


# ---------------------------------------------------------------- pgbench cells


def _write(text: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="ik-bench-", delete=False) as f:
        f.write(text)
    return f.name


async def pgbench_cell(
    probe: Probe,
    db: str,
    dsn: str,
    script: str,
    variables: dict[str, str],
    clients: int,
    seconds: float,
    statements: int,
) -> dict[str, Any]:
    path = _write(script)
    defines: list[str] = []
    for name, value in variables.items():
        defines += ["-D", f"{name}={value}"]
    command = ["pgbench", "-n", "-M", "prepared", "-c", str(clients)]
    command += ["-j", str(min(clients, CPUS)), "-T", str(max(1, round(seconds)))]
    command += ["-f", path, *defines, with_db(dsn, db)]
    before = await probe.snapshot(db)
    sampler = probe.sampler(db)
    busy, mine, usage = machine_cpu(), self_cpu(), children_cpu()
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await proc.communicate()
    cpu = children_cpu() - usage
    cell_cpu = sampler.stop() if sampler else None
    busy_after, mine = machine_cpu(), self_cpu() - mine
    await probe.wait_idle([db])
    after = await probe.snapshot(db)
    os.unlink(path)
    text = stdout.decode()
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", text)
    done = re.search(r"number of transactions actually processed: (\d+)", text)
    failed = re.search(r"number of failed transactions: (\d+)", text)
    if proc.returncode != 0 or tps is None or done is None or "aborted" in text:
        raise RuntimeError(f"pgbench failed: {text[-400:]} {stderr.decode()[-1500:]}")
    turns = int(done.group(1))
    out: dict[str, Any] = {
        "turns": turns,
        "turns_per_s": round(float(tps.group(1)), 1),
        "errors": int(failed.group(1)) if failed else 0,
        "client_cpu_us_per_turn": cpu_us_per_turn(cpu, turns),
        "client_cpu_from": "getrusage(RUSAGE_CHILDREN) around the pgbench process",
        "client_statements_per_turn": statements,
        "client_statements_from": "statements in the pgbench script (one script run = one turn)",
        "others_cpu_share": others_share(
            busy, busy_after, None if cell_cpu is None else cpu + cell_cpu + mine
        ),
    }
    out.update(await probe.delta(before, after, turns, cell_cpu, db))
    return out


# ---------------------------------------------------------------- recording our statements


async def capture(dsn: str, effects: int) -> tuple[Script, list[Call], list[Call]]:
    """Record one steady-state turn of the store (the thread already holds committed and
    failed turns, so epoch, revision and revision + 1 differ) and a replay of it."""
    store = await open_durability(store_url(dsn))
    thread = f"cap{effects}x{os.getpid()}"
    op = operation(effects)
    for i in range(3):
        await store.with_turn(thread, f"capseed{i}", op)
    for i in range(4):
        with contextlib.suppress(Failed):
            await store.with_turn(thread, f"capfail{i}", failing)
    recorder = Recorder()
    with recorder.installed():
        recorder.active = True
        await store.with_turn(thread, "capturn", op)
        await asyncio.sleep(0.2)  # anything the turn left running in the background
        turn_calls, recorder.calls = recorder.calls, []
        await store.with_turn(thread, "capturn", op)
        await asyncio.sleep(0.2)
        recorder.active = False
        replay_calls = recorder.calls
    await store.close()
    conn = await asyncpg.connect(with_db(dsn, BENCH_DB))
    try:
        script = await build_script(
            conn, turn_calls, thread_id=thread, turn_id="capturn", loaded_revision=3
        )
    finally:
        await conn.close()
    return script, turn_calls, replay_calls


CAPTURED = {"thread_id": "", "turn_id": "capturn", "loaded_revision": 3}


def _floor_file(calls: list[Call]) -> str:
    """The recorded turn for the floor's processes (rows as dicts: records do not pickle)."""
    plain = [
        Call(
            c.method,
            c.query,
            c.args,
            dict(c.result) if c.method == "fetchrow" and c.result else None,
        )
        for c in calls
    ]
    thread = next(c.args[0] for c in calls if c.args)
    with tempfile.NamedTemporaryFile(suffix=".pickle", prefix="ik-floor-", delete=False) as f:
        f.write(pickle.dumps((plain, {**CAPTURED, "thread_id": thread})))
    return f.name


async def seed_threads(dsn: str, effects: int, threads: list[str]) -> None:
    store = await open_durability(store_url(dsn))
    try:
        for thread in threads:
            await store.with_turn(thread, "seed", operation(effects))
    finally:
        await store.close()


# ---------------------------------------------------------------- setup


async def setup(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for db in (BENCH_DB, REF_DB):
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", db):
                await conn.execute(f'CREATE DATABASE "{db}"')
    finally:
        await conn.close()
    conn = await asyncpg.connect(with_db(dsn, BENCH_DB))
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    finally:
        await conn.close()
    store = await open_durability(store_url(dsn), setup=True)
    await store.close()
    conn = await asyncpg.connect(with_db(dsn, REF_DB))
    try:
        await conn.execute((REFERENCE / "schema.sql").read_text())
        state = json.dumps({"version": 1, "facts": STATE})
        for i in range(1, 33):
            await conn.execute("INSERT INTO threads (thread_id) VALUES ($1)", i)
            await conn.execute("INSERT INTO checkpoints VALUES ($1, 0, $2::jsonb)", i, state)
            await conn.execute("INSERT INTO counters (id) VALUES ($1)", i)
    finally:
        await conn.close()


async def checkpoint(probe: Probe) -> None:
    """Every cell starts right after a checkpoint, so full-page images hit each alike."""
    await probe.conn.execute("CHECKPOINT")


# ---------------------------------------------------------------- replay and thread length


async def replay_cost(probe: Probe, dsn: str, replays: int) -> dict[str, Any]:
    store = await open_durability(store_url(dsn))
    op = operation(0)
    await store.with_turn("replay", "done", op)
    await asyncio.sleep(0.5)  # the WAL writer flushes the turn's asynchronous lease release
    before = await probe.snapshot(BENCH_DB)
    for _ in range(replays):
        await store.with_turn("replay", "done", op)
    await store.close()
    await probe.wait_idle([BENCH_DB])
    after = await probe.snapshot(BENCH_DB)
    return {"replays": replays, **(await probe.delta(before, after, replays, None, BENCH_DB))}


async def thread_length(dsn: str, long: int, sample: int, rounds: int) -> dict[str, Any]:
    """Per-turn time on a thread with 10 committed turns vs one with ``long``, alternating
    rounds so that load changes hit both alike; the median round of each is reported."""
    store = await open_durability(store_url(dsn))
    op = operation(0)
    tag = f"len{os.getpid()}"
    for i in range(10):
        await store.with_turn(f"{tag}-short", f"fill{i}", op)
    for i in range(long):
        await store.with_turn(f"{tag}-long", f"fill{i}", op)
    timings: dict[str, list[float]] = {"short": [], "long": []}
    for r in range(rounds):
        for name in ("short", "long"):
            started = time.perf_counter()
            for i in range(sample):
                await store.with_turn(f"{tag}-{name}", f"sample{r}-{i}", op)
            timings[name].append((time.perf_counter() - started) / sample)
    await store.close()
    short, long_ = statistics.median(timings["short"]), statistics.median(timings["long"])
    return {
        "short_turns": 10,
        "long_turns": long,
        "sample_turns_per_round": sample,
        "rounds": rounds,
        "ms_per_turn_short": round(short * 1000, 3),
        "ms_per_turn_long": round(long_ * 1000, 3),
        "ratio": round(long_ / short, 3),
    }


# ---------------------------------------------------------------- the run


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    probe = await Probe.open(args.dsn)
    server = {
        "version": await probe.conn.fetchval("SHOW server_version"),
        **{
            name: await probe.conn.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_level")
        },
        "statements_counted_by": (
            "pg_stat_statements"
            if probe.statements
            else "the client (pg_stat_statements not preloaded): asyncpg calls for ours,"
            " script statements for pgbench"
        ),
        "commit_records_counted_by": "pg_walinspect" if probe.walinspect else "not counted",
        "server_cpu_from": (
            "/proc/<pid>/stat of the cell's backends and the WAL writer, checkpointer and"
            " background writer"
            if probe.postmaster
            else "not measured (server not on this machine)"
        ),
    }
    started_load = machine()
    await setup(args.dsn)
    scripts: dict[int, Script] = {}
    recorded: dict[int, dict[str, Any]] = {}
    replay_calls: list[Call] = []
    floors: dict[int, str] = {}
    for effects, _, _ in KINDS:
        script, calls, replay_calls = await capture(args.dsn, effects)
        scripts[effects] = script
        floors[effects] = _floor_file(calls)
        recorded[effects] = {
            "statements": len(calls),
            "sql": [" ".join(c.query.split()) for c in calls],
            "pgbench_script": script.text,
        }
    cells: list[dict[str, Any]] = []
    for effects, kind, reference in KINDS:
        for clients in args.clients:
            reps: list[dict[str, Any]] = []
            for rep in range(args.reps):
                tag = f"{'e' if effects else 'p'}{clients}r{rep}x{os.getpid()}"
                results: dict[str, dict[str, Any]] = {}
                order = list(SIDES)
                order = order[rep % len(order) :] + order[: rep % len(order)]
                for side in order:
                    load = machine()
                    warning = load_warning(f"{kind} c={clients} rep {rep + 1} {side}", load)
                    if warning:
                        print(warning, flush=True)
                    await checkpoint(probe)
                    if side == "ours":
                        cell = await ours_cell(probe, args.dsn, effects, clients, args.seconds, tag)
                    elif side == "asyncpg":
                        floor_tag = f"{tag}-apg"
                        await seed_threads(
                            args.dsn, effects, [f"{floor_tag}-{c}" for c in range(clients)]
                        )
                        cell = await ours_cell(
                            probe,
                            args.dsn,
                            effects,
                            clients,
                            args.seconds,
                            floor_tag,
                            floor=floors[effects],
                        )
                    elif side == "same_sql":
                        prefix = f"{tag}-pgb-"
                        await seed_threads(
                            args.dsn, effects, [f"{prefix}{c}" for c in range(clients)]
                        )
                        variables = {**scripts[effects].variables, "tp": prefix, "n": "0"}
                        cell = await pgbench_cell(
                            probe,
                            BENCH_DB,
                            args.dsn,
                            scripts[effects].text,
                            variables,
                            clients,
                            args.seconds,
                            scripts[effects].statements,
                        )
                    else:
                        text = (REFERENCE / reference).read_text()
                        cell = await pgbench_cell(
                            probe,
                            REF_DB,
                            args.dsn,
                            text,
                            {},
                            clients,
                            args.seconds,
                            script_statements(text),
                        )
                    _statement_source(cell, probe.statements)
                    others = cell.pop("others_cpu_share")
                    cell["machine"] = cell_machine(load, machine(), others)
                    warning = others_warning(f"{kind} c={clients} rep {rep + 1} {side}", others)
                    if warning:
                        print(warning, flush=True)
                    results[side] = cell
                reps.append({**results, **_ratios(results)})
                print(_rep_line(kind, clients, rep, reps[-1]), flush=True)
            cells.append(_summary(kind, reference, clients, reps))
    for path in floors.values():
        os.unlink(path)
    replay = await replay_cost(probe, args.dsn, args.replays)
    replay["round_trips_counted_on_client"] = len(replay_calls)
    length = await thread_length(args.dsn, args.long_thread, args.length_sample, 5)
    await probe.close()
    return {
        "benchmark": "postgres_turns",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.seconds < 10 or args.reps < 3,
        "settings": {
            "seconds": args.seconds,
            "reps": args.reps,
            "clients": args.clients,
            "pgbench": "-n -M prepared, -j = min(clients, cores)",
            "ours": "one thread per client, clients over min(clients, cores) processes",
            "asyncpg": "as ours: one dedicated connection per client, no library code",
            "checkpoint_before_each_cell": True,
        },
        "server": server,
        "machine_at_start": started_load,
        "machine_at_end": machine(),
        "cells": cells,
        "replay": replay,
        "thread_length": length,
        "recorded_turns": {("one_effect" if e else "no_effect"): r for e, r in recorded.items()},
        "goals": {
            "ratio_vs_reference_c8": 0.7,
            "ratio_vs_same_sql_c8": 0.8,
            "thread_length_ratio_max": 1.1,
            "replay_statements": 1,
            "replay_wal_bytes": 0,
        },
    }


def _statement_source(cell: dict[str, Any], server: bool) -> None:
    """Statements per turn from ``pg_stat_statements`` when the server has it, else the
    client's count; the source is named in the cell."""
    if server and cell.get("statements_per_turn") is not None:
        cell["statements_from"] = "pg_stat_statements"
    else:
        cell["statements_per_turn"] = cell["client_statements_per_turn"]
        cell["statements_from"] = "client: " + cell["client_statements_from"]


def _cpu_per_turn(cell: dict[str, Any]) -> float | None:
    client, server = cell.get("client_cpu_us_per_turn"), cell.get("server_cpu_us_per_turn")
    return None if client is None or server is None else round(client + server, 1)


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """ours / the other side, within one repetition: throughput, and CPU per turn (client +
    server: above 1 means ours costs more)."""
    for cell in results.values():
        cell["cpu_us_per_turn"] = _cpu_per_turn(cell)
    ours = results["ours"]
    out: dict[str, float | None] = {}
    for side in SIDES[1:]:
        out[f"ratio_vs_{side}"] = ratio(ours["turns_per_s"], results[side]["turns_per_s"])
        out[f"cpu_ratio_vs_{side}"] = ratio(
            ours["cpu_us_per_turn"], results[side]["cpu_us_per_turn"]
        )
    floor, reference = results["asyncpg"]["turns_per_s"], results["reference"]["turns_per_s"]
    out["asyncpg_vs_reference"] = ratio(floor, reference)
    return out


PER_TURN = (
    "statements_per_turn",
    "xact_commit_per_turn",
    "commit_records_per_turn",
    "wal_sync_per_turn",
    "wal_records_per_turn",
    "wal_fpi_per_turn",
    "wal_bytes_per_turn",
    "db_wal_records_per_turn",
    "db_wal_bytes_per_turn",
    "db_wal_fpi_per_turn",
    "commit_records_all_per_turn",
    "statement_wal_bytes_per_turn",
    "client_statements_per_turn",
    "client_cpu_us_per_turn",
    "server_cpu_us_per_turn",
    "cpu_us_per_turn",
    "server_cpu_all_us_per_turn",
)


def _summary(kind: str, reference: str, clients: int, reps: list[dict[str, Any]]) -> dict[str, Any]:
    median: dict[str, Any] = {}
    for side in SIDES:
        median[side] = {
            key: _median([r[side].get(key) for r in reps]) for key in ("turns_per_s", *PER_TURN)
        }
    return {
        "turn": kind,
        "clients": clients,
        "reference": reference,
        **{
            f"{what}_vs_{side}": _median([r[f"{what}_vs_{side}"] for r in reps])
            for what in ("ratio", "cpu_ratio")
            for side in SIDES[1:]
        },
        "asyncpg_vs_reference": _median([r["asyncpg_vs_reference"] for r in reps]),
        "overloaded_cells": sum(r[s]["machine"]["overloaded"] for r in reps for s in SIDES),
        "median": median,
        "reps": reps,
    }


def _rep_line(kind: str, clients: int, rep: int, r: dict[str, Any]) -> str:
    return (
        f"{kind:<10} c={clients} rep {rep + 1}: ours {r['ours']['turns_per_s']}/s,"
        f" asyncpg {r['asyncpg']['turns_per_s']}/s ({r['ratio_vs_asyncpg']}x),"
        f" same SQL {r['same_sql']['turns_per_s']}/s ({r['ratio_vs_same_sql']}x),"
        f" reference {r['reference']['turns_per_s']}/s ({r['ratio_vs_reference']}x)"
    )


def _wal(values: dict[str, Any], key: str) -> Any:
    """WAL of the cell's database (``pg_walinspect``), else of the whole cluster."""
    mine = values.get(f"db_{key}")
    return mine if mine is not None else values.get(key)


def print_table(report: dict[str, Any]) -> None:
    columns: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("turns/s", lambda v: v["turns_per_s"]),
        ("stmts", lambda v: v["statements_per_turn"]),
        ("xacts", lambda v: v["xact_commit_per_turn"]),
        ("commit rec", lambda v: v["commit_records_per_turn"]),
        ("wal sync", lambda v: v["wal_sync_per_turn"]),
        ("wal rec", lambda v: _wal(v, "wal_records_per_turn")),
        ("wal B", lambda v: _wal(v, "wal_bytes_per_turn")),
        ("fpi", lambda v: _wal(v, "wal_fpi_per_turn")),
        ("client us", lambda v: v["client_cpu_us_per_turn"]),
        ("server us", lambda v: v["server_cpu_us_per_turn"]),
        ("cpu us", lambda v: v["cpu_us_per_turn"]),
    ]
    header = f"{'turn':<11}{'c':>3} {'side':<10}" + "".join(f"{t:>11}" for t, _ in columns)
    print(header + f"{'ratio':>8}{'cpu ratio':>10}")
    for cell in report["cells"]:
        for side in SIDES:
            values = cell["median"][side]
            shown, cpu = "", ""
            if side != "ours":
                shown = table_cell(cell[f"ratio_vs_{side}"])
                cpu = table_cell(cell[f"cpu_ratio_vs_{side}"])
            print(
                f"{cell['turn']:<11}{cell['clients']:>3} {side:<10}"
                + "".join(f"{table_cell(get(values)):>11}" for _, get in columns)
                + f"{shown:>8}{cpu:>10}"
            )
    server = report["server"]
    print(
        "per turn, medians over repetitions; ratio = ours / side (turns/s), cpu ratio = ours /"
        " side (client + server CPU per turn: above 1, ours costs more)"
    )
    print(
        f"statements from {server['statements_counted_by']}; transactions from"
        " pg_stat_database.xact_commit; commit records and WAL of the cell's database from"
        f" {server['commit_records_counted_by']}; WAL fsyncs from pg_stat_wal.wal_sync (whole"
        f" cluster); server CPU from {server['server_cpu_from']}"
    )
    floor = ", ".join(
        f"{c['turn']} c={c['clients']}: {table_cell(c['asyncpg_vs_reference'])}x"
        for c in report["cells"]
    )
    print(f"the asyncpg floor against the reference (turns/s): {floor}")
    start, end = report["machine_at_start"], report["machine_at_end"]
    overloaded = sum(c["overloaded_cells"] for c in report["cells"])
    total = len(report["cells"]) * len(SIDES) * report["settings"]["reps"]
    shares = [
        r[side]["machine"]["others_cpu_share"]
        for c in report["cells"]
        for r in c["reps"]
        for side in SIDES
    ]
    measured = [x for x in shares if x is not None]
    print(
        f"load {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']}"
        f" cores; other work used up to {max(measured, default=0):.0%} of the cores during a"
        f" cell; {overloaded} of {total} cells flagged (other work above {OTHERS_LIMIT:.0%})"
    )
    replay = report["replay"]
    print(
        f"replay: {table_cell(replay.get('statements_per_turn'))} statement(s) on the server,"
        f" {replay['round_trips_counted_on_client']} on the client,"
        f" {table_cell(replay.get('db_wal_records_per_turn'))} WAL records"
        f" ({table_cell(replay.get('db_wal_bytes_per_turn'))} bytes) in the bench database and"
        f" {table_cell(replay.get('commit_records_per_turn'))} commit records per replay"
    )
    length = report["thread_length"]
    print(
        f"thread length 10 vs {length['long_turns']}: {length['ms_per_turn_short']} vs"
        f" {length['ms_per_turn_long']} ms per turn (ratio {length['ratio']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="a database for the monitoring link")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per cell")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians reported")
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8])
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--long-thread", type=int, default=10_000)
    parser.add_argument("--length-sample", type=int, default=40, help="turns per round")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(json.loads(args.child)))
        return
    report = asyncio.run(run(args))
    print()
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
