"""How old a stored moment is, in the short words an operator scans (``3d 4h``)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["age", "span"]


def age(moment: datetime | None) -> str:
    """``3d 4h`` style age of a timestamp (``-`` when unknown); the two largest units only."""
    if moment is None:
        return "-"
    return span((datetime.now(UTC) - moment).total_seconds())


def span(seconds: float) -> str:
    """``3d 4h`` style length of time (the two largest units; a negative one is ``0s``)."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
