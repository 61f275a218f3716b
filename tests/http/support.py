"""The service on a real uvicorn server on loopback; a model and a provider that can be held at
a call (to be slow, to time out, to be cancelled); helpers to read its answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette

from intention_kernel.contracts import DurabilityStore
from intention_kernel.contracts.gateway import (
    ModelGateway,
    ModelOutputDelta,
    ModelRequest,
    ModelResponse,
)
from intention_kernel.examples.travel_desk import FakeHotelProvider, compile_desk, scripted_model
from intention_kernel.http import BearerTokens, Server, create_app, server_config
from intention_kernel.http._service import SERVICE_STATE, Service
from intention_kernel.kernel import CompiledAgent
from intention_kernel.testing import ScriptedModelGateway


class Gate:
    """Holds callers until opened; ``entered`` is set when the first one arrives."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self._open = asyncio.Event()

    async def passing(self) -> None:
        self.entered.set()
        await self._open.wait()

    def open(self) -> None:
        self._open.set()


class GatedModel:
    """The scripted model; ``hold(task)`` makes the next calls of that task wait for the gate."""

    def __init__(self, inner: ScriptedModelGateway) -> None:
        self.inner = inner
        self.gates: dict[str, Gate] = {}
        self.broken: set[str] = set()
        """Tasks whose calls raise (a bug in the gateway, say)."""

    def hold(self, task: str) -> Gate:
        gate = self.gates[task] = Gate()
        return gate

    def count(self, task: str | None = None) -> int:
        return self.inner.count(task)

    async def _pass(self, task: str) -> None:
        if task in self.broken:
            raise RuntimeError(f"the {task} gateway broke: secret-internal-detail")
        gate = self.gates.get(task)
        if gate is not None:
            await gate.passing()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await self._pass(request.task)
        return await self.inner.complete(request)

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        await self._pass(request.task)
        async for item in self.inner.stream(request):
            yield item


class GatedProvider(FakeHotelProvider):
    """The fake hotel provider; ``gate`` (when set) holds each booking before it is made."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: Gate | None = None

    async def book(self, quote: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        if self.gate is not None:
            await self.gate.passing()
        return await super().book(quote, idempotency_key=idempotency_key)


SEARCH = {"text": "Find a hotel in Lisbon for 2 nights"}
QUOTE = {"text": "How much is Alfama Inn?"}
BOOK = {"text": "Book it"}


def events(text: str) -> list[tuple[str, Any]]:
    """The ``(event, data)`` pairs of a server-sent events body."""
    found = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


def without_replayed(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "replayed"}


def is_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem document of ``response``, checked to be ``status`` with ``code``."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    assert problem["status"] == status
    assert problem["type"].endswith(code)
    assert {"title", "detail", "retryable"} <= set(problem)
    assert "Traceback" not in response.text
    return problem


TOKENS = {"alice": "alice-token-0001", "bob": "bob-token-000002"}


def bearer(who: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@dataclass
class Desk:
    store: DurabilityStore
    model: GatedModel
    provider: GatedProvider
    agent: CompiledAgent


@dataclass
class Live:
    server: Server
    client: httpx.AsyncClient
    service: Service
    url: str
    app: Starlette

    async def post(
        self,
        thread: str,
        key: str | None,
        body: Any,
        *,
        who: str | None = "alice",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        sent = dict(bearer(who) if who else {})
        if key is not None:
            sent["Idempotency-Key"] = key
        sent.update(headers or {})
        return await self.client.post(f"/v1/threads/{thread}/turns", json=body, headers=sent)


class QuietServer(Server):
    """The service's server without process signal handlers (it runs inside the test)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_desk(store: DurabilityStore, *, model: ModelGateway | None = None) -> Desk:
    """The travel desk on ``store`` with the scripted model that can be held, or ``model``."""
    gated = GatedModel(scripted_model())
    provider = GatedProvider()
    agent = compile_desk(store, model=model or gated, provider=provider)
    return Desk(store, gated, provider, agent)


FAST_WORKERS = {"poll_interval": 0.05, "backoff": 0.05, "max_backoff": 0.2, "claim_ttl": 5.0}
"""In-process worker settings of the tests: a retry after a failure comes within 0.2 s."""


def app_for(desk: Desk, **options: Any) -> Starlette:
    options.setdefault("authenticate", BearerTokens.from_secrets(TOKENS))
    options.setdefault("worker_settings", FAST_WORKERS)
    return create_app(desk.agent, **options)


@asynccontextmanager
async def serve(app: Starlette) -> AsyncIterator[Live]:
    """``app`` on a real uvicorn server on 127.0.0.1, stopped (and drained) at the end."""
    server = QuietServer(server_config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise AssertionError("the server stopped before it started")
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield Live(server, client, getattr(app.state, SERVICE_STATE), url, app)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 60)


async def to_confirmation(live: Live, thread: str) -> dict[str, Any]:
    """Search, quote and ask to book on ``thread``: the interaction that waits for consent."""
    for key, body in (("k-search", SEARCH), ("k-quote", QUOTE), ("k-book", BOOK)):
        answer = await live.post(thread, key, body)
        assert answer.status_code == 200, answer.text
    interaction: dict[str, Any] = answer.json()["interaction"]
    assert interaction is not None and "yes" in interaction["options"]
    return interaction
