"""``redis://host:port/0?stream=NAME``: ``XADD`` one stream entry per event (redis-py asyncio).

Each entry has the fields ``id`` (the event id), ``thread_id``, ``turn_id``, ``sequence``,
``type``, ``event`` (the JSON envelope) and, when the turn was traced, ``traceparent`` (W3C
Trace Context, so a consumer's span joins the turn's trace). **Redis Streams do not
deduplicate**: a re-delivery after a relay crash adds a second entry with the same ``id``
field, so consumers must deduplicate by it. A batch is sent as one pipeline (one round trip).

Optional parameters: ``maxlen`` (approximate stream cap, ``XADD MAXLEN ~``), ``timeout``
(seconds per command, default 5). ``rediss://`` uses TLS; credentials go in the URL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult

import redis.asyncio as aioredis
import redis.exceptions

from ...contracts.events import KernelEvent
from ...contracts.sinks import PublishOutcome
from ._url import encode_event, invalid, number, port_of, query

__all__ = ["RedisSink", "from_url"]

_DB = re.compile(r"^/?(\d{1,2})?$")


class RedisSink:
    """Adds one stream entry per event (``XADD``), a batch in one pipelined round trip.

    Redis Streams do not deduplicate: a re-delivery adds a second entry with the same ``id``
    field, so consumers deduplicate by it. A lost connection, or no answer within ``timeout``
    (a hung server), is ``unavailable``; a command error is ``retry`` for the events it hit.
    """

    def __init__(self, url: str, stream: str, *, maxlen: int | None, timeout: float) -> None:
        self.stream = stream
        self.maxlen = maxlen
        self.timeout = timeout
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=2,
            socket_timeout=timeout,
            retry_on_timeout=False,
        )

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        pipe = self._client.pipeline(transaction=False)
        for event in events:
            fields: dict[bytes | bytearray | memoryview | str | int | float, Any] = {
                "id": event.id,
                "thread_id": event.thread_id,
                "turn_id": event.turn_id,
                "sequence": event.sequence,
                "type": event.type,
                "event": encode_event(event),
            }
            if event.traceparent is not None:
                fields["traceparent"] = event.traceparent  # the turn's trace, for consumers
            pipe.xadd(self.stream, fields, maxlen=self.maxlen, approximate=True)
        try:
            results = await pipe.execute(raise_on_error=False)
        except (redis.exceptions.TimeoutError, TimeoutError):
            # No answer is not an answer about these events: a hung server is an outage.
            reason = f"Redis did not answer within {self.timeout:g}s"
            return [PublishOutcome.unavailable(reason)] * len(events)
        except (redis.exceptions.ConnectionError, OSError) as exc:
            reason = f"Redis unreachable: {type(exc).__name__}"
            return [PublishOutcome.unavailable(reason)] * len(events)
        except redis.exceptions.RedisError as exc:
            return [PublishOutcome.retry(f"Redis error: {type(exc).__name__}")] * len(events)
        finally:
            await pipe.reset()  # type: ignore[no-untyped-call]
        return [
            PublishOutcome.retry(f"XADD failed: {result}")
            if isinstance(result, Exception)
            else PublishOutcome.ok()
            for result in results
        ]

    async def close(self) -> None:
        await self._client.aclose()


def from_url(url: SplitResult) -> RedisSink:
    params = query(url, allowed=("stream", "maxlen", "timeout"))
    port_of(url, 6379)
    if not _DB.match(url.path):
        raise invalid(url, "the path must be a database number: redis://host:6379/0")
    stream = params.get("stream", "")
    if not stream or len(stream) > 512:
        raise invalid(url, "stream=NAME is required")
    maxlen: int | None = None
    if "maxlen" in params:
        if not params["maxlen"].isdigit() or int(params["maxlen"]) < 1:
            raise invalid(url, "parameter 'maxlen' must be a positive integer")
        maxlen = int(params["maxlen"])
    connection_url = url._replace(query="").geturl()
    return RedisSink(
        connection_url, stream, maxlen=maxlen, timeout=number(url, params, "timeout", 5.0)
    )
