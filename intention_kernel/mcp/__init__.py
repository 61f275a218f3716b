"""MCP tools as capabilities: reads answer at once, writes wait for consent and the ledger.

The ``mcp`` extra (``pip install "intention-kernel[mcp]"``, the official MCP Python SDK).
``McpServer`` owns one server's connection (stdio, streamable HTTP, or any SDK transport);
``capabilities_from_mcp`` lists its tools as capabilities for ``define_agent``. See docs/mcp.md.
"""

from __future__ import annotations

from ._connection import IDEMPOTENCY_META_KEY, McpServer, ServerTarget
from ._errors import McpCallNotApplied, McpError, McpToolDefinitionError, McpUnavailableError
from ._tools import EffectKey, ToolOverride, capabilities_from_mcp

__all__ = [
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
