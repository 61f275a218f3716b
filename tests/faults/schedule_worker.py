"""A worker process with a schedule, for the scheduler process tests
(``test_schedule_processes``).

It opens the store by URL, compiles an agent whose only schedule is ``spec["schedule"]``
(the keywords of ``define_schedule``), and runs ``agent.worker(**spec["worker"])``, scheduler
included, until SIGTERM (which drains it). Its turns ask for nothing and compose a fixed answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from multiprocessing.process import BaseProcess
from typing import Any

from intention_kernel.durability.factory import open_durability
from intention_kernel.kernel import CompiledAgent, Kernel, define_agent, define_schedule
from intention_kernel.testing import ScriptedModelGateway
from tests.faults import inbox_worker

__all__ = ["build", "start"]


def _agent_gateway() -> ScriptedModelGateway:
    return ScriptedModelGateway(
        {"interpret": {"intentions": []}, "compose": {"text": "Done.", "citations": []}}
    )


def build(store: Any, schedule: Mapping[str, Any]) -> CompiledAgent:
    """The agent, with ``schedule`` (the keywords of ``define_schedule``) its only schedule."""
    definition = define_agent(
        id="scheduled",
        version="1.0.0",
        description="Runs a turn at every occurrence of its schedule.",
        schedules=[define_schedule(**schedule)],
    )
    return Kernel(durability=store, model=_agent_gateway()).compile(definition)


async def main(spec: Mapping[str, Any]) -> None:
    """Run the worker and its scheduler until SIGTERM (drain)."""
    store = await open_durability(spec["url"])
    try:
        agent = build(store, spec["schedule"])
        worker = agent.worker(**spec["worker"])
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        if inbox_worker.TERMINATED[0]:
            worker.stop()
        await worker.run()
    finally:
        with contextlib.suppress(Exception):
            await store.close()


def start(spec: Mapping[str, Any]) -> BaseProcess:
    """Fork a worker process with ``spec``'s schedule."""
    return inbox_worker.start(spec, main)
