"""Consent that expires: how long a confirmation may be accepted, and whether it still may.

Why a deadline on consent: an approval accepted a week later authorizes a price that may have
changed. A confirmation with a deadline keeps ``expires_at`` (UTC ISO text, from the kernel's
clock) in its agenda item and its interaction; an accept after it is refused in kernel words
(``INTERACTION_EXPIRED``) and the consent is asked again with the values of then. A timer (a
``Timer`` in the store, submitted when due) runs the question's own turn at the deadline, which
closes the question and drops its operation: an expired question does not stay open forever.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from pydantic import JsonValue

from ..contracts.checkpoint import Interaction, KernelCheckpoint
from ..contracts.errors import ErrorCode, InvalidIdError
from ..contracts.ids import validate_id
from ..contracts.inbox import Timer

__all__ = [
    "EXPIRES_AT",
    "EXPIRE_INTERACTION",
    "EXTERNAL_KEY",
    "EXTERNAL_TIMEOUT",
    "MAX_CONSENT_SECONDS",
    "MAX_EXTERNAL_KEY",
    "deadline",
    "expired",
    "expiry_seconds",
    "expiry_timer",
    "external_key",
    "is_expiry",
    "is_external",
    "timers_of",
]

MAX_CONSENT_SECONDS = 366 * 86_400
"""The longest a consent may stay acceptable: a year."""
EXPIRES_AT = "expires_at"
"""The key of the deadline in an agenda item's and an interaction's data."""
EXPIRE_INTERACTION = "expire_interaction"
"""The selection of a question's timer turn: ``{"expire_interaction": <interaction id>}``."""
EXTERNAL_KEY = "external_key"
"""The key of a parked step's completion, in its agenda item's data and in the selection of
the turn that completes it (``{"external_key": ..., "result": ...}``)."""
EXTERNAL_TIMEOUT = "external_timeout"
"""The selection of a parked step's timer turn: ``{"external_timeout": <key>}``."""
MAX_EXTERNAL_KEY = 200
"""An external key's longest length (turn ids ``<key>@completed`` must stay ids)."""


def external_key(key: object) -> str:
    """``key`` if it can name a parked step's completion: an id of at most
    ``MAX_EXTERNAL_KEY`` characters without ``@`` (its turn ids append ``@completed``)."""
    checked = validate_id(key, "external key", max_length=MAX_EXTERNAL_KEY)
    if "@" in checked:
        raise InvalidIdError(
            "an external key has no '@'",
            code=ErrorCode.INVALID_ID,
            context={"field": "key", "reason": "at_sign"},
        )
    return checked


def expiry_seconds(value: object) -> float | None:
    """``value`` (seconds or a ``timedelta``; ``None``: no deadline) as seconds; ``ValueError``
    when it is not a duration in (0, ``MAX_CONSENT_SECONDS``]."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_CONSENT_SECONDS
    ):
        raise ValueError(f"expected seconds in (0, {MAX_CONSENT_SECONDS}] or None")
    return float(seconds)


def deadline(now: datetime, seconds: float | None) -> dict[str, JsonValue]:
    """The data a confirmation keeps for its deadline (nothing without one)."""
    if seconds is None:
        return {}
    return {EXPIRES_AT: (now + timedelta(seconds=seconds)).isoformat()}


def _deadline_of(data: Mapping[str, JsonValue]) -> datetime | None:
    """The stored deadline, if it reads as an aware time."""
    try:
        moment = datetime.fromisoformat(str(data[EXPIRES_AT]))
    except (KeyError, ValueError):
        return None
    return moment if moment.tzinfo is not None else None


def expired(data: Mapping[str, JsonValue], now: datetime) -> bool:
    """Whether the confirmation with ``data`` can no longer be accepted at ``now``. A stored
    deadline that cannot be read counts as passed: consent is asked again, never assumed."""
    if EXPIRES_AT not in data:
        return False
    moment = _deadline_of(data)
    return moment is None or now >= moment


def is_expiry(selection: Mapping[str, JsonValue] | None) -> bool:
    """Whether a turn's selection is a question's timer turn."""
    return selection is not None and set(selection) == {EXPIRE_INTERACTION}


def is_external(selection: Mapping[str, JsonValue] | None) -> bool:
    """Whether a turn's selection completes a parked step, or is its timeout's timer turn."""
    if selection is None:
        return False
    return set(selection) in ({EXTERNAL_TIMEOUT}, {EXTERNAL_KEY, "result"})


def expiry_timer(thread_id: str, interaction: Interaction) -> Timer | None:
    """The timer that closes ``interaction`` at its deadline (``None``: it has none). Its turn
    id is derived from the interaction's, so registering it twice keeps one."""
    due = _deadline_of(interaction.data)
    if due is None:
        return None
    return Timer(
        thread_id=thread_id,
        turn_id=f"{interaction.id}@expires",
        due_at=due,
        text="",
        selection={EXPIRE_INTERACTION: interaction.id},
    )


def timers_of(thread_id: str, turn_id: str, checkpoint: KernelCheckpoint) -> list[Timer]:
    """The timers a committed turn leaves: its question's deadline, and the timeouts of the
    steps it parked. Their turn ids come from the question's id and the keys, so keeping them
    again (a replay) keeps one of each."""
    found: list[Timer] = []
    interaction = checkpoint.interaction
    if interaction is not None and interaction.turn_id == turn_id:
        timer = expiry_timer(thread_id, interaction)
        if timer is not None:
            found.append(timer)
    for item in checkpoint.agenda:
        key = item.data.get(EXTERNAL_KEY)
        due = _deadline_of(item.data)
        if item.created_turn_id == turn_id and isinstance(key, str) and due is not None:
            found.append(Timer(thread_id, f"{key}@timeout", due, "", {EXTERNAL_TIMEOUT: key}))
    return found
