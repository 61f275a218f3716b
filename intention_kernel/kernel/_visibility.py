"""Fact types: what a model may see of each fact (``define_fact``).

Why declared per type: the checkpoint keeps every fact's full value for the capabilities, but
some values (a card number, an e-mail address) must never reach a model provider. A fact type
is shown in full (minus its redacted paths), as present only, or not at all. Every value
withheld that way is also scrubbed from everything else a model request carries (a capability's
output or canonical text, an earlier answer in the recent messages), so it cannot leak around
the projection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from ..contracts.checkpoint import FactRecord
from ._states import ModelVisibility

__all__ = [
    "MIN_SCRUBBED",
    "REDACTED",
    "FactType",
    "FactView",
    "Secrets",
    "Visibility",
    "define_fact",
]

REDACTED = "[redacted]"
"""What the model sees in place of a withheld value."""
MIN_SCRUBBED = 4
"""Withheld strings (and numbers, as digits) this long or longer are scrubbed wherever they
occur; shorter ones are too common to remove everywhere and are withheld from the fact only."""

Visibility = ModelVisibility | Literal["full", "presence", "hidden"]
"""A visibility as a definition may spell it: the member or its string value."""
_VISIBILITIES = tuple(ModelVisibility)


@dataclass(frozen=True, slots=True)
class FactType:
    """How a model may see the facts of one type (``name@version``), as ``define_fact``
    recorded it. ``redact`` lists dotted paths in the value (``"card.number"``; a list applies
    the rest of the path to each element) the model sees as ``"[redacted]"``."""

    ref: str
    visibility: Visibility = ModelVisibility.FULL
    redact: tuple[str, ...] = ()


def define_fact(
    ref: str, *, visibility: Visibility = ModelVisibility.FULL, redact: Sequence[str] = ()
) -> FactType:
    """Declare what a model may see of fact type ``ref`` (``define_agent(facts=[...])``);
    ``kernel.compile`` checks it. Undeclared fact types are shown in full."""
    return FactType(
        ref=ref,
        visibility=ModelVisibility(visibility) if visibility in _VISIBILITIES else visibility,
        redact=tuple(redact),
    )


@dataclass(frozen=True, slots=True)
class Secrets:
    """Withheld values to scrub from a model request: whole strings, text inside strings, and
    numbers."""

    strings: tuple[str, ...] = ()
    numbers: frozenset[float] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.strings or self.numbers)

    def scrub(self, value: JsonValue) -> JsonValue:
        """``value`` with every withheld string or number replaced by ``REDACTED``."""
        if isinstance(value, str):
            for secret in self.strings:
                if secret in value:
                    value = REDACTED if value == secret else value.replace(secret, REDACTED)
            return value
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return REDACTED if value in self.numbers else value
        if isinstance(value, dict):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value


def _leaves(value: JsonValue) -> Iterable[str | int | float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield value


def _at(value: JsonValue, path: Sequence[str]) -> Iterable[JsonValue]:
    """The values at a dotted path (lists apply the rest of the path to each element)."""
    if isinstance(value, list):
        for item in value:
            yield from _at(item, path)
    elif not path:
        yield value
    elif isinstance(value, dict) and path[0] in value:
        yield from _at(value[path[0]], path[1:])


def _redacted(value: JsonValue, path: Sequence[str]) -> JsonValue:
    if isinstance(value, list):
        return [_redacted(item, path) for item in value]
    if not path:
        return REDACTED
    if isinstance(value, dict) and path[0] in value:
        return {**value, path[0]: _redacted(value[path[0]], path[1:])}
    return value


def _digits(number: int | float) -> str:
    """A number as it would be written in text (``1234.0`` as ``1234``)."""
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


class FactView:
    """An agent's visibility rules, compiled: how each fact is shown and what is withheld."""

    __slots__ = ("_rules", "active")

    def __init__(self, types: Iterable[FactType]) -> None:
        self._rules: dict[str, tuple[ModelVisibility, tuple[tuple[str, ...], ...]]] = {
            t.ref: (ModelVisibility(t.visibility), tuple(tuple(p.split(".")) for p in t.redact))
            for t in types
        }
        self.active = any(
            visibility is not ModelVisibility.FULL or paths
            for visibility, paths in self._rules.values()
        )
        """Whether any fact type withholds anything (otherwise nothing is scrubbed)."""

    def show(self, fact: FactRecord) -> JsonValue:
        """The fact as the model sees it, or ``None`` when it is hidden."""
        shown: dict[str, JsonValue] = {
            "id": fact.id,
            "type": f"{fact.type}@{fact.version}",
            "revision": fact.revision,
        }
        rule = self._rules.get(f"{fact.type}@{fact.version}")
        if rule is None:
            shown["value"] = fact.value
            return shown
        visibility, paths = rule
        if visibility is ModelVisibility.HIDDEN:
            return None
        if visibility is ModelVisibility.PRESENCE:
            shown["present"] = True
            return shown
        value = fact.value
        for path in paths:
            value = _redacted(value, path)
        shown["value"] = value
        return shown

    def secrets(self, facts: Iterable[FactRecord]) -> Secrets:
        """Every value the rules withhold from these facts, to scrub from a whole request."""
        if not self.active:
            return Secrets()
        found: set[str] = set()
        numbers: set[float] = set()
        for fact in facts:
            rule = self._rules.get(f"{fact.type}@{fact.version}")
            if rule is None:
                continue
            visibility, paths = rule
            if visibility is ModelVisibility.FULL:
                withheld = [v for path in paths for v in _at(fact.value, path)]
            else:
                withheld = [fact.value]
            for value in withheld:
                for leaf in _leaves(value):
                    text = leaf if isinstance(leaf, str) else _digits(leaf)
                    if len(text) < MIN_SCRUBBED:
                        continue
                    found.add(text)
                    if not isinstance(leaf, str):
                        numbers.add(leaf)
        # Longest first: a secret that contains another is replaced whole.
        return Secrets(tuple(sorted(found, key=lambda s: (-len(s), s))), frozenset(numbers))
