"""The answer form's fields: a confirmation's proposed input as form inputs, and the text an
operator typed back into JSON values.

Why per the field's JSON Schema type: a form sends text, and ``"7"`` typed for an ``integer``
field is the number 7. An ``integer`` takes a whole number, a ``number`` a finite decimal
number (``7``, ``7.5``, ``1e3``), a ``boolean`` is chosen (true or false), a field with a list of
allowed texts (``enum``, ``Literal``) is chosen from them, a ``string`` is taken exactly as
typed; any other field (an object, a list, a union) is edited as JSON. A field that may be
``null`` (``int | None``) is null when left empty. Text that does not read as its type is an
``EDIT_INVALID`` refusal naming the field: shown on the page, and no turn runs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from ...contracts.checkpoint import KernelCheckpoint
from ...contracts.errors import ErrorCode, InvalidInputError
from ...kernel import ConfirmationField, PendingConfirmation, pending_confirmation
from ._inspector import Inspector
from ._session import Session

__all__ = [
    "EDIT_PREFIX",
    "FieldInput",
    "answer_section",
    "choices",
    "field_inputs",
    "is_answer_turn",
    "new_answer_turn",
    "shown",
    "typed_edits",
]

EDIT_PREFIX = "edit."
"""An edited field's form name: ``edit.amount``."""
_TURN = re.compile(r"inspector-answer-[0-9a-f]{32}")
_WHOLE = re.compile(r"[+-]?\d{1,40}")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SIMPLE = ("integer", "number", "boolean", "string")
_HINTS = {
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "choice": "one of the choices",
    "string": "text, taken exactly as typed",
    "json": "JSON",
}


@dataclass(frozen=True, slots=True)
class FieldInput:
    """One field as the form shows it."""

    name: str
    title: str
    kind: str
    """``integer``, ``number``, ``boolean``, ``choice``, ``string`` or ``json``."""
    nullable: bool
    choices: tuple[str, ...]
    proposed: JsonValue
    proposed_text: str
    editable: bool

    @property
    def hint(self) -> str:
        hint = _HINTS[self.kind]
        return f"{hint}, or empty for none" if self.nullable else hint


def _kind(schema: Mapping[str, Any]) -> tuple[str, bool, tuple[str, ...]]:
    nullable = False
    options = schema.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(rest) != 1 or len(rest) == len(options) or not isinstance(rest[0], dict):
            return "json", False, ()
        schema, nullable = rest[0], True
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return "choice", nullable, tuple(enum)
    kind = schema.get("type")
    return (kind if kind in _SIMPLE else "json"), nullable, ()


def shown(value: JsonValue, kind: str) -> str:
    """A JSON value as the form shows it for a field of ``kind``."""
    if value is None and kind != "json":
        return ""
    if kind in ("string", "choice") and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _input(field: ConfirmationField) -> FieldInput:
    kind, nullable, choices = _kind(field.schema)
    return FieldInput(
        name=field.name,
        title=field.title or field.name,
        kind=kind,
        nullable=nullable,
        choices=choices,
        proposed=field.value,
        proposed_text=shown(field.value, kind),
        editable=field.editable,
    )


def field_inputs(pending: PendingConfirmation) -> list[FieldInput]:
    return [_input(f) for f in pending.fields]


def _refuse(constant: str) -> None:
    raise ValueError(constant)


def _parsed(text: str, field: FieldInput) -> JsonValue:
    """The value ``text`` stands for in ``field`` (``ValueError``: it does not read as one)."""
    if field.nullable and text.strip() == "":
        return None
    kind = field.kind
    if kind == "string":
        return text
    stripped = text.strip()
    if kind == "integer" and _WHOLE.fullmatch(stripped):
        return int(stripped)
    if kind == "number" and _DECIMAL.fullmatch(stripped):
        if _WHOLE.fullmatch(stripped):
            return int(stripped)
        number = float(stripped)
        if number not in (float("inf"), float("-inf")):
            return number
    if kind == "boolean" and stripped in ("true", "false"):
        return stripped == "true"
    if kind == "choice" and text in field.choices:
        return text
    if kind == "json" and stripped:
        try:
            value: JsonValue = json.loads(stripped, parse_constant=_refuse)
        except (ValueError, RecursionError):
            pass
        else:
            return value
    raise ValueError(f"enter {field.hint}")


