"""``capabilities_from_mcp``: a server's tools as capabilities, writes under the effect ledger.

Why each rule: an MCP tool's annotations are hints from the server, so only an explicit
``readOnlyHint: true`` makes a read; every other tool is a write, held for the user's consent
to its exact arguments (``confirmation="required"``) and run through ``run_effect``, at most
once per effect key. The consent question says what the specification's defaults say when a
hint is missing (destructive, open world). A call that may have reached the server and has no
answer is ``uncertain``; one that provably did not (never sent, rejected, ``isError``) is
``failed`` and may be asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import JsonValue, ValidationError

from ..contracts.codec import fingerprint
from ..contracts.errors import ErrorCode
from ..contracts.receipts import EffectAuthority
from ..kernel import (
    Capability,
    CapabilityContext,
    Completed,
    Confirmation,
    ConfirmationMode,
    Effect,
    EffectKind,
    Failed,
    define_capability,
)
from ._connection import McpServer
from ._errors import McpCallNotApplied, McpError, McpToolDefinitionError, McpUnavailableError
from ._results import _clean, error_text, stored
from ._schemas import SchemaModel, capability_name, schema_model, schema_problem

__all__ = ["EffectKey", "ToolOverride", "capabilities_from_mcp"]

EffectKey = Callable[[str, dict[str, JsonValue]], str]
"""``key(tool_name, arguments)``: the business operation a write is (``order:42``); the ledger
runs one call per key. The default is the tool name and a digest of the canonical arguments."""

REJECTED = frozenset(
    {types.PARSE_ERROR, types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS}
)
"""JSON-RPC errors that mean the server refused the request before running anything."""
_MAX_DESCRIPTION = 2000


@dataclass(frozen=True, slots=True)
class ToolOverride:
    """The host's word on one tool, over what the server's annotations say.

    ``effect="read"`` vouches that a tool without ``readOnlyHint`` writes nothing;
    ``effect="write"`` makes a tool the server calls read-only a write. ``confirmation`` is
    for writes (``"none"`` is refused at compile, as for every write). ``id`` replaces the
    mapped capability id (e.g. to resolve two names that map to one)."""

    id: str | None = None
    effect: Effect | None = None
    confirmation: Confirmation | None = None
    description: str | None = None
    version: str | None = None


def _hints(annotations: types.ToolAnnotations | None) -> list[str]:
    """What the consent question warns about: the spec's defaults when a hint is missing."""
    found = []
    if annotations is None or annotations.destructive_hint is not False:
        found.append("destructive: it may change or delete data")
    if annotations is None or annotations.open_world_hint is not False:
        found.append("open world: it may reach systems outside this server")
    return found


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _description(tool: types.Tool, override: ToolOverride) -> str:
    text = override.description or tool.description or tool.title or tool.name
    text = " ".join(text.split())
    return text[:_MAX_DESCRIPTION] or tool.name


def _output_schema(tool: types.Tool) -> dict[str, Any]:
    """``{"text", "structured"}``: the tool's output schema under ``structured`` (its
    definitions moved to the root, where its references point)."""
    inner = dict(tool.output_schema) if tool.output_schema is not None else {}
    defs = inner.pop("$defs", None) or inner.pop("definitions", None)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "structured": inner},
        "required": ["text"],
    }
    if defs is not None:
        schema["$defs"] = defs
    return schema


def _default_key(tool: str, arguments: dict[str, JsonValue]) -> str:
    return f"{tool}:{fingerprint(arguments)}"


async def capabilities_from_mcp(
    server: McpServer,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    overrides: Mapping[str, ToolOverride] | None = None,
    key: EffectKey | None = None,
    version: str = "1.0.0",
) -> list[Capability]:
    """The server's tools (``include`` only those, never the ``exclude``d) as capabilities
    with ids ``<server name>.<tool name>``. A tool that cannot be one (a bad name or schema,
    two names for one id) is refused with every problem in one ``McpToolDefinitionError``:
    exclude it, or override its id. Nothing is defined then."""
    overrides = dict(overrides or {})
    tools = await server.list_tools()
    names = [t.name for t in tools]
    wanted = set(names) if include is None else set(include)
    unknown = sorted((wanted | set(exclude) | set(overrides)) - set(names))
    problems: list[str] = [f"{n!r}: the server lists no such tool" for n in unknown]
    chosen = [t for t in tools if t.name in wanted and t.name not in set(exclude)]
    seen: dict[str, str] = {}
    caps: list[Capability] = []
    for tool in chosen:
        override = overrides.get(tool.name, ToolOverride())
        mapped = capability_name(tool.name)
        if mapped is None and override.id is None:
            problems.append(f"{tool.name[:80]!r}: not a valid tool name")
            continue
        cap_id = override.id or f"{server.name}.{mapped}"
        if cap_id in seen:
            problems.append(f"{tool.name!r} and {seen[cap_id]!r}: both map to {cap_id!r}")
            continue
        seen[cap_id] = tool.name
        found = [schema_problem(tool.input_schema, input=True)]
        if tool.output_schema is not None:
            found.append(schema_problem(tool.output_schema, input=False))
        bad = [p for p in found if p is not None]
        if bad:
            problems.extend(f"{tool.name!r}: {p}" for p in bad)
            continue
        caps.append(_capability(server, tool, cap_id, override, key or _default_key, version))
    if problems:
        raise McpToolDefinitionError(
            f"{len(problems)} problem(s) with the tools of MCP server {server.name!r}: "
            + "; ".join(problems[:20]),
            context={"server": server.name, "problems": problems},
        )
    return caps


