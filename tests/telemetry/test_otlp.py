"""One booking turn exported through the OTLP/HTTP exporter to a receiver on loopback, decoded
with the OTLP protobuf definitions as a collector would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from intention_kernel.durability.sqlite import SQLiteDurability

from ..relay._net import free_port
from .conftest import MODEL, Traced, make_desk


class Collector:
    """``POST /v1/traces`` on 127.0.0.1: keeps every decoded export request."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[ExportTraceServiceRequest] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def spans(self) -> list[tuple[str, bytes, bytes, dict[str, object]]]:
        """``(name, span id, parent span id, attributes)`` of every received span."""
        found = []
        for request in self.requests:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attributes: dict[str, object] = {}
                        for kv in span.attributes:
                            kind = kv.value.WhichOneof("value")
                            attributes[kv.key] = getattr(kv.value, kind) if kind else None
                        found.append((span.name, span.span_id, span.parent_span_id, attributes))
        return found


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    yield server
    server.server.shutdown()
    server.server.server_close()


async def test_a_booking_turn_reaches_an_otlp_receiver(
    store: SQLiteDurability, collector: Collector
) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.port}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    desk = make_desk(store, Traced(provider, None))  # type: ignore[arg-type]
    held = await desk.held_booking()
    await desk.confirm(held)
    assert provider.force_flush(10_000)
    provider.shutdown()

    spans = collector.spans()
    names = [name for name, *_ in spans]
    assert names.count("ik.turn") == 4
    assert "ik.effect hotels.book" in names and f"chat {MODEL}" in names
    by_id = {span_id: (name, attrs) for name, span_id, _, attrs in spans}
    [(_, _, step_id, effect)] = [s for s in spans if s[0] == "ik.effect hotels.book"]
    assert by_id[step_id][0] == "ik.step hotels.book"
    assert effect["ik.receipt.status"] == "completed"
    assert len(str(effect["ik.effect.key_sha256"])) == 16
    chats = [attrs for name, _, _, attrs in spans if name == f"chat {MODEL}"]
    assert {c["ik.model.task"] for c in chats} == {"interpret", "compose"}
    assert all(c["gen_ai.usage.input_tokens"] == 120 for c in chats)
