"""Bad MCP input is refused with a typed error before anything is defined or written.

A server listing tools with invalid, enormous or too deep schemas, unusable or colliding names;
a server that never finishes its initialisation; a host that names tools the server does not
list, or asks a write to run without consent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from intention_kernel.contracts import AgentCompilationError, ErrorCode
from intention_kernel.kernel import Kernel, define_agent
from intention_kernel.mcp import (
    McpServer,
    McpToolDefinitionError,
    McpUnavailableError,
    ToolOverride,
    capabilities_from_mcp,
)
from intention_kernel.testing import MemoryDurability

from .support import executions, scripted_model, stdio_target

BAD = [
    "bad schema",
    "invalid_schema",
    "enormous_schema",
    "deep_schema",
    "remote_ref",
    "sendEmail",
    "sendemail",
]


async def test_every_bad_tool_is_named_in_one_typed_error(tmp_path: Path) -> None:
    async with McpServer(stdio_target(tmp_path, "bad-tools"), name="bad") as server:
        with pytest.raises(McpToolDefinitionError) as caught:
            await capabilities_from_mcp(server)
        error = caught.value
        assert error.code is ErrorCode.MCP_TOOL_INVALID and not error.retryable
        problems = "\n".join(error.context["problems"])
        assert "'bad schema': not a valid tool name" in problems
        assert "'invalid_schema': its schema is invalid" in problems
        assert "'enormous_schema': its schema is" in problems and "more than 65536" in problems
        assert "'deep_schema': its schema is nested deeper" in problems
        assert "'remote_ref': its schema refers to another document" in problems
        assert "'sendemail' and 'sendEmail': both map to 'bad.sendemail'" in problems
        assert "fine_tool" not in problems

        [fine] = await capabilities_from_mcp(server, exclude=BAD)
        assert fine.id == "bad.fine_tool"
        # A collision is resolved by the host naming one of them.
        caps = await capabilities_from_mcp(
            server,
            include=["sendEmail", "sendemail"],
            overrides={"sendEmail": ToolOverride(id="bad.send_email_v2")},
        )
        assert sorted(c.id for c in caps) == ["bad.send_email_v2", "bad.sendemail"]


async def test_names_the_server_does_not_list_are_refused(tmp_path: Path) -> None:
    async with McpServer(stdio_target(tmp_path), name="notes") as server:
        with pytest.raises(McpToolDefinitionError, match="lists no such tool"):
            await capabilities_from_mcp(server, include=["lookup_notes"])
        with pytest.raises(McpToolDefinitionError, match="lists no such tool"):
            await capabilities_from_mcp(server, overrides={"nope": ToolOverride(effect="read")})


async def test_a_server_that_hangs_at_initialisation_is_unavailable(tmp_path: Path) -> None:
    server = McpServer(stdio_target(tmp_path, "hang"), name="notes", connect_timeout=1.0)
    with pytest.raises(McpUnavailableError) as caught:
        async with server:
            pass
    assert caught.value.code is ErrorCode.MCP_SERVER_UNAVAILABLE and caught.value.retryable
    assert "initialisation" in caught.value.message


async def test_a_server_that_cannot_start_is_unavailable(tmp_path: Path) -> None:
    missing = stdio_target(tmp_path)
    missing.command = str(tmp_path / "no-such-server")
    with pytest.raises(McpUnavailableError):
        async with McpServer(missing, name="notes"):
            pass


async def test_a_write_cannot_be_made_to_run_without_consent(tmp_path: Path) -> None:
    async with McpServer(stdio_target(tmp_path), name="notes") as server:
        caps = await capabilities_from_mcp(
            server,
            include=["add_note", "lookup_note"],
            overrides={"add_note": ToolOverride(confirmation="none")},
        )
    agent = define_agent(id="notes", version="1.0.0", description="Notes.", capabilities=caps)
    kernel = Kernel(durability=MemoryDurability(), model=scripted_model())
    with pytest.raises(AgentCompilationError, match="write_without_confirmation"):
        kernel.compile(agent)
    assert executions(tmp_path) == []


async def test_a_tool_vouched_read_only_by_the_host_is_a_read(tmp_path: Path) -> None:
    async with McpServer(stdio_target(tmp_path), name="notes") as server:
        vouched = {"archive_note": ToolOverride(effect="read")}
        [cap] = await capabilities_from_mcp(server, include=["archive_note"], overrides=vouched)
    assert cap.effect == "read" and cap.confirmation == "none" and cap.consent_summary is None


@pytest.mark.parametrize("name", ["", "Notes", "1notes", "no tes", "n" * 41])
def test_a_server_name_that_cannot_prefix_an_id_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(McpToolDefinitionError):
        McpServer(stdio_target(tmp_path), name=name)


async def test_a_closed_server_refuses_calls(tmp_path: Path) -> None:
    server = McpServer(stdio_target(tmp_path), name="notes")
    async with server:
        assert [t.name for t in await server.list_tools()][:1] == ["lookup_note"]
    with pytest.raises(McpUnavailableError):
        await server.list_tools()
