"""Stage: reduction. Pure: outcomes become the successor's facts, agenda and interaction.

Facts are applied in plan order (deterministic even when steps ran concurrently): declared
invalidations first, then each produced fact as a new record or the next revision, with the
step's evidence and the ids of the facts it relied on. Held steps and steps that asked for input,
a dependency or consent become agenda items (a consent hold whose required facts did not come
this turn waits for them instead); the first such request becomes the active
interaction unless one is already pending (it stays until answered).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

from pydantic import JsonValue

from ...contracts.checkpoint import (
    AgendaItem,
    AgendaStatus,
    Evidence,
    FactRecord,
    Interaction,
    KernelCheckpoint,
)
from ...contracts.codec import fingerprint
from ...contracts.events import EventCategory
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from .. import consent
from .._capability import Capability
from .._expiry import EXPIRES_AT, deadline, expiry_seconds
from .._facts import apply_fact, invalidate, parse_fact_ref
from .._states import HoldReason, StepStatus
from ..approval import consent_data
from .plan import consent_hold
from .state import HeldStep, PlannedStep, Reduction, StepOutcome, TurnState

__all__ = [
    "apply_outcome",
    "bound_agenda",
    "bound_receipts",
    "fact_state",
    "interaction_id",
    "reduce",
    "reduce_outcomes",
    "settle",
]

_ASKS = {StepStatus.NEEDS_INPUT: "input", StepStatus.NEEDS_CONFIRMATION: "confirmation"}
"""Step outcomes that ask the user something, and the kind of interaction they open."""
_REASKS = {AgendaStatus.NEEDS_INPUT: "input", AgendaStatus.NEEDS_CONFIRMATION: "confirmation"}
"""Pending agenda items that asked the user something, and the kind of interaction."""
_DEADLINED = (
    AgendaStatus.NEEDS_CONFIRMATION,
    AgendaStatus.NEEDS_INPUT,
    AgendaStatus.AWAITING_EXTERNAL,
)
"""The agenda items that may carry ``expires_at`` (their ``expires_after``)."""
_PENDING = {
    StepStatus.NEEDS_INPUT: AgendaStatus.NEEDS_INPUT,
    StepStatus.NEEDS_CONFIRMATION: AgendaStatus.NEEDS_CONFIRMATION,
    StepStatus.NEEDS_DEPENDENCY: AgendaStatus.WAITING_FOR_FACT,
    StepStatus.AWAITING_EXTERNAL: AgendaStatus.AWAITING_EXTERNAL,
}
"""Step outcomes that leave an agenda item, and the status the item is stored with."""
_HELD = {
    HoldReason.AWAITING_CONFIRMATION: AgendaStatus.AWAITING_CONFIRMATION,
    HoldReason.WAITING_FOR_FACT: AgendaStatus.WAITING_FOR_FACT,
}
"""Held steps become agenda items with the same (stored) status."""


def bound_receipts(
    previous: Iterable[EffectReceipt], new: Iterable[EffectReceipt], limit: int
) -> list[EffectReceipt]:
    """Receipts that matter now: every uncertain one, plus the most recent others (bounded)."""
    merged: dict[str, EffectReceipt] = {}
    for receipt in (*previous, *new):
        merged.pop(receipt.idempotency_key, None)
        merged[receipt.idempotency_key] = receipt
    ordered = list(merged.values())
    uncertain = [r for r in ordered if r.status is ReceiptStatus.UNCERTAIN]
    others = [r for r in ordered if r.status is not ReceiptStatus.UNCERTAIN]
    keep = {id(r) for r in uncertain} | {id(r) for r in others[-limit:]}
    return [r for r in ordered if id(r) in keep]


def bound_agenda(
    agenda: list[AgendaItem], interaction: Interaction | None, limit: int
) -> list[AgendaItem]:
    """Keep ``limit`` items: always the one the active interaction waits on, then the newest.

    The pinned item counts toward the limit, so the agenda never holds more than ``limit``.
    """
    if len(agenda) <= limit:
        return agenda
    pinned = None if interaction is None else interaction.agenda_item_id
    kept = [a for a in agenda if a.id == pinned][:limit]
    others = [a for a in agenda if a.id != pinned]
    room = limit - len(kept)
    keep = {id(a) for a in kept} | {id(a) for a in (others[-room:] if room else [])}
    return [a for a in agenda if id(a) in keep]


def _agenda_item(
    step: PlannedStep,
    status: AgendaStatus,
    reason: str | None,
    turn_id: str,
    data: dict[str, JsonValue],
) -> AgendaItem:
    return AgendaItem(
        id=f"{turn_id}:{step.step_id}"[:256],
        capability_id=step.capability.id,
        capability_version=step.capability.version,
        input=step.input_json,
        status=status,
        reason=reason,
        created_turn_id=turn_id,
        data=data,
    )


def fact_state(refs: Iterable[str], facts: Mapping[str, FactRecord]) -> dict[str, JsonValue]:
    """Revisions of the facts of the given types: a waiting step resumes when they change."""
    wanted = set(refs)
    return {
        fid: f.revision for fid, f in sorted(facts.items()) if f"{f.type}@{f.version}" in wanted
    }


def apply_outcome(facts: dict[str, FactRecord], outcome: StepOutcome, turn_id: str) -> bool:
    """A completed step's declared invalidations, then its facts; ``False`` for any other."""
    if outcome.status != StepStatus.COMPLETED or outcome.evidence is None:
        return False
    cap = outcome.step.capability
    invalidate(facts, [r for r in (parse_fact_ref(x) for x in cap.invalidates) if r is not None])
    for ref, key, value in outcome.facts:
        apply_fact(facts, ref, key, value, outcome.evidence, outcome.derived_from, turn_id)
    return True


