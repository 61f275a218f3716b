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
            help="nats://host:port of a NATS server with JetStream.", show_default=False
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
    stream: Annotated[str, typer.Option("--stream", help="The JetStream stream.")] = "IK_TURNS",
    subject: Annotated[
        str, typer.Option("--subject", help="Subjects <subject>.<partition>.")
    ] = "ik.turns",
    consumer: Annotated[
        str, typer.Option("--consumer", help="Durable consumers <consumer>-<partition>.")
    ] = "ik-turns",
    ack_wait: Annotated[
        float,
        typer.Option(
            "--ack-wait",
            help="Seconds before a message a dead process held is delivered again.",
        ),
    ] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Submit the turns published on the broker to the store's inbox until SIGTERM or SIGINT.

    Each message is acknowledged once its turn is durable; a message the kernel refuses is
    logged and dropped. Exit 0 after a stop.
    """
    if urlsplit(broker).scheme != "nats":
        raise typer.BadParameter("the broker is nats://host:port", param_hint="BROKER")

    async def body() -> dict[str, Any]:
        from ..ingress import NatsIngress

        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        try:
            async with open_store(store, pool_size=2) as opened:
                served = await load_served_agent(agent, opened)
                running = NatsIngress(
                    served.submit,
                    broker,
                    stream=stream,
                    subject=subject,
                    consumer=consumer,
                    partitions=partitions,
                    ack_wait=ack_wait,
                )
                log.info(
                    "ingress from %s (%s, %d partitions) to %s: agent %s",
                    running.shown_server,
                    stream,
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