def _capability(
    server: McpServer,
    tool: types.Tool,
    cap_id: str,
    override: ToolOverride,
    key: EffectKey,
    version: str,
) -> Capability:
    annotations = tool.annotations
    read_only = annotations is not None and annotations.read_only_hint is True
    effect: Effect = override.effect or (EffectKind.READ if read_only else EffectKind.WRITE)
    writes = effect == EffectKind.WRITE
    confirmation: Confirmation = override.confirmation or (
        ConfirmationMode.REQUIRED if writes else ConfirmationMode.NONE
    )
    title = f"{_description(tool, override).rstrip('.')} [MCP tool {tool.name} of {server.name}"
    hints = _hints(annotations)
    summary = _escaped(title + ("; " + "; ".join(hints) if hints else "") + "]")
    model_name = cap_id.replace(".", "_").replace("-", "_")
    output = schema_model(f"{model_name}_output", _output_schema(tool))
    call = _ToolCall(server, tool.name, key, output)
    return define_capability(
        id=cap_id,
        version=override.version or version,
        description=_description(tool, override),
        input=schema_model(f"{model_name}_input", tool.input_schema),
        output=call.output,
        execute=call.write if writes else call.read,
        effect=effect,
        confirmation=confirmation,
        consent_summary=summary if writes else None,
    )


class _Progress:
    """A call's progress notifications, as the step's progress (``StepProgress`` items of a
    streamed turn) until the call returned: none is shown after the step's end."""

    def __init__(self, context: CapabilityContext) -> None:
        self._context = context
        self.open = True

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self.open:
            text = _clean(message or "")
            self._context.report_progress(text, progress=progress, total=total)


@dataclass(frozen=True, slots=True)
class _ToolCall:
    """What one tool's capability runs: the call, and its result as the step's outcome."""

    server: McpServer
    tool: str
    key: EffectKey
    output: type[SchemaModel]

    async def read(self, context: CapabilityContext, arguments: SchemaModel) -> Completed | Failed:
        progress = _Progress(context)
        try:
            outcome, _ = await self.server.call(
                self.tool, arguments.model_dump(mode="json"), progress=progress
            )
        finally:
            progress.open = False
        if isinstance(outcome, BaseException):
            raise _call_error(outcome) from outcome
        value = stored(outcome)
        if value.get("is_error"):
            return Failed(f"the tool reported an error: {error_text(value)}", retryable=True)
        return self._completed(value)

    async def write(self, context: CapabilityContext, arguments: SchemaModel) -> Completed | Failed:
        args: dict[str, JsonValue] = arguments.model_dump(mode="json")

        async def operation(authority: EffectAuthority) -> JsonValue:
            provider_key = context.provider_key(authority, tenant=self.server.name)
            progress = _Progress(context)
            try:
                outcome, sent = await self.server.call(
                    self.tool, args, key=provider_key, progress=progress
                )
            except McpUnavailableError as exc:
                raise _not_sent() from exc
            finally:
                progress.open = False
            if isinstance(outcome, BaseException):
                if not sent:
                    raise _not_sent() from outcome
                if isinstance(outcome, MCPError) and outcome.code in REJECTED:
                    raise McpCallNotApplied(
                        "the MCP server refused the request",
                        context={"jsonrpc_code": outcome.code},
                        detail=error_text({"text": outcome.message}),
                    ) from outcome
                raise outcome  # it may have been applied: the ledger records uncertain
            value = stored(outcome)
            if value.get("is_error"):
                raise McpCallNotApplied(
                    "the MCP tool reported an error", retryable=True, detail=error_text(value)
                )
            return value

        try:
            execution = await context.run_effect(self.key(self.tool, args), operation)
        except McpCallNotApplied as exc:
            if exc.code != ErrorCode.MCP_CALL_REFUSED:
                raise
            return Failed(f"the tool reported an error: {exc.detail}", retryable=True)
        value = execution.value
        if not isinstance(value, dict):
            raise McpError("the stored result of the call is not an object")
        return self._completed(value)

    def _completed(self, value: Mapping[str, JsonValue]) -> Completed:
        refused = value.get("refused")
        if refused is not None:
            raise McpError(
                "the tool's result is larger than the limits",
                code=ErrorCode.PAYLOAD_TOO_LARGE,
                context={"tool": self.tool, "reason": refused},
            )
        text = value.get("text")
        text = text if isinstance(text, str) else ""
        try:
            output = self.output.model_validate(
                {"text": text, "structured": value.get("structured")}
                if value.get("structured") is not None
                else {"text": text}
            )
        except ValidationError as exc:
            raise McpError(
                "the tool's result does not match its output schema",
                context={"tool": self.tool},
            ) from exc
        artifacts = value.get("artifacts")
        shown: dict[str, JsonValue] = {"mcp_content": artifacts} if artifacts else {}
        return Completed(
            output=output,
            text=text or None,
            source=f"mcp:{self.server.name}/{self.tool}",
            artifacts=shown,
        )


def _not_sent() -> McpCallNotApplied:
    return McpCallNotApplied(
        "the MCP server could not be reached; the request was not sent",
        code=ErrorCode.MCP_SERVER_UNAVAILABLE,
        retryable=True,
    )


def _call_error(error: BaseException) -> BaseException:
    """A read's failed call, typed: the connection (retryable) or the server's refusal."""
    if isinstance(error, McpError):
        return error
    if isinstance(error, MCPError):
        lost = error.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)
        return McpError(
            "the MCP server did not answer the call" if lost else "the MCP server refused the call",
            code=ErrorCode.MCP_SERVER_UNAVAILABLE if lost else ErrorCode.MCP_CALL_REFUSED,
            retryable=lost,
            context={"jsonrpc_code": error.code},
        )
    if isinstance(error, Exception):
        return McpUnavailableError("the MCP call failed", context={"error": type(error).__name__})
    return error
