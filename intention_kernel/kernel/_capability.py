"""``define_capability``: one typed, versioned thing an agent can do.

Why definitions are inert data: ``kernel.compile`` checks every definition at once and lists
every problem, so ``define_capability`` records what it is given and leaves judging to compile.
The input and output schemas are pydantic models; their JSON Schema is what a model sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ._results import CapabilityResult
from ._states import Confirmation, ConfirmationMode, Effect, EffectKind

if TYPE_CHECKING:
    from ._context import CapabilityContext

__all__ = ["Capability", "Confirmation", "Effect", "Guidance", "define_capability"]

_EFFECTS = tuple(EffectKind)
_CONFIRMATIONS = tuple(ConfirmationMode)
Execute = Callable[["CapabilityContext", Any], Awaitable[CapabilityResult]]


@dataclass(frozen=True, slots=True)
class Guidance:
    """What the interpreting model is told about when (not) to pick this capability."""

    when_to_use: str = ""
    when_not_to_use: str = ""
    examples: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "when_to_use": self.when_to_use,
            "when_not_to_use": self.when_not_to_use,
            "examples": list(self.examples),
        }


@dataclass(frozen=True, slots=True)
class Capability:
    """One typed, versioned thing an agent can do, as ``define_capability`` recorded it.

    Inert until ``kernel.compile`` judges it; ``effect`` and ``confirmation`` hold the enum
    members for known values and anything else as given, so compile can name the mistake.
    """

    id: str
    version: str
    description: str
    input_schema: type[BaseModel]
    output_schema: type[BaseModel]
    execute: Execute
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    invalidates: tuple[str, ...] = ()
    effect: Effect = EffectKind.READ
    confirmation: Confirmation = ConfirmationMode.NONE
    guidance: Guidance = field(default_factory=Guidance)
    consent_fields: tuple[str, ...] = ()
    """Input fields the user must see first when asked for consent (e.g. the amount)."""
    consent_summary: str | None = None
    """A headline for the consent question, ``{field}`` placeholders filled from the input
    (``"Pay {amount_eur} EUR to {payee}"``); every field is still listed after it."""
    problems: tuple[tuple[str, str], ...] = ()
    """``(code, message)`` pairs ``@capability`` could not derive from the function: compile
    lists them with every other problem (never part of the manifest)."""
    editable: bool | tuple[str, ...] = False
    """Which input fields a confirmation may be answered with edits to (``True``: all)."""
    consent_expires_after: float | None = None
    """Seconds a kernel confirmation may be accepted for; a later accept is refused and the
    consent asked again with the values of then (``None``: it does not expire)."""


def _names(fields: Sequence[str]) -> tuple[str, ...]:
    """A single name given as a string is one field, not its characters."""
    return (fields,) if isinstance(fields, str) else tuple(fields)


def define_capability(
    *,
    id: str,
    version: str,
    description: str,
    input: type[BaseModel],
    output: type[BaseModel],
    execute: Execute,
    requires: Sequence[str] = (),
    provides: Sequence[str] = (),
    invalidates: Sequence[str] = (),
    effect: Effect = EffectKind.READ,
    confirmation: Confirmation = ConfirmationMode.NONE,
    guidance: Guidance | None = None,
    consent_fields: Sequence[str] = (),
    consent_summary: str | None = None,
    editable: bool | Sequence[str] = False,
    consent_expires_after: float | timedelta | None = None,
) -> Capability:
    """Record a capability. ``execute(context, input)`` gets the validated input model and
    returns ``Completed | NeedsInput | NeedsDependency | NeedsConfirmation | Failed``.
    Writes must declare ``effect="write"`` and go through ``context.run_effect``.

    ``consent_fields`` (input fields listed first) and ``consent_summary`` (a ``{field}``
    template for the headline) shape the consent question; it always lists every field.
    ``editable`` lets a kernel confirmation be approved with edits (``True``: any field, or the
    named ones; default none, see ``docs/writes.md``). ``consent_expires_after`` (seconds or a
    ``timedelta``) bounds how long a kernel confirmation may be accepted: a later accept is
    answered ``INTERACTION_EXPIRED`` and the consent is asked again."""
    return Capability(
        id=id,
        version=version,
        description=description,
        input_schema=input,
        output_schema=output,
        execute=execute,
        requires=tuple(requires),
        provides=tuple(provides),
        invalidates=tuple(invalidates),
        effect=EffectKind(effect) if effect in _EFFECTS else effect,
        confirmation=(
            ConfirmationMode(confirmation) if confirmation in _CONFIRMATIONS else confirmation
        ),
        guidance=guidance if guidance is not None else Guidance(),
        consent_fields=_names(consent_fields),
        consent_summary=consent_summary,
        editable=editable if isinstance(editable, bool) else _names(editable),
        consent_expires_after=_seconds(consent_expires_after),
    )


def _seconds(value: float | timedelta | None) -> float | None:
    """A ``timedelta`` as seconds; anything else as given (compile judges it)."""
    return value.total_seconds() if isinstance(value, timedelta) else value
