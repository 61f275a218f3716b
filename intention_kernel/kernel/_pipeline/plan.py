"""Stage: planning. Intentions become validated, ordered steps, or clarifications.

Checks, in order: the capability is registered; its input is valid against the capability's
schema (one bounded repair round through the gateway for everything that failed, else a
clarification; an input the store's codec refuses counts as invalid); policies (allow, deny
with a safe reason, require confirmation); the capability's own confirmation mode (``required``
steps are held, never run in the proposing turn; consent is asked only once the step's required
facts exist, until then it waits for them); fact prerequisites (from the checkpoint, or from a
step of this turn, which then runs first); writes run one after another. ``build_plan`` is pure
and is where confirmation and dependency holds are decided, so writes and resumption plug in
here without reshaping the pipeline.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import PydanticSerializationError

from ...contracts import codec
from ...contracts.checkpoint import FactRecord
from ...contracts.errors import FlowControlError, SerializationError
from ...contracts.events import EventCategory
from .. import consent
from .._capability import Capability
from .._limits import stored_within
from .._policies import PolicyRequest
from .._states import ConfirmationMode, EffectKind, HoldReason
from ._model import ask
from .budget import spent, stop
from .interpret import parse_interpretation, validation_problems
from .state import AgentRuntime, HeldStep, Interpretation, Plan, PlannedStep, TurnState

__all__ = ["Checked", "build_plan", "check_intentions", "consent_hold", "judge", "plan"]

IN_STATE = stored_within(4)
"""An input is stored in an agenda item of the turn result (and in events, less deep)."""
UNCLEAR = "I could not work out part of your request. Could you say it another way?"
REFUSED = "I cannot help with that request as it is. Could you say it another way?"
"""The safe answer when the provider declined to interpret (a refusal or a content filter):
nothing runs and no repair is asked (the same question would get the same refusal)."""
TOO_LARGE = (
    "I cannot ask you to confirm {what}: it has more details than one question can show,"
    " so nothing was done."
)


@dataclass(slots=True)
class Checked:
    valid: list[tuple[Capability, BaseModel, dict[str, JsonValue]]] = field(default_factory=list)
    problems: list[JsonValue] = field(default_factory=list)
    clarifications: list[str] = field(default_factory=list)


def check_intentions(
    runtime: AgentRuntime, interpretation: Interpretation | None, malformed: list[JsonValue]
) -> Checked:
    """Pure: split intentions into valid steps and problems (with a clarification each)."""
    checked = Checked()
    if interpretation is None:
        checked.problems.append({"index": None, "problems": malformed})
        checked.clarifications.append(UNCLEAR)
        return checked
    for index, intention in enumerate(interpretation.intentions):
        cap = runtime.capabilities.get(intention.capability)
        if cap is None:
            checked.problems.append(
                {"index": index, "capability": intention.capability, "problems": ["unknown"]}
            )
            checked.clarifications.append(UNCLEAR)
            continue
        try:
            model = cap.input_schema.model_validate(intention.input)
            data = _stored_input(cap, model)
        except ValidationError as exc:
            details = validation_problems(exc)
            fields = sorted({".".join(str(x) for x in d["loc"]) for d in exc.errors() if d["loc"]})
            _refuse(checked, index, cap, details, fields)
            continue
        except SerializationError as exc:
            where = str(exc.context.get("path", "$"))
            name = where.removeprefix("$").removeprefix(".")
            problem: JsonValue = {"loc": [name], "msg": exc.message, "type": str(exc.code)}
            _refuse(checked, index, cap, [problem], [name] if name else [])
            continue
        checked.valid.append((cap, model, data))
    return checked


def _stored_input(cap: Capability, model: BaseModel) -> dict[str, JsonValue]:
    """The validated input as it is committed (agenda, events) and digested for consent."""
    what = f"input of {cap.id}"
    try:
        dumped = model.model_dump(mode="json")
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        codec.check(model.model_dump(), limits=IN_STATE, what=what)  # names the offending part
        raise SerializationError(
            f"{what} cannot be written as JSON",
            context={"what": what, "reason": type(exc).__name__},
        ) from exc
    stored: dict[str, JsonValue] = codec.round_trip(dumped, limits=IN_STATE, what=what)
    # Pydantic writes NaN and Infinity as null: the stored operation (resumed, confirmed,
    # digested) must be the one that runs, so it must validate back to the same input.
    again: BaseModel | None = None
    try:
        again = cap.input_schema.model_validate(stored)
        where = next(
            (n for n in type(model).model_fields if getattr(again, n) != getattr(model, n)), ""
        )
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
    if again != model:
        raise SerializationError(
            f"{what} does not read back as it was given (NaN or Infinity?)",
            context={"what": what, "reason": "not_exact", "path": f"$.{where}" if where else "$"},
        )
    return stored


def _refuse(
    checked: Checked, index: int, cap: Capability, problems: list[JsonValue], fields: list[str]
) -> None:
    """An invalid (or unstorable) input: a problem for the repair, a clarification otherwise."""
    checked.problems.append({"index": index, "capability": cap.id, "problems": problems})
    detail = f" (please check: {', '.join(fields)})" if fields else ""
    checked.clarifications.append(
        f"I need a bit more detail for {cap.description.rstrip('.').lower()}{detail}."
    )


def _hold(
    step: PlannedStep, status: HoldReason, reason: str, missing: Sequence[str] = ()
) -> HeldStep:
    return HeldStep(step, status, reason, tuple(missing))


def build_plan(
    runtime: AgentRuntime,
    facts: Mapping[str, FactRecord],
    valid: Sequence[tuple[Capability, BaseModel, dict[str, JsonValue]]],
    host_context: Mapping[str, Any],
    numbered: int = 0,
) -> Plan:
    """Pure: policies, confirmation, prerequisites and dependency order for valid steps.

    ``numbered``: steps earlier rounds of the turn planned; they count toward ``max_steps``
    and this round's step ids go on from them."""
    plan = Plan()
    limit = runtime.limits.max_steps
    if numbered + len(valid) > limit:
        plan.clarifications.append(
            f"That is more than {limit} things at once; I handled the first {limit}."
        )
        valid = valid[: max(0, limit - numbered)]
    candidates: list[PlannedStep] = []
    confirming: list[tuple[PlannedStep, str]] = []
    for n, (cap, model, data) in enumerate(valid, start=numbered + 1):
        step = PlannedStep(f"step-{n}", cap, model, data)
        verdict, reason = judge(runtime, step, facts, host_context)
        if verdict == "deny":
            plan.clarifications.append(reason)
        elif verdict == "confirm":
            confirming.append((step, reason))
        else:
            candidates.append(step)
    available = {f"{f.type}@{f.version}" for f in facts.values()}
    providers: dict[str, list[str]] = {}
    for step in candidates:
        for ref in step.capability.provides:
            providers.setdefault(ref, []).append(step.step_id)
    ready = available | providers.keys()
    plan.held.extend(consent_hold(s, reason, ready) for s, reason in confirming)
    missing: dict[str, list[str]] = {}
    last_write: str | None = None
    for step in candidates:
        after: list[str] = []
        for ref in step.capability.requires:
            same_turn = [p for p in providers.get(ref, []) if p != step.step_id]
            if same_turn:
                after.extend(same_turn)
            elif ref not in available:
                missing.setdefault(step.step_id, []).append(ref)
        if step.capability.effect == EffectKind.WRITE:
            if last_write is not None:
                after.append(last_write)
            last_write = step.step_id
        step.after = tuple(dict.fromkeys(after))
    plan.steps, held = _order(candidates, missing)
    plan.held.extend(held)
    return plan


