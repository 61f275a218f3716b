"""Approve with edits: a kernel confirmation accepted with changed arguments.

Why the kernel checks an edit, not the capability: consent is bound to a digest of the
validated input (``approval.py``). An edited answer consents to another operation, so the
kernel validates the edited input against the capability's schema and its policies before any
model call, renders its question and digests it again, keeps both the proposed and the approved
input, and runs only the approved one (whose effect key and ledger request follow from it). The
capability decides what may change (``editable``). A refused edit is a typed error
(``EDIT_INVALID``, ``EDIT_NOT_ALLOWED``) naming the fields: nothing runs, nothing is written,
the confirmation stays open.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import JsonValue, ValidationError

from ...contracts.checkpoint import AgendaStatus, Interaction
from ...contracts.errors import ErrorCode, InvalidInputError, KernelError
from .. import consent
from ..approval import consent_data
from .plan import _stored_input, judge
from .reduce import confirm_prompt
from .state import PlannedStep, TurnState

__all__ = ["Edit", "apply_edit", "checked_edit"]

_MAX_PROBLEMS = 20
"""Validation problems named in one refusal (a huge edit must not make a huge error)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """An edit that passed every check: the approved input (validated, stored form)."""

    input: dict[str, JsonValue]
    fields: tuple[str, ...]
    """The top-level fields whose value differs from the proposed input."""


def _refuse(
    message: str, code: ErrorCode, reason: str, fields: list[str], **more: JsonValue
) -> InvalidInputError:
    # The names go into the message too: a submitted turn's failure keeps only its message.
    if fields:
        message = f"{message}: {', '.join(fields)}"
    context: dict[str, JsonValue] = {
        "field": "selection.edits",
        "reason": reason,
        "fields": list[JsonValue](fields),
        **more,
    }
    return InvalidInputError(message, code=code, context=context)


def _problems(exc: ValidationError) -> list[JsonValue]:
    """Where and why, never the rejected value (it may be anything the client sent)."""
    return [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_input=False, include_url=False)[:_MAX_PROBLEMS]
    ]


def checked_edit(
    state: TurnState, interaction: Interaction, option: str, edits: JsonValue
) -> Edit | None:
    """The selection's ``edits`` checked against the pending operation, or a typed error.

    ``None`` when the edit changes nothing (a plain accept). The item and capability must be
    the ones that would run: when they are gone, the answer is left to ``resume`` (which
    refuses it, nothing runs)."""
    if not isinstance(edits, dict):
        raise _refuse("edits must be a JSON object", ErrorCode.EDIT_INVALID, "not_an_object", [])
    agenda = [] if state.checkpoint is None else state.checkpoint.agenda
    item = next((a for a in agenda if a.id == interaction.agenda_item_id), None)
    named = sorted(edits)
    if item is None or item.status != AgendaStatus.AWAITING_CONFIRMATION:
        raise _refuse(
            "only a confirmation the kernel asks can be answered with edits",
            ErrorCode.EDIT_NOT_ALLOWED,
            "not_editable",
            named,
        )
    if option != "yes":
        raise _refuse(
            "edits come only with the accepting answer",
            ErrorCode.EDIT_NOT_ALLOWED,
            "not_accepting",
            named,
        )
    cap = state.runtime.capabilities.get(item.capability_id)
    if cap is None or cap.version != item.capability_version or not isinstance(item.input, dict):
        return None
    known = cap.input_schema.model_fields
    unknown = [n for n in named if n not in known]
    if unknown:
        raise _refuse(
            "edits name fields the operation does not have",
            ErrorCode.EDIT_INVALID,
            "unknown_field",
            unknown,
        )
    allowed = set(known) if cap.editable is True else set(cap.editable or ())
    locked = [n for n in named if n not in allowed]
    if locked:
        raise _refuse(
            "the capability does not allow editing these fields",
            ErrorCode.EDIT_NOT_ALLOWED,
            "locked" if allowed else "not_editable",
            locked,
            editable=list[JsonValue](sorted(allowed)),
        )
    try:
        model = cap.input_schema.model_validate({**item.input, **edits})
        approved = _stored_input(cap, model)
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        raise _refuse(
            "the edited input is not valid",
            ErrorCode.EDIT_INVALID,
            "invalid",
            fields or named,
            problems=_problems(exc),
        ) from None
    except KernelError as exc:
        raise _refuse(
            "the edited input cannot be stored", ErrorCode.EDIT_INVALID, str(exc.code), named
        ) from None
    changed = tuple(k for k in approved if approved[k] != item.input.get(k))
    if not changed:
        return None
    if consent.details(approved, cap.consent_fields) is None:
        raise _refuse(
            "the edited operation is too large to show", ErrorCode.EDIT_INVALID, "too_large", named
        )
    step = PlannedStep("edit", cap, model, approved)
    verdict, why = judge(state.runtime, step, state.facts, state.host_context)
    if verdict == "deny":
        raise _refuse(
            "a policy refuses the edited operation",
            ErrorCode.EDIT_NOT_ALLOWED,
            "refused",
            list(changed),
            refusal=why,
        )
    return Edit(approved, changed)


def apply_edit(state: TurnState, step: PlannedStep, edit: Edit) -> tuple[PlannedStep, str, str]:
    """The approved step, its digest and its question (rendered as the proposed one was)."""
    cap = step.capability
    model = cap.input_schema.model_validate(edit.input)
    edited = PlannedStep(step.step_id, cap, model, edit.input, step.after)
    data = consent_data(cap.id, cap.version, cap.requires, edit.input, state.facts)
    question = confirm_prompt(cap, edit.input) or ""  # checked to fit by ``checked_edit``
    return edited, str(data["digest"]), question
