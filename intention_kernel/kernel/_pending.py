"""``pending_confirmation``: the confirmation a thread waits on, as a reviewer's form needs it.

Why from the agent and not from the checkpoint alone: the checkpoint keeps the question, its
options and the proposed input; which fields may be edited and what each may hold are the
served capability's (``editable``, its input schema). A host's own review page, and the web
inspector, build their form from this.

Why ``check_edits`` checks what it can before a turn runs: an operator should hear at once that
a value is not valid or a field is locked, with the same codes and reasons the kernel answers
(``EDIT_INVALID``, ``EDIT_NOT_ALLOWED``). It is a preview, never the decision: the turn that
carries the answer checks the edits again, with the agent's policies and the confirmation as it
is then (``kernel._pipeline.edits``), and only that check lets anything run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, JsonValue, ValidationError

from ..contracts.checkpoint import AgendaStatus, KernelCheckpoint
from ..contracts.errors import ErrorCode, InvalidInputError
from ._pipeline.resume import ACCEPT, accepting_options

if TYPE_CHECKING:
    from ._runtime import CompiledAgent

__all__ = ["ConfirmationField", "PendingConfirmation", "pending_confirmation"]

_CONFIRMING = (AgendaStatus.AWAITING_CONFIRMATION, AgendaStatus.NEEDS_CONFIRMATION)
_MAX_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class ConfirmationField:
    """One top-level field of the proposed input."""

    name: str
    value: JsonValue
    """The proposed value (as stored: JSON)."""
    schema: dict[str, JsonValue]
    """The field's JSON Schema (a top-level ``$ref`` resolved; ``{}`` when not known)."""
    editable: bool
    title: str = ""


@dataclass(frozen=True, slots=True)
class PendingConfirmation:
    """The confirmation a thread waits on: question, options, proposed input, what may change."""

    interaction_id: str
    prompt: str
    options: tuple[str, ...]
    accepting: tuple[str, ...]
    """The options that consent (``("yes",)`` for a kernel confirmation); others decline."""
    capability_id: str
    capability_version: str | None
    kernel_owned: bool
    """Asked by the kernel (``confirmation="required"`` or a policy): only these take edits."""
    runnable: bool
    """The served agent has the capability at the proposed version (else nothing can run)."""
    fields: tuple[ConfirmationField, ...]
    proposed: dict[str, JsonValue]
    asked_in: str
    """The turn that asked."""
    _model: type[BaseModel] | None = field(default=None, repr=False, compare=False)

    @property
    def editable(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.editable)

    def check_edits(self, edits: Mapping[str, JsonValue]) -> None:
        """Refuse edits the kernel would refuse for their fields or their schema, with its
        codes (``EDIT_INVALID``, ``EDIT_NOT_ALLOWED``), reasons and field names; the policies
        and the confirmation's state are the answering turn's to check."""
        named = sorted(edits)
        if not named:
            return
        if not self.kernel_owned:
            raise _refuse(
                "only a confirmation the kernel asks can be answered with edits",
                ErrorCode.EDIT_NOT_ALLOWED,
                "not_editable",
                named,
            )
        known = (
            {f.name for f in self.fields} if self._model is None else set(self._model.model_fields)
        )
        unknown = [n for n in named if n not in known]
        if unknown:
            raise _refuse(
                "edits name fields the operation does not have",
                ErrorCode.EDIT_INVALID,
                "unknown_field",
                unknown,
            )
        allowed = set(self.editable)
        locked = [n for n in named if n not in allowed]
        if locked:
            raise _refuse(
                "the capability does not allow editing these fields",
                ErrorCode.EDIT_NOT_ALLOWED,
                "locked" if allowed else "not_editable",
                locked,
                editable=list[JsonValue](sorted(allowed)),
            )
        if self._model is None:
            return
        try:
            self._model.model_validate({**self.proposed, **edits})
        except ValidationError as exc:
            fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
            problems: list[JsonValue] = [
                {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in exc.errors(include_input=False, include_url=False)[:_MAX_PROBLEMS]
            ]
            raise _refuse(
                "the edited input is not valid",
                ErrorCode.EDIT_INVALID,
                "invalid",
                fields or named,
                problems=problems,
            ) from None


def _refuse(
    message: str, code: ErrorCode, reason: str, fields: list[str], **more: JsonValue
) -> InvalidInputError:
    context: dict[str, JsonValue] = {
        "field": "selection.edits",
        "reason": reason,
        "fields": list[JsonValue](fields),
        **more,
    }
    return InvalidInputError(f"{message}: {', '.join(fields)}", code=code, context=context)


def _resolved(schema: Any, definitions: Mapping[str, Any]) -> dict[str, JsonValue]:
    """The field's schema with a ``$ref`` to ``$defs`` replaced (at the top and in ``anyOf``)."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = definitions.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    options = schema.get("anyOf")
    if isinstance(options, list):
        schema = {**schema, "anyOf": [_resolved(o, definitions) for o in options]}
    return dict(schema)


def pending_confirmation(
    agent: CompiledAgent, checkpoint: KernelCheckpoint | None
) -> PendingConfirmation | None:
    """The confirmation ``checkpoint`` waits on, described with ``agent``'s capability, or
    ``None`` when the thread waits on no confirmation (or on another kind of question)."""
    interaction = None if checkpoint is None else checkpoint.interaction
    if checkpoint is None or interaction is None or interaction.kind != "confirmation":
        return None
    item = next((a for a in checkpoint.agenda if a.id == interaction.agenda_item_id), None)
    if item is None or item.status not in _CONFIRMING:
        return None
    kernel_owned = item.status == AgendaStatus.AWAITING_CONFIRMATION
    capabilities = agent._runtime.capabilities  # the compiled catalog: read, never changed
    cap = capabilities.get(item.capability_id)
    runnable = cap is not None and cap.version == item.capability_version
    proposed = dict(item.input) if isinstance(item.input, dict) else {}
    model = cap.input_schema if cap is not None and runnable else None
    allowed: set[str] = set()
    properties: Mapping[str, Any] = {}
    definitions: Mapping[str, Any] = {}
    names = list(proposed)
    if model is not None and cap is not None:
        if kernel_owned and isinstance(item.input, dict):
            allowed = set(model.model_fields) if cap.editable is True else set(cap.editable or ())
        schema = model.model_json_schema()
        properties = schema.get("properties") or {}
        definitions = schema.get("$defs") or {}
        names = [n for n in model.model_fields if n in proposed] + [
            n for n in proposed if n not in model.model_fields
        ]
    fields = []
    for name in names:
        info = None if model is None else model.model_fields.get(name)
        alias = info.alias if info is not None and info.alias else name
        shown = _resolved(properties.get(name, properties.get(alias)), definitions)
        title = shown.get("title")
        fields.append(
            ConfirmationField(
                name=name,
                value=proposed[name],
                schema=shown,
                editable=name in allowed,
                title=title if isinstance(title, str) else name,
            )
        )
    return PendingConfirmation(
        interaction_id=interaction.id,
        prompt=interaction.prompt,
        options=tuple(interaction.options),
        accepting=(ACCEPT,) if kernel_owned else accepting_options(item),
        capability_id=item.capability_id,
        capability_version=item.capability_version,
        kernel_owned=kernel_owned,
        runnable=runnable,
        fields=tuple(fields),
        proposed=proposed,
        asked_in=interaction.turn_id,
        _model=model,
    )
