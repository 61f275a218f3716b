"""``@capability``: a capability from a typed async function.

Why: the schema a model sees is already in the function's signature and docstring. Deriving the
input model from the parameters (as pydantic's ``validate_call`` does) and the output from the
return annotation removes the separate models and the ``execute`` adapter, while producing the
same ``Capability`` record as ``define_capability``: compile, the manifest and the fingerprint
treat both forms alike. What cannot be derived (a missing annotation, a plain ``def``) is
recorded, not raised, so compile lists it with every other problem of the agent.
"""

from __future__ import annotations

import inspect
import re
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints, overload

from pydantic import BaseModel, Field, create_model

from ._capability import Capability, Guidance, define_capability
from ._context import CapabilityContext
from ._results import (
    AwaitingExternal,
    CapabilityResult,
    Completed,
    Failed,
    NeedsConfirmation,
    NeedsDependency,
    NeedsInput,
)
from ._states import Confirmation, ConfirmationMode, Effect, EffectKind

__all__ = ["DEFAULT_VERSION", "OUTPUT_FIELD", "Function", "capability", "capability_from"]

DEFAULT_VERSION = "1.0.0"
"""The version of a capability that names none; still part of the fingerprint."""
OUTPUT_FIELD = "result"
"""The one field of the output model that wraps a plain return type (``int``, ``list[str]``)."""

_RESULTS = (AwaitingExternal, Completed, Failed, NeedsConfirmation, NeedsDependency, NeedsInput)
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^:param\s+(?:[^:]+\s+)?(\w+):\s*(.*)$")
Function = Callable[..., Awaitable[Any]]
"""An ``async def`` taking the step's ``CapabilityContext`` first, then the inputs."""


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Capability"


def _capability_id(name: str) -> str:
    """``getBalance`` -> ``get_balance``; compile judges the result by the capability id rules."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).strip("_").lower()


def _summary(doc: str) -> str:
    """The docstring's first paragraph, on one line."""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _param_docs(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style ``Args:`` section (or ``:param x:``)."""
    found: dict[str, str] = {}
    current: str | None = None
    indent: int | None = None
    inside = False
    for line in doc.splitlines():
        text = line.strip()
        if (sphinx := _SPHINX.match(text)) is not None:
            current, inside = sphinx.group(1), False
            found[current] = sphinx.group(2).strip()
            continue
        if not inside:
            inside = bool(_SECTION.match(text))
            current = None if inside else current
            if not inside and current is not None and text and line[:1].isspace():
                found[current] = f"{found[current]} {text}".strip()
            continue
        depth = len(line) - len(line.lstrip())
        if not text:
            continue
        if depth == 0:
            inside, current = False, None  # the next section (``Returns:``) or prose
            continue
        indent = depth if indent is None else indent
        entry = _ENTRY.match(text) if depth <= indent else None
        if entry is not None:
            current = entry.group(1)
            found[current] = entry.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {text}".strip()
    return {name: text for name, text in found.items() if text}


def _reserved(name: str) -> bool:
    """Names pydantic would not keep as an input field, or that shadow the model's own."""
    return name.startswith(("_", "model_")) or hasattr(BaseModel, name)


def _is_context(hint: object) -> bool:
    return hint is CapabilityContext or get_origin(hint) is CapabilityContext


def _output(hint: object) -> object | None:
    """The return annotation without the ``CapabilityResult`` types passed through as given."""
    if get_origin(hint) in (typing.Union, UnionType):
        rest = [arg for arg in get_args(hint) if arg not in _RESULTS]
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return None if hint in _RESULTS or hint is CapabilityResult else hint


