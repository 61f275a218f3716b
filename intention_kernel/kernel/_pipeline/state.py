"""The data that flows through the pipeline stages of one turn.

Why one mutable record: each stage fills its own field (``projection``, ``interpretation``,
``plan``, ``outcomes``, ``reduction``, ``response``) and reads only earlier ones, which keeps the
stages small and the order visible in ``run_pipeline``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ...contracts.checkpoint import AgendaItem, Evidence, FactRecord, Interaction, KernelCheckpoint
from ...contracts.durability import TurnScope
from ...contracts.errors import FlowControlError
from ...contracts.events import EventCategory, KernelEvent
from ...contracts.gateway import ModelRefusal
from ...contracts.receipts import EffectReceipt
from .._agent import AgentDefinition
from .._capability import Capability
from .._completion import CompletionTokens
from .._context import ExternalCompletion, TurnInfo
from .._events import EventRecorder
from .._facts import FactRef
from .._failures import ErrorClassifier, StepError
from .._flow import FlowGate
from .._limits import KernelLimits
from .._prompts import Catalog
from .._response import Response, TurnUsage
from .._routing import ModelRoute
from .._states import HoldReason, StepStatus
from .._visibility import FactView
from ..approval import Approval, ConfirmationAnswer
from ..streaming import Progress

__all__ = [
    "AgentRuntime",
    "Answer",
    "Composition",
    "HeldStep",
    "Intention",
    "Interpretation",
    "Meter",
    "Plan",
    "PlannedStep",
    "Reduction",
    "StepOutcome",
    "TurnState",
]


class Intention(BaseModel):
    """One thing the user wants done: a capability and its (unvalidated) input."""

    model_config = ConfigDict(extra="ignore")

    capability: str
    input: dict[str, JsonValue] = Field(default_factory=dict)


class Answer(BaseModel):
    """The user's answer to the active interaction, as the model read it from their words."""

    model_config = ConfigDict(extra="ignore")

    option: str
    interaction_id: str | None = None


class Interpretation(BaseModel):
    """What the interpreting model must answer."""

    model_config = ConfigDict(extra="ignore")

    intentions: list[Intention] = Field(default_factory=list)
    answer: Answer | None = None
    reply: str | None = None
    more: bool = False
    """The model wants to see these intentions' results before deciding what else to do: the
    kernel interprets again after they ran (a further round, ``KernelLimits.max_rounds``)."""


class Composition(BaseModel):
    """What the composing model must answer: text and the evidence ids it relies on."""

    model_config = ConfigDict(extra="ignore")

    text: str
    citations: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AgentRuntime:
    """Everything compile fixed for the agent, shared by all its turns."""

    definition: AgentDefinition
    fingerprint: str
    capabilities: Mapping[str, Capability]
    catalog: Catalog
    routes: Mapping[str, ModelRoute]
    """The model of each task (``routing.TASKS``)."""
    ports: Mapping[str, Any]
    limits: KernelLimits
    composition_schema: dict[str, JsonValue]
    facts: FactView
    """What the model may see of each fact type."""
    clock: Callable[[], datetime]
    """The kernel's clock: every time it records (events, messages, approvals, durations)."""
    ids: Callable[[str], str]
    """The kernel's id generator (``prefix -> id``): trace, evidence and execution ids."""
    classify_error: ErrorClassifier | None = None
    """The host's mapping of a capability's exception to a ``StepError`` (``None``: default)."""
    deps: Any = None
    """The kernel's dependencies (``Kernel(deps=...)``): a turn's ``context.deps`` by default."""
    flow: FlowGate | None = None
    """Budgets and provider limits around each model call (``None``: none declared)."""
    completion: CompletionTokens | None = None
    """Signs and checks completion tokens (``Kernel(completion_secret=...)``)."""
    outbox_categories: frozenset[EventCategory] = frozenset(EventCategory)
    """The event categories a turn commits to the outbox (``Kernel(outbox_categories=...)``)."""


@dataclass(slots=True)
class Meter:
    """Tokens and model calls of one ``run``, across the attempts of its turn."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    def usage(self) -> TurnUsage:
        return TurnUsage(self.input_tokens, self.output_tokens, self.calls)


@dataclass(slots=True)
class PlannedStep:
    step_id: str
    capability: Capability
    input: BaseModel
    input_json: dict[str, JsonValue]
    after: tuple[str, ...] = ()
    """Steps of this turn that must complete first (they provide a required fact)."""
    approval: Approval | None = None
    """Set when the step resumes an accepted kernel confirmation."""
    answer: ConfirmationAnswer | None = None
    """Set when the step resumes its own (capability-owned) confirmation."""
    external: ExternalCompletion | None = None
    """Set when the step resumes its ``AwaitingExternal`` with the outside world's result."""


