"""``outbox relay|check-sink|stats|dead|requeue|prune``: deliver a store's outbox and look after
its backlog (see ``docs/relay.md``).

Why these live with the other commands: an operator names the store the same way
(``--store``/``IK_STORE``), reads the same ``--json`` and gets the same exit codes whether
they prune turns or delivered events.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated, Any

import typer

from ..contracts.durability import DurabilityStore
from ..contracts.outbox import OutboxSource, Partition
from ..relay import Backoff, BatchReport, OutboxRelay, RelayStats, open_sink
from ._common import (
    CliError,
    ExitCode,
    JsonOpt,
    OlderThanOpt,
    StoreOpt,
    emit,
    log_to_stderr,
    open_store,
    out,
    parse_duration,
    print_fields,
    print_table,
    run,
)

__all__ = ["outbox_app", "outbox_source", "register"]

outbox_app = typer.Typer(
    help="The outbox relay: deliver committed events to a sink; inspect, requeue and prune.",
    no_args_is_help=True,
)

SinkOpt = Annotated[
    str,
    typer.Option(
        "--sink",
        help="Sink URL: stdout://, file:///..., nats://, redis://, webhook+https://.",
        show_default=False,
    ),
]

RELAY_POOL_SIZE = 4
"""Connections a relay may use on PostgreSQL (claims and marks run while a batch publishes)."""


def register(app: typer.Typer) -> None:
    outbox_app.command("relay")(relay)
    outbox_app.command("check-sink")(check_sink)
    outbox_app.command("stats")(stats)
    outbox_app.command("dead")(dead)
    outbox_app.command("requeue")(requeue)
    outbox_app.command("prune")(prune)
    app.add_typer(outbox_app, name="outbox")


def outbox_source(store: DurabilityStore) -> OutboxSource:
    """The store as a relay's source; a store without delivery state cannot be relayed."""
    if not isinstance(store, OutboxSource):
        raise CliError(
            "NOT_AN_OUTBOX_SOURCE",
            f"the {type(store).__name__} store does not track outbox deliveries",
            ExitCode.STORE,
        )
    return store


