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
from pathlib import Path
from typing import Any

import pytest

TOP_LEVEL = [
    "DEFAULT_LIMITS",
    "SCHEMA_VERSION",
    "AgendaItem",
    "AgendaStatus",
    "AgentCompilationError",
    "AgentDefinition",
    "AwaitingExternal",
    "Budget",
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
    "FlowControlError",
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
    "Limit",
    "Message",
    "MissedRuns",
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
    "Price",
    "ProducedFact",
    "ProviderWait",
    "ReceiptStatus",
    "ReconcileOutcome",
    "ReconciliationRecord",
    "Response",
    "RoundStarted",
    "Schedule",
    "ScheduleInfo",
    "Scheduler",
    "SchemaValidationError",
    "SerializationError",
    "StepFinished",
    "StepProgress",
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
    "Watched",
    "Worker",
    "WorkerSettings",
    "__version__",
    "capability",
    "define_agent",
    "define_capability",
    "define_fact",
    "define_schedule",
]

KERNEL = [
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
    "FlowControlError",
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

CLI = [
    "main",
]
"""The command line (the ``cli`` extra); its commands live in private modules."""

HTTP_INSPECTOR = [
    "OPERATOR",
    "VIEWER",
    "ProviderKey",
    "create_inspector",
    "inspector_role",
]
"""The operator's web inspector (pages in private modules, one per page)."""

OPERATIONS = [
    "CompatReport",
    "Diagnosis",
    "Finding",
    "RefusedThread",
    "age",
    "answer_line",
    "compat_report",
    "diagnose_thread",
    "redact",
    "turn_answer",
    "turn_input",
]
"""Operator logic shared by the command line and the inspector."""

RELAY = [
    "SINK_SCHEMES",
    "Backoff",
    "BatchReport",
    "EventSink",
    "OutboxNotifier",
    "OutboxRelay",
    "OutboxSource",
    "OutboxStats",
    "OutcomeKind",
    "Partition",
    "PartitionLease",
    "Partitions",
    "PublishOutcome",
    "RelayStats",
    "open_sink",
    "sign",
    "verify_signature",
]

RELAY_SINKS = [
    "SINK_SCHEMES",
    "open_sink",
]

MODELS = [
    "DIALECTS",
    "PROVIDERS",
    "TASK_GUIDES",
    "AnthropicGateway",
    "Dialect",
    "Failure",
    "ModelRefusal",
    "OpenAIGateway",
    "Provider",
    "PydanticAIGateway",
    "RetryPolicy",
    "check_schema",
    "resolve_model",
    "strip_null_optionals",
    "to_dialect",
]

DURABILITY = [
    "DurabilityEngine",
    "DurableStore",
    "HistoryStorage",
    "Inbox",
    "InboxStorage",
    "InspectionStorage",
    "Lease",
    "MemoryDurability",
    "MemoryStore",
    "NewRequest",
    "OpenedTurn",
    "OutboxStorage",
    "Reconciliation",
    "StoredTurn",
    "Submitted",
    "TurnCommit",
    "TurnStorage",
    "open_durability",
]

DURABILITY_MEMORY = [
    "MemoryDurability",
    "MemoryStore",
    "from_location",
    "schema_info_at",
]

DURABILITY_SQLITE = [
    "SQLiteDurability",
    "from_location",
    "read_schema_info",
    "schema_info_at",
]

DURABILITY_POSTGRES = [
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "LeaseSettings",
    "PostgresDurability",
    "admin_connection",
    "check_schema_name",
    "drop_schema",
    "from_location",
    "init_connection",
    "read_schema_info",
    "schema_info_at",
]

TELEMETRY = [
    "AVAILABLE",
    "FlowMetrics",
    "InboxBacklog",
    "RelayTelemetry",
    "Telemetry",
    "UncertainReceipts",
    "continued_trace",
    "current_traceparent",
    "db_system",
    "effect_span",
    "key_hash",
    "model_span",
    "plan_span",
    "step_span",
]

TESTING = [
    "CrashPoint",
    "EventCollector",
    "MemoryDurability",
    "MemoryStore",
    "ScriptEntry",
    "ScriptedModelGateway",
    "SimulatedCrash",
    "crash_hook",
    "raise_at",
]

CONFORMANCE = [
    "ROLES",
    "ConformanceHarness",
    "DurabilityConformance",
    "HistoryConformance",
    "InspectionConformance",
    "Provider",
    "TurnConformance",
    "commit_simple",
    "conformance_test",
    "effect",
    "make_events",
    "make_result",
    "turn_storage",
]

EXAMPLE = [
    "HOTELS",
    "FakeHotelProvider",
    "build_agent",
    "compile_desk",
    "scripted_model",
]
"""The shipped example agent (``python -m intention_kernel.demo``)."""

MCP = [
    "IDEMPOTENCY_META_KEY",
    "EffectKey",
    "McpCallNotApplied",
    "McpError",
    "McpServer",
    "McpToolDefinitionError",
    "McpUnavailableError",
    "ServerTarget",
    "ToolOverride",
    "capabilities_from_mcp",
]
"""MCP tools as capabilities (the ``mcp`` extra: the official MCP SDK)."""

INGRESS = [
    "MAX_MESSAGE_BYTES",
    "IngressStats",
    "NatsIngress",
    "RedisIngress",
    "TurnMessage",
    "decode_turn",
    "encode_turn",
    "partition_of",
]
"""Turns from brokers (``NatsIngress`` and ``RedisIngress`` load their extras when used)."""

MCP_EXAMPLE = [
    "notes_agent",
    "scripted_model",
    "server_parameters",
]
"""The example agent on an MCP server (docs/mcp.md)."""

PACKAGES = [
    ("intention_kernel", TOP_LEVEL),
    ("intention_kernel.kernel", KERNEL),
    ("intention_kernel.contracts", CONTRACTS),
    ("intention_kernel.http", HTTP),
]
PINNED = [
    *PACKAGES,
    ("intention_kernel.cli", CLI),
    ("intention_kernel.http.inspector", HTTP_INSPECTOR),
    ("intention_kernel.operations", OPERATIONS),
    ("intention_kernel.relay", RELAY),
    ("intention_kernel.relay.sinks", RELAY_SINKS),
    ("intention_kernel.models", MODELS),
    ("intention_kernel.durability", DURABILITY),
    ("intention_kernel.durability.memory", DURABILITY_MEMORY),
    ("intention_kernel.durability.sqlite", DURABILITY_SQLITE),
    ("intention_kernel.durability.postgres", DURABILITY_POSTGRES),
    ("intention_kernel.telemetry", TELEMETRY),
    ("intention_kernel.testing", TESTING),
    ("intention_kernel.testing.conformance", CONFORMANCE),
    ("intention_kernel.examples.travel_desk", EXAMPLE),
    ("intention_kernel.mcp", MCP),
    ("intention_kernel.examples.mcp_notes", MCP_EXAMPLE),
    ("intention_kernel.ingress", INGRESS),
]
"""Every public package and its ``__all__`` (the first four are also checked for order and
docstrings above)."""
NO_ALL = {"intention_kernel.examples"}
"""Public packages without ``__all__``: a namespace that only holds the example."""
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


PUBLIC_MODULES = [
    "intention_kernel",
    "intention_kernel.cli",
    "intention_kernel.contracts",
    "intention_kernel.contracts.checkpoint",
    "intention_kernel.contracts.codec",
    "intention_kernel.contracts.durability",
    "intention_kernel.contracts.errors",
    "intention_kernel.contracts.events",
    "intention_kernel.contracts.flow",
    "intention_kernel.contracts.gateway",
    "intention_kernel.contracts.ids",
    "intention_kernel.contracts.inbox",
    "intention_kernel.contracts.inspect",
    "intention_kernel.contracts.outbox",
    "intention_kernel.contracts.receipts",
    "intention_kernel.contracts.sinks",
    "intention_kernel.contracts.turns",
    "intention_kernel.demo",
    "intention_kernel.durability",
    "intention_kernel.durability.engine",
    "intention_kernel.durability.factory",
    "intention_kernel.durability.memory",
    "intention_kernel.durability.postgres",
    "intention_kernel.durability.rules",
    "intention_kernel.durability.sqlite",
    "intention_kernel.durability.storage",
    "intention_kernel.durability.store",
    "intention_kernel.examples",
    "intention_kernel.examples.mcp_notes",
    "intention_kernel.examples.travel_desk",
    "intention_kernel.http",
    "intention_kernel.http.inspector",
    "intention_kernel.ingress",
    "intention_kernel.kernel",
    "intention_kernel.kernel.approval",
    "intention_kernel.kernel.consent",
    "intention_kernel.kernel.streaming",
    "intention_kernel.mcp",
    "intention_kernel.models",
    "intention_kernel.operations",
    "intention_kernel.operations.compat_report",
    "intention_kernel.operations.diagnosis",
    "intention_kernel.relay",
    "intention_kernel.relay.signing",
    "intention_kernel.relay.sinks",
    "intention_kernel.sync",
    "intention_kernel.telemetry",
    "intention_kernel.testing",
    "intention_kernel.testing.conformance",
    "intention_kernel.testing.conformance.flow",
    "intention_kernel.testing.conformance.inbox",
    "intention_kernel.testing.conformance.outbox",
]
"""Every module importable by a public path (no segment starts with ``_``). A module not listed
here is private: it may be renamed, split or moved without notice. Adding one is an API
change, made here deliberately."""


def public_path_modules() -> list[str]:
    """The dotted names of the package's modules whose every segment lacks a leading ``_``."""
    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "intention_kernel").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not any(part.startswith("_") for part in parts):
            found.append(".".join(parts))
    return sorted(found)