def _same(a: JsonValue, b: JsonValue) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def typed_edits(pending: PendingConfirmation, form: Mapping[str, str]) -> dict[str, JsonValue]:
    """The fields whose typed value differs from the proposed one, as JSON values.

    Every ``edit.<field>`` of the form is read, editable or not (a field the page showed
    read-only and a name the operation lacks come only from a crafted form: they are passed
    on, and refused by ``check_edits`` and again by the kernel, never dropped)."""
    inputs = {f.name: f for f in field_inputs(pending)}
    edits: dict[str, JsonValue] = {}
    wrong: list[str] = []
    problems: list[JsonValue] = []
    for key, text in form.items():
        if not key.startswith(EDIT_PREFIX):
            continue
        name = key.removeprefix(EDIT_PREFIX)
        field = inputs.get(name)
        if field is None:
            edits[name] = text  # not a field of the operation: refused by name
            continue
        try:
            value = _parsed(text, field)
        except ValueError as exc:
            wrong.append(name)
            problems.append({"loc": [name], "msg": str(exc), "type": "form"})
            continue
        if not _same(value, field.proposed):
            edits[name] = value
    if wrong:
        raise InvalidInputError(
            f"the edited input is not valid: {', '.join(sorted(wrong))}",
            code=ErrorCode.EDIT_INVALID,
            context={
                "field": "selection.edits",
                "reason": "invalid",
                "fields": list[JsonValue](sorted(wrong)),
                "problems": problems,
            },
        )
    return edits


def new_answer_turn() -> str:
    """A fresh turn id for an answer, made when it is reviewed: the confirmed form carries it,
    so sending that form twice replays the turn instead of answering again."""
    return f"inspector-answer-{uuid.uuid4().hex}"


def is_answer_turn(turn_id: str) -> bool:
    return _TURN.fullmatch(turn_id) is not None


def choices(pending: PendingConfirmation) -> list[tuple[str, str]]:
    """``(option, label)`` for each option of the question, in its order."""
    shown_as: list[tuple[str, str]] = []
    for option in pending.options:
        if pending.kernel_owned and option in pending.accepting:
            label = "Approve: it runs once, with the values above (a changed value is an edit)"
        elif pending.kernel_owned:
            label = "Decline: nothing runs"
        elif option in pending.accepting:
            label = f"{option}: consent, the capability goes on"
        else:
            label = f"{option}: decline, nothing runs"
        shown_as.append((option, label))
    return shown_as


async def answer_section(
    inspector: Inspector, session: Session, thread_id: str, checkpoint: KernelCheckpoint | None
) -> dict[str, Any] | None:
    """The thread page's confirmation section, or ``None`` when it waits on no confirmation."""
    interaction = None if checkpoint is None else checkpoint.interaction
    if interaction is None or interaction.kind != "confirmation":
        return None
    agent = inspector.agent
    pending = None if agent is None else pending_confirmation(agent, checkpoint)
    reason = None
    if agent is None:
        reason = "Answering here needs the agent: serve the inspector with it (agent=)."
    elif pending is None:
        reason = "This confirmation has no pending operation left to answer."
    elif not session.operator:
        reason = "Only an operator may answer this confirmation."
    elif not await inspector.may(session, thread_id, "answer"):
        reason = f"{session.principal.id} may not answer on this thread."
    return {
        "interaction": interaction,
        "pending": pending,
        "inputs": [] if pending is None else field_inputs(pending),
        "choices": [] if pending is None else choices(pending),
        "can_answer": reason is None,
        "reason": reason,
        "option": "",
        "values": {},
        "invalid": [],
    }
