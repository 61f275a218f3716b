"""Every Python snippet in ``docs/*.md`` runs, as the README's do (``tests/test_readme.py``).

A page reads top to bottom, so its snippets run in order in one namespace, in a fresh working
directory, with top-level ``await`` allowed (a plain snippet runs outside the event loop, as a
script would: the ``*_sync`` calls refuse a running loop). A snippet may use names the text
around it introduces (``store``, ``desk``, ``agent``, ``url`` ...): each one it uses without
defining must be in ``GIVEN`` below, real objects built by code (a SQLite store in the working
directory, a fresh PostgreSQL database, the travel desk), never mocks; any other undefined name
fails the test, naming it. The givens are built in a namespace of their own, so a missing
import in a snippet is still caught. A snippet that defines a ``Test*`` class with pytest
fixtures (a conformance harness) also has each fixture built and the harness opened twice
and closed, as pytest would before the suite's first test.

A snippet that runs until it is stopped (a relay) starts with ``# runs until stopped``: it
runs for ``RUN_FOR`` seconds and is then cancelled; an error before that fails the page. A
snippet that cannot run on its own (the body of a capability, a definition elided with
``...``) starts with a visible ``# fragment: why`` comment: it is compiled, not run. Keep those
few.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import builtins
import http.server
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
FRAGMENT = re.compile(r"\A\s*# fragment: \S")
UNTIL_STOPPED = re.compile(r"\A\s*# runs until stopped\b")
RUN_FOR = 2.0
"""Seconds a snippet that runs until stopped (a relay, a server) runs before it is stopped."""
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)

GIVEN: dict[str, str] = {
    # stores and agents
    "store": """
from intention_kernel.durability import open_durability
store = await open_durability("sqlite:///given.db")
_cleanups.append(store.close)
""",
    "url": """
import uuid
from intention_kernel.durability.postgres import admin_connection
from tests.support.postgres import postgres_dsn
_server = postgres_dsn().rsplit("/", 1)[0]
_database = f"ik_docs_{uuid.uuid4().hex[:12]}"
async with admin_connection(postgres_dsn()) as _admin:
    await _admin.execute(f'CREATE DATABASE "{_database}"')
url = f"{_server}/{_database}"

async def _drop_database():
    async with admin_connection(postgres_dsn()) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{_database}" WITH (FORCE)')

_cleanups.append(_drop_database)
""",
    "agent": """
from intention_kernel.examples.travel_desk import build_agent
agent = build_agent()
""",
    "definition": """
from intention_kernel.examples.travel_desk import build_agent
definition = build_agent()
""",
    "agent_v2": """
from intention_kernel.examples.travel_desk import build_agent
agent_v2 = build_agent()
""",
    "model": """
from intention_kernel.examples.travel_desk import scripted_model
model = scripted_model()
""",
    "desk": """
from intention_kernel.examples.travel_desk import compile_desk
desk = compile_desk(store)
""",
    "kernel": """
from intention_kernel import Kernel
kernel = Kernel(durability=store, model=model)
""",
    "MyDurability": """
from intention_kernel.durability.sqlite import SQLiteDurability as MyDurability
""",
    # a turn's parts
    "text": 'text = "Find a hotel in Lisbon for 2 nights"',
    "thread_id": 'thread_id = "t1"',
    "turn_id": 'turn_id = "turn-1"',
    "operation": """
from intention_kernel.testing.conformance import make_result

async def operation(scope):
    await scope.commit(make_result(scope))
""",
    "orders_client": """
class _Orders:
    async def status(self, order_id):
        return "shipped"

orders_client = _Orders()
""",
    "first_answer": 'first_answer = {"intentions": []}',
    "second_answer": 'second_answer = {"intentions": []}',
    "OLD_FINGERPRINT": 'OLD_FINGERPRINT = "ik1-" + "0" * 64',
    "migrate": """
def migrate(checkpoint):
    return checkpoint
""",
    "schema": """
schema = {"type": "object", "properties": {"extra": {"type": "object"}}}
""",
    "handle": """
def handle(event):
    return None
""",
    # the service and the inspector
    "tokens": """
from intention_kernel.http import BearerTokens
tokens = BearerTokens.from_secrets({"alice": "alice-token-0001"})
""",
    "secret": 'secret = b"s" * 32',
    "my_provider_key": """
