"""``ingress``: turns from a broker, each message submitted to the store's inbox, until SIGTERM
or SIGINT (``docs/ingress.md``).

Why it only submits: the ingress acknowledges a message once its turn is durable in the inbox,
and the store's workers (``intention-kernel worker``, or ``serve``'s) run it; a slow turn never
holds a broker's message open. Any number of ingress processes share the partitions.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from ..durability.factory import redact
from ._agent import load_served_agent
from ._common import JsonOpt, StoreOpt, emit, log_to_stderr, open_store, out, run, store_url

__all__ = ["register"]

log = logging.getLogger("intention_kernel.ingress")


def register(app: typer.Typer) -> None:
    app.command("ingress")(ingress)


def ingress(
    broker: Annotated[
        str,
        typer.Argument(
            help="nats://host:port (NATS JetStream) or redis://host:port/db (Redis Streams).",
            show_default=False,
        ),
    ],
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="module:attribute of the agent, as for serve and worker.",
            show_default=False,
        ),
    ],
    store: StoreOpt = None,
    partitions: Annotated[
        int,
        typer.Option(
            "--partitions", min=1, max=1024, help="Partitions (publishers use partition_of)."
        ),
    ] = 4,
    stream: Annotated[
        str | None,
        typer.Option(
            "--stream",
            help="NATS: the JetStream stream (IK_TURNS); Redis: the streams' key prefix, one"
            " stream <prefix>:<partition> each (ik:turns).",
            show_default=False,
        ),
    ] = None,
    subject: Annotated[
        str, typer.Option("--subject", help="NATS: subjects <subject>.<partition>.")
    ] = "ik.turns",
    consumer: Annotated[
        str,
        typer.Option(
            "--consumer",
            help="NATS: durable consumers <consumer>-<partition>; Redis: the consumer group.",
        ),
    ] = "ik-turns",
    ack_wait: Annotated[
        float,
        typer.Option(
            "--ack-wait",
            help="Seconds before a message a dead process held is delivered again (NATS), or"
            " its partition taken over (Redis: the partition's lease).",
        ),
    ] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Submit the turns published on the broker to the store's inbox until SIGTERM or SIGINT.

    Each message is acknowledged once its turn is durable; a message the kernel refuses is
    logged and dropped. Exit 0 after a stop.
    """
    scheme = urlsplit(broker).scheme
    if scheme not in ("nats", "redis", "rediss"):
        raise typer.BadParameter(
            "the broker is nats://host:port or redis://host:port/db", param_hint="BROKER"
        )

    async def body() -> dict[str, Any]:
        from ..ingress import NatsIngress, RedisIngress

        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        try:
            async with open_store(store, pool_size=2) as opened:
                served = await load_served_agent(agent, opened)
                running: NatsIngress | RedisIngress
                if scheme == "nats":
                    running = NatsIngress(
                        served.submit,
                        broker,
                        stream=stream or "IK_TURNS",
                        subject=subject,
                        consumer=consumer,
                        partitions=partitions,
                        ack_wait=ack_wait,
                    )
                else:
                    running = RedisIngress(
                        served.submit,
                        broker,
                        stream=stream or "ik:turns",
                        group=consumer,
                        partitions=partitions,
                        lease=ack_wait,
                    )
                log.info(
                    "ingress from %s (%s, %d partitions) to %s: agent %s",
                    redact(broker),
                    running.stream,
                    partitions,
                    redact(store_url(store)),
                    agent,
                )
                await running.run(stopping)
                stats = running.stats
                log.info(
                    "ingress stopped: %d submitted, %d refused", stats.submitted, stats.refused
                )
                return {
                    "submitted": stats.submitted,
                    "refused": stats.refused,
                    "retried": stats.retried,
                }
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    with log_to_stderr():
        data = run(as_json, body)
    emit(
        as_json,
        data,
        lambda: out.print(
            f"ingress stopped: {data['submitted']} submitted, {data['refused']} refused",
            markup=False,
        ),
    )
