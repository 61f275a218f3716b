"""Stage: resumption, between planning and execution. Pending work meets this turn's answer.

Why its own stage: an answer is only meaningful against the loaded checkpoint's active
interaction and agenda, and consent must be checked against the operation exactly as it would
run now. In order:

1. ``selected_answer`` (before interpretation): a ``selection`` naming an interaction must name
   the active one of this thread, with one of its options; otherwise a typed error and nothing
   runs or is written.
2. A model restatement of a pending confirmable operation (same capability, same validated
   input) merges into it: never a second write, the pending interaction is shown again.
3. The answer: a declined confirmation (kernel-owned or capability-owned) cancels the operation
   and nothing runs; an accepted one rebuilds the operation from the agenda item, recomputes its
   digest (capability id, version, validated input, revisions of the facts it relies on) and
   runs it with the approval record only if the digest matches; otherwise it is held again and
   the user is asked again; so is an accept after the confirmation's deadline (``expiry``). A
   selection's ``edits`` (``edits.py``, checked in step 1) replace the operation by the
   approved one, digested again, before it runs. A capability-owned
   confirmation is resumed only for an accepting option (its ``accept``), by running the
   capability with the answer, which it must check.
4. An input request is answered when this turn plans the same capability again.
5. Steps waiting for a fact resume once the fact exists or changed since they asked, or after
   this turn's step providing it, under the planner's rule (``judge``): refused by a policy,
   held for consent, or run.

An accepted confirmation never stands in for a missing required fact: such a step waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import JsonValue, ValidationError

from ...contracts.checkpoint import AgendaItem, AgendaStatus, Interaction
from ...contracts.errors import ErrorCode, InvalidInputError
from ...contracts.events import EventCategory
from .._expiry import EXPIRES_AT, expired, is_expiry, is_external
from .._states import EffectKind, HoldReason
from ..approval import Approval, ConfirmationAnswer, consent_data
from .edits import Edit, apply_edit, checked_edit
from .expiry import NOTHING_EXPIRED, expire, expiring_question, late_accept
from .external import resume_external
from .plan import consent_hold, judge
from .reduce import fact_state
from .state import HeldStep, Plan, PlannedStep, TurnState

__all__ = ["Chosen", "resume", "selected_answer", "spoken_answer"]

ACCEPT = "yes"
"""The accepting option of a kernel confirmation (offered as ``["yes", "no"]``)."""
NOTHING_PENDING = "There is nothing waiting for your answer right now."
CHANGED = (
    "Something changed since you were asked ({what}), so I have not done it. Please confirm again."
)
STILL_PENDING = "That is already waiting for your confirmation."
WAITING = "I cannot do that yet ({what}): it needs {refs} first. I will ask you again then."
_KERNEL_KEYS = ("missing", "digest", "relied_on", "prompt", "options", "accept", EXPIRES_AT)
_CONFIRMING = (AgendaStatus.AWAITING_CONFIRMATION, AgendaStatus.NEEDS_CONFIRMATION)
"""Agenda items waiting for consent: kernel-owned, then capability-owned."""


@dataclass(frozen=True, slots=True)
class Chosen:
    interaction: Interaction
    option: str
    via: str  # "selection" | "text"
    edit: Edit | None = None
    """Accepted with edited arguments (a selection's ``edits``, checked)."""
    expiry: bool = False
    """Not an answer: the question's deadline passed (its timer turn, ``_expiry``)."""


def _refuse(message: str, code: ErrorCode, **context: JsonValue) -> InvalidInputError:
    return InvalidInputError(message, code=code, context={"field": "selection", **context})


def selected_answer(state: TurnState) -> Chosen | None:
    """A UI answer (``{"interaction_id", "option"[, "thread_id", "edits"]}``), checked before
    any model call. Selections without ``interaction_id`` are passed on to the model as before."""
    selection = state.turn.selection
    if is_expiry(selection):  # a question's timer turn (``expiry``), not an answer
        expiring = expiring_question(state)
        return None if expiring is None else Chosen(expiring, "", "timer", expiry=True)
    if selection is None or "interaction_id" not in selection:
        return None
    named = selection.get("interaction_id")
    thread = selection.get("thread_id")
    active = None if state.checkpoint is None else state.checkpoint.interaction
    if thread is not None and thread != state.turn.thread_id:
        raise _refuse(
            "the answer belongs to another thread",
            ErrorCode.INTERACTION_NOT_ACTIVE,
            reason="thread",
        )
    if active is None or named != active.id:
        raise _refuse(
            "the interaction is not active in this thread",
            ErrorCode.INTERACTION_NOT_ACTIVE,
            reason="inactive" if active is not None else "none_active",
        )
    option = selection.get("option")
    if not isinstance(option, str) or option not in active.options:
        raise _refuse(
            "the option is not one the interaction offers",
            ErrorCode.INTERACTION_OPTION_UNKNOWN,
            options=list[JsonValue](active.options),
        )
    edits = selection.get("edits")
    edit = None if edits is None else checked_edit(state, active, option, edits)
    return Chosen(active, option, "selection", edit)


def spoken_answer(state: TurnState, plan: Plan) -> Chosen | None:
    """The model's reading of typed text as an answer; untrusted, so problems clarify."""
    interpretation = state.interpretation
    if interpretation is None or interpretation.answer is None:
        return None
    answer = interpretation.answer
    active = None if state.checkpoint is None else state.checkpoint.interaction
    if active is None or (answer.interaction_id not in (None, active.id)):
        plan.clarifications.append(NOTHING_PENDING)
        return None
    option = answer.option.strip().lower()
    matches = [o for o in active.options if o.lower() == option]
    if not matches:
        if active.options:
            plan.clarifications.append(f"Please answer with one of: {', '.join(active.options)}.")
        return None
    return Chosen(active, matches[0], "text")


def _same(step: PlannedStep, item: AgendaItem) -> bool:
    return step.capability.id == item.capability_id and step.input_json == item.input


def _merge_restatements(state: TurnState, plan: Plan, chosen: Chosen | None) -> None:
    agenda = [] if state.checkpoint is None else state.checkpoint.agenda
    pending = [a for a in agenda if a.status in _CONFIRMING]
    if not pending:
        return
    merged = {s.step_id for s in plan.steps if any(_same(s, i) for i in pending)}
    merged |= {h.step.step_id for h in plan.held if any(_same(h.step, i) for i in pending)}
    if not merged:
        return
    plan.steps = [s for s in plan.steps if s.step_id not in merged]
    plan.held = [h for h in plan.held if h.step.step_id not in merged]
    for step in plan.steps:
        step.after = tuple(a for a in step.after if a not in merged)
    state.recorder.emit(
        "confirmation.merged",
        {"steps": list[JsonValue](sorted(merged))},
        cause=state.plan_event,
        category=EventCategory.AUDIT,
    )
    if chosen is None:
        plan.notes.append(STILL_PENDING)
        plan.resurface = True


def _rebuild(state: TurnState, item: AgendaItem, step_id: str) -> PlannedStep | None:
    """The operation exactly as it would run now, or ``None`` if it can no longer run."""
    cap = state.runtime.capabilities.get(item.capability_id)
    if cap is None or cap.version != item.capability_version or not isinstance(item.input, dict):
        return None
    try:
        model = cap.input_schema.model_validate(item.input)
    except ValidationError:
        return None
    return PlannedStep(step_id, cap, model, model.model_dump(mode="json"))


def _first(plan: Plan, step: PlannedStep) -> None:
    """Run the resumed step first; this turn's other writes wait for it (one at a time)."""
    for other in plan.steps:
        if other.capability.effect == EffectKind.WRITE:
            other.after = (*other.after, step.step_id)
    plan.steps.insert(0, step)


def _ask_again(plan: Plan, step: PlannedStep, item: AgendaItem, kernel_owned: bool) -> None:
    """The operation held for a new consent question (digest and deadline of now)."""
    if kernel_owned:
        reason = item.reason or "needs your confirmation"
        plan.held.append(HeldStep(step, HoldReason.AWAITING_CONFIRMATION, reason))
    else:
        _first(plan, step)  # no answer: the capability asks again itself


def _answer(state: TurnState, plan: Plan, chosen: Chosen) -> None:
    checkpoint = state.checkpoint
    assert checkpoint is not None  # an answer needs an active interaction
    interaction = chosen.interaction
    item = next((a for a in checkpoint.agenda if a.id == interaction.agenda_item_id), None)
    plan.close_interaction = True
    if item is None:
        return
    if item.status not in _CONFIRMING:
        plan.close_interaction = False  # input requests are answered by planning the step again
        return
    plan.resolved.add(item.id)
    now = state.runtime.clock().isoformat()
    actor = state.host_context.get("actor")
    who = actor if isinstance(actor, str) else None
    record: dict[str, JsonValue] = {
        "interaction_id": interaction.id,
        "agenda_item_id": item.id,
        "capability_id": item.capability_id,
        "option": chosen.option,
        "actor": who,
        "answered_at": now,
        "turn_id": state.turn.turn_id,
        "via": chosen.via,
    }
    question = {"question": interaction.prompt}  # what the user saw: kept, not sent in events
    name = item.capability_id
    cap = state.runtime.capabilities.get(name)
    description = (cap.description if cap else name).rstrip(".")
    kernel_owned = item.status == AgendaStatus.AWAITING_CONFIRMATION
    accepting = (ACCEPT,) if kernel_owned else accepting_options(item)
    if chosen.option not in accepting:
        # Declines are the kernel's, whoever asked: the item is cancelled and nothing runs.
        plan.decisions.append({**record, **question, "decision": "declined"})
        plan.notes.append(f"Cancelled: {description}. Nothing was done.")
        audit = dict(record)
        if not kernel_owned:
            audit["details"] = _shown(item)  # e.g. a hold the host may want to release
        _audit(state, "confirmation.declined", audit)
        return
    step = _rebuild(state, item, f"resume-{len(plan.resolved)}")
    if step is not None and expired(item.data, state.runtime.clock()):
        late_accept(state, plan, record, question, description, item)
        _ask_again(plan, step, item, kernel_owned)  # with the values of now
        return
    if step is None:
        plan.decisions.append({**record, **question, "decision": "refused"})
        plan.notes.append(f"I can no longer do that ({description}); nothing was done.")
        _audit(state, "confirmation.refused", record)
        return
    cap = step.capability
    available = {f"{f.type}@{f.version}" for f in state.facts.values()}
    hold = consent_hold(step, item.reason or "needs your confirmation", available)
    if hold.status == HoldReason.WAITING_FOR_FACT:
        # Consent never stands in for a missing fact (an item asked before this rule, or a
        # fact invalidated since): the step waits for it and consent is asked again then.
        plan.decisions.append({**record, **question, "decision": "waiting"})
        plan.notes.append(WAITING.format(what=description, refs=", ".join(hold.missing)))
        plan.held.append(hold)
        _audit(state, "confirmation.deferred", {**record, "missing": list[JsonValue](hold.missing)})
        return
    now_data = consent_data(cap.id, cap.version, cap.requires, step.input_json, state.facts)
    digest = str(now_data["digest"])
    if digest != item.data.get("digest"):
        plan.decisions.append({**record, **question, "decision": "changed", "digest": digest})
        plan.notes.append(CHANGED.format(what=_what_changed(item, now_data)))
        _audit(state, "confirmation.mismatch", {**record, "digest": digest})
        _ask_again(plan, step, item, kernel_owned)
        return
    if kernel_owned:
        asked, proposed, edited = interaction.prompt, digest, chosen.edit
        if edited is not None:  # consent to the approved operation: re-rendered, re-digested
            step, digest, asked = apply_edit(state, step, edited)
        step.approval = Approval(
            interaction_id=interaction.id,
            agenda_item_id=item.id,
            capability_id=item.capability_id,
            digest=digest,
            actor=who,
            answered_at=now,
            turn_id=state.turn.turn_id,
            via=chosen.via,
            question=asked,
            edited=() if edited is None else edited.fields,
            proposed_digest=None if edited is None else proposed,
        )
        both: dict[str, JsonValue] = {}
        if edited is not None:  # the proposed and the approved arguments, kept with the actor
            both = {"proposed_question": interaction.prompt, "proposed_input": item.input}
            both["input"] = step.input_json
        plan.decisions.append({**step.approval.to_json(), "option": chosen.option, **both})
        accepted = step.approval.to_json()
        del accepted["question"]
        _audit(state, "confirmation.accepted", accepted)
    else:
        step.answer = ConfirmationAnswer(
            interaction.id, chosen.option, _shown(item), who, now, digest, accepting
        )
        plan.decisions.append({**record, **question, "decision": "answered", "digest": digest})
        _audit(state, "confirmation.answered", {**record, "digest": digest})
    _first(plan, step)


def accepting_options(item: AgendaItem) -> tuple[str, ...]:
    """The options of a capability-owned confirmation that give consent (stored with the item).

    An item stored without them (before they were recorded) accepts only ``"yes"``: anything
    else declines, which cancels and runs nothing.
    """
    stored = item.data.get("accept")
    if isinstance(stored, list) and stored:
        return tuple(str(a) for a in stored)
    return (ACCEPT,)


def _shown(item: AgendaItem) -> dict[str, JsonValue]:
    """What the capability returned with its ``NeedsConfirmation`` (without the kernel's keys)."""
    return {k: v for k, v in item.data.items() if k not in _KERNEL_KEYS}


def _what_changed(item: AgendaItem, now: dict[str, JsonValue]) -> str:
    if item.data.get("relied_on") != now.get("relied_on"):
        return "information it relied on was updated"
    return "the operation is not the same any more"


def _audit(state: TurnState, kind: str, data: dict[str, JsonValue]) -> None:
    state.recorder.emit(kind, data, cause=state.plan_event, category=EventCategory.AUDIT)


def _answer_input(state: TurnState, plan: Plan) -> None:
    checkpoint = state.checkpoint
    interaction = None if checkpoint is None else checkpoint.interaction
    if checkpoint is None or interaction is None or interaction.kind != "input":
        return
    item = next((a for a in checkpoint.agenda if a.id == interaction.agenda_item_id), None)
    if item is None:
        return
    planned = [s.capability.id for s in plan.steps] + [h.step.capability.id for h in plan.held]
    if item.capability_id in planned:
        plan.resolved.add(item.id)
        plan.close_interaction = True


def _resume_waiting(state: TurnState, plan: Plan) -> None:
    """Consumers waiting for a fact run once it exists (or after the step providing it)."""
    checkpoint = state.checkpoint
    if checkpoint is None:
        return
    available = {f"{f.type}@{f.version}" for f in state.facts.values()}
    providers: dict[str, list[str]] = {}
    for step in plan.steps:
        for ref in step.capability.provides:
            providers.setdefault(ref, []).append(step.step_id)
    for item in checkpoint.agenda:
        if item.status != AgendaStatus.WAITING_FOR_FACT or item.id in plan.resolved:
            continue
        missing = item.data.get("missing")
        refs = [str(r) for r in missing] if isinstance(missing, list) else []
        if any(r not in available and r not in providers for r in refs):
            continue
        if not any(r in providers for r in refs) and fact_state(refs, state.facts) == item.data.get(
            "seen"
        ):
            continue  # nothing new since it asked: running it again would only ask again
        if len(plan.steps) >= state.runtime.limits.max_steps:
            return
        resumed = _rebuild(state, item, f"waiting-{len(plan.resolved) + 1}")
        if resumed is None:
            continue
        step = resumed
        plan.resolved.add(item.id)
        verdict, reason = judge(state.runtime, step, state.facts, state.host_context)
        if verdict != "run":
            # The same rule as for a step planned now: refused, or held for consent (asked
            # now that its facts exist, or at the end of this turn once its provider ran).
            if verdict == "deny":
                plan.clarifications.append(reason)
            else:
                plan.held.append(consent_hold(step, reason, available | providers.keys()))
            _audit(state, "step.resumed", {"agenda_item_id": item.id, "step_id": step.step_id})
            continue
        after = [p for r in refs for p in providers.get(r, [])]
        if step.capability.effect == EffectKind.WRITE:
            after.extend(s.step_id for s in plan.steps if s.capability.effect == EffectKind.WRITE)
        step.after = tuple(dict.fromkeys(after))
        plan.steps.append(step)
        _audit(state, "step.resumed", {"agenda_item_id": item.id, "step_id": step.step_id})


def resume(state: TurnState, chosen: Chosen | None) -> None:
    plan = state.plan
    assert plan is not None
    if chosen is None:
        chosen = spoken_answer(state, plan)
    _merge_restatements(state, plan, chosen)
    if chosen is not None and chosen.expiry:
        expire(state, plan, chosen.interaction)
    elif chosen is not None:
        _answer(state, plan, chosen)
    elif is_external(state.turn.selection):
        resume_external(state, plan, _rebuild)
    elif is_expiry(state.turn.selection):
        plan.notes.append(NOTHING_EXPIRED)  # answered since its timer was due
    _answer_input(state, plan)
    _resume_waiting(state, plan)