def my_provider_key(receipt):
    return receipt.idempotency_key
""",
    "my_key_for": """
def my_key_for(receipt):
    return receipt.idempotency_key
""",
    # telemetry and the relay
    "tracer": """
from opentelemetry import trace
tracer = trace.get_tracer("docs")
""",
    "meter_provider": """
from opentelemetry.sdk.metrics import MeterProvider
meter_provider = MeterProvider()
_cleanups.append(lambda: asyncio.to_thread(meter_provider.shutdown))
""",
    "headers": 'headers = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}',
    "sink": """
from intention_kernel.relay import open_sink
sink = open_sink("stdout://")
""",
}
"""Names the docs' text introduces, each built by code (which may use other givens)."""

GIVEN_IN: dict[str, dict[str, str]] = {
    "conformance.md": {  # "my" roles: the in-process store's, over one shared state
        "connection": """
from intention_kernel.durability.memory import MemoryStore
connection = MemoryStore()
""",
        "MyTurns": "from intention_kernel.durability.memory._adapter import MemoryTurns as MyTurns",
        "MyHistory": """
from intention_kernel.durability.memory._adapter import MemoryHistory as MyHistory
""",
        "MyOutbox": """
from intention_kernel.durability.memory._outbox import MemoryOutbox as MyOutbox
""",
        "MyInspection": """
from intention_kernel.durability.memory._inspect import MemoryInspection as MyInspection
""",
    },
    "inspector.md": {  # the inspector's pages serve a compiled agent
        "agent": """
from intention_kernel.examples.travel_desk import compile_desk
agent = compile_desk(store)
""",
    },
}
"""A page's own meaning of a name, where it differs from ``GIVEN``."""

FILES = {"tokens": "alice sha256:" + "0" * 64 + "\n", "session.key": "k" * 32}
"""Files a snippet reads from its working directory (``BearerTokens.from_file("tokens")``)."""

ENVIRONMENT = {
    "IK_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"d" * 32).decode(),
    "OPENAI_API_KEY": "sk-docs-not-a-key",
    "ANTHROPIC_API_KEY": "sk-ant-docs-not-a-key",
    "GOOGLE_API_KEY": "docs-not-a-key",
}
"""Settings a snippet names; the keys are never used (nothing here calls a provider)."""


