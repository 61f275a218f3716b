"""A worker process for the MCP kill campaign (``test_mcp_kill_campaign``).

Like ``inbox_worker``, it opens the store by URL and runs ``agent.worker(...)`` until SIGTERM;
here the one write comes from a real MCP server: ``notes.add_note`` of ``tests/mcp/
notes_server.py`` over streamable HTTP, imported with ``capabilities_from_mcp`` (effect key
``note:<title>``, so one planned note is one ledger key). Turns:

- ``add note T``: proposes ``add_note(title=T)`` (held for consent);
- ``yes``: accepts it; the step calls the tool through the ledger.

The log (``inbox_worker.append``) gets ``effect`` / ``effected`` around the step's execution,
``calling`` / ``called`` around each tool call (with the provider key the server receives), and
the ledger's and the commit's crash points (``inbox_worker``'s hook). Up to ``latency`` seconds
pass before and after each call: the kills land in every part of the write.
``IK_PLANTED_BUG=mcp_blind_retry`` wraps the tool with a bug the campaign must catch: when the
ledger says the outcome is unknown, it calls the tool again outside the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import re
import signal
import time
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from typing import Any

from mcp.shared.dispatcher import ProgressFnT
from pydantic import JsonValue

from intention_kernel.contracts import DurabilityStore, ModelRequest
from intention_kernel.contracts.errors import EffectUncertainError
from intention_kernel.contracts.receipts import EffectAuthority
from intention_kernel.durability.factory import open_durability
from intention_kernel.kernel import (
    Capability,
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
)
from intention_kernel.mcp import McpServer, capabilities_from_mcp
from intention_kernel.testing import ScriptedModelGateway
from tests.faults import inbox_worker
from tests.faults.inbox_worker import TERMINATED, _log_points, append

__all__ = ["ADD", "TENANT", "build_agent", "ledger_key", "start"]

ADD = "notes.add_note"
TENANT = "notes"
"""The server's name: the provider key's namespace (``McpServer(name=...)``)."""
_ADD = re.compile(r"add note (\S+)")


def ledger_key(title: str) -> str:
    """The ledger's key of the note ``title`` (the capability id and the host's effect key)."""
    return f"{ADD}:note:{title}"


class LoggedServer(McpServer):
    """``McpServer`` whose writes are logged around the call, with network-like latency."""

    def __init__(self, url: str, *, log: str | None, latency: float) -> None:
        super().__init__(url, name=TENANT, call_timeout=30.0)
        self._log = log
        self._latency = latency

    def _note(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            append(self._log, {**record, "pid": os.getpid(), "at": time.monotonic()})

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        key: str | None = None,
        progress: ProgressFnT | None = None,
    ) -> tuple[Any, bool]:
        if key is None:
            return await super().call(name, arguments, progress=progress)
        await asyncio.sleep(random.uniform(0, self._latency))
        self._note({"ev": "calling", "provider_key": key})
        outcome, sent = await super().call(name, arguments, key=key, progress=progress)
        ok = not isinstance(outcome, BaseException)
        self._note({"ev": "called", "provider_key": key, "sent": sent, "ok": ok})
        await asyncio.sleep(random.uniform(0, self._latency))
        return outcome, sent


def _logged(cap: Capability, log: str | None, server: McpServer, planted: bool) -> Capability:
    """The tool's capability, logging ``effect`` / ``effected`` around its execution."""
    pid = os.getpid()
    inner = cap.execute

    async def execute(context: CapabilityContext, arguments: Any) -> Any:
        key = ledger_key(str(arguments.model_dump()["title"]))
        note = {"thread": context.turn.thread_id, "key": key, "pid": pid}
        if log is not None:
            append(log, {"ev": "effect", **note})
        outcome = "ok"
        try:
            return await inner(context, arguments)
        except EffectUncertainError:
            outcome = "uncertain"
            if planted:  # the bug: a blind retry after a lost answer, outside the ledger
                authority = EffectAuthority(key, "planted")
                provider_key = context.provider_key(authority, tenant=TENANT)
                args = arguments.model_dump(mode="json")
                await server.call("add_note", args, key=provider_key)
                return Completed(output=cap.output_schema.model_validate({"text": "added"}))
            raise
        except BaseException as exc:
            outcome = repr(exc)
            raise
        finally:
            if log is not None:
                append(log, {"ev": "effected", **note, "outcome": outcome})

    return dataclasses.replace(cap, execute=execute)


async def build_agent(
    store: DurabilityStore, server: McpServer, log: str | None = None
) -> CompiledAgent:
    """The campaign's agent: the server's ``add_note`` as its one capability."""
    [cap] = await capabilities_from_mcp(
        server, include=["add_note"], key=lambda tool, args: f"note:{args['title']}"
    )
    planted = os.environ.get("IK_PLANTED_BUG") == "mcp_blind_retry"
    cap = _logged(cap, log, server, planted)

    def interpret(request: ModelRequest) -> JsonValue:
        text = str(request.input["text"])
        intentions: list[JsonValue] = []
        if found := _ADD.fullmatch(text):
            note = {"title": found[1], "body": f"remember {found[1]}"}
            intentions = [{"capability": ADD, "input": note}]
        answer: JsonValue = {"option": "yes"} if text == "yes" else None
        return {"intentions": intentions, "answer": answer, "reply": None}

    def compose(request: ModelRequest) -> JsonValue:
        outcomes = request.input["outcomes"]
        assert isinstance(outcomes, list)
        texts = [str(o["text"]) for o in outcomes if isinstance(o, dict) and o.get("text")]
        ids: list[JsonValue] = [
            str(o["evidence_id"]) for o in outcomes if isinstance(o, dict) and o["evidence_id"]
        ]
        return {"text": " ".join(texts) or "Okay.", "citations": ids}

    agent = define_agent(
        id="mcp-campaign",
        version="1.0.0",
        description="Keeps notes on an MCP server.",
        capabilities=[cap],
    )
    gateway = ScriptedModelGateway({"interpret": interpret, "compose": compose})
    return Kernel(durability=store, model=gateway).compile(agent)


async def main(spec: Mapping[str, Any]) -> None:
    """Run a worker until SIGTERM (drain)."""
    log: str = spec["log"]
    _log_points(log)
    store = await open_durability(spec["url"], **dict(spec.get("options") or {}))
    try:
        async with LoggedServer(spec["mcp"], log=log, latency=spec["latency"]) as server:
            agent = await build_agent(store, server, log)
            worker = agent.worker(**spec["worker"])
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
            if TERMINATED[0]:
                worker.stop()
            append(log, {"ev": "started", "pid": os.getpid(), "worker": worker.worker_id})
            await worker.run()
            append(log, {"ev": "stopped", "pid": os.getpid(), "completed": worker.completed})
    finally:
        with contextlib.suppress(Exception):
            await store.close()


def start(spec: Mapping[str, Any]) -> BaseProcess:
    """Fork a worker process running ``spec`` (``inbox_worker.start`` with this ``main``)."""
    return inbox_worker.start(spec, main)
