"""What an ingress did: counters an operator (and a test) reads."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IngressStats"]


@dataclass(slots=True)
class IngressStats:
    """Messages submitted (a redelivery of a submitted one included), refused (they can
    never be submitted: logged, and dropped from the broker), and submits retried."""

    submitted: int = 0
    refused: int = 0
    retried: int = 0
