"""The blocking API: ``open_durability_sync``, ``run_sync``, ``stream_sync``, from plain threads
and from a threaded WSGI server, on a real SQLite store."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from pydantic import JsonValue

from intention_kernel import (
    CompiledAgent,
    Kernel,
    StepStarted,
    TextDelta,
    TurnCompleted,
    TurnConflictError,
    TurnResult,
    UsageError,
)
from intention_kernel.contracts import ModelOutputDelta, ModelRequest, ModelResponse
from intention_kernel.durability.factory import sqlite_url
from intention_kernel.sync import Portal, SyncDurability, open_durability_sync
from intention_kernel.testing import ScriptedModelGateway

from .kernel.support import Shop, cite_all, support_agent


def interpret(request: ModelRequest) -> JsonValue:
    text = str(request.input["text"])
    order = text.removeprefix("where is order ").removesuffix("?")
    return {"intentions": [{"capability": "orders.lookup", "input": {"order_id": order}}]}


@pytest.fixture
def portal() -> Iterator[Portal]:
    own = Portal()
    yield own
    own.close()
    assert not own._thread.is_alive(), "the portal's thread stopped"


@pytest.fixture
def store(portal: Portal, tmp_path: Path) -> Iterator[SyncDurability]:
    with open_durability_sync(sqlite_url(tmp_path / "sync.db"), portal=portal) as opened:
        yield opened


def desk(store: SyncDurability, gateway: ScriptedModelGateway | None = None) -> CompiledAgent:
    model = gateway or ScriptedModelGateway({"interpret": interpret, "compose": cite_all})
    kernel = Kernel(durability=store, model=model, ports={"shop": Shop()})
    return kernel.compile(support_agent())


def test_run_sync_from_a_plain_thread_runs_and_replays(store: SyncDurability) -> None:
    agent = desk(store)
    first = agent.run_sync(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    again = agent.run_sync(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    assert first.response.text == "Order 42 has shipped." and not first.replayed
    assert again.replayed and again.response == first.response
    stored = store.call(lambda s: s.get_turn("t1", "turn-1"))
    assert stored is not None and stored.trace_id == first.trace_id


def test_many_threads_at_once_distinct_turns_and_one_turn_id(store: SyncDurability) -> None:
    agent = desk(store)

    def distinct(n: int) -> TurnResult:
        return agent.run_sync(thread_id=f"t{n}", turn_id="turn-1", text=f"where is order {n}?")

    def same(_: int) -> TurnResult | TurnConflictError:
        try:
            return agent.run_sync(thread_id="shared", turn_id="turn-1", text="where is order 7?")
        except TurnConflictError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=8) as pool:
        ran = list(pool.map(distinct, range(8)))
        racing = list(pool.map(same, range(8)))
    assert [r.response.text for r in ran] == [f"Order {n} has shipped." for n in range(8)]
    results = [r for r in racing if isinstance(r, TurnResult)]
    assert sum(not r.replayed for r in results) == 1, "one delivery ran the turn"
    assert {r.trace_id for r in results} == {results[0].trace_id}, "the others replayed it"
    stored = store.call(lambda s: s.list_turns("shared"))
    assert len(stored) == 1


def test_stream_sync_yields_progress_then_the_committed_result(store: SyncDurability) -> None:
    agent = desk(store)
    items = list(agent.stream_sync(thread_id="t1", turn_id="turn-1", text="where is order 42?"))
    assert isinstance(items[0], StepStarted)
    last = items[-1]
    assert isinstance(last, TurnCompleted) and not last.result.replayed
    text = "".join(i.text for i in items if isinstance(i, TextDelta))
    assert text == last.result.response.text


class Stalling(ScriptedModelGateway):
    """Its first composing stream stops mid-text until cancelled: the turn stays open."""

    stalled = False

    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelOutputDelta | ModelResponse]:
        written = ""
        async for item in super().stream(request):
            yield item
            written += item.text if isinstance(item, ModelOutputDelta) else ""
            if request.task == "compose" and not self.stalled and written.endswith('"Or'):
                self.stalled = True
                await asyncio.Event().wait()


def test_closing_stream_sync_early_cancels_the_turn_and_waits(
    store: SyncDurability, portal: Portal
) -> None:
    gateway = Stalling({"interpret": interpret, "compose": cite_all}, chunk_size=1)
    agent = desk(store, gateway)
    items = agent.stream_sync(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    for item in items:
        if isinstance(item, TextDelta):
            break  # mid-text: the turn has not committed yet
    items.close()

    async def running() -> int:
        me = asyncio.current_task()
        return sum(1 for t in asyncio.all_tasks() if t is not me and not t.done())

    assert portal.call(running) == 0, "the turn ended before close() returned"
    assert store.call(lambda s: s.get_turn("t1", "turn-1")) is None
    again = agent.run_sync(thread_id="t1", turn_id="turn-1", text="where is order 42?")
    assert not again.replayed, "delivered again, the turn runs"


def test_the_blocking_calls_refuse_a_running_loop(store: SyncDurability, tmp_path: Path) -> None:
    agent = desk(store)

    async def inside(call: Callable[[], object]) -> None:
        with pytest.raises(UsageError, match="running event loop"):
            call()

    asyncio.run(inside(lambda: agent.run_sync(thread_id="t", turn_id="u", text="hi")))
    asyncio.run(inside(lambda: agent.stream_sync(thread_id="t", turn_id="u", text="hi")))
    asyncio.run(inside(lambda: open_durability_sync(sqlite_url(tmp_path / "x.db"))))
    asyncio.run(inside(store.close_sync))


def test_the_store_refuses_a_foreign_loop(store: SyncDurability) -> None:
    agent = desk(store)

    async def elsewhere() -> None:
        with pytest.raises(UsageError, match="portal"):
            await agent.run(thread_id="t", turn_id="u", text="where is order 1?")

    asyncio.run(elsewhere())


def test_a_closed_portal_refuses_new_work(tmp_path: Path) -> None:
    own = Portal()
    store = open_durability_sync(sqlite_url(tmp_path / "c.db"), portal=own)
    store.close_sync()
    own.close()
    own.close()  # twice is fine
    with pytest.raises(UsageError, match="closed"):
        desk(store).run_sync(thread_id="t", turn_id="u", text="where is order 1?")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_threaded_wsgi_app_runs_turns_with_run_sync(store: SyncDurability) -> None:
    agent = desk(store)
    served: set[str] = set()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length))
        served.add(threading.current_thread().name)
        result = agent.run_sync(
            thread_id=body["thread"], turn_id=body["turn"], text=body["text"], timeout=30
        )
        payload = json.dumps({"text": result.response.text, "replayed": result.replayed})
        start_response("200 OK", [("Content-Type", "application/json")])
        return [payload.encode()]

    server = make_server("127.0.0.1", 0, app, ThreadingWSGIServer, handler_class=Quiet)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{server.server_port}/"

    def post(n: int) -> dict[str, Any]:
        body = {"thread": f"w{n % 6}", "turn": "turn-1", "text": f"where is order {n % 6}?"}
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(post, range(24)))
    finally:
        server.shutdown()
        server.server_close()
    for n, answer in enumerate(answers):
        assert answer["text"] == f"Order {n % 6} has shipped."
    assert sum(not a["replayed"] for a in answers) == 6, "each turn ran once, then replayed"
    assert len(served) > 1, "requests were served by several threads"
