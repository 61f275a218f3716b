"""``define_agent``: a named, versioned set of capabilities with instructions and policies.

Why ``agent.capability`` registers on a frozen definition: the decorator form puts a
capability's definition next to its agent, as ``@capability`` puts it next to its function,
and a module reads top to bottom (the agent, then what it can do). The definition stays inert
data: ``kernel.compile`` judges it and keeps what it compiled, whatever is registered after.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, overload

from ..contracts.errors import AgentCompilationError
from ._budgets import Budget
from ._capability import Capability, Guidance
from ._function_capability import DEFAULT_VERSION, Function, capability_from
from ._policies import Policy
from ._routing import ModelChoice
from ._schedule import Schedule
from ._states import Confirmation, ConfirmationMode, Effect, EffectKind
from ._visibility import FactType

__all__ = ["AgentDefinition", "define_agent"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """A named, versioned set of capabilities with instructions and policies; inert data
    until ``kernel.compile`` judges it.

    ``models`` holds the per-task models as ``(task, model)`` pairs sorted by task
    (``dict(agent.models)`` reads them back); ``facts`` what a model may see of each fact type.
    """

    id: str
    version: str
    description: str
    capabilities: tuple[Capability, ...]
    instructions: str = ""
    model: str | None = None
    policies: tuple[Policy, ...] = ()
    models: tuple[tuple[str, ModelChoice], ...] = ()
    facts: tuple[FactType, ...] = ()
    deps_type: type[Any] | None = None
    """The class of the host's dependencies (``Kernel(deps=...)``, ``run(deps=...)``)."""
    budgets: tuple[Budget, ...] = ()
    """Spend limits of this agent's model calls, on top of the kernel's (``docs/budgets.md``);
    not part of the fingerprint: an operator may change them without a new agent version."""
    schedules: tuple[Schedule, ...] = ()
    """Turns its workers submit on a cron (``define_schedule``, ``docs/schedules.md``); not
    part of the fingerprint: a schedule names no checkpoint shape."""

    @overload
    def capability(
        self,
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
        self,
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
        self,
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
        """``@capability`` that also registers the capability on this agent.

        As ``@agent.capability``, ``@agent.capability(...)`` or ``agent.capability(f, ...)``,
        with ``capability``'s options; it returns the ``Capability``, as ``@capability`` does,
        so the name it decorates is the capability either way. The agent is the one
        ``define_agent(...)`` returned, its capabilities in registration order after those
        given there: the manifest and the fingerprint are those of the same agent defined with
        ``capabilities=[...]``. A second capability with an id the agent already has is
        refused at once with ``AgentCompilationError`` (``duplicate_capability``) and nothing
        is registered; every other problem is listed by ``kernel.compile`` as usual.

        ``kernel.compile(agent)`` snapshots the definition: a capability registered after it
        is not part of that compiled agent (nor of its fingerprint). Register them all at
        import time, next to the agent, and compile once they are.
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
        # The defining scope, so annotations naming its local classes resolve.
        return capability_from(fn, options, sys._getframe(1).f_locals, self._register)

    def _register(self, cap: Capability) -> None:
        if isinstance(cap.id, str) and any(
            getattr(known, "id", None) == cap.id for known in self.capabilities
        ):
            problem = {
                "code": "duplicate_capability",
                "where": f"capability {cap.id!r}",
                "message": f"agent {self.id!r} already has a capability with this id",
            }
            raise AgentCompilationError(
                f"{problem['where']}: {problem['message']} ({problem['code']})",
                context={"problems": [problem]},
            )
        # Frozen for everything else: only registration adds to the capabilities tuple.
        object.__setattr__(self, "capabilities", (*self.capabilities, cap))


def define_agent(
    *,
    id: str,
    version: str,
    description: str,
    capabilities: Sequence[Capability] = (),
    instructions: str = "",
    model: str | None = None,
    policies: Sequence[Policy] = (),
    models: Mapping[str, ModelChoice] | None = None,
    facts: Sequence[FactType] = (),
    deps_type: type[Any] | None = None,
    budgets: Sequence[Budget] = (),
    schedules: Sequence[Schedule] = (),
) -> AgentDefinition:
    """Record an agent; ``kernel.compile(agent)`` validates it.

    ``model`` is passed to the kernel's gateway as the model to ask. ``models`` picks a model per
    task: ``{"interpret": ..., "compose": ..., "default": ...}``, each a ``ModelGateway`` or a
    model string (``"anthropic:claude-sonnet-4-5"``); the choices are part of the fingerprint.
    ``facts`` declares what a model may see of fact types (``define_fact``). ``deps_type`` is
    the class of the dependencies a turn runs with (``context.deps``, typed by
    ``CapabilityContext[Deps]``): a run whose deps are not an instance is refused
    (``INVALID_DEPS``). Not part of the fingerprint: deps are never stored. ``capabilities``
    may be left out and registered with ``@agent.capability`` instead. ``budgets`` bound this
    agent's model spend (``Budget``), on top of the kernel's. ``schedules`` are turns the
    agent's workers submit on a cron (``define_schedule``).
    """
    chosen = sorted((models or {}).items(), key=lambda item: str(item[0]))
    return AgentDefinition(
        id=id,
        version=version,
        description=description,
        capabilities=tuple(capabilities),
        instructions=instructions,
        model=model,
        policies=tuple(policies),
        models=tuple(chosen),
        facts=tuple(facts),
        deps_type=deps_type,
        budgets=tuple(budgets),
        schedules=tuple(schedules),
    )
