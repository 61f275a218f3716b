"""A caller's W3C ``traceparent`` is continued: the ``ik.turn`` span of the request's turn is a
child of the caller's span, and the turn's events (the outbox, a webhook) carry that trace, so
caller -> turn -> consumer is one trace. A malformed ``traceparent`` starts a new trace.

Both ways a turn runs: submitted to the inbox and run by a worker (the default; the trace
context is kept with the request), and in the request (``busy="wait"``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Receive, Scope, Send

from intention_kernel.contracts import DurabilityStore
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.http import BearerTokens, create_app
from intention_kernel.kernel import Kernel
from intention_kernel.relay import OutboxRelay, open_sink

from ..relay._support import FAST
from ..relay.test_webhook_sink import SECRET, Receiver
from .support import SEARCH, TOKENS, Live, events, serve

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"


@dataclass
class Traced:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def turns(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == "ik.turn"]


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider, exporter)
    provider.shutdown()


@pytest.fixture(params=["enqueue", "wait"])
async def live(
    store: DurabilityStore, traced: Traced, request: pytest.FixtureRequest
) -> AsyncIterator[Live]:
    """The travel desk, traced by its own provider (never the global one), on a real server;
    its turns submitted to the inbox (``enqueue``) or run in the request (``wait``)."""
    busy = request.param
    kernel = Kernel(
        durability=store,
        model=scripted_model(),
        ports={"hotels": FakeHotelProvider()},
        tracer_provider=traced.provider,
    )
    app = create_app(
        kernel.compile(build_agent()), authenticate=BearerTokens.from_secrets(TOKENS), busy=busy
    )
    async with serve(app) as running:
        yield running


def _ids(span: ReadableSpan) -> tuple[str, str | None]:
    """The span's trace id and its parent's span id (hex)."""
    assert span.context is not None
    parent = f"{span.parent.span_id:016x}" if span.parent is not None else None
    return f"{span.context.trace_id:032x}", parent


async def test_the_turn_continues_the_callers_trace(
    live: Live, traced: Traced, request: pytest.FixtureRequest
) -> None:
    answer = await live.post("t-1", "turn-1", SEARCH, headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200, answer.text
    [turn] = traced.turns()
    assert _ids(turn) == (TRACE, CALLER)
    assert turn.parent is not None and turn.parent.is_remote
    other = f"00-{'a1' * 16}-{'b2' * 8}-01"
    again = await live.post("t-1", "turn-1", SEARCH, headers={"traceparent": other})
    assert again.json()["replayed"] is True
    if request.node.callspec.params["live"] == "wait":
        # A replay run in the request, from another caller's span, joins that caller's trace.
        assert _ids(traced.turns()[-1]) == ("a1" * 16, "b2" * 8)
    else:  # a submitted replay is read from the store: no turn runs, no turn span
        assert len(traced.turns()) == 1


async def test_a_streamed_turn_continues_the_callers_trace(live: Live, traced: Traced) -> None:
    headers = {"traceparent": TRACEPARENT, "Accept": "text/event-stream"}
    answer = await live.post("t-1", "turn-1", SEARCH, headers=headers)
    assert events(answer.text)[-1][0] == "turn.completed"
    [turn] = traced.turns()
    assert _ids(turn) == (TRACE, CALLER)


@pytest.mark.parametrize(
    "malformed",
    [
        "garbage",
        f"00-{'0' * 32}-{CALLER}-01",  # the all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",  # the all-zero parent id is invalid
        f"00-{TRACE.upper()}-{CALLER}-01",
        f"ff-{TRACE}-{CALLER}-01",  # version ff is forbidden
        f"00-{TRACE}-{CALLER}",
        "",
    ],
)
async def test_a_malformed_traceparent_starts_a_new_trace(
    live: Live, traced: Traced, malformed: str
) -> None:
    answer = await live.post("t-1", "turn-1", SEARCH, headers={"traceparent": malformed})
    assert answer.status_code == 200, answer.text
    [turn] = traced.turns()
    trace_id, parent = _ids(turn)
    assert parent is None and trace_id != TRACE


async def test_without_a_traceparent_the_turn_is_a_trace_of_its_own(
    live: Live, traced: Traced
) -> None:
    await live.post("t-1", "turn-1", SEARCH)
    await live.post("t-1", "turn-2", {"text": "How much is Alfama Inn?"})
    first, second = traced.turns()
    assert _ids(first)[1] is None and _ids(second)[1] is None
    assert _ids(first)[0] != _ids(second)[0]


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("IK_WEBHOOK_SECRET", SECRET)
    server = Receiver()
    server.start()
    yield server
    server.stop()


async def test_the_webhook_of_the_turns_events_carries_the_callers_trace(
    live: Live, traced: Traced, store: DurabilityStore, receiver: Receiver
) -> None:
    answer = await live.post("t-1", "turn-1", SEARCH, headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200, answer.text
    [turn] = traced.turns()
    assert turn.context is not None
    expected = f"00-{TRACE}-{turn.context.span_id:016x}-01"  # a child of ik.turn, same trace
    sink = open_sink(receiver.sink_url())
    try:
        report = await OutboxRelay(store, sink, relay_id="r-trace", backoff=FAST).run_once()  # type: ignore[arg-type]
    finally:
        await sink.close()
    assert report.delivered == len(receiver.requests) > 0
    for headers, _ in receiver.requests:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", lowered["traceparent"])
        assert lowered["traceparent"] == expected
    assert {e.traceparent for e in receiver.events} == {expected}


WITHOUT_OTEL = f"""
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from intention_kernel import telemetry
from intention_kernel.testing import MemoryDurability
from tests.http.support import SEARCH, app_for, make_desk, serve

async def main() -> None:
    async with serve(app_for(make_desk(MemoryDurability()))) as live:
        traced = {{"traceparent": "{TRACEPARENT}"}}
        answer = await live.post("t-1", "turn-1", SEARCH, headers=traced)
    assert answer.status_code == 200, answer.text
    assert not telemetry.AVAILABLE and "opentelemetry.trace" not in sys.modules
    print("ok")

asyncio.run(main())
"""


def test_without_opentelemetry_a_traceparent_changes_nothing() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


class ServerSpans:
    """ASGI middleware as a host's HTTP instrumentation is: a server span per request that
    continues the caller's trace itself."""

    def __init__(self, app: ASGIApp, provider: TracerProvider) -> None:
        self.app = app
        self.tracer = provider.get_tracer("asgi")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = TraceContextTextMapPropagator().extract(headers)
        with self.tracer.start_as_current_span(
            "POST /v1/threads", context=parent, kind=SpanKind.SERVER
        ):
            await self.app(scope, receive, send)


async def test_a_host_server_span_stays_the_turns_parent(
    store: DurabilityStore, traced: Traced
) -> None:
    kernel = Kernel(
        durability=store,
        model=scripted_model(),
        ports={"hotels": FakeHotelProvider()},
        tracer_provider=traced.provider,
    )
    app = create_app(
        kernel.compile(build_agent()), authenticate=BearerTokens.from_secrets(TOKENS), busy="wait"
    )
    app.add_middleware(ServerSpans, provider=traced.provider)
    async with serve(app) as live:
        answer = await live.post("t-1", "turn-1", SEARCH, headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200, answer.text
    [server] = [s for s in traced.exporter.get_finished_spans() if s.name == "POST /v1/threads"]
    assert server.context is not None and _ids(server) == (TRACE, CALLER)
    [turn] = traced.turns()
    assert _ids(turn) == (TRACE, f"{server.context.span_id:016x}")