def test_the_public_modules_are_exactly_the_listed_ones() -> None:
    found = public_path_modules()
    added = sorted(set(found) - set(PUBLIC_MODULES))
    removed = sorted(set(PUBLIC_MODULES) - set(found))
    assert not added, f"new public-path modules {added}: give them a leading _ or pin them here"
    assert not removed, f"public-path modules {removed} are gone: that breaks an import path"
    assert sorted(PUBLIC_MODULES) == PUBLIC_MODULES


PUBLIC_MODULE_BUDGET = 52
"""At most this many public-path modules: a file is private by default outside ``contracts/``;
a package's ``__all__`` is its API, not the files behind it. (47: the inbox's contract and its
conformance module, each beside the outbox's; 49: the ``mcp`` extra and its example; 51: the
budget counters' contract and conformance module, beside the inbox's; 52: ``ingress``, turns
from brokers.)"""


def test_the_public_modules_stay_within_their_budget() -> None:
    names = public_path_modules()
    assert len(names) <= PUBLIC_MODULE_BUDGET, f"{len(names)} public-path modules: {names}"


def test_the_shipped_package_holds_no_fault_machinery_and_keeps_crash_points_private() -> None:
    """The campaign, planted bugs and scratch schemas are this repository's own test code (under
    ``tests/support``); hosts arm crash points through ``intention_kernel.testing``."""
    import intention_kernel.testing as testing
    from intention_kernel import _crashpoints

    names = public_path_modules()
    for gone in ("campaign", "planted", "postgres"):
        assert f"intention_kernel.testing.{gone}" not in names
    assert "intention_kernel.crashpoints" not in names
    for name in ("CrashPoint", "SimulatedCrash", "crash_hook", "raise_at"):
        assert getattr(testing, name) is getattr(_crashpoints, name)


def test_the_public_module_count_sees_private_segments() -> None:
    names = public_path_modules()
    assert "intention_kernel.kernel" in names
    assert "intention_kernel.http.inspector" in names
    assert not [n for n in names if any(part.startswith("_") for part in n.split("."))]
    assert "intention_kernel.kernel._pipeline.plan" not in names


@pytest.mark.parametrize(("package", "expected"), PINNED, ids=[p for p, _ in PINNED])
def test_every_public_package_exports_exactly_its_pinned_names(
    package: str, expected: list[str]
) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(expected)
    assert len(set(module.__all__)) == len(module.__all__)
    assert [name for name in expected if _is_private(name)] == []
    assert [name for name in expected if not hasattr(module, name)] == []


def test_every_public_package_is_pinned() -> None:
    root = Path(__file__).resolve().parent.parent
    packages = {
        name
        for name in public_path_modules()
        if (root / name.replace(".", "/") / "__init__.py").is_file()
    }
    assert packages - NO_ALL == {package for package, _ in PINNED}
    for package in NO_ALL:
        assert not hasattr(importlib.import_module(package), "__all__"), package
