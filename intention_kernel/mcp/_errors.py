"""The errors of MCP tools: a stable code, a safe message and a retry hint, like every other.

Why two families: an error about a server or its tool definitions (``McpError``) is raised where
the host connects or imports, and fails a step like any other exception when a call meets it.
An error *inside* a write's ledger operation that proves the server did not apply the call
(``McpCallNotApplied``) derives from ``EffectNotAppliedError``, the only error the ledger
records as ``failed`` (a retry may call again); everything else leaves the write ``uncertain``.
Messages never hold the server's text or the arguments: those may carry secrets or data.
"""

from __future__ import annotations

from typing import Any

from ..contracts.errors import EffectNotAppliedError, ErrorCode, KernelError

__all__ = ["McpCallNotApplied", "McpError", "McpToolDefinitionError", "McpUnavailableError"]


class McpError(KernelError):
    """Root of the errors about MCP servers, their tool definitions and their results."""

    default_code = ErrorCode.MCP_RESULT_INVALID
    default_message = "the MCP server answered something unusable"


class McpUnavailableError(McpError):
    """The server could not be reached, or did not finish its initialisation in time."""

    default_code = ErrorCode.MCP_SERVER_UNAVAILABLE
    default_message = "the MCP server is not available"
    default_retryable = True


class McpToolDefinitionError(McpError):
    """A listed tool cannot be a capability (``context["problems"]`` names every one).

    Raised by ``capabilities_from_mcp`` before anything is defined: an invalid or oversized
    schema, a name that is not usable, two names that map to one capability id."""

    default_code = ErrorCode.MCP_TOOL_INVALID
    default_message = "the MCP server lists tools that cannot be capabilities"


class McpCallNotApplied(EffectNotAppliedError):
    """A write the server provably did not apply: the ledger records ``failed``.

    Either the request never left this process (the connection was down or could not be
    opened: ``MCP_SERVER_UNAVAILABLE``, retryable), or the server refused or reported it as
    failed (``isError``, or a JSON-RPC error that means the request was rejected:
    ``MCP_CALL_REFUSED``). ``detail`` holds the server's bounded text for the model; it is
    never part of the message, the ledger or the events."""

    default_code = ErrorCode.MCP_CALL_REFUSED
    default_message = "the MCP server did not apply the call"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: ErrorCode | None = None,
        retryable: bool | None = None,
        context: dict[str, Any] | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message, code=code, retryable=retryable, context=context)
        self.detail = detail
