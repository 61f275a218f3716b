"""A small MCP server whose tools send progress notifications, for the progress tests.

``python tests/mcp/progress_server.py`` serves over stdio. ``count_notes`` (a read) and
``import_notes`` (a write) each report ``n`` steps (``counted 1 of n``...) before they answer.
"""

from __future__ import annotations

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("progress", log_level="WARNING")


async def steps(ctx: Context, n: int, verb: str) -> None:
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"{verb} {i} of {n}")


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def count_notes(n: int, ctx: Context) -> str:
    """Count the notes, reporting each step."""
    await steps(ctx, n, "counted")
    return f"There are {n} notes."


@server.tool(annotations=types.ToolAnnotations(destructive_hint=False, open_world_hint=False))
async def import_notes(n: int, ctx: Context) -> str:
    """Import notes, reporting each step."""
    await steps(ctx, n, "imported")
    return f"Imported {n} notes."


if __name__ == "__main__":
    server.run()
