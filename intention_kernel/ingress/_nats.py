"""``NatsIngress``: turns from a NATS JetStream stream, one durable pull consumer per partition.

Why ``max_ack_pending=1`` on every partition's consumer: JetStream then hands out a partition's
next message only once the one before it was acknowledged, whichever process pulled it. So any
number of ingress processes share the partitions with no coordination of their own, a thread's
messages are submitted in the order they were published, and a message whose process died
(``kill -9``) before acknowledging it is handed to another after ``ack_wait``, before anything
published after it. The acknowledgement follows the durable submit: a message is never lost,
and one submitted twice (a lost acknowledgement, a redelivery) is the same request.

Why a refusal is terminated rather than retried: a message the kernel refuses (not JSON, no
turn id, a bad thread id, a turn id used for another request) is refused again on every
delivery, and left in place it would hold its partition back for good. It is logged with its
subject and sequence, counted, and dropped (``term``); a store that is unavailable is retried
in place, the partition waiting behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from ..contracts.errors import ConfigurationError
from ._partitions import run_partitions
from ._stats import IngressStats
from ._submitting import Delivery, SubmitTurn, pause, submit_message

__all__ = ["NatsIngress"]

log = logging.getLogger("intention_kernel.ingress")

FETCH_WAIT = 1.0
"""Seconds one pull waits for a message (a stop is noticed within it)."""
TURN_ID_HEADER = "Ik-Turn-Id"


class NatsIngress:
    """Submits the turns published on ``<subject>.<partition>`` of ``stream`` (created if
    missing, with one durable consumer ``<consumer>-<partition>`` per partition) through
    ``submit``, until ``run``'s ``stopping`` is set."""

    def __init__(
        self,
        submit: SubmitTurn,
        server: str,
        *,
        stream: str = "IK_TURNS",
        subject: str = "ik.turns",
        consumer: str = "ik-turns",
        partitions: int = 4,
        ack_wait: float = 30.0,
        retry: float = 1.0,
    ) -> None:
        if not 1 <= partitions <= 1024:
            raise ConfigurationError(
                "partitions must be from 1 to 1024", context={"setting": "partitions"}
            )
        if not 1.0 <= ack_wait <= 3600.0:
            raise ConfigurationError(
                "ack_wait must be from 1 to 3600 seconds", context={"setting": "ack_wait"}
            )
        self._submit = submit
        self.server = server
        self.shown_server = server.rsplit("@", 1)[-1]  # for logs: never the credentials
        self.stream = stream
        self.subject = subject
        self.consumer = consumer
        self.partitions = partitions
        self.ack_wait = ack_wait
        self.retry = retry
        self.stats = IngressStats()

    async def run(self, stopping: asyncio.Event) -> None:
        """Connect (again, while the server is away), make sure of the stream and the
        consumers, and submit every partition's messages until ``stopping`` is set."""
        nc = await self._connect(stopping)
        if nc is None:
            return
        try:
            js = nc.jetstream(timeout=5.0)
            await self._ensure(js, stopping)
            await run_partitions(
                self.partitions, lambda index, halt: self._partition(js, index, halt), stopping
            )
        finally:
            with contextlib.suppress(OSError, nats.errors.Error):
                await nc.close()

    async def _connect(self, stopping: asyncio.Event) -> Client | None:
        while not stopping.is_set():
            try:
                return await nats.connect(
                    servers=[self.server],
                    connect_timeout=2,
                    max_reconnect_attempts=-1,  # a restarted server is found again
                    reconnect_time_wait=0.5,
                    error_cb=_quiet,
                    disconnected_cb=_said("disconnected from"),
                    reconnected_cb=_said("reconnected to"),
                )
            except (OSError, TimeoutError, nats.errors.Error) as exc:
                log.warning("NATS at %s: %s; trying again", self.shown_server, type(exc).__name__)
                await pause(stopping, self.retry)
        return None

    async def _ensure(self, js: JetStreamContext, stopping: asyncio.Event) -> None:
        """The stream and one consumer per partition (made when missing; an existing consumer
        is checked, ``_check``)."""
        while True:
            try:
                try:
                    await js.stream_info(self.stream)
                except nats.js.errors.NotFoundError:
                    await js.add_stream(name=self.stream, subjects=[f"{self.subject}.*"])
                for index in range(self.partitions):
                    try:
                        info = await js.consumer_info(self.stream, self._durable(index))
                    except nats.js.errors.NotFoundError:
                        info = await js.add_consumer(self.stream, self._config(index))
                    self._check(info.config, index)
                return
            except (OSError, TimeoutError, nats.errors.Error) as exc:
                if stopping.is_set():
                    raise
                log.warning("NATS stream %s not ready: %s", self.stream, type(exc).__name__)
                await pause(stopping, self.retry)

    def _check(self, config: ConsumerConfig, index: int) -> None:
        """An existing consumer that would hand out a partition's messages out of order (or
        another partition's) is refused, not used."""
        if config.max_ack_pending != 1 or config.filter_subject != f"{self.subject}.{index}":
            raise ConfigurationError(
                "a NATS consumer of the ingress exists with another configuration: it must"
                " filter its partition's subject with max_ack_pending=1 (delete it to have it"
                " made again)",
                context={"setting": "consumer", "consumer": self._durable(index)},
            )

    def _durable(self, index: int) -> str:
        return f"{self.consumer}-{index}"

    def _config(self, index: int) -> ConsumerConfig:
        return ConsumerConfig(
            durable_name=self._durable(index),
            filter_subject=f"{self.subject}.{index}",
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_ack_pending=1,  # the partition's next message only after this one: its order
        )

    async def _partition(self, js: JetStreamContext, index: int, stopping: asyncio.Event) -> None:
        subscription = await js.pull_subscribe_bind(
            durable=self._durable(index), stream=self.stream
        )
        try:
            while not stopping.is_set():
                try:
                    messages = await subscription.fetch(1, timeout=FETCH_WAIT)
                except TimeoutError:
                    continue  # nothing published (or the server is away: the client reconnects)
                except (OSError, nats.errors.Error) as exc:
                    log.debug("partition %d: fetch failed: %s", index, type(exc).__name__)
                    await pause(stopping, self.retry)
                    continue
                for message in messages:
                    await self._deliver(message, stopping)
        finally:
            with contextlib.suppress(OSError, nats.errors.Error):
                await subscription.unsubscribe()

    async def _deliver(self, message: Msg, stopping: asyncio.Event) -> None:
        """Submit the message's turn, then acknowledge it; a refusal terminates it; while a
        store that is unavailable is tried again, the message is held (``in_progress``)."""
        headers: Mapping[str, str] = message.headers or {}
        delivery = await submit_message(
            self._submit,
            message.data,
            headers.get(TURN_ID_HEADER) or headers.get("Nats-Msg-Id"),
            {"broker": "nats", "subject": message.subject, "sequence": _sequence(message)},
            self.stats,
            stopping,
            retry=self.retry,
            holding=message.in_progress,
        )
        with contextlib.suppress(OSError, nats.errors.Error):
            if delivery is Delivery.SUBMITTED:
                await message.ack()  # lost: redelivered, and submitted again as the same request
            elif delivery is Delivery.REFUSED:
                await message.term()


def _sequence(message: Msg) -> int | None:
    try:
        return int(message.metadata.sequence.stream)
    except (AttributeError, TypeError, ValueError, nats.errors.Error):
        return None


async def _quiet(*_: Any) -> None:
    """Driver errors: the ingress logs what it does about them, not the driver's noise."""


def _said(what: str) -> Callable[[], Awaitable[None]]:
    async def said() -> None:
        log.info("%s NATS", what)

    return said