def relay(
    sink: SinkOpt,
    store: StoreOpt = None,
    relay_id: Annotated[
        str | None, typer.Option("--relay-id", help="Name in claims and logs (default: random).")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, max=10_000)] = 100,
    claim_ttl: Annotated[
        float, typer.Option("--claim-ttl", help="Seconds a claim lasts if this relay dies.")
    ] = 30.0,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", min=1, help="Failed attempts before dead letter.")
    ] = 10,
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", help="Seconds between polls when idle.")
    ] = 1.0,
    max_backoff: Annotated[
        float, typer.Option("--max-backoff", help="Longest retry delay, in seconds.")
    ] = 60.0,
    once: Annotated[bool, typer.Option("--once", help="Deliver one batch and exit.")] = False,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition",
            help="i/N: serve share i of N relays (a lease; a stopped relay's share moves on).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Deliver the outbox to a sink until stopped (or one batch with --once).

    SIGTERM or SIGINT stop it gracefully: the current round finishes and the rest of the batch
    is released for other relays (and a --partition lease is given up).
    """

    async def body() -> BatchReport | RelayStats:
        share = None if partition is None else Partition.parse(partition)
        opened_sink = open_sink(sink)  # refused here, before touching the store
        try:
            async with open_store(store, pool_size=RELAY_POOL_SIZE) as opened:
                worker = OutboxRelay(
                    outbox_source(opened),
                    opened_sink,
                    relay_id=relay_id,
                    batch_size=batch_size,
                    claim_ttl=claim_ttl,
                    max_attempts=max_attempts,
                    poll_interval=poll_interval,
                    backoff=Backoff(maximum=max_backoff),
                    partition=share,
                )
                if once:
                    try:
                        return await worker.run_once()
                    finally:
                        await worker.give_up_partition()
                loop = asyncio.get_running_loop()
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(signum, worker.stop)
                log = logging.getLogger("intention_kernel.relay")
                log.info(
                    "relay %s started%s",
                    worker.relay_id,
                    "" if share is None else f" on partition {share}",
                )
                await worker.run()
                log.info(
                    "relay %s stopped after %d events", worker.relay_id, worker.stats.delivered
                )
                return worker.stats
        finally:
            await opened_sink.close()

    with log_to_stderr():
        result = run(as_json, body)

    def human() -> None:
        if isinstance(result, BatchReport):
            out.print(
                f"claimed {result.claimed}, delivered {result.delivered}, retried"
                f" {result.retried}, dead-lettered {result.dead_lettered}, released"
                f" {result.released}"
                + ("; the sink was unavailable" if result.sink_unavailable else "")
                + ("; the claim was too slow to publish (see the log)" if result.slow_claim else "")
            )
        else:
            out.print(f"delivered {result.delivered} event(s) in {result.batches} batch(es)")

    emit(as_json, result, human)


def check_sink(sink: SinkOpt, as_json: JsonOpt = False) -> None:
    """Check a sink URL (and that its extra is installed) without connecting or publishing."""

    async def body() -> dict[str, Any]:
        await open_sink(sink).close()
        return {"ok": True}

    data = run(as_json, body)
    emit(as_json, data, lambda: out.print("ok: the sink URL is valid"))


def stats(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The delivery backlog: pending, claimed, dead, delivered, oldest pending age, and the
    relay partition leases (who holds which share, and whether the lease is live)."""

    async def body() -> Any:
        async with open_store(store) as opened:
            return await outbox_source(opened).outbox_stats()

    data = run(as_json, body)

    def human() -> None:
        oldest = data.oldest_pending_age
        print_fields(
            [
                ("pending", data.pending),
                ("claimed", data.claimed),
                ("dead", data.dead),
                ("delivered", data.delivered),
                ("oldest pending", "-" if oldest is None else f"{oldest:.1f}s"),
                ("blocked threads", data.blocked_threads),
            ]
        )
        if data.partitions:
            rows = [
                [
                    f"{p.index}/{p.count}",
                    p.holder,
                    p.held_until.isoformat(),
                    "yes" if p.live else "no",
                ]
                for p in data.partitions
            ]
            print_table(["partition", "holder", "held until", "live"], rows, ids=("holder",))

    emit(as_json, data, human)


def dead(
    store: StoreOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Dead-lettered events, in position order (requeue them once the consumer is fixed)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            return {"events": await outbox_source(opened).dead_letters(limit=limit)}

    data = run(as_json, body)

    def human() -> None:
        print_table(
            ("position", "thread", "turn", "type", "attempts", "last error"),
            [
                (
                    str(stored.position),
                    stored.event.thread_id,
                    stored.event.turn_id,
                    stored.event.type,
                    str(stored.attempts),
                    stored.last_error or "-",
                )
                for stored in data["events"]
            ],
            ids=("thread", "turn", "type"),
        )

    emit(as_json, data, human)


def requeue(
    store: StoreOpt = None,
    position: Annotated[
        list[int] | None,
        typer.Option("--position", help="A dead event's position (repeat for more)."),
    ] = None,
    thread_id: Annotated[
        str | None, typer.Option("--thread-id", "--thread", help="Only this thread's events.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Make dead-lettered events pending again (all of them unless narrowed)."""

    async def body() -> dict[str, Any]:
        async with open_store(store) as opened:
            count = await outbox_source(opened).requeue(position or None, thread_id=thread_id)
        return {"requeued": count}

    data = run(as_json, body)
    emit(as_json, data, lambda: out.print(f"requeued {data['requeued']} event(s)"))


def prune(older_than: OlderThanOpt, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete events delivered longer ago than --older-than; pending and dead ones stay."""

    async def body() -> dict[str, Any]:
        seconds = parse_duration(older_than).total_seconds()
        async with open_store(store) as opened:
            pruned = await outbox_source(opened).prune(seconds)
        return {"pruned": pruned, "older_than_seconds": seconds}

    data = run(as_json, body)
    emit(
        as_json,
        data,
        lambda: out.print(f"pruned {data['pruned']} delivered event(s) older than {older_than}"),
    )