def interaction_id(thread_id: str, item_id: str) -> str:
    """Bound to the thread: an answer naming it cannot be replayed into another thread."""
    return "ia-" + fingerprint([thread_id, item_id])[:32]


def confirm_prompt(cap: Capability | None, input_json: JsonValue, name: str = "") -> str | None:
    """The kernel's confirmation question: what will be done, with every field of the input
    (``consent.question``; the capability's material fields first, its summary as headline).
    ``None`` for an operation too large to show: planning refuses those, so only an item stored
    before that rule can be one, and it is not asked (nothing runs)."""
    if cap is None:
        return consent.question(name, input_json)
    return consent.question(
        cap.description,
        input_json,
        first=cap.consent_fields,
        summary=cap.consent_summary,
    )


def _reopen(item: AgendaItem, cap: Capability | None) -> tuple[str, str, tuple[str, ...]] | None:
    """The question a still-pending agenda item asks, to make it the active interaction."""
    if item.status == AgendaStatus.AWAITING_CONFIRMATION:
        asked = confirm_prompt(cap, item.input, item.capability_id)
        return None if asked is None else ("confirmation", asked, ("yes", "no"))
    prompt = item.data.get("prompt")
    if item.status in _REASKS and isinstance(prompt, str) and prompt:
        options = item.data.get("options")
        listed = tuple(str(o) for o in options) if isinstance(options, list) else ()
        return _REASKS[item.status], prompt, listed
    return None


def settle(hold: HeldStep, facts: Mapping[str, FactRecord]) -> HeldStep:
    """A step held for consent whose required facts do not exist at the end of the turn (the
    step of this turn that was to provide them did not) waits for them instead: consent is
    never asked for an operation without the facts it relies on."""
    if hold.status != HoldReason.AWAITING_CONFIRMATION:
        return hold
    available = {f"{f.type}@{f.version}" for f in facts.values()}
    return consent_hold(hold.step, hold.reason, available)


