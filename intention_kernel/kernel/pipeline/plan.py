"""Stage: planning. Intentions become validated, ordered steps, or clarifications.

Checks, in order: the capability is registered; its input is valid against the capability's
schema (one bounded repair round through the gateway for everything that failed, else a
clarification); policies (allow, deny with a safe reason, require confirmation); the capability's
own confirmation mode (``required`` steps are held, never run in the proposing turn); fact
prerequisites (from the checkpoint, or from a step of this turn, which then runs first); writes
run one after another. ``build_plan`` is pure and is where confirmation and dependency holds are
decided, so writes and resumption plug in here without reshaping the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, JsonValue, ValidationError

from ...contracts.checkpoint import FactRecord
from ...contracts.events import EventCategory
from ..capability import Capability
from ..policies import PolicyRequest
from ..states import ConfirmationMode, EffectKind, HoldReason
from ._model import ask
from .interpret import parse_interpretation, validation_problems
from .state import AgentRuntime, HeldStep, Interpretation, Plan, PlannedStep, TurnState

__all__ = ["Checked", "build_plan", "check_intentions", "plan"]

UNCLEAR = "I could not work out part of your request. Could you say it another way?"


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
        except ValidationError as exc:
            details = validation_problems(exc)
            checked.problems.append({"index": index, "capability": cap.id, "problems": details})
            fields = sorted({".".join(str(x) for x in d["loc"]) for d in exc.errors() if d["loc"]})
            detail = f" (please check: {', '.join(fields)})" if fields else ""
            checked.clarifications.append(
                f"I need a bit more detail for {cap.description.rstrip('.').lower()}{detail}."
            )
            continue
        checked.valid.append((cap, model, model.model_dump(mode="json")))
    return checked


def _hold(
    step: PlannedStep, status: HoldReason, reason: str, missing: Sequence[str] = ()
) -> HeldStep:
    return HeldStep(step, status, reason, tuple(missing))


def build_plan(
    runtime: AgentRuntime,
    facts: Mapping[str, FactRecord],
    valid: Sequence[tuple[Capability, BaseModel, dict[str, JsonValue]]],
    host_context: Mapping[str, Any],
) -> Plan:
    """Pure: policies, confirmation, prerequisites and dependency order for valid steps."""
    plan = Plan()
    limit = runtime.limits.max_steps
    if len(valid) > limit:
        plan.clarifications.append(
            f"That is more than {limit} things at once; I handled the first {limit}."
        )
        valid = valid[:limit]
    candidates: list[PlannedStep] = []
    for n, (cap, model, data) in enumerate(valid, start=1):
        step = PlannedStep(f"step-{n}", cap, model, data)
        decision = None
        for policy in runtime.definition.policies:
            decision = policy(
                PolicyRequest(cap.id, cap.version, cap.effect, data, facts, host_context)
            )
            if decision.outcome != "allow":
                break
        if decision is not None and decision.outcome == "deny":
            plan.clarifications.append(decision.reason or "That is not allowed here.")
        elif cap.confirmation == ConfirmationMode.REQUIRED or (
            decision is not None and decision.outcome == "require_confirmation"
        ):
            reason = (decision.reason if decision else "") or "needs your confirmation"
            plan.held.append(_hold(step, HoldReason.AWAITING_CONFIRMATION, reason))
        else:
            candidates.append(step)
    available = {f"{f.type}@{f.version}" for f in facts.values()}
    providers: dict[str, list[str]] = {}
    for step in candidates:
        for ref in step.capability.provides:
            providers.setdefault(ref, []).append(step.step_id)
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


async def plan(state: TurnState, malformed: list[JsonValue]) -> None:
    runtime = state.runtime
    checked = check_intentions(runtime, state.interpretation, malformed)
    repaired = False
    if checked.problems:
        previous = (
            None if state.interpretation is None else state.interpretation.model_dump(mode="json")
        )
        output = await ask(
            state,
            "repair",
            runtime.definition.instructions,
            {
                "text": state.turn.text,
                "previous": previous,
                "problems": checked.problems,
                "capabilities": runtime.catalog,
            },
            runtime.interpretation_schema,
        )
        interpretation, malformed = parse_interpretation(output)
        state.interpretation = interpretation
        repaired = True
        checked = check_intentions(runtime, interpretation, malformed)
        state.recorder.emit(
            "interpretation.repaired",
            {"valid": not checked.problems, "problems": len(checked.problems)},
            cause=state.start_event,
        )
    result = build_plan(runtime, state.facts, checked.valid, state.host_context)
    result.clarifications[:0] = checked.clarifications
    result.repaired = repaired
    state.plan = result
    state.plan_event = state.recorder.emit(
        "plan.created",
        {
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
