"""``nats://host:port/subject?stream=NAME``: NATS JetStream publish with ``Nats-Msg-Id`` = event id.

JetStream drops a message whose ``Nats-Msg-Id`` it has already stored within the stream's
duplicate window (default 2 minutes, ``dedupe_window`` seconds here), so a re-delivery after a
relay crash is stored once. On the first connection the sink creates the stream (subject =
the URL's subject) or verifies that the existing stream captures the subject.

Optional parameters: ``dedupe_window`` (seconds, used when creating the stream, default 120),
``timeout`` (seconds per publish ack, default 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult, unquote

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from ...contracts.errors import ConfigurationError
from ...contracts.events import KernelEvent
from ...contracts.sinks import PublishOutcome
from ._url import encode_event, invalid, number, port_of, query

__all__ = ["NatsSink", "from_url"]

_SUBJECT = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_STREAM = re.compile(r"^[A-Za-z0-9_\-]{1,200}$")
_CONNECT_TIMEOUT = 2


def _headers(event: KernelEvent) -> dict[str, str]:
    """``Nats-Msg-Id`` for deduplication, and the turn's ``traceparent`` when it was traced
    (a consumer's span then joins the turn's trace)."""
    if event.traceparent is None:
        return {"Nats-Msg-Id": event.id}
    return {"Nats-Msg-Id": event.id, "traceparent": event.traceparent}


async def _quiet(*_: Any) -> None:
    """Connection callbacks: the relay reports outages through outcomes, not driver logs."""


class NatsSink:
    """Publishes each event to a JetStream subject with ``Nats-Msg-Id`` set to the event id,
    so a re-delivery within the stream's duplicate window is stored once.

    Connects lazily on the first ``publish`` (creating the stream, or checking that it
    captures the subject) and connects again on a later batch after an outage: the relay owns
    the retries, not the driver. An unreachable server, a lost connection, an ack that does
    not come within ``timeout`` (a hung server looks connected) or JetStream answering 503 is
    ``unavailable``; a JetStream error answer on a live connection ``retry``; an event over the
    max payload ``reject``.
    Messages show the server without its credentials.
    """

    def __init__(
        self,
        server: str,
        subject: str,
        stream: str,
        *,
        dedupe_window: float = 120.0,
        timeout: float = 5.0,
    ) -> None:
        self.server = server
        self.shown_server = server.rsplit("@", 1)[-1]  # for messages: never the credentials
        self.subject = subject
        self.stream = stream
        self.dedupe_window = dedupe_window
        self.timeout = timeout
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._connecting = asyncio.Lock()

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        try:
            js = await self._jetstream()
        except ConfigurationError as exc:
            return [PublishOutcome.unavailable(exc.message)] * len(events)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            await self._reset()
            reason = f"NATS unreachable at {self.shown_server}: {type(exc).__name__}"
            return [PublishOutcome.unavailable(reason)] * len(events)
        outcomes = list(await asyncio.gather(*(self._publish_one(js, e) for e in events)))
        if self._nc is not None and not self._nc.is_connected:
            await self._reset()
        return outcomes

    async def _publish_one(self, js: JetStreamContext, event: KernelEvent) -> PublishOutcome:
        try:
            await js.publish(
                self.subject,
                encode_event(event),
                timeout=self.timeout,
                stream=self.stream,
                headers=_headers(event),
            )
        except nats.errors.MaxPayloadError:
            return PublishOutcome.reject("event larger than the NATS max payload")
        except nats.js.errors.NoStreamResponseError:
            self._js = None  # verify (or re-create) the stream on the next batch
            return PublishOutcome.unavailable(f"no JetStream stream answers on {self.subject}")
        except nats.js.errors.ServiceUnavailableError as exc:
            return PublishOutcome.unavailable(f"JetStream unavailable: {exc.description}")
        except nats.js.errors.APIError as exc:
            return PublishOutcome.retry(f"JetStream error {exc.code}: {exc.description}")
        except TimeoutError:
            # No answer is not an answer about this event: a hung server, a partition that
            # drops packets or a stalled JetStream disk look like this on a live connection.
            return PublishOutcome.unavailable(
                f"NATS at {self.shown_server} did not acknowledge within {self.timeout:g}s"
            )
        except (OSError, nats.errors.Error) as exc:
            if self._nc is None or not self._nc.is_connected:
                return PublishOutcome.unavailable(f"NATS connection lost: {type(exc).__name__}")
            return PublishOutcome.retry(f"JetStream publish failed: {type(exc).__name__}")
        return PublishOutcome.ok()

    async def _jetstream(self) -> JetStreamContext:
        async with self._connecting:
            if self._nc is None or not self._nc.is_connected:
                await self._reset()
                # One attempt, bounded: the relay owns retries (with backoff), not the driver.
                async with asyncio.timeout(_CONNECT_TIMEOUT + 1):
                    self._nc = await nats.connect(
                        servers=[self.server],
                        connect_timeout=_CONNECT_TIMEOUT,
                        allow_reconnect=False,
                        max_reconnect_attempts=1,
                        reconnect_time_wait=0,
                        error_cb=_quiet,
                        disconnected_cb=_quiet,
                        closed_cb=_quiet,
                    )
            if self._js is None:
                js = self._nc.jetstream(timeout=self.timeout)
                await self._ensure_stream(js)
                self._js = js
            return self._js

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        try:
            owner = await js.find_stream_name_by_subject(self.subject)
        except nats.js.errors.NotFoundError:
            owner = None
        if owner is None:
            await js.add_stream(
                name=self.stream,
                subjects=[self.subject],
                duplicate_window=self.dedupe_window,
            )
        elif owner != self.stream:
            raise ConfigurationError(
                "the NATS subject belongs to another stream",
                context={"subject": self.subject, "stream": self.stream, "owner": owner},
            )

    async def _reset(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(OSError, nats.errors.Error):
                await nc.close()

    async def close(self) -> None:
        async with self._connecting:
            await self._reset()


def from_url(url: SplitResult) -> NatsSink:
    params = query(url, allowed=("stream", "dedupe_window", "timeout"))
    port = port_of(url, 4222)
    subject = unquote(url.path.lstrip("/"))
    if not _SUBJECT.match(subject):
        raise invalid(url, "the path must be a NATS subject without wildcards: nats://h:p/a.b")
    stream = params.get("stream", "")
    if not _STREAM.match(stream):
        raise invalid(url, "stream=NAME is required (letters, digits, '-' and '_')")
    netloc = url.netloc.rsplit("@", 1)[0] + "@" if "@" in url.netloc else ""
    host = url.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return NatsSink(
        f"nats://{netloc}{host}:{port}",
        subject,
        stream,
        dedupe_window=number(url, params, "dedupe_window", 120.0),
        timeout=number(url, params, "timeout", 5.0),
    )