class _Derived:
    """What the function's signature says: the input model, its field order, the output."""

    def __init__(self, fn: object, localns: Mapping[str, Any], input_name: str | None) -> None:
        self.problems: list[tuple[str, str]] = []
        name = getattr(fn, "__name__", "capability")
        self.positional: list[str] = []
        self.named: list[str] = []
        self.wrap = False
        if not callable(fn):
            self._refuse("invalid_execute", "@capability needs an async function")
            fn = _placeholder
        elif not inspect.iscoroutinefunction(fn):
            self._refuse("not_async", f"{name} must be an async function (async def)")
        try:
            hints = get_type_hints(fn, localns=dict(localns), include_extras=True)
        except Exception as exc:  # NameError, TypeError: an annotation that does not resolve
            self._refuse(
                "unresolved_annotation", f"an annotation of {name} does not resolve: {exc}"
            )
            hints = {}
        docs = _param_docs(inspect.getdoc(fn) or "")
        params = list(inspect.signature(fn).parameters.values())
        if not params or not _is_context(hints.get(params[0].name)):
            self._refuse(
                "missing_context",
                "the first parameter receives the step's context: annotate it"
                " CapabilityContext (or CapabilityContext[Deps])",
            )
        fields: dict[str, Any] = {}
        for param in params[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                self._refuse("variadic_parameter", f"*{param.name}: every input is named")
            elif param.name not in hints:
                self._refuse("missing_annotation", f"parameter {param.name!r} needs a type")
            elif _reserved(param.name):
                self._refuse(
                    "reserved_parameter",
                    f"parameter {param.name!r} is a reserved name (a leading underscore, model_,"
                    " or a pydantic model attribute): rename it",
                )
            else:
                default: Any = ... if param.default is param.empty else param.default
                field = (
                    Field(default, description=docs[param.name]) if param.name in docs else default
                )
                fields[param.name] = (hints[param.name], field)
                kind = param.POSITIONAL_ONLY
                (self.positional if param.kind is kind else self.named).append(param.name)
        if input_name is not None and not (
            isinstance(input_name, str) and input_name.isidentifier()
        ):
            self._refuse("invalid_input_name", "input_name must be a Python identifier")
            input_name = None
        self.input: type[BaseModel] = self._model(input_name or f"{_camel(name)}Input", fields)
        self.output: type[BaseModel] = self._model(f"{_camel(name)}Output", {})
        if "return" not in hints:
            self._refuse("missing_annotation", f"{name} needs a return annotation (the output)")
            return
        output = _output(hints["return"])
        if output is None:
            self._refuse(
                "missing_output", "the return annotation must name the output besides the results"
            )
        elif isinstance(output, type) and issubclass(output, BaseModel):
            self.output = output
        else:
            self.wrap = True
            self.output = self._model(f"{_camel(name)}Output", {OUTPUT_FIELD: (output, ...)})

    def _refuse(self, code: str, message: str) -> None:
        self.problems.append((code, message))

    def _model(self, name: str, fields: dict[str, Any]) -> type[BaseModel]:
        try:
            model: type[BaseModel] = create_model(name, **fields)
            model.model_json_schema()
        except Exception as exc:  # pydantic raises several types for unschematizable types
            self._refuse("invalid_schema", f"{name} has no JSON Schema: {exc}")
            return create_model(name)
        return model


async def _placeholder(context: CapabilityContext) -> None:
    """Stands in for a definition that was not a function; compile refuses it."""


def _executor(fn: Function, derived: _Derived) -> Callable[..., Awaitable[CapabilityResult]]:
    """``execute(context, input)``: the function called with the input's fields; a plain value
    becomes ``Completed``, a ``CapabilityResult`` is passed through, an exception propagates
    (the step fails, as for any ``execute`` that raises)."""
    positional, named, wrap = derived.positional, derived.named, derived.wrap

    async def execute(context: CapabilityContext, input: BaseModel) -> CapabilityResult:
        args = [getattr(input, name) for name in positional]
        kwargs = {name: getattr(input, name) for name in named}
        value = await fn(context, *args, **kwargs)
        if isinstance(value, _RESULTS):
            return value
        # The kernel checks the output against the schema, as for the long form's Completed.
        return Completed(output={OUTPUT_FIELD: value} if wrap else value)

    execute.__qualname__ = getattr(fn, "__qualname__", "execute")
    return execute


def _build(fn: Function, localns: Mapping[str, Any], options: dict[str, Any]) -> Capability:
    derived = _Derived(fn, localns, options.pop("input_name"))
    doc = (inspect.getdoc(fn) or "") if callable(fn) else ""
    name = getattr(fn, "__name__", "")
    cap = define_capability(
        id=options.pop("id") or _capability_id(name),
        description=options.pop("description") or _summary(doc),
        input=derived.input,
        output=derived.output,
        execute=_executor(fn, derived),
        **options,
    )
    return replace(cap, problems=tuple(derived.problems)) if derived.problems else cap


@overload
def capability(
    fn: Function,
    /,
    *,
    id: str | None = None,
    version: str = DEFAULT_VERSION,
    description: str | None = None,
    requires: Sequence[str] = (),
    provides: Sequence[str] = (),
    invalidates: Sequence[str] = (),
    effect: Effect = EffectKind.READ,
    confirmation: Confirmation = ConfirmationMode.NONE,
    guidance: Guidance | None = None,
    consent_fields: Sequence[str] = (),
    consent_summary: str | None = None,
    editable: bool | Sequence[str] = False,
    consent_expires_after: float | timedelta | None = None,
    input_name: str | None = None,
) -> Capability: ...


@overload
def capability(
    fn: None = None,
    /,
    *,
    id: str | None = None,
    version: str = DEFAULT_VERSION,
    description: str | None = None,
    requires: Sequence[str] = (),
    provides: Sequence[str] = (),
    invalidates: Sequence[str] = (),
    effect: Effect = EffectKind.READ,
    confirmation: Confirmation = ConfirmationMode.NONE,
    guidance: Guidance | None = None,
    consent_fields: Sequence[str] = (),
    consent_summary: str | None = None,
    editable: bool | Sequence[str] = False,
    consent_expires_after: float | timedelta | None = None,
    input_name: str | None = None,
) -> Callable[[Function], Capability]: ...


def capability(
    fn: Function | None = None,
    /,
    *,
    id: str | None = None,
    version: str = DEFAULT_VERSION,
    description: str | None = None,
    requires: Sequence[str] = (),
    provides: Sequence[str] = (),
    invalidates: Sequence[str] = (),
    effect: Effect = EffectKind.READ,
    confirmation: Confirmation = ConfirmationMode.NONE,
    guidance: Guidance | None = None,
    consent_fields: Sequence[str] = (),
    consent_summary: str | None = None,
    editable: bool | Sequence[str] = False,
    consent_expires_after: float | timedelta | None = None,
    input_name: str | None = None,
) -> Capability | Callable[[Function], Capability]:
    """A ``Capability`` from ``async def f(context: CapabilityContext[Deps], a: int, ...)``.

    As ``@capability``, ``@capability(...)`` or ``capability(f, ...)``. The input model is built
    from the parameters after the context (annotations, defaults, ``Annotated[..., Field()]``;
    the docstring's ``Args:`` section describes them), the output from the return annotation (a
    pydantic model, or a plain type wrapped in a model with the one field ``result``). The id is
    the function's name unless given, the description the docstring's first paragraph, the
    version ``1.0.0``. Returning a plain value completes the step with it; returning a
    ``CapabilityResult`` passes it through; raising fails the step. ``input_name`` names the
    input model (its JSON Schema title, part of the fingerprint; default ``<Function>Input``):
    give a long-form capability's input model name to move it to this form with the same
    fingerprint. Every other option is ``define_capability``'s, and the manifest is the same as
    the long form's. ``agent.capability(...)`` does the same and registers the capability on
    the agent.
    """
    options: dict[str, Any] = {
        "id": id,
        "version": version,
        "description": description,
        "requires": requires,
        "provides": provides,
        "invalidates": invalidates,
        "effect": effect,
        "confirmation": confirmation,
        "guidance": guidance,
        "consent_fields": consent_fields,
        "consent_summary": consent_summary,
        "editable": editable,
        "consent_expires_after": consent_expires_after,
        "input_name": input_name,
    }
    # The defining scope, so annotations naming its local classes resolve (as pydantic does).
    return capability_from(fn, options, sys._getframe(1).f_locals)


def capability_from(
    fn: Function | None,
    options: Mapping[str, Any],
    localns: Mapping[str, Any],
    register: Callable[[Capability], None] | None = None,
) -> Capability | Callable[[Function], Capability]:
    """``capability``'s work for each way of calling it: the capability from ``fn`` (with
    ``capability``'s ``options``, annotations resolved in ``localns``, the caller's scope), or
    the decorator that builds it in the scope it is applied in; ``register`` receives it first
    (``agent.capability``)."""

    def make(function: Function, scope: Mapping[str, Any]) -> Capability:
        cap = _build(function, scope, dict(options))
        if register is not None:
            register(cap)
        return cap

    if fn is None:

        def decorate(function: Function) -> Capability:
            return make(function, {**localns, **sys._getframe(1).f_locals})

        return decorate
    return make(fn, localns)
