"""An agent for the ``worker`` command: the support desk with a slow step.

``where is N`` looks the order up; ``slow S`` waits ``S`` seconds in a read step (a turn still
running when the worker is told to stop); ``broken`` fails the model call for good (a request
that goes dead). The same factory submits in the test and runs in the worker process, so both
compute the same request fingerprint.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel.contracts import ModelRequest
from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.kernel import CapabilityContext, Completed, Kernel, define_capability
from intention_kernel.testing import ScriptedModelGateway
from tests.kernel.support import Shop, cite_all, support_agent


class Pause(BaseModel):
    seconds: float


class Paused(BaseModel):
    seconds: float


async def _wait(context: CapabilityContext, query: Pause) -> Completed:
    await asyncio.sleep(query.seconds)
    return Completed(output=Paused(seconds=query.seconds), text=f"Waited {query.seconds}s.")


WAIT = define_capability(
    id="clock.wait",
    version="1.0.0",
    description="Wait a number of seconds.",
    input=Pause,
    output=Paused,
    execute=_wait,
)


def _interpret(request: ModelRequest) -> JsonValue | BaseException:
    text = request.input["text"]
    assert isinstance(text, str)
    intentions: list[JsonValue] = []
    if text.startswith("where is "):
        intentions = [{"capability": "orders.lookup", "input": {"order_id": text[9:]}}]
    elif text.startswith("slow "):
        intentions = [{"capability": "clock.wait", "input": {"seconds": float(text[5:])}}]
    elif text == "broken":
        return ModelGatewayError("the model refuses this request", retryable=False)
    return {"intentions": intentions, "answer": None, "reply": None}


def desk(store: Any) -> Any:
    """The agent on the opened store (``--agent tests.cli.inbox_agents:desk``)."""
    gateway = ScriptedModelGateway({"interpret": _interpret, "compose": cite_all})
    kernel = Kernel(durability=store, model=gateway, ports={"shop": Shop()})
    return kernel.compile(support_agent([WAIT]))
