"""The agent kernel: capabilities, compile, and the durable turn pipeline.

Talks to storage only through the ``Durability``/``TurnScope`` protocols and to models only
through the ``ModelGateway`` protocol (model strings are resolved by ``intention_kernel.models``).
"""

from .agent import AgentDefinition, define_agent
from .approval import Approval, ConfirmationAnswer, operation_digest
from .capability import Capability, Guidance, define_capability
from .compat import Compatibility, Migration
from .context import CapabilityContext, StepEvents, TurnInfo
from .events import Redactor
from .failures import ErrorClassifier, StepError
from .kernel import Kernel
from .keys import provider_idempotency_key
from .limits import KernelLimits
from .manifest import build_manifest, manifest_fingerprint
from .policies import Policy, PolicyDecision, PolicyRequest, allow, deny, require_confirmation
from .response import Response, StepSummary, TurnResult, TurnUsage
from .results import (
    CapabilityResult,
    Completed,
    Failed,
    NeedsConfirmation,
    NeedsDependency,
    NeedsInput,
    ProducedFact,
)
from .runtime import CompiledAgent, request_fingerprint
from .states import (
    Confirmation,
    ConfirmationMode,
    Effect,
    EffectKind,
    HoldReason,
    ModelVisibility,
    StepStatus,
)
from .streaming import (
    ConfirmationHeld,
    StepFinished,
    StepStarted,
    StreamItem,
    TextDelta,
    TurnCompleted,
)
from .visibility import FactType, define_fact

__all__ = [
    "AgentDefinition",
    "Approval",
    "Capability",
    "CapabilityContext",
    "CapabilityResult",
    "Compatibility",
    "CompiledAgent",
    "Completed",
    "Confirmation",
    "ConfirmationAnswer",
    "ConfirmationHeld",
    "ConfirmationMode",
    "Effect",
    "EffectKind",
    "ErrorClassifier",
    "FactType",
    "Failed",
    "Guidance",
    "HoldReason",
    "Kernel",
    "KernelLimits",
    "Migration",
    "ModelVisibility",
    "NeedsConfirmation",
    "NeedsDependency",
    "NeedsInput",
    "Policy",
    "PolicyDecision",
    "PolicyRequest",
    "ProducedFact",
    "Redactor",
    "Response",
    "StepError",
    "StepEvents",
    "StepFinished",
    "StepStarted",
    "StepStatus",
    "StepSummary",
    "StreamItem",
    "TextDelta",
    "TurnCompleted",
    "TurnInfo",
    "TurnResult",
    "TurnUsage",
    "allow",
    "build_manifest",
    "define_agent",
    "define_capability",
    "define_fact",
    "deny",
    "manifest_fingerprint",
    "operation_digest",
    "provider_idempotency_key",
    "request_fingerprint",
    "require_confirmation",
]