Verdict = Literal["run", "deny", "confirm"]


def judge(
    runtime: AgentRuntime,
    step: PlannedStep,
    facts: Mapping[str, FactRecord],
    host_context: Mapping[str, Any],
) -> tuple[Verdict, str]:
    """Policies (the first decision other than ``allow`` wins), then the capability's own
    confirmation mode: whether the step may run, is refused (safe reason) or needs consent.
    An operation too large to show in full in a consent question is refused: consent is only
    ever asked for what the user can see.

    The one rule for steps planned now and for steps resumed once their facts exist.
    """
    cap = step.capability
    decision = None
    for policy in runtime.definition.policies:
        decision = policy(
            PolicyRequest(cap.id, cap.version, cap.effect, step.input_json, facts, host_context)
        )
        if decision.outcome != "allow":
            break
    if decision is not None and decision.outcome == "deny":
        return "deny", decision.reason or "That is not allowed here."
    if cap.confirmation == ConfirmationMode.REQUIRED or (
        decision is not None and decision.outcome == "require_confirmation"
    ):
        if consent.details(step.input_json, cap.consent_fields) is None:
            return "deny", TOO_LARGE.format(what=cap.description.rstrip(".").lower())
        return "confirm", (decision.reason if decision else "") or "needs your confirmation"
    return "run", ""


def consent_hold(step: PlannedStep, reason: str, available: Collection[str]) -> HeldStep:
    """Consent is asked only for an operation whose required facts are ``available`` (they
    exist, or a step of this turn provides them and reduce checks it did): otherwise the step
    first waits for them, so the consent digest covers the fact revisions it relies on.

    The one rule for steps planned now, resumed, accepted, and held at the end of the turn.
    """
    absent = [r for r in step.capability.requires if r not in available]
    if absent:
        return _hold(step, HoldReason.WAITING_FOR_FACT, f"needs {', '.join(absent)} first", absent)
    return _hold(step, HoldReason.AWAITING_CONFIRMATION, reason)


