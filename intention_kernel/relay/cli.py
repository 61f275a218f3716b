"""``relay_main(argv)``: the outbox relay command line (mounted as ``intention-kernel outbox``).

Commands::

    relay     --store URL --sink URL [--relay-id ID] [--batch-size N] [--claim-ttl S]
              [--max-attempts N] [--poll-interval S] [--once]
    check-sink --sink URL            validate a sink URL (and its extra) without publishing
    stats     --store URL            pending / claimed / dead / delivered / oldest age
    dead      --store URL [--limit N]
    requeue   --store URL [--position N ...] [--thread-id T]
    prune     --store URL --older-than AGE   (e.g. 7d, 12h, 30m, 90s)

Exit codes: 0 ok, 2 refused configuration (unknown sink, malformed URL, missing extra).
``relay`` stops gracefully on SIGTERM or SIGINT: the current round finishes, the rest of the
batch is released for other relays.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import re
import signal
import sys
from collections.abc import Sequence

from ..contracts.errors import ConfigurationError, KernelError
from ._backoff import Backoff
from ._relay import OutboxRelay
from ._sources import open_source
from .sinks import open_sink

__all__ = ["parse_age", "relay_main"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``"7d"`` -> seconds. Plain numbers are seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise ConfigurationError("an age looks like 90s, 30m, 12h or 7d", context={"age": text})
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="intention-kernel outbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("relay", help="deliver the outbox to a sink until stopped")
    run.add_argument("--store", required=True, help="store URL")
    run.add_argument("--sink", required=True, help="sink URL (see docs/relay.md)")
    run.add_argument("--relay-id", default=None)
    run.add_argument("--batch-size", type=int, default=100)
    run.add_argument("--claim-ttl", type=float, default=30.0, help="seconds")
    run.add_argument("--max-attempts", type=int, default=10)
    run.add_argument("--poll-interval", type=float, default=1.0, help="seconds")
    run.add_argument("--max-backoff", type=float, default=60.0, help="seconds")
    run.add_argument("--once", action="store_true", help="deliver one batch and exit")

    check = commands.add_parser("check-sink", help="validate a sink URL")
    check.add_argument("--sink", required=True)

    for name, text in (("stats", "delivery backlog"), ("dead", "list dead-lettered events")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--store", required=True)
        if name == "dead":
            sub.add_argument("--limit", type=int, default=100)

    requeue = commands.add_parser("requeue", help="make dead-lettered events pending again")
    requeue.add_argument("--store", required=True)
    requeue.add_argument("--position", type=int, action="append", default=None)
    requeue.add_argument("--thread-id", default=None)

    prune = commands.add_parser("prune", help="delete delivered events older than an age")
    prune.add_argument("--store", required=True)
    prune.add_argument("--older-than", required=True, type=str)
    return parser


def relay_main(argv: Sequence[str] | None = None) -> int:
    """Run the outbox command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        return asyncio.run(_dispatch(args))
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigurationError) else 1


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "check-sink":
        sink = open_sink(args.sink)
        await sink.close()
        print("ok")
        return 0
    if args.command == "relay":
        return await _relay(args)
    async with open_source(args.store) as source:
        if args.command == "stats":
            stats = await source.outbox_stats()
            print(json.dumps(dataclasses.asdict(stats)))
        elif args.command == "dead":
            for stored in await source.dead_letters(limit=args.limit):
                print(stored.model_dump_json())
        elif args.command == "requeue":
            print(await source.requeue(args.position, thread_id=args.thread_id))
        elif args.command == "prune":
            print(await source.prune(parse_age(args.older_than)))
    return 0


async def _relay(args: argparse.Namespace) -> int:
    sink = open_sink(args.sink)  # refused here, before touching the store
    try:
        async with open_source(args.store) as source:
            relay = OutboxRelay(
                source,
                sink,
                relay_id=args.relay_id,
                batch_size=args.batch_size,
                claim_ttl=args.claim_ttl,
                max_attempts=args.max_attempts,
                poll_interval=args.poll_interval,
                backoff=Backoff(maximum=args.max_backoff),
            )
            if args.once:
                report = await relay.run_once()
                print(json.dumps(dataclasses.asdict(report)))
                return 0
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, relay.stop)
            logging.getLogger("intention_kernel.relay").info("relay %s started", relay.relay_id)
            await relay.run()
            logging.getLogger("intention_kernel.relay").info(
                "relay %s stopped after %d events", relay.relay_id, relay.stats.delivered
            )
            return 0
    finally:
        await sink.close()
