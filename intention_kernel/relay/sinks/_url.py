"""Sink URL parsing shared by the sinks: strict, so a typo is refused at start, not at 3 a.m."""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import SplitResult, parse_qs, urlsplit

from ...contracts.errors import ConfigurationError, ErrorCode
from ...contracts.events import KernelEvent

__all__ = ["encode_event", "invalid", "number", "parse", "port_of", "query", "redact"]


def redact(url: SplitResult) -> str:
    """The URL without credentials, for error messages and logs."""
    host = url.hostname or ""
    try:
        port = url.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return url._replace(netloc=netloc, query="").geturl()


def invalid(url: SplitResult | str, why: str) -> ConfigurationError:
    shown = url if isinstance(url, str) else redact(url)
    return ConfigurationError(
        f"invalid sink URL: {why}", code=ErrorCode.INVALID_SINK_URL, context={"url": shown}
    )


def parse(url: object) -> SplitResult:
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError("a sink URL is required", code=ErrorCode.INVALID_SINK_URL)
    try:
        parsed = urlsplit(url.strip())
    except ValueError as exc:
        raise invalid("<unparsable>", "the URL cannot be parsed") from exc
    if parsed.fragment:
        raise invalid(parsed, "fragments are not allowed")
    return parsed


def query(url: SplitResult, allowed: Collection[str]) -> dict[str, str]:
    """Query parameters; unknown or repeated names are refused."""
    try:
        values = parse_qs(url.query, keep_blank_values=True, strict_parsing=bool(url.query))
    except ValueError as exc:
        raise invalid(url, "the query string is malformed") from exc
    result: dict[str, str] = {}
    for name, items in values.items():
        if name not in allowed:
            expected = ", ".join(sorted(allowed)) or "none"
            raise invalid(url, f"unknown parameter {name!r} (expected: {expected})")
        if len(items) != 1:
            raise invalid(url, f"parameter {name!r} is given more than once")
        result[name] = items[0]
    return result


def port_of(url: SplitResult, default: int) -> int:
    try:
        port = url.port
    except ValueError as exc:
        raise invalid(url, "the port is not a number in 0-65535") from exc
    if not url.hostname:
        raise invalid(url, "a host is required")
    return default if port is None else port


def number(url: SplitResult, params: dict[str, str], name: str, default: float) -> float:
    text = params.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise invalid(url, f"parameter {name!r} must be a number") from None
    if not 0 < value < 1e6:
        raise invalid(url, f"parameter {name!r} must be positive")
    return value


def encode_event(event: KernelEvent) -> bytes:
    """The wire form of an event for every sink: its JSON envelope, UTF-8."""
    return event.model_dump_json().encode()
