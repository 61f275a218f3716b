"""A worker process for the budget and provider-limit tests (``test_flow_processes``).

Run as ``python -m tests.kernel._flow_worker '<spec JSON>'``: it opens the store by URL, runs
turns of a lookup agent against the fake provider (``_flow_provider``) through the OpenAI
gateway, ``tasks`` at a time, and prints one JSON line: turns run, refusals, model calls.
It stops after ``turns`` turns, or after ``refusals`` budget refusals in a row.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx2

from intention_kernel.durability.factory import open_durability
from intention_kernel.kernel import Budget, Kernel, Limit
from intention_kernel.models import OpenAIGateway, RetryPolicy
from tests.kernel.support import Shop, support_agent


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    store = await open_durability(spec["url"], **spec.get("options", {}))
    # Our own HTTP client, closed at the end: the SDK's own would be left to the collector,
    # with its connections (this also runs inside the test process).
    http = httpx2.AsyncClient(timeout=30.0)
    try:
        gateway = OpenAIGateway(
            "gpt-test",
            base_url=spec["provider"],
            api_key="none",
            max_tokens=50,
            retry=RetryPolicy(attempts=3, base_delay=0.05, deadline=30.0),
            http_client=http,
        )
        budgets = (
            [Budget(tokens=spec["budget"], per=None, name=spec["name"])]
            if spec.get("budget")
            else []
        )
        limits = {"openai": Limit(concurrent=spec["concurrent"])} if spec.get("concurrent") else {}
        kernel = Kernel(
            durability=store,
            model=gateway,
            ports={"shop": Shop()},
            budgets=budgets,
            provider_limits=limits,
        )
        agent = kernel.compile(support_agent())
        runs, refused, calls, errors = [0], [0], [0], []
        refused_in_a_row = [0]
        numbers = iter(range(spec["turns"]))

        async def loop(task: int) -> None:
            for number in numbers:
                if refused_in_a_row[0] >= spec.get("refusals", 10**9):
                    return
                thread = f"{spec['prefix']}-{task}-{number}"
                try:
                    result = await agent.run(thread_id=thread, turn_id="u1", text="where is 42")
                except Exception as exc:
                    errors.append(repr(exc))
                    continue
                calls[0] += result.usage.model_calls
                if result.response.kind == "budget_exceeded":
                    refused[0] += 1
                    refused_in_a_row[0] += 1
                    await asyncio.sleep(0.05)  # let calls of other processes settle
                    continue
                refused_in_a_row[0] = 0
                runs[0] += 1

        await asyncio.gather(*(loop(t) for t in range(spec.get("tasks", 1))))
        return {"runs": runs[0], "refused": refused[0], "calls": calls[0], "errors": errors}
    finally:
        await http.aclose()
        await store.close()


if __name__ == "__main__":
    outcome = asyncio.run(main(json.loads(sys.argv[1])))
    sys.stdout.write(json.dumps({**outcome, "pid": os.getpid()}) + "\n")
