"""Sinks for the outbox relay, chosen by URL. Each broker driver is imported only by its module,
so a missing optional extra fails with an install hint when that sink is opened, not on import.

=========================================  =========  ==========================================
URL                                        extra      acknowledged when
=========================================  =========  ==========================================
``stdout://``                              (none)     the line is written and flushed
``file:///abs/path.jsonl``                 (none)     the batch is written and ``fsync``'d
``webhook+https://host/path?secret_env=S`` webhook    the receiver answers 2xx
``nats://host:4222/subject?stream=NAME``   nats       JetStream acknowledges (dedupe by msg id)
``redis://host:6379/0?stream=NAME``        redis      ``XADD`` returns an entry id
=========================================  =========  ==========================================
"""

from __future__ import annotations

import importlib
from typing import cast

from ...contracts.errors import ConfigurationError, ErrorCode
from ...contracts.sinks import EventSink
from ._url import invalid, parse

__all__ = ["SINK_SCHEMES", "open_sink"]

SINK_SCHEMES: dict[str, tuple[str, str | None]] = {
    "stdout": ("stdout", None),
    "file": ("file", None),
    "webhook+http": ("webhook", "webhook"),
    "webhook+https": ("webhook", "webhook"),
    "nats": ("nats", "nats"),
    "redis": ("redis", "redis"),
    "rediss": ("redis", "redis"),
}
"""URL scheme -> (sink module, optional extra that provides its driver)."""


def open_sink(url: str) -> EventSink:
    """Create the sink for ``url``; refuses unknown schemes and malformed URLs at once with
    ``ConfigurationError`` (code ``INVALID_SINK_URL``). Connections are opened lazily by the
    first ``publish``, so a sink that is down at start is retried, not fatal."""
    parsed = parse(url)
    entry = SINK_SCHEMES.get(parsed.scheme.lower())
    if entry is None:
        known = ", ".join(f"{scheme}://" for scheme in SINK_SCHEMES)
        raise invalid(parsed, f"unknown sink scheme {parsed.scheme!r} (known: {known})")
    module_name, extra = entry
    try:
        module = importlib.import_module(f"._{module_name}", __name__)
    except ImportError as exc:
        raise ConfigurationError(
            f"the {module_name} sink needs an optional extra: "
            f"pip install 'intention-kernel[{extra}]'",
            code=ErrorCode.INVALID_CONFIGURATION,
            context={"extra": extra},
        ) from exc
    return cast(EventSink, module.from_url(parsed))
