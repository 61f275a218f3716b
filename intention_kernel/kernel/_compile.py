"""``compile``: judge an agent definition as a whole and fingerprint its manifest.

Why list every problem at once: fixing a definition one error per run is slow and hides
related mistakes (a renamed fact breaks several capabilities). ``AgentCompilationError``
carries them all in ``context["problems"]``, each ``{"code", "where", "message"}``.

With the kernel's model routes, compile also refuses a capability whose input schema a chosen
provider cannot express: the gateways that answer ``interpret`` and ``repair`` (the tasks whose
answers carry capability inputs) and have a ``dialect`` must express every input schema
(``intention_kernel.models.check_schema``), and every task must have a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from ..contracts.errors import AgentCompilationError, KernelError
from ..contracts.ids import validate_id
from ._agent import AgentDefinition
from ._capability import Capability, Guidance
from ._expiry import expiry_seconds
from ._facts import parse_fact_ref
from ._manifest import build_manifest, manifest_fingerprint
from ._routing import MODEL_KEYS, TASKS, ModelRoute, is_gateway
from ._schedule import Schedule
from ._states import ConfirmationMode, EffectKind, ModelVisibility
from ._visibility import FactType
from .consent import summary_fields

__all__ = ["check_agent", "compile_manifest", "describe_problem"]

# Semantic versioning 2.0.0 (the official pattern).
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_CAPABILITY_ID = re.compile(r"^[a-z][a-z0-9_\-]*(?:\.[a-z0-9_\-]+)*$")
_EFFECTS = tuple(EffectKind)
_CONFIRMATIONS = tuple(ConfirmationMode)
_ASKS_CONSENT = (ConfirmationMode.REQUIRED, ConfirmationMode.CAPABILITY)
_VISIBILITIES = tuple(ModelVisibility)
_CARRY_INPUTS = ("interpret", "repair")
"""The tasks whose answers carry capability inputs, so their providers must express them."""


class _Problems:
    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, code: str, where: str, message: str) -> None:
        self.items.append({"code": code, "where": where, "message": message})


def _is_model(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _check_text(problems: _Problems, value: object, where: str, field: str) -> None:
    if not isinstance(value, str) or not value.strip():
        problems.add(f"empty_{field}", where, f"{field} must be non-blank text")


def _check_version(problems: _Problems, value: object, where: str) -> None:
    if not isinstance(value, str) or not _SEMVER.match(value):
        problems.add("invalid_version", where, "version must be semantic (e.g. 1.0.0)")


def _check_facts(problems: _Problems, refs: Iterable[object], where: str, field: str) -> None:
    for ref in refs:
        if parse_fact_ref(ref) is None:
            problems.add("invalid_fact_ref", where, f"{field} entry {ref!r} is not 'name@version'")


def _check_schema(problems: _Problems, model: object, where: str, field: str) -> None:
    if not _is_model(model):
        problems.add("invalid_schema", where, f"{field} must be a pydantic model class")
        return
    assert isinstance(model, type) and issubclass(model, BaseModel)
    try:
        model.model_json_schema()
    except Exception as exc:  # pydantic raises several types for unschematizable models
        problems.add("invalid_schema", where, f"{field} has no JSON Schema: {type(exc).__name__}")


def _check_consent(problems: _Problems, cap: Capability, where: str) -> None:
    """``consent_fields``, the ``consent_summary`` placeholders and ``editable`` name fields of
    the input."""
    known = set(cap.input_schema.model_fields) if _is_model(cap.input_schema) else None
    named: list[tuple[str, object]] = [("consent_fields", f) for f in cap.consent_fields]
    if not isinstance(cap.editable, bool):
        named += [("editable", f) for f in cap.editable]
    summary = cap.consent_summary
    if summary is not None:
        if not isinstance(summary, str) or not summary.strip():
            problems.add("invalid_consent_summary", where, "consent_summary must be non-blank text")
        else:
            try:
                named += [("consent_summary", f) for f in summary_fields(summary)]
            except ValueError as exc:
                problems.add("invalid_consent_summary", where, f"consent_summary: {exc}")
    try:
        expiry = expiry_seconds(cap.consent_expires_after)
    except ValueError as exc:
        problems.add("invalid_consent_expiry", where, f"consent_expires_after: {exc}")
        expiry = None
    if expiry is not None and cap.confirmation != ConfirmationMode.REQUIRED:
        problems.add(
            "invalid_consent_expiry",
            where,
            "consent_expires_after applies to confirmation='required' (a capability that"
            " asks itself sets NeedsConfirmation(expires_after=...))",
        )
    for source, name in named:
        if not isinstance(name, str):
            problems.add("unknown_consent_field", where, f"{source} names {name!r}, not a field")
        elif known is not None and name not in known:
            problems.add(
                "unknown_consent_field",
                where,
                f"{source} names {name!r}, which is not a field of the input"
                f" (fields: {', '.join(sorted(known)) or 'none'})",
            )


def _check_capability(problems: _Problems, cap: Capability, where: str) -> None:
    try:
        validate_id(cap.id, "capability id")
        if not _CAPABILITY_ID.match(cap.id):
            raise ValueError
    except (KernelError, ValueError, TypeError):
        problems.add("invalid_capability_id", where, "capability id must look like 'orders.search'")
    _check_version(problems, cap.version, where)
    _check_text(problems, cap.description, where, "description")
    _check_schema(problems, cap.input_schema, where, "input")
    _check_schema(problems, cap.output_schema, where, "output")
    _check_consent(problems, cap, where)
    _check_facts(problems, cap.requires, where, "requires")
    _check_facts(problems, cap.provides, where, "provides")
    _check_facts(problems, cap.invalidates, where, "invalidates")
    if cap.effect not in _EFFECTS:
        problems.add("invalid_effect", where, "effect must be none, read or write")
    if cap.confirmation not in _CONFIRMATIONS:
        problems.add(
            "invalid_confirmation", where, "confirmation must be none, required or capability"
        )
    if cap.effect == EffectKind.WRITE and cap.confirmation == ConfirmationMode.NONE:
        problems.add(
            "write_without_confirmation",
            where,
            "a write capability needs confirmation='required' or 'capability'",
        )
    if cap.effect in (EffectKind.NONE, EffectKind.READ) and cap.confirmation in _ASKS_CONSENT:
        problems.add(
            "confirmation_without_write", where, "only write capabilities take a confirmation"
        )
    if not callable(cap.execute):
        problems.add("invalid_execute", where, "execute must be an async callable")
    if not isinstance(cap.guidance, Guidance):
        problems.add("invalid_guidance", where, "guidance must be a Guidance")
    for code, message in cap.problems:
        problems.add(code, where, message)


def _check_models(problems: _Problems, models: object) -> None:
    if not isinstance(models, tuple):
        problems.add("invalid_models", "models", "models must come from define_agent(models=...)")
        return
    for pair in models:
        if not isinstance(pair, tuple) or len(pair) != 2:
            problems.add(
                "invalid_models", "models", "models must come from define_agent(models=...)"
            )
            continue
        task, choice = pair
        where = f"models[{task!r}]"
        if task not in MODEL_KEYS:
            problems.add("unknown_model_task", where, f"a model task is one of {list(MODEL_KEYS)}")
        if isinstance(choice, str):
            prefix, sep, name = choice.partition(":")
            if not (sep and prefix.strip() and name.strip()):
                problems.add(
                    "invalid_model", where, "a model string is provider:model (openai:gpt-4.1)"
                )
        elif not is_gateway(choice):
            problems.add("invalid_model", where, "a model is a ModelGateway or a model string")


def _check_fact_types(problems: _Problems, types: object, provided: Mapping[str, set[str]]) -> None:
    if not isinstance(types, tuple):
        problems.add("invalid_fact_type", "facts", "facts must come from define_agent(facts=...)")
        return
    seen: set[str] = set()
    for index, declared in enumerate(types):
        if not isinstance(declared, FactType):
            problems.add("invalid_fact_type", f"facts[{index}]", "expected define_fact()")
            continue
        where = f"fact {declared.ref!r}"
        if parse_fact_ref(declared.ref) is None:
            problems.add("invalid_fact_ref", where, f"{declared.ref!r} is not 'name@version'")
        elif declared.ref not in provided:
            problems.add("unknown_fact_type", where, "no capability provides this fact type")
        if declared.ref in seen:
            problems.add("duplicate_fact_type", where, "a fact type is declared once")
        seen.add(str(declared.ref))
        if declared.visibility not in _VISIBILITIES:
            problems.add("invalid_visibility", where, "visibility must be full, presence or hidden")
        for path in declared.redact:
            if not isinstance(path, str) or not all(p.strip() for p in path.split(".")):
                problems.add(
                    "invalid_redaction", where, f"{path!r} is not a dotted path like 'card.number'"
                )


def _check_routes(
    problems: _Problems, caps: list[Capability], routes: Mapping[str, ModelRoute | None]
) -> None:
    for task in TASKS:
        if routes.get(task) is None:
            problems.add(
                "no_model",
                f"models[{task!r}]",
                "no model answers this task: pass Kernel(model=...) or models={'default': ...}",
            )
    checked: set[int] = set()
    for task in _CARRY_INPUTS:
        route = routes.get(task)
        dialect = getattr(route.gateway, "dialect", None) if route is not None else None
        if route is None or not isinstance(dialect, str) or id(route.gateway) in checked:
            continue
        checked.add(id(route.gateway))
        from ..models._schemas import check_schema

        for cap in caps:
            if not _is_model(cap.input_schema):
                continue  # reported as invalid_schema
            try:
                schema = cap.input_schema.model_json_schema()
            except Exception:  # reported as invalid_schema
                continue
            for line in check_schema(dialect, schema):  # type: ignore[arg-type]
                problems.add(
                    "schema_not_expressible",
                    f"capability {cap.id!r}",
                    f"the input schema cannot be expressed for {route.label} "
                    f"({dialect} dialect): {line}",
                )


def _check_schedules(problems: _Problems, schedules: object) -> None:
    if not isinstance(schedules, tuple):
        problems.add("invalid_schedules", "schedules", "expected a sequence of define_schedule()")
        return
    seen: set[str] = set()
    for index, schedule in enumerate(schedules):
        if not isinstance(schedule, Schedule):
            problems.add("invalid_schedule", f"schedules[{index}]", "expected define_schedule()")
        elif schedule.id in seen:
            problems.add("duplicate_schedule", f"schedule {schedule.id!r}", "ids must be unique")
        else:
            seen.add(schedule.id)


def check_agent(
    agent: object, *, routes: Mapping[str, ModelRoute | None] | None = None
) -> list[dict[str, str]]:
    """Every problem of ``agent``, in definition order; empty when it compiles.

    ``routes`` (the model of each task, when a kernel compiles) adds the model problems: a task
    without a model, or a capability input schema a chosen provider cannot express.
    """
    problems = _Problems()
    if not isinstance(agent, AgentDefinition):
        problems.add("invalid_agent", "agent", "expected the result of define_agent()")
        return problems.items
    try:
        validate_id(agent.id, "agent id")
    except KernelError:
        problems.add("invalid_agent_id", "agent", "agent id must be a non-blank identifier")
    _check_version(problems, agent.version, "agent")
    _check_text(problems, agent.description, "agent", "description")
    for index, policy in enumerate(agent.policies):
        if not callable(policy):
            problems.add("invalid_policy", f"policies[{index}]", "a policy must be callable")
    seen: set[str] = set()
    provided: dict[str, set[str]] = {}
    valid: list[Capability] = []
    for index, cap in enumerate(agent.capabilities):
        if not isinstance(cap, Capability):
            problems.add(
                "invalid_capability", f"capabilities[{index}]", "expected define_capability()"
            )
            continue
        where = f"capability {cap.id!r}" if isinstance(cap.id, str) else f"capabilities[{index}]"
        _check_capability(problems, cap, where)
        if isinstance(cap.id, str) and cap.id in seen:
            problems.add("duplicate_capability", where, "capability ids must be unique")
        seen.add(str(cap.id))
        for ref in cap.provides:
            provided.setdefault(str(ref), set()).add(str(cap.id))
        valid.append(cap)
    _check_schedules(problems, agent.schedules)
    for cap in valid:
        for ref in cap.requires:
            providers = provided.get(str(ref), set()) - {str(cap.id)}
            if parse_fact_ref(ref) is not None and not providers:
                problems.add(
                    "unprovided_fact",
                    f"capability {cap.id!r}",
                    f"requires {ref!r} but no other capability provides it",
                )
    if agent.deps_type is not None and not isinstance(agent.deps_type, type):
        problems.add("invalid_deps_type", "agent", "deps_type must be a class (or None)")
    _check_models(problems, agent.models)
    _check_fact_types(problems, agent.facts, provided)
    if routes is not None:
        _check_routes(problems, valid, routes)
    return problems.items


def describe_problem(problem: Mapping[str, str]) -> str:
    """``where: message (code)``, e.g. ``capability 'orders.lookup': description must be
    non-blank text (empty_description)``: what a person reads to fix the definition."""
    return f"{problem['where']}: {problem['message']} ({problem['code']})"


def compile_manifest(
    agent: AgentDefinition, *, routes: Mapping[str, ModelRoute | None] | None = None
) -> tuple[dict[str, Any], str]:
    """Validate ``agent`` (with the kernel's model ``routes``, when given) and return its
    manifest and fingerprint."""
    problems = check_agent(agent, routes=routes)
    if problems:
        listed = "; ".join(describe_problem(p) for p in problems)
        raise AgentCompilationError(
            f"the agent definition has {len(problems)} problem(s): {listed}",
            context={"problems": problems},
        )
    manifest = build_manifest(agent)
    return manifest, manifest_fingerprint(manifest)
