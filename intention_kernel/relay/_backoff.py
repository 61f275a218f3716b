"""``Backoff``: how long to wait before the next attempt, growing exponentially with jitter.

Jitter spreads the retries of many relays (or many events) so a recovering sink is not hit by
all of them at the same instant.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..contracts.errors import ConfigurationError

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 0.5
    """Delay before the second attempt, in seconds."""
    maximum: float = 60.0
    """Upper bound of any delay, in seconds."""
    multiplier: float = 2.0
    jitter: float = 0.2
    """Each delay is scaled by a random factor in ``[1 - jitter, 1 + jitter]``."""

    def __post_init__(self) -> None:
        if not (0 <= self.initial <= self.maximum) or self.multiplier < 1:
            raise ConfigurationError(
                "backoff needs 0 <= initial <= maximum and multiplier >= 1",
                context={"initial": self.initial, "maximum": self.maximum},
            )
        if not 0 <= self.jitter < 1:
            raise ConfigurationError("backoff jitter must be in [0, 1)")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failure (1-based)."""
        exponent = min(max(attempt - 1, 0), 64)
        base = min(self.maximum, self.initial * self.multiplier**exponent)
        return min(self.maximum, base * random.uniform(1 - self.jitter, 1 + self.jitter))
