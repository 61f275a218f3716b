"""``webhook+http(s)://host:port/path?secret_env=NAME``: one signed HTTP POST per event (httpx).

The body is the event's JSON envelope, signed the Standard Webhooks way (``webhook-id`` = the
event id, ``webhook-timestamp``, ``webhook-signature``; see ``intention_kernel.relay.signing``)
with the ``whsec_...`` secret in environment variable ``secret_env``. An event of a traced turn
also carries the W3C ``traceparent`` header. While a secret is rotated
the variable holds both, space-separated, and every request carries both signatures. Answers
map to outcomes: 2xx ok; 408, 429 and 5xx retry; any other status reject (dead-letter with the
status); no connection, or no answer within ``timeout``, unavailable.

Optional parameters: ``timeout`` (seconds per request, default 10), ``concurrency`` (requests
in flight per batch, default 16).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from urllib.parse import SplitResult

import httpx

from ...contracts.errors import ConfigurationError
from ...contracts.events import KernelEvent
from ...contracts.sinks import PublishOutcome
from ..signing import signature_headers, signing_key
from ._url import encode_event, invalid, number, port_of, query

__all__ = ["WebhookSink", "from_url"]

_RETRY_STATUSES = frozenset({408, 429})


class WebhookSink:
    """POSTs each event's JSON envelope, signed with each of ``secrets`` (see
    ``relay.signing``).

    Receivers deduplicate by the signed ``webhook-id``. 2xx is ``ok``; 408, 429 and 5xx
    ``retry``; any other status ``reject``; no connection or no answer within ``timeout``
    ``unavailable`` (a hung receiver is an outage). Redirects are not
    followed, and at most ``concurrency`` requests of a batch are in flight.
    """

    def __init__(
        self,
        target: str,
        secrets: Sequence[str | bytes],
        *,
        timeout: float = 10.0,
        concurrency: int = 16,
    ) -> None:
        self.target = target
        self._secrets = [signing_key(secret) for secret in secrets]
        self._timeout = timeout
        self._limit = asyncio.Semaphore(concurrency)
        self._client: httpx.AsyncClient | None = None

    async def publish(self, events: Sequence[KernelEvent]) -> list[PublishOutcome]:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        client = self._client
        return list(await asyncio.gather(*(self._post(client, event) for event in events)))

    async def _post(self, client: httpx.AsyncClient, event: KernelEvent) -> PublishOutcome:
        body = encode_event(event)
        headers = {
            "Content-Type": "application/json",
            **signature_headers(self._secrets, event.id, body),
        }
        if event.traceparent is not None:
            headers["traceparent"] = event.traceparent  # a consumer's span joins the turn's trace
        try:
            async with self._limit:
                response = await client.post(self.target, content=body, headers=headers)
        except httpx.ConnectError as exc:
            return PublishOutcome.unavailable(f"webhook unreachable: {type(exc).__name__}")
        except httpx.TimeoutException as exc:
            # No answer within ``timeout`` says nothing about the event: a receiver that
            # accepts connections and hangs is an outage, not a reason to dead-letter.
            return PublishOutcome.unavailable(
                f"webhook did not answer within {self._timeout:g}s: {type(exc).__name__}"
            )
        except httpx.HTTPError as exc:
            return PublishOutcome.retry(f"webhook request failed: {type(exc).__name__}")
        status = response.status_code
        if 200 <= status < 300:
            return PublishOutcome.ok()
        if status in _RETRY_STATUSES or status >= 500:
            return PublishOutcome.retry(f"webhook answered HTTP {status}")
        return PublishOutcome.reject(f"webhook answered HTTP {status}")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def from_url(url: SplitResult) -> WebhookSink:
    scheme = url.scheme.removeprefix("webhook+")
    params = query(url, allowed=("secret_env", "timeout", "concurrency"))
    port = port_of(url, 443 if scheme == "https" else 80)
    if url.username or url.password:
        raise invalid(url, "credentials in a webhook URL are not allowed; use secret_env")
    name = params.get("secret_env")
    if not name:
        raise invalid(url, "secret_env=NAME is required: webhooks are always signed")
    timeout = number(url, params, "timeout", 10.0)
    concurrency = number(url, params, "concurrency", 16)
    if concurrency != int(concurrency):
        raise invalid(url, "parameter 'concurrency' must be an integer")
    secret = os.environ.get(name)
    if not secret or not secret.split():
        raise ConfigurationError(
            "the webhook secret environment variable is not set",
            context={"secret_env": name},
        )
    try:
        secrets = [signing_key(item) for item in secret.split()]
    except ConfigurationError as exc:
        raise ConfigurationError(exc.message, context={"secret_env": name}) from None
    host = url.hostname or ""
    host = f"[{host}]" if ":" in host else host
    target = f"{scheme}://{host}:{port}{url.path or '/'}"
    return WebhookSink(
        target,
        secrets,
        timeout=timeout,
        concurrency=int(concurrency),
    )