def reduce_outcomes(
    checkpoint: KernelCheckpoint | None,
    outcomes: list[StepOutcome],
    held: list[HeldStep],
    turn_id: str,
    receipt_limit: int,
    agenda_limit: int = 20,
    *,
    thread_id: str = "",
    resolved: Collection[str] = (),
    close_interaction: bool = False,
    capabilities: Mapping[str, Capability] | None = None,
    now: datetime | None = None,
) -> Reduction:
    facts: dict[str, FactRecord] = {} if checkpoint is None else {f.id: f for f in checkpoint.facts}
    evidence: list[Evidence] = []
    new_receipts: list[EffectReceipt] = []
    agenda = [] if checkpoint is None else [a for a in checkpoint.agenda if a.id not in resolved]
    interaction = None if checkpoint is None or close_interaction else checkpoint.interaction
    new_interaction: Interaction | None = None
    asks: list[tuple[AgendaItem, str, str, tuple[str, ...]]] = []
    for outcome in outcomes:
        new_receipts.extend(outcome.receipts)
        if apply_outcome(facts, outcome, turn_id):
            assert outcome.evidence is not None
            evidence.append(outcome.evidence)
    # Consent is bound to the facts as the user sees them at the end of the proposing turn.
    for outcome in outcomes:
        status = _PENDING.get(outcome.status)
        if status is not None:
            cap = outcome.step.capability
            data: dict[str, JsonValue] = {"missing": list(outcome.missing), **outcome.data}
            if status == AgendaStatus.WAITING_FOR_FACT:
                data["seen"] = fact_state(outcome.missing, facts)
            if status == AgendaStatus.NEEDS_CONFIRMATION:
                data.update(
                    consent_data(cap.id, cap.version, cap.requires, outcome.step.input_json, facts)
                )
            if outcome.status in _ASKS and outcome.prompt:
                data["prompt"] = outcome.prompt
                data["options"] = list(outcome.options)
            if status in _DEADLINED:
                data.update(deadline(now or datetime.now(UTC), outcome.expires_after))
            if status == AgendaStatus.NEEDS_CONFIRMATION:
                data["accept"] = list(outcome.accept)
            item = _agenda_item(outcome.step, status, outcome.reason, turn_id, data)
            agenda.append(item)
            if outcome.status in _ASKS and outcome.prompt:
                asks.append((item, _ASKS[outcome.status], outcome.prompt, outcome.options))
    settled = [settle(hold, facts) for hold in held]
    for hold in settled:
        data = {"missing": list(hold.missing)}
        if hold.status == HoldReason.WAITING_FOR_FACT:
            data["seen"] = fact_state(hold.missing, facts)
        cap = hold.step.capability
        if hold.status == HoldReason.AWAITING_CONFIRMATION:
            data.update(
                consent_data(cap.id, cap.version, cap.requires, hold.step.input_json, facts)
            )
            data.update(
                deadline(now or datetime.now(UTC), expiry_seconds(cap.consent_expires_after))
            )
        item = _agenda_item(hold.step, _HELD[hold.status], hold.reason, turn_id, data)
        agenda.append(item)
        if hold.status == HoldReason.AWAITING_CONFIRMATION:
            asked = confirm_prompt(cap, hold.step.input_json)
            if asked is not None:
                asks.append((item, "confirmation", asked, ("yes", "no")))
    if interaction is None and not asks:
        # An earlier request still waits (e.g. a second write proposed while one was pending).
        known = capabilities or {}
        for item in agenda:
            question = _reopen(item, known.get(item.capability_id))
            if question is not None:
                asks.append((item, *question))
                break
    if interaction is None and asks:
        item, kind, prompt, options = asks[0]
        new_interaction = Interaction(
            id=interaction_id(thread_id, item.id),
            kind=kind,
            prompt=prompt,
            options=list(options),
            agenda_item_id=item.id,
            turn_id=turn_id,
            data={EXPIRES_AT: item.data[EXPIRES_AT]} if EXPIRES_AT in item.data else {},
        )
        interaction = new_interaction
    previous_receipts = [] if checkpoint is None else checkpoint.receipts
    return Reduction(
        facts=list(facts.values()),
        agenda=bound_agenda(agenda, interaction, agenda_limit),
        interaction=interaction,
        new_interaction=new_interaction,
        receipts=bound_receipts(previous_receipts, new_receipts, receipt_limit),
        evidence=evidence,
        held=settled,
    )


def reduce(state: TurnState) -> None:
    assert state.plan is not None
    reduction = reduce_outcomes(
        state.checkpoint,
        state.outcomes,
        state.plan.held,
        state.turn.turn_id,
        state.runtime.limits.max_receipts,
        state.runtime.limits.max_agenda,
        thread_id=state.turn.thread_id,
        resolved=state.plan.resolved,
        close_interaction=state.plan.close_interaction,
        capabilities=state.runtime.capabilities,
        now=state.runtime.clock(),
    )
    state.reduction = reduction
    recorder = state.recorder
    for outcome in state.outcomes:
        if outcome.facts and outcome.evidence is not None:
            recorder.emit(
                "facts.recorded",
                {
                    "facts": [
                        str(ref) if key is None else f"{ref}#{key}" for ref, key, _ in outcome.facts
                    ],
                    "evidence_id": outcome.evidence.id,
                },
                cause=outcome.event,
                step_id=outcome.step.step_id,
                category=EventCategory.AUDIT,
            )
    if reduction.new_interaction is not None:
        recorder.emit(
            "interaction.opened",
            {
                "interaction_id": reduction.new_interaction.id,
                "kind": reduction.new_interaction.kind,
            },
            cause=state.plan_event,
            category=EventCategory.AUDIT,
        )