@dataclass(frozen=True, slots=True)
class HeldStep:
    """A valid step that does not run this turn: awaiting consent or a missing fact."""

    step: PlannedStep
    status: HoldReason
    reason: str
    missing: tuple[str, ...] = ()


@dataclass(slots=True)
class Plan:
    steps: list[PlannedStep] = field(default_factory=list)
    held: list[HeldStep] = field(default_factory=list)
    clarifications: list[str] = field(default_factory=list)
    repaired: bool = False
    notes: list[str] = field(default_factory=list)
    """Kernel-worded lines about resumed work (cancelled, asked again, still pending)."""
    resolved: set[str] = field(default_factory=set)
    """Agenda item ids this turn takes off the agenda (answered, resumed or cancelled)."""
    close_interaction: bool = False
    """The active interaction was answered this turn."""
    resurface: bool = False
    """Show the still-pending interaction again (the user restated what it waits for)."""
    decisions: list[dict[str, JsonValue]] = field(default_factory=list)
    """Approval and decline records to keep in the checkpoint's metadata."""


@dataclass(slots=True)
class StepOutcome:
    """How one planned step ended this turn, with what reduce and compose need of it."""

    step: PlannedStep
    status: StepStatus
    output: JsonValue = None
    facts: list[tuple[FactRef, str | None, JsonValue]] = field(default_factory=list)
    evidence: Evidence | None = None
    text: str | None = None
    reason: str | None = None
    prompt: str | None = None
    options: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    """The options of a capability-owned confirmation that give consent."""
    expires_after: float | None = None
    """Seconds a capability-owned confirmation may be accepted for (``None``: no limit)."""
    missing: tuple[str, ...] = ()
    data: dict[str, JsonValue] = field(default_factory=dict)
    """What a capability-owned confirmation asks about (kept for resuming it)."""
    receipts: list[EffectReceipt] = field(default_factory=list)
    derived_from: tuple[str, ...] = ()
    event: KernelEvent | None = None
    artifacts: dict[str, JsonValue] = field(default_factory=dict)
    """What a completed step returned for the host (``Completed.artifacts``), stored form."""
    error: StepError | None = None
    """Set when the step ended by an exception (or its timeout): how it is reported."""
    error_type: str | None = None
    """That exception's qualified class name, for the step's event (never its message)."""


@dataclass(slots=True)
class Reduction:
    facts: list[FactRecord]
    agenda: list[AgendaItem]
    interaction: Interaction | None
    new_interaction: Interaction | None
    receipts: list[EffectReceipt]
    evidence: list[Evidence]
    held: list[HeldStep] = field(default_factory=list)
    """The plan's held steps as stored: a consent hold whose facts did not come waits instead."""


@dataclass(slots=True)
class TurnState:
    runtime: AgentRuntime
    scope: TurnScope
    turn: TurnInfo
    host_context: Mapping[str, Any]
    recorder: EventRecorder
    checkpoint: KernelCheckpoint | None
    deadline: float
    facts: dict[str, FactRecord] = field(default_factory=dict)
    """Facts of the loaded checkpoint by id (read-only for stages before reduce)."""
    start_event: KernelEvent | None = None
    projection: dict[str, JsonValue] = field(default_factory=dict)
    interpretation: Interpretation | None = None
    plan: Plan | None = None
    plan_event: KernelEvent | None = None
    outcomes: list[StepOutcome] = field(default_factory=list)
    reduction: Reduction | None = None
    response: Response | None = None
    updates: list[str] = field(default_factory=list)
    """Kernel-worded news about earlier work (a reconciled write), added to this turn's answer."""
    meter: Meter = field(default_factory=Meter)
    chosen: tuple[str, ...] | None = None
    """The capabilities shown to ``interpret`` (``None``: the whole catalog)."""
    refusal: ModelRefusal | None = None
    """The provider declined to interpret or select: the turn answers safely, runs nothing."""
    progress: Progress | None = None
    """A ``stream`` consumer's listener (``None`` for ``run``): what it is shown is provisional."""
    deps: Any = None
    """The dependencies this turn's capabilities see as ``context.deps`` (never stored)."""
    stopped: FlowControlError | None = None
    """A budget ran out at a model call: the turn answers in the kernel's words (``budget``)."""
    round: int = 1
    """The planning round: 1, then one more each time the model asked to see results."""
    numbered: int = 0
    """``step-N`` ids given out so far this turn (steps of every round share one sequence)."""
