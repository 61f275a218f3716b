"""The agent the ingress tests submit to (``--agent tests.ingress.agent:echo_agent``): every
turn's answer repeats its text, with no capability, so a committed turn shows which message
it was."""

from __future__ import annotations

from pydantic import JsonValue

from intention_kernel.contracts import Durability, ModelRequest
from intention_kernel.kernel import CompiledAgent, Kernel, define_agent
from intention_kernel.testing import ScriptedModelGateway


def _interpret(request: ModelRequest) -> JsonValue:
    return {"intentions": [], "answer": None, "reply": f"Got {request.input.get('text')}."}


def _compose(request: ModelRequest) -> JsonValue:
    return {"text": str(request.input.get("reply")), "citations": []}


def echo_agent(store: Durability) -> CompiledAgent:
    model = ScriptedModelGateway({"interpret": _interpret, "compose": _compose})
    definition = define_agent(
        id="echo", version="1.0.0", description="Repeats what it is told.", capabilities=[]
    )
    return Kernel(durability=store, model=model).compile(definition)
