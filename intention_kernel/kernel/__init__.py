"""The agent kernel: capabilities, compile, and the durable turn pipeline.

Talks to storage only through the ``Durability``/``TurnScope`` protocols and to models only
through the ``ModelGateway`` protocol (model strings are resolved by ``intention_kernel.models``).
"""

from ._agent import AgentDefinition, define_agent
from ._budgets import Budget, BudgetContext, Limit, Price
from ._capability import Capability, Guidance, define_capability
from ._compat import Compatibility, Migration, admit_checkpoint
from ._compile import compile_manifest
from ._completion import CompletionTokens
from ._context import CapabilityContext, ExternalCompletion, TurnInfo
from ._events import Redactor
from ._failures import ErrorClassifier, StepError
from ._function_capability import capability
from ._kernel import Kernel
from ._keys import provider_idempotency_key
from ._limits import KernelLimits
from ._pending import ConfirmationField, PendingConfirmation, pending_confirmation
from ._policies import Policy, PolicyDecision, PolicyRequest, allow, deny, require_confirmation
from ._response import Response, StepSummary, TurnResult, TurnUsage
from ._results import (
    AwaitingExternal,
    Completed,
    Failed,
    NeedsConfirmation,
    NeedsDependency,
    NeedsInput,
    ProducedFact,
)
from ._runtime import CompiledAgent, request_fingerprint
from ._schedule import Schedule, define_schedule, describe_schedule
from ._scheduler import Scheduler
from ._states import (
    Confirmation,
    ConfirmationMode,
    Effect,
    EffectKind,
    HoldReason,
    ModelVisibility,
    StepStatus,
)
from ._visibility import FactType, define_fact
from ._watch import Watched
from ._worker import Worker, WorkerSettings
from .approval import Approval, ConfirmationAnswer, operation_digest
from .streaming import (
    ConfirmationHeld,
    ProviderWait,
    RoundStarted,
    StepFinished,
    StepProgress,
    StepStarted,
    StreamItem,
    TextDelta,
    TurnCompleted,
)

__all__ = [
    "AgentDefinition",
    "Approval",
    "AwaitingExternal",
    "Budget",
    "BudgetContext",
    "Capability",
    "CapabilityContext",
    "Compatibility",
    "CompiledAgent",
    "Completed",
    "CompletionTokens",
    "Confirmation",
    "ConfirmationAnswer",
    "ConfirmationField",
    "ConfirmationHeld",
    "ConfirmationMode",
    "Effect",
    "EffectKind",
    "ErrorClassifier",
    "ExternalCompletion",
    "FactType",
    "Failed",
    "Guidance",
    "HoldReason",
    "Kernel",
    "KernelLimits",
    "Limit",
    "Migration",
    "ModelVisibility",
    "NeedsConfirmation",
    "NeedsDependency",
    "NeedsInput",
    "PendingConfirmation",
    "Policy",
    "PolicyDecision",
    "PolicyRequest",
    "Price",
    "ProducedFact",
    "ProviderWait",
    "Redactor",
    "Response",
    "RoundStarted",
    "Schedule",
    "Scheduler",
    "StepError",
    "StepFinished",
    "StepProgress",
    "StepStarted",
    "StepStatus",
    "StepSummary",
    "StreamItem",
    "TextDelta",
    "TurnCompleted",
    "TurnInfo",
    "TurnResult",
    "TurnUsage",
    "Watched",
    "Worker",
    "WorkerSettings",
    "admit_checkpoint",
    "allow",
    "capability",
    "compile_manifest",
    "define_agent",
    "define_capability",
    "define_fact",
    "define_schedule",
    "deny",
    "describe_schedule",
    "operation_digest",
    "pending_confirmation",
    "provider_idempotency_key",
    "request_fingerprint",
    "require_confirmation",
]