def _snippets(doc: Path) -> list[tuple[int, str]]:
    text = doc.read_text()
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _compile(source: str, where: str) -> Any:
    return compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _free_names(source: str) -> set[str]:
    """Names ``source`` reads before it binds them (imports, assignments, defs, parameters,
    patterns), by position: ``stream(text=text)`` above ``case TextDelta(text, ...)`` needs
    ``text``. A comprehension binds its targets where it starts."""
    tree = ast.parse(source)
    first_load: dict[str, tuple[int, int]] = {}
    first_bind: dict[str, tuple[int, int]] = {}

    def bind(name: str, node: ast.AST) -> None:
        at = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        first_bind[name] = min(first_bind.get(name, at), at)

    for node in ast.walk(tree):
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for generator in node.generators:
                for target in ast.walk(generator.target):
                    if isinstance(target, ast.Name):
                        bind(target.id, node)
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                at = (node.lineno, node.col_offset)
                first_load[node.id] = min(first_load.get(node.id, at), at)
            else:
                bind(node.id, node)
        elif isinstance(node, ast.alias):
            bind((node.asname or node.name).split(".")[0], node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bind(node.name, node)
        elif isinstance(node, ast.arg):
            bind(node.arg, node)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bind(node.name, node)
    late = {n for n, at in first_load.items() if n not in first_bind or at < first_bind[n]}
    return late - set(dir(builtins))


class _Page:
    """One page's run: its namespace, the givens' own namespace and what to close after."""

    def __init__(self, doc: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.doc = doc
        self.loop = loop
        self.namespace: dict[str, Any] = {"__name__": f"docs_{doc.stem}"}
        self.cleanups: list[Callable[[], Awaitable[object] | object]] = []
        self.given: dict[str, Any] = {"__name__": "given", "_cleanups": self.cleanups}
        self.given["asyncio"] = asyncio
        self.built: set[str] = set()
        self.givens = {**GIVEN, **GIVEN_IN.get(doc.name, {})}

    def execute(self, code: Any, namespace: dict[str, Any], *, until_stopped: bool = False) -> None:
        result = eval(code, namespace)  # the documentation's own code
        if not inspect.iscoroutine(result):
            return
        task = self.loop.create_task(result)
        if not until_stopped:
            self.loop.run_until_complete(task)
            return
        self.loop.run_until_complete(asyncio.wait({task}, timeout=RUN_FOR))
        if task.done():
            task.result()  # it stopped by itself: only an error fails the page
            return
        task.cancel()
        self.loop.run_until_complete(asyncio.wait({task}))

    def build(self, name: str, where: str) -> None:
        if name in self.built:
            return
        source = self.givens.get(name)
        if source is None:
            raise AssertionError(
                f"{where} uses {name!r}, which neither the page defines before it nor GIVEN"
                " gives: define it in the snippet, or add it to GIVEN in tests/test_docs.py"
            )
        for needed in sorted(_free_names(source) - set(self.given)):
            self.build(needed, f"GIVEN[{name!r}]")
        self.execute(_compile(source, f"GIVEN[{name!r}]"), self.given)
        self.built.add(name)

    def run(self, line: int, source: str) -> None:
        where = f"{self.doc.name}:{line}"
        code = _compile(source, where)
        if FRAGMENT.match(source):
            return  # compiled: valid Python, deliberately not run
        for name in sorted(_free_names(source) - set(self.namespace)):
            self.build(name, where)
            self.namespace[name] = self.given[name]
        self.execute(code, self.namespace, until_stopped=bool(UNTIL_STOPPED.match(source)))
        for value in list(self.namespace.values()):
            own = isinstance(value, type) and value.__module__ == self.namespace["__name__"]
            if own and value.__name__.startswith("Test"):
                self._prepare(value, where)

    def _prepare(self, suite: type, where: str) -> None:
        """Build each fixture the suite class defines (``tmp_path`` given), as pytest would,
        and open the harness it returns twice (a restart), then close it."""
        for attribute in vars(suite).values():
            wrapped = getattr(attribute, "_get_wrapped_function", None)
            if wrapped is None:
                continue
            function = wrapped()
            names = list(inspect.signature(function).parameters)[1:]
            assert set(names) <= {"tmp_path"}, f"{where}: fixture wants {names}"
            harness = function(suite(), *[Path.cwd()] * len(names))
            self.loop.run_until_complete(self._open_twice(harness))

    @staticmethod
    async def _open_twice(harness: Any) -> None:
        try:
            await harness.open()
            await harness.open()
        finally:
            await harness.close_all()

    def close(self) -> None:
        try:
            for cleanup in reversed(self.cleanups):
                result = cleanup()
                if inspect.isawaitable(result):
                    self.loop.run_until_complete(result)
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint on loopback that accepts what it is sent (the exporters a page
    sets up deliver there, instead of retrying against a collector that is not running)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _shut_down_providers(namespace: dict[str, Any]) -> None:
    """Flush and stop the OpenTelemetry SDK providers a page made, while the collector runs
    (at exit they would export again)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    for value in namespace.values():
        if isinstance(value, MeterProvider | TracerProvider):
            value.shutdown()


@pytest.mark.parametrize("doc", [d for d in DOCS if _snippets(d)], ids=lambda d: d.name)
def test_every_snippet_runs(
    doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    page = _Page(doc, asyncio.new_event_loop())
    try:
        for line, source in _snippets(doc):
            page.run(line, source)
    finally:
        try:
            _shut_down_providers(page.namespace)
        finally:
            page.close()


def test_fragments_are_few() -> None:
    """A fragment is an exception with its reason in the page, not a way around this test."""
    snippets = [s for doc in DOCS for _, s in _snippets(doc)]
    fragments = [s for s in snippets if FRAGMENT.match(s)]
    assert len(snippets) >= 20
    assert len(fragments) * 4 <= len(snippets), [f.splitlines()[0] for f in fragments]


def test_the_free_names_are_found() -> None:
    source = "import os\nx = 1\nasync def f(a):\n    return a + x + y\nprint(store, os)\n"
    assert _free_names(source) == {"y", "store"}
    assert _free_names("print(text)\nmatch 1:\n    case int(text): pass\n") == {"text"}
    assert _free_names("[e for e in events if e]\n") == {"events"}


def test_the_cli_guide_documents_correcting_a_reconciliation() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "still to come" not in text
    assert "reconcile --correct" in text
