"""The public surface is deliberate: each package's ``__all__`` is exactly the list below.

Adding or removing a name is an API change, made here in the same change. Every exported name
imports, is documented (a class or function docstring, or a docstring under a constant or type
alias) and is not private. The lists keep ruff's ``__all__`` order: constants, classes, then
functions, each alphabetical.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from typing import Any

import pytest

TOP_LEVEL = [
    "DEFAULT_LIMITS",
    "SCHEMA_VERSION",
    "AgendaItem",
    "AgendaStatus",
    "AgentCompilationError",
    "AgentDefinition",
    "Capability",
    "CapabilityContext",
    "CheckpointCorruptError",
    "CheckpointIncompatibleError",
    "CompiledAgent",
    "Completed",
    "ConfigurationError",
    "ConfirmationHeld",
    "ConfirmationMode",
    "Durability",
    "DurabilityError",
    "DurabilityStore",
    "DurableTurnResult",
    "EffectAuthority",
    "EffectConflictError",
    "EffectError",
    "EffectExecution",
    "EffectIdentity",
    "EffectKind",
    "EffectNotAppliedError",
    "EffectOperation",
    "EffectReceipt",
    "EffectUncertainError",
    "ErrorCode",
    "EventCategory",
    "EventSink",
    "Evidence",
    "FactRecord",
    "FactType",
    "Failed",
    "Guidance",
    "HoldReason",
    "Interaction",
    "InvalidIdError",
    "InvalidInputError",
    "JsonLimits",
    "JsonValue",
    "Kernel",
    "KernelCheckpoint",
    "KernelError",
    "KernelEvent",
    "KernelLimits",
    "LeaseLostError",
    "Message",
    "ModelGateway",
    "ModelGatewayError",
    "ModelOutputDelta",
    "ModelRefusal",
    "ModelRequest",
    "ModelResponse",
    "ModelVisibility",
    "NeedsConfirmation",
    "NeedsDependency",
    "NeedsInput",
    "ProducedFact",
    "ReceiptStatus",
    "ReconcileOutcome",
    "ReconciliationRecord",
    "Response",
    "SchemaValidationError",
    "SerializationError",
    "StepFinished",
    "StepStarted",
    "StepStatus",
    "StoreSchemaError",
    "StoredEvent",
    "StreamItem",
    "StreamingModelGateway",
    "TextDelta",
    "TurnCompleted",
    "TurnConflictError",
    "TurnResult",
    "TurnScope",
    "TurnTimeoutError",
    "UsageError",
    "__version__",
    "define_agent",
    "define_capability",
    "define_fact",
]

KERNEL = [
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

CONTRACTS = [
    "DEFAULT_LIMITS",
    "SCHEMA_VERSION",
    "AgendaItem",
    "AgendaStatus",
    "AgentCompilationError",
    "CheckpointCorruptError",
    "CheckpointIncompatibleError",
    "ConfigurationError",
    "Durability",
    "DurabilityError",
    "DurabilityStore",
    "DurableTurnResult",
    "EffectAuthority",
    "EffectConflictError",
    "EffectError",
    "EffectExecution",
    "EffectIdentity",
    "EffectNotAppliedError",
    "EffectOperation",
    "EffectReceipt",
    "EffectUncertainError",
    "ErrorCode",
    "EventCategory",
    "EventSink",
    "Evidence",
    "FactRecord",
    "Interaction",
    "InvalidIdError",
    "InvalidInputError",
    "JsonLimits",
    "JsonValue",
    "KernelCheckpoint",
    "KernelError",
    "KernelEvent",
    "LeaseLostError",
    "Message",
    "ModelGateway",
    "ModelGatewayError",
    "ModelOutputDelta",
    "ModelRefusal",
    "ModelRequest",
    "ModelResponse",
    "ReceiptStatus",
    "ReconcileOutcome",
    "ReconciliationRecord",
    "SchemaValidationError",
    "SerializationError",
    "StoreSchemaError",
    "StoredEvent",
    "StreamingModelGateway",
    "TurnConflictError",
    "TurnScope",
    "TurnTimeoutError",
    "UsageError",
]

HTTP = [
    "Authenticator",
    "Authorizer",
    "BearerTokens",
    "Principal",
    "Server",
    "create_app",
    "hash_token",
    "server_config",
]
"""The HTTP service (the ``http`` extra: Starlette and uvicorn, installed with ``dev``)."""

PACKAGES = [
    ("intention_kernel", TOP_LEVEL),
    ("intention_kernel.kernel", KERNEL),
    ("intention_kernel.contracts", CONTRACTS),
    ("intention_kernel.http", HTTP),
]
DOCUMENTED_ELSEWHERE = {"JsonValue": "pydantic"}
"""Names re-exported from a dependency, which documents them."""


def _ruff_order(name: str) -> tuple[int, str]:
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defining_module(module_name: str, name: str) -> ast.Module:
    """The parsed source of the module that assigns ``name``, following relative imports."""
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = "." * node.level + (node.module or "")
                    package = module.__package__ or module_name
                    return _defining_module(
                        importlib.util.resolve_name(source, package), alias.name
                    )
    return tree


def _has_attribute_docstring(tree: ast.Module, name: str) -> bool:
    for node, following in zip(tree.body, tree.body[1:], strict=False):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
                and bool(following.value.value.strip())
            )
    return False


def _own_docstring(obj: Any) -> str | None:
    """A docstring the object itself declares (not inherited, not a dataclass signature)."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not isinstance(doc, str) or not doc.strip() or doc.startswith(f"{obj.__name__}("):
        return None
    return doc


@pytest.mark.parametrize(("package", "expected"), PACKAGES)
def test_all_is_exactly_the_listed_surface(package: str, expected: list[str]) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == expected
    assert expected == sorted(expected, key=_ruff_order)
    assert len(set(expected)) == len(expected)


@pytest.mark.parametrize(("package", "expected"), PACKAGES)
def test_every_exported_name_imports(package: str, expected: list[str]) -> None:
    namespace: dict[str, Any] = {}
    exec(f"from {package} import *", namespace)
    assert [name for name in expected if name not in namespace] == []


@pytest.mark.parametrize(("package", "expected"), PACKAGES)
def test_no_private_name_is_exported(package: str, expected: list[str]) -> None:
    assert [name for name in expected if _is_private(name)] == []


@pytest.mark.parametrize(("package", "expected"), PACKAGES)
def test_every_exported_name_is_documented(package: str, expected: list[str]) -> None:
    module = importlib.import_module(package)
    undocumented: list[str] = []
    for name in expected:
        obj = getattr(module, name)
        if name in DOCUMENTED_ELSEWHERE:
            documented = obj.__module__.startswith(DOCUMENTED_ELSEWHERE[name])
        elif name.startswith("__"):
            documented = True  # ``__version__``: a dunder says what it is
        elif inspect.isclass(obj) or inspect.isfunction(obj):
            documented = _own_docstring(obj) is not None
        else:  # a constant or a type alias: a docstring right under its assignment
            documented = _has_attribute_docstring(_defining_module(package, name), name)
        if not documented:
            undocumented.append(name)
    assert undocumented == []


def test_the_same_object_under_every_name() -> None:
    """A name exported at several levels is one object, not a copy or a look-alike."""
    top = importlib.import_module("intention_kernel")
    for package, expected in PACKAGES[1:]:
        module = importlib.import_module(package)
        for name in set(expected) & set(TOP_LEVEL):
            assert getattr(top, name) is getattr(module, name), name
