"""Client CPU per turn of the stores, and where it goes: a profile of the library's Python side.

    .venv/bin/python bench/profile_turns.py [--store sqlite|postgres|both] [--turns 2000]
        [--clients 8] [--effects 0|1|both] [--repeat 1] [--profile] [--top 30] [--dsn URL]

Runs ``--turns`` turns (after a warm-up) through the public API (``open_durability``,
``with_turn``, ``run_effect``, ``commit``, with the payloads of ``bench/_payloads.py``) spread
over ``--clients`` asyncio tasks, one thread each, in this one process, and prints the process
CPU time (``getrusage``: the event loop, the SQLite worker thread, asyncpg) per turn, the
smallest and the median of ``--repeat`` runs, and the user part alone (system time is mostly
the kernel's side of fsync and sockets, which varies with the machine's I/O). This is
less noisy than the throughput benchmarks on a busy machine: it counts CPU, not wall time.
With ``--profile`` the timed turns run under ``cProfile`` (thread CPU time, on the event
loop's thread and on SQLite's worker thread, added up) and the top functions by own time and
by cumulative time are printed (profiling slows Python code, so compare CPU figures from runs
without it).

SQLite uses a fresh file under a temporary directory; PostgreSQL uses ``--dsn`` (default
``$IK_POSTGRES_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``) with its own schema
``ik_prof`` (created on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _payloads import operation

from intention_kernel.durability import open_durability

DEFAULT_DSN = os.environ.get("IK_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def cpu_now() -> tuple[float, float]:
    """(user + system, user) CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_utime


async def run(
    url: str,
    effects: int,
    clients: int,
    turns: int,
    profile: cProfile.Profile | None,
    profiles: list[cProfile.Profile],
) -> tuple[float, float]:
    """CPU seconds per turn (all, user only) for ``turns`` turns over ``clients`` tasks (after
    a warm-up)."""
    store = await open_durability(url, setup=True) if "postgres" in url else None
    if store is None:
        store = await open_durability(url)
    op = operation(effects)
    tag = os.urandom(4).hex()
    names = [f"prof-{tag}-{effects}-{i}" for i in range(clients)]
    per_client = max(1, turns // clients)

    async def client(thread: str, start: int, count: int) -> None:
        for n in range(start, start + count):
            await store.with_turn(thread, f"t{n}", op)

    warm = max(20, per_client // 10)
    await asyncio.gather(*(client(t, 0, warm) for t in names))
    # SQLite runs its statements on one worker thread: profiled there too (cProfile follows
    # one thread), and the two profiles are added up.
    worker: Any = getattr(store, "_db", None)  # SQLite: its jobs run on the worker thread
    side = cProfile.Profile(time.thread_time) if profile and worker is not None else None
    cpu = cpu_now()
    if profile is not None:
        if side is not None:
            await worker.read(lambda conn: side.enable())
        profile.enable()
    await asyncio.gather(*(client(t, warm, per_client) for t in names))
    if profile is not None:
        profile.disable()
        if side is not None:
            await worker.read(lambda conn: side.disable())
            side.create_stats()
            profiles.append(side)
    now = cpu_now()
    await store.close()
    turns_run = per_client * clients
    return (now[0] - cpu[0]) / turns_run, (now[1] - cpu[1]) / turns_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--effects", choices=("0", "1", "both"), default="both")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (min, median)")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    stores = ("sqlite", "postgres") if args.store == "both" else (args.store,)
    kinds = (0, 1) if args.effects == "both" else (int(args.effects),)
    sep = "&" if "?" in args.dsn else "?"
    with tempfile.TemporaryDirectory(prefix="ik-prof-") as tmp:
        for store in stores:
            for effects in kinds:
                url = (
                    f"sqlite:///{Path(tmp) / f'prof-{effects}.db'}"
                    if store == "sqlite"
                    else f"{args.dsn}{sep}schema=ik_prof"
                )
                # CPU time of the profiled thread, not wall time (waits are not work).
                profile = cProfile.Profile(time.thread_time) if args.profile else None
                extra: list[cProfile.Profile] = []
                runs = [
                    asyncio.run(run(url, effects, args.clients, args.turns, profile, extra))
                    for _ in range(max(1, args.repeat))
                ]
                total = [r[0] * 1e6 for r in runs]
                user = [r[1] * 1e6 for r in runs]
                print(
                    f"{store:8} effects={effects} clients={args.clients}: "
                    f"{min(total):7.1f} us client CPU per turn, {min(user):7.1f} us of it user "
                    f"(min of {len(runs)}; medians {statistics.median(total):.1f}, "
                    f"{statistics.median(user):.1f})" + (" (profiled)" if profile else "")
                )
                if profile is not None:
                    stats: Any = pstats.Stats(profile, *extra)
                    stats.sort_stats("tottime").print_stats(args.top)
                    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
