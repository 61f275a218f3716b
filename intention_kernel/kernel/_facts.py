"""Fact references (``name@version``) and the pure rules for versioned fact records.

Why pure: reduction must give the same successor state for the same outcomes, so replacing,
invalidating and projecting facts are plain functions over checkpoint data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from ..contracts.checkpoint import Evidence, FactRecord

__all__ = ["FactRef", "apply_fact", "fact_id", "invalidate", "parse_fact_ref"]

_REF = re.compile(r"^([a-z][a-z0-9_.\-]{0,119})@([1-9][0-9]{0,8})$")


@dataclass(frozen=True, slots=True)
class FactRef:
    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


def parse_fact_ref(value: object) -> FactRef | None:
    """``"order@1"`` -> ``FactRef("order", 1)``; ``None`` when malformed."""
    if not isinstance(value, str):
        return None
    match = _REF.match(value)
    if match is None:
        return None
    return FactRef(match.group(1), int(match.group(2)))


def fact_id(ref: FactRef, key: str | None) -> str:
    """Stable id of a fact: one per type, or one per (type, key)."""
    return f"{ref}" if key is None else f"{ref}#{key}"


def apply_fact(
    facts: dict[str, FactRecord],
    ref: FactRef,
    key: str | None,
    value: JsonValue,
    evidence: Evidence,
    derived_from: Iterable[str],
    turn_id: str,
) -> FactRecord:
    """Insert a fact, or replace it with the next revision (lineage kept in ``derived_from``)."""
    fid = fact_id(ref, key)
    previous = facts.get(fid)
    record = FactRecord(
        id=fid,
        type=ref.name,
        version=ref.version,
        revision=1 if previous is None else previous.revision + 1,
        value=value,
        evidence=[evidence],
        derived_from=sorted(set(derived_from)),
        turn_id=turn_id,
    )
    facts[fid] = record
    return record


def invalidate(facts: dict[str, FactRecord], refs: Iterable[FactRef]) -> list[str]:
    """Drop every fact of the given types; returns the removed ids (sorted)."""
    targets = {(r.name, r.version) for r in refs}
    removed = sorted(fid for fid, f in facts.items() if (f.type, f.version) in targets)
    for fid in removed:
        del facts[fid]
    return removed


def by_type(facts: Mapping[str, FactRecord], ref: FactRef) -> list[FactRecord]:
    return [f for f in facts.values() if f.type == ref.name and f.version == ref.version]
