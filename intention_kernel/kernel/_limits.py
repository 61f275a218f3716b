"""``KernelLimits``: the bounds that keep per-turn cost independent of thread length and of
the number of capabilities."""

from __future__ import annotations

from dataclasses import dataclass

from ..contracts.codec import DEFAULT_LIMITS, JsonLimits
from ..contracts.errors import ConfigurationError

__all__ = ["KernelLimits", "stored_within"]

ENVELOPE_BYTES = 64 * 1024
"""Room left for the document around a value (event envelope, turn result fields)."""


def stored_within(levels: int) -> JsonLimits:
    """The codec's limits for a value stored ``levels`` containers deep in its document.

    An event's data sits 1 level inside its event; an agenda item's input or data and a fact's
    value sit 4 levels inside the turn result (result, checkpoint, list, record). Checking a
    value with what remains means a value accepted on its way in is never refused at commit.
    """
    return JsonLimits(
        max_bytes=DEFAULT_LIMITS.max_bytes - ENVELOPE_BYTES,
        max_depth=DEFAULT_LIMITS.max_depth - levels,
    )


@dataclass(frozen=True, slots=True)
class KernelLimits:
    """The bounds that keep each turn's cost independent of the thread's length."""

    max_text_length: int = 16_000
    """Characters of user text accepted by ``run``."""
    max_selection_bytes: int = 16_384
    """Encoded size of a ``selection``."""
    max_messages: int = 40
    """Messages kept in the checkpoint; older ones are counted in ``omitted_messages``."""
    context_messages: int = 12
    """Recent messages shown to the model."""
    max_receipts: int = 50
    """Receipts kept in the checkpoint (uncertain ones are always kept)."""
    max_agenda: int = 20
    """Agenda items kept; the oldest go first, never the one the active interaction names (which
    counts toward the limit)."""
    max_steps: int = 8
    """Planned steps per turn, every round together; more are refused with a clarification."""
    max_rounds: int = 4
    """Planning rounds per turn: after its steps ran, the model may ask to see their results
    and plan more (a tool loop); each further round is one more ``interpret`` call."""
    step_timeout: float = 30.0
    """Seconds one capability step may run."""
    select_above: int = 24
    """Catalog size past which a turn first asks the model to choose capabilities from their
    summaries (``select``), so ``interpret`` gets only the chosen ones' schemas."""
    select_at_most: int = 6
    """Capabilities a ``select`` answer may choose (pending work's capabilities come on top)."""

    def __post_init__(self) -> None:
        numbers = {
            "max_text_length": self.max_text_length,
            "max_selection_bytes": self.max_selection_bytes,
            "max_messages": self.max_messages,
            "context_messages": self.context_messages,
            "max_receipts": self.max_receipts,
            "max_agenda": self.max_agenda,
            "max_steps": self.max_steps,
            "max_rounds": self.max_rounds,
            "select_above": self.select_above,
            "select_at_most": self.select_at_most,
        }
        bad = {k: v for k, v in numbers.items() if not isinstance(v, int) or v < 1}
        if not (self.step_timeout > 0) or bad:
            raise ConfigurationError(
                "kernel limits must be positive", context={"invalid": sorted(bad)}
            )