def _order(
    steps: list[PlannedStep], missing: Mapping[str, list[str]]
) -> tuple[list[PlannedStep], list[HeldStep]]:
    """Hold steps whose facts are missing (and their dependents); order the rest so each step
    comes after the steps it waits for; steps in a cycle are held."""
    held: dict[str, HeldStep] = {}
    for step in steps:
        if step.step_id in missing:
            refs = missing[step.step_id]
            held[step.step_id] = _hold(
                step, HoldReason.WAITING_FOR_FACT, f"needs {', '.join(refs)} first", refs
            )
    changed = True
    while changed:
        changed = False
        for step in steps:
            if step.step_id not in held and any(a in held for a in step.after):
                refs = [r for a in step.after if a in held for r in held[a].missing]
                held[step.step_id] = _hold(
                    step, HoldReason.WAITING_FOR_FACT, "waits for a step that cannot run yet", refs
                )
                changed = True
    ordered: list[PlannedStep] = []
    placed: set[str] = set()
    pending = [s for s in steps if s.step_id not in held]
    while pending:
        ready = [s for s in pending if all(a in placed for a in s.after)]
        if not ready:
            for step in pending:
                held[step.step_id] = _hold(
                    step, HoldReason.WAITING_FOR_FACT, "circular fact dependency"
                )
            break
        for step in ready:
            ordered.append(step)
            placed.add(step.step_id)
        pending = [s for s in pending if s.step_id not in placed]
    return ordered, [held[s.step_id] for s in steps if s.step_id in held]


def _repair_ids(state: TurnState) -> tuple[str, ...]:
    """The capabilities a repair is shown: those ``interpret`` saw, plus any it named."""
    catalog = state.runtime.catalog
    if state.chosen is None:
        return catalog.ids
    named = [] if state.interpretation is None else state.interpretation.intentions
    return catalog.ordered([*state.chosen, *(i.capability for i in named)])


async def plan(state: TurnState, malformed: list[JsonValue]) -> Plan:
    """Plan this round's intentions; a further round's plan joins the turn's (``state.plan``).
    Returns this round's own plan."""
    runtime = state.runtime
    if state.refusal is not None:
        checked = Checked(clarifications=[REFUSED])
    else:
        checked = check_intentions(runtime, state.interpretation, malformed)
    repaired = False
    if checked.problems:
        previous = (
            None if state.interpretation is None else state.interpretation.model_dump(mode="json")
        )
        shown = _repair_ids(state)
        try:
            reply = await ask(
                state,
                "repair",
                {
                    "text": state.turn.text,
                    "previous": previous,
                    "problems": checked.problems,
                    "capabilities": runtime.catalog.entries(shown),
                },
                runtime.catalog.schema(shown),
            )
        except FlowControlError as exc:
            if not spent(exc):
                raise
            stop(state, exc)
            reply = None
        if reply is None:
            checked = Checked()  # the budget ran out: nothing of this interpretation runs
        else:
            repaired = True
            if reply.refusal is not None:
                state.refusal = reply.refusal
                state.interpretation = None
                checked = Checked(clarifications=[REFUSED])
            else:
                interpretation, malformed = parse_interpretation(reply.output)
                state.interpretation = interpretation
                checked = check_intentions(runtime, interpretation, malformed)
            state.recorder.emit(
                "interpretation.repaired",
                {
                    "valid": not checked.problems and state.refusal is None,
                    "problems": len(checked.problems),
                },
                cause=state.start_event,
            )
    result = build_plan(runtime, state.facts, checked.valid, state.host_context, state.numbered)
    state.numbered += min(len(checked.valid), max(0, runtime.limits.max_steps - state.numbered))
    result.clarifications[:0] = checked.clarifications
    result.repaired = repaired
    if state.plan is None:
        state.plan = result
    else:
        state.plan.steps.extend(result.steps)
        state.plan.held.extend(result.held)
        state.plan.clarifications.extend(result.clarifications)
        state.plan.repaired |= repaired
    state.plan_event = state.recorder.emit(
        "plan.created",
        {
            "round": state.round,
            "steps": [
                {"step_id": s.step_id, "capability_id": s.capability.id, "after": list(s.after)}
                for s in result.steps
            ],
            "held": [
                {
                    "step_id": h.step.step_id,
                    "capability_id": h.step.capability.id,
                    "status": str(h.status),
                }
                for h in result.held
            ],
            "clarifications": len(result.clarifications),
        },
        cause=state.start_event,
        category=EventCategory.AUDIT,
    )
    return result
