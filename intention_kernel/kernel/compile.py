"""``compile``: judge an agent definition as a whole and fingerprint its manifest.

Why list every problem at once: fixing a definition one error per run is slow and hides
related mistakes (a renamed fact breaks several capabilities). ``AgentCompilationError``
carries them all in ``context["problems"]``, each ``{"code", "where", "message"}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from ..contracts.errors import AgentCompilationError, KernelError
from ..contracts.ids import validate_id
from .agent import AgentDefinition
from .capability import Capability, Guidance
from .facts import parse_fact_ref
from .manifest import build_manifest, manifest_fingerprint
from .states import ConfirmationMode, EffectKind

__all__ = ["check_agent", "compile_manifest"]

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


def check_agent(agent: object) -> list[dict[str, str]]:
    """Every problem of ``agent``, in definition order; empty when it compiles."""
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
    for cap in valid:
        for ref in cap.requires:
            providers = provided.get(str(ref), set()) - {str(cap.id)}
            if parse_fact_ref(ref) is not None and not providers:
                problems.add(
                    "unprovided_fact",
                    f"capability {cap.id!r}",
                    f"requires {ref!r} but no other capability provides it",
                )
    return problems.items


def compile_manifest(agent: AgentDefinition) -> tuple[dict[str, Any], str]:
    """Validate ``agent`` and return its manifest and fingerprint."""
    problems = check_agent(agent)
    if problems:
        raise AgentCompilationError(
            f"the agent definition has {len(problems)} problem(s)",
            context={"problems": problems},
        )
    manifest = build_manifest(agent)
    return manifest, manifest_fingerprint(manifest)
