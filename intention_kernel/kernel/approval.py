"""Consent bound server-side to the exact operation it was given for.

Why a digest: an approval that only says "yes" can drift from what runs (the input changes, a
fact the operation relied on is replaced). The kernel stores, with the pending operation, a
digest of the capability id, version, validated input and the revisions of the facts it relied
on, and recomputes it right before execution. A different digest means the user agreed to
something else: nothing runs and the user is asked again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from ..contracts.checkpoint import FactRecord
from ..contracts.codec import fingerprint

__all__ = ["Approval", "ConfirmationAnswer", "consent_data", "operation_digest", "relied_on"]


def relied_on(requires: Iterable[str], facts: Mapping[str, FactRecord]) -> dict[str, int]:
    """Ids and revisions of the visible facts whose ``type@version`` the capability requires."""
    wanted = set(requires)
    return {
        fid: f.revision for fid, f in sorted(facts.items()) if f"{f.type}@{f.version}" in wanted
    }


def operation_digest(
    capability_id: str,
    capability_version: str,
    input_json: Mapping[str, JsonValue],
    facts: Mapping[str, int],
) -> str:
    """Canonical JSON SHA-256 of exactly what a confirmation consents to."""
    return fingerprint(
        {
            "capability_id": capability_id,
            "capability_version": capability_version,
            "input": dict(input_json),
            "facts": dict(facts),
        }
    )


def consent_data(
    capability_id: str,
    capability_version: str,
    requires: Iterable[str],
    input_json: Mapping[str, JsonValue],
    facts: Mapping[str, FactRecord],
) -> dict[str, JsonValue]:
    """What a pending confirmation is bound to: the digest and the fact revisions it used."""
    used = relied_on(requires, facts)
    return {
        "digest": operation_digest(capability_id, capability_version, input_json, used),
        "relied_on": dict[str, JsonValue](used),
    }


@dataclass(frozen=True, slots=True)
class Approval:
    """The stored record of one accepted confirmation: who, when, and for what digest."""

    interaction_id: str
    agenda_item_id: str
    capability_id: str
    digest: str
    actor: str | None
    answered_at: str
    turn_id: str
    via: str
    """``selection`` (a UI control) or ``text`` (interpreted by the model)."""
    question: str = ""
    """The question as the user was asked it: every field the digest covers."""
    edited: tuple[str, ...] = ()
    """The fields the answer edited (``docs/writes.md``, approve with edits); ``digest`` and
    ``question`` are then those of the approved operation, ``proposed_digest`` the one asked."""
    proposed_digest: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        record: dict[str, JsonValue] = {
            "decision": "accepted",
            "interaction_id": self.interaction_id,
            "agenda_item_id": self.agenda_item_id,
            "capability_id": self.capability_id,
            "digest": self.digest,
            "actor": self.actor,
            "answered_at": self.answered_at,
            "turn_id": self.turn_id,
            "via": self.via,
            "question": self.question,
        }
        if self.edited:
            record.update(edited=list(self.edited), proposed_digest=self.proposed_digest)
        return record

    @classmethod
    def from_json(cls, record: object) -> Approval | None:
        """The approval ``to_json`` wrote (a step parked after it ran keeps it), or ``None``
        when ``record`` is not one: the resumed write then asks for consent again."""
        if not isinstance(record, dict):
            return None
        try:
            edited = record.get("edited") or []
            return cls(
                interaction_id=str(record["interaction_id"]),
                agenda_item_id=str(record["agenda_item_id"]),
                capability_id=str(record["capability_id"]),
                digest=str(record["digest"]),
                actor=None if record["actor"] is None else str(record["actor"]),
                answered_at=str(record["answered_at"]),
                turn_id=str(record["turn_id"]),
                via=str(record["via"]),
                question=str(record.get("question", "")),
                edited=tuple(str(f) for f in edited) if isinstance(edited, list) else (),
                proposed_digest=_text_or_none(record.get("proposed_digest")),
            )
        except KeyError:
            return None


@dataclass(frozen=True, slots=True)
class ConfirmationAnswer:
    """The answer to a capability-owned confirmation, handed back to the capability.

    The kernel resumes the capability only with an accepting option (one of its
    ``NeedsConfirmation.accept``; a declined answer is cancelled by the kernel). The capability
    must still check it (``accepted()``) before it calls ``run_effect``; ``data`` is what it
    returned with its ``NeedsConfirmation``.
    """

    interaction_id: str
    option: str
    data: Mapping[str, Any]
    actor: str | None
    answered_at: str
    digest: str
    accepting: tuple[str, ...] = ("yes",)
    """The options that give consent, as the capability declared them."""

    def accepted(self, *options: str) -> bool:
        """True when the chosen option is one of ``options`` (default: the accepting ones)."""
        return self.option in (options or self.accepting)


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)
