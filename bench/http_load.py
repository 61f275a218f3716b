"""HTTP service load test: K concurrent conversations against ``intention_kernel.http`` on
loopback, with duplicate deliveries and client-side timeouts, next to the same conversations
calling ``CompiledAgent.run`` directly, in one run.

    .venv/bin/python bench/http_load.py [--clients 8] [--seconds 10 | --turns 30] [--quick]
                                        [--store sqlite] [--store postgresql://...] [--servers N]

The agent is small and its model scripted (``ScriptedModelGateway``, no network): a read
capability (``notes.lookup``) and a write (``orders.place``, confirmation required) that goes
through ``run_effect`` to a fake provider. The provider answers per idempotency key and appends
every call to a log file, so the calls of every server process are counted after the run.

Each conversation is one thread; its turns cycle through "look up topic-N" (a read), "order
cK-iN" (the write, held for confirmation) and "yes" (the write runs). Each turn has one key (the
turn id, sent as ``Idempotency-Key``) and, at random (seeded), one of:

- ``once``: sent once;
- ``repeat``: sent, answered, then sent again with the same key (duplicate delivery);
- ``concurrent``: sent twice at once with the same key (one runs, the other waits and replays);
- ``timeout``: sent with a very short client timeout (``--short-timeout``), then, after the
  client gave up, sent again with the same key: the server may still be running the first one,
  the retry must get the same answer, waiting or replaying.

A repeat goes to the next server (``--servers N`` starts N server processes on one store, and
requests go round robin): any instance serves any thread. After the timed window, every key is
delivered once more (the replay check) and one key per conversation with another text (it must
be refused, 409 ``TURN_ID_REUSED``). The checks (a failed one exits 1):

- no 5xx and no unexpected status, ever;
- every answer of a key is the same as its replay (the body without ``replayed``), the replay
  says ``replayed: true`` and ``Idempotent-Replayed: true``, a sequential repeat too, and at
  most one answer of a key says it ran the turn (exactly one when no attempt timed out);
- every key committed exactly once: read back with the store API (``list_turns``), each
  conversation's committed turn ids are its keys, in order, once each;
- the write provider was called exactly once per confirmed order (never twice for a key).

The direct cell runs the same conversations (same seed) in this process with ``agent.run``
(a repeat is a second ``run``, a timeout ``asyncio.timeout`` around it) on a fresh store of the
same kind; the HTTP cell runs uvicorn in separate processes (client and server CPU apart) on a
fresh store. Reported per cell: requests/s (answered requests), turns/s, p50/p99 latency of the
answered requests, CPU per request (client; servers from ``/proc``); and the ratio HTTP/direct
(the HTTP overhead). Writes ``bench/results/http_load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import json
import math
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, JsonValue

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._measure import (  # noqa: E402
    cell_machine,
    cpu_seconds,
    machine,
    machine_cpu,
    others_share,
    read_proc_stat,
    self_cpu,
)
from intention_kernel import (  # noqa: E402
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    KernelError,
    define_agent,
    define_capability,
)
from intention_kernel.contracts.durability import DurabilityStore  # noqa: E402
from intention_kernel.contracts.gateway import ModelRequest  # noqa: E402
from intention_kernel.durability import open_durability  # noqa: E402
from intention_kernel.durability.factory import sqlite_url  # noqa: E402
from intention_kernel.kernel import provider_idempotency_key  # noqa: E402
from intention_kernel.testing import ScriptedModelGateway  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "http_load.json"
DEFAULT_APP = "intention_kernel.http:create_app"
USER, TOKEN = "bench", "bench-secret"
MODES = ("once", "repeat", "concurrent", "timeout")

# ---------------------------------------------------------------- the agent


class NoteQuery(BaseModel):
    topic: str = Field(min_length=1)


class Note(BaseModel):
    topic: str
    text: str


class OrderRequest(BaseModel):
    item: str = Field(min_length=1)


class Order(BaseModel):
    order_id: str
    item: str


class OrderProvider:
    """The write provider: one order per idempotency key (its id derived from the key), every
    call appended to ``log`` as one JSON line (``O_APPEND``: several processes share it)."""

    def __init__(self, log: Path) -> None:
        self.log = log

    async def place(self, item: str, *, idempotency_key: str) -> JsonValue:
        line = json.dumps({"key": idempotency_key, "item": item, "pid": os.getpid()}) + "\n"
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:12]
        return {"order_id": f"ORD-{digest}", "item": item}


def read_provider_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def lookup(context: CapabilityContext, query: NoteQuery) -> Completed:
    text = f"Note on {query.topic}: nothing changed since yesterday."
    return Completed(output=Note(topic=query.topic, text=text), text=text, source="notes")


async def place(context: CapabilityContext, request: OrderRequest) -> Completed:
    provider: OrderProvider = context.ports["orders"]
    effect = await context.run_effect(
        f"order:{request.item}",
        lambda authority: provider.place(
            request.item,
            idempotency_key=provider_idempotency_key(
                authority, tenant="bench", thread=context.turn.thread_id
            ),
        ),
    )
    order = Order.model_validate(effect.value)
    return Completed(output=order, text=f"Ordered {order.item} ({order.order_id}).")


def interpret(request: ModelRequest) -> JsonValue:
    text = str(request.input.get("text", "")).strip()
    if text == "yes":
        return {"intentions": [], "answer": {"option": "yes"}, "reply": None}
    if text.startswith("order "):
        intention: JsonValue = {"capability": "orders.place", "input": {"item": text[6:]}}
        return {"intentions": [intention], "answer": None, "reply": None}
    if text.startswith("look up "):
        intention = {"capability": "notes.lookup", "input": {"topic": text[8:]}}
        return {"intentions": [intention], "answer": None, "reply": None}
    return {"intentions": [], "answer": None, "reply": None}


def compose(request: ModelRequest) -> JsonValue:
    outcomes = request.input.get("outcomes")
    texts = [
        str(o["text"])
        for o in (outcomes if isinstance(outcomes, list) else [])
        if isinstance(o, dict) and o.get("text")
    ]
    return {"text": " ".join(texts) or "How can I help?", "citations": []}


def compile_agent(store: DurabilityStore, log: Path) -> CompiledAgent:
    agent = define_agent(
        id="load-desk",
        version="1.0.0",
        description="Looks up notes and places orders.",
        capabilities=[
            define_capability(
                id="notes.lookup",
                version="1.0.0",
                description="Look up the note on a topic.",
                input=NoteQuery,
                output=Note,
                effect="read",
                execute=lookup,
            ),
            define_capability(
                id="orders.place",
                version="1.0.0",
                description="Place an order for an item.",
                input=OrderRequest,
                output=Order,
                effect="write",
                confirmation="required",
                execute=place,
            ),
        ],
    )
    model = ScriptedModelGateway({"interpret": interpret, "repair": interpret, "compose": compose})
    kernel = Kernel(durability=store, model=model, ports={"orders": OrderProvider(log)})
    return kernel.compile(agent)


# ---------------------------------------------------------------- plans (pure)


@dataclass(frozen=True)
class Step:
    """One turn of a conversation: its key (the turn id), its text, how it is delivered, and
    the order it confirms (a "yes" turn)."""

    key: str
    text: str
    mode: str
    confirms: str | None = None


def plan_step(
    rng: random.Random, conversation: int, n: int, duplicates: float, timeouts: float
) -> Step:
    """Turn ``n`` (from 1) of conversation ``conversation``: a read, an order, its "yes"."""
    draw = rng.random()
    if draw < timeouts:
        mode = "timeout"
    elif draw < timeouts + duplicates / 2:
        mode = "repeat"
    elif draw < timeouts + duplicates:
        mode = "concurrent"
    else:
        mode = "once"
    key = f"c{conversation}-t{n}"
    phase = (n - 1) % 3
    if phase == 0:
        return Step(key, f"look up topic-{conversation}-{n}", mode)
    if phase == 1:
        return Step(key, f"order c{conversation}-i{n}", mode)
    return Step(key, "yes", mode, confirms=f"c{conversation}-i{n - 1}")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100); ``None`` for no values."""
    if not values:
        return None
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


# ---------------------------------------------------------------- answers and checks (pure)


@dataclass
class Answer:
    """One delivery of a key and what came back. ``kind``: ``first``, ``repeat``,
    ``concurrent``, ``timed_out`` (the client gave up: no answer), ``retry`` (after a
    timeout), ``verify`` (the replay check), ``conflict`` (same key, other text)."""

    thread: str
    key: str
    kind: str
    status: int | None
    replayed: bool | None = None
    replayed_header: bool | None = None
    body: dict[str, Any] | None = None
    code: str | None = None
    seconds: float = 0.0
    server: int = 0
    error: str | None = None


def same_answer(body: Mapping[str, Any]) -> dict[str, Any]:
    """What must be the same in every answer of a key: the body without ``replayed``."""
    return {k: v for k, v in body.items() if k != "replayed"}


def check_answers(answers: Iterable[Answer]) -> list[str]:
    """The client-side checks; one line per problem (capped per kind by the caller)."""
    problems: list[str] = []
    by_key: dict[tuple[str, str], list[Answer]] = {}
    for a in answers:
        by_key.setdefault((a.thread, a.key), []).append(a)
        where = f"{a.thread}/{a.key} ({a.kind}, server {a.server})"
        if a.status is not None and a.status >= 500:
            problems.append(f"{where}: {a.status} {a.code or ''} {a.error or ''}".rstrip())
        elif a.kind == "conflict":
            if a.status != 409 or a.code != "TURN_ID_REUSED":
                problems.append(f"{where}: expected 409 TURN_ID_REUSED, got {a.status} {a.code}")
        elif a.kind == "timed_out":
            if a.status is not None and a.status != 200:
                problems.append(f"{where}: status {a.status} {a.code or ''}".rstrip())
        elif a.status != 200:
            problems.append(f"{where}: status {a.status} {a.code or a.error or ''}".rstrip())
        elif a.replayed_header is None:
            problems.append(f"{where}: no Idempotent-Replayed header")
        elif a.replayed_header != a.replayed:
            problems.append(
                f"{where}: Idempotent-Replayed {a.replayed_header} but body {a.replayed}"
            )
    for (thread, key), group in by_key.items():
        answered = [
            a for a in group if a.status == 200 and a.body is not None and a.kind != "conflict"
        ]
        if not answered:
            problems.append(f"{thread}/{key}: never answered")
            continue
        reference = same_answer(answered[0].body or {})
        for a in answered[1:]:
            if same_answer(a.body or {}) != reference:
                problems.append(
                    f"{thread}/{key}: the {a.kind} answer differs from the {answered[0].kind} one"
                )
        ran = [a for a in answered if a.replayed is False]
        if len(ran) > 1:
            problems.append(f"{thread}/{key}: {len(ran)} answers say they ran the turn")
        gave_up = any(a.kind == "timed_out" and a.status is None for a in group)
        if not ran and not gave_up:
            problems.append(f"{thread}/{key}: no answer says it ran the turn")
        for a in answered:
            if a.kind in ("verify", "repeat") and a.replayed is not True:
                problems.append(f"{thread}/{key}: the {a.kind} delivery was not a replay")
        concurrent = [a for a in answered if a.kind == "concurrent"]
        if len(concurrent) == 2 and sum(a.replayed is False for a in concurrent) != 1:
            problems.append(f"{thread}/{key}: two deliveries at once, not exactly one ran")
    return problems


def check_store(
    committed: Mapping[str, Sequence[str]], expected: Mapping[str, Sequence[str]]
) -> list[str]:
    """Every key committed exactly once, in the conversation's order: the committed turn ids of
    each thread (``list_turns``, by revision) are its keys."""
    problems: list[str] = []
    for thread, keys in expected.items():
        turns = list(committed.get(thread, ()))
        counts = Counter(turns)
        twice = sorted(k for k, n in counts.items() if n > 1)
        if twice:
            problems.append(f"{thread}: committed more than once: {', '.join(twice[:5])}")
        missing = [k for k in keys if k not in counts]
        if missing:
            problems.append(f"{thread}: never committed: {', '.join(missing[:5])}")
        extra = sorted(set(turns) - set(keys))
        if extra:
            problems.append(f"{thread}: committed but never sent: {', '.join(extra[:5])}")
        if not (twice or missing or extra) and turns != list(keys):
            problems.append(f"{thread}: committed out of order")
    for thread in committed:
        if thread not in expected:
            problems.append(f"{thread}: a thread nobody talked to has turns")
    return problems


def check_provider(calls: Iterable[Mapping[str, Any]], orders: Iterable[str]) -> list[str]:
    """The write provider was called exactly once per confirmed order, once per key."""
    problems: list[str] = []
    calls = list(calls)
    by_key = Counter(str(c["key"]) for c in calls)
    by_item = Counter(str(c["item"]) for c in calls)
    for key, n in by_key.items():
        if n > 1:
            problems.append(f"provider key {key[:24]}... called {n} times")
    wanted = list(orders)
    for item in wanted:
        if by_item[item] != 1:
            problems.append(f"order {item}: {by_item[item]} provider calls")
    for item in sorted(set(by_item) - set(wanted)):
        problems.append(f"order {item}: placed but never confirmed")
    return problems


def summarize(answers: Sequence[Answer], seconds: float) -> dict[str, Any]:
    """Requests/s, turns/s and latency of the timed window (the verify phase excluded)."""
    timed = [a for a in answers if a.kind not in ("verify", "conflict")]
    answered = [a for a in timed if a.status is not None]
    keys = {(a.thread, a.key) for a in timed}

    def latency(kinds: Iterable[str]) -> dict[str, float | None]:
        wanted = set(kinds)
        values = [a.seconds * 1000 for a in answered if a.kind in wanted]
        p50, p99 = percentile(values, 50), percentile(values, 99)
        return {
            "count": len(values),
            "p50_ms": None if p50 is None else round(p50, 2),
            "p99_ms": None if p99 is None else round(p99, 2),
        }

    return {
        "requests": len(answered),
        "gave_up": sum(1 for a in timed if a.status is None),
        "turns": len(keys),
        "seconds": round(seconds, 3),
        "requests_per_s": round(len(answered) / seconds, 1) if seconds > 0 else None,
        "turns_per_s": round(len(keys) / seconds, 1) if seconds > 0 else None,
        "latency": {
            "all": latency(("first", "repeat", "concurrent", "retry", "timed_out")),
            "first": latency(("first",)),
            "repeats": latency(("repeat", "retry")),
        },
        "by_kind": dict(Counter(a.kind for a in timed)),
    }


# ---------------------------------------------------------------- conversations


Send = Callable[[str, str, str, bool, int], Awaitable[Answer]]
"""``send(thread, key, text, short, server) -> Answer`` (``short``: with the short client
timeout); the caller sets ``kind``."""


@dataclass
class Settings:
    clients: int
    turns: int
    seconds: float
    duplicates: float
    timeouts: float
    short_timeout: float
    seed: int
    servers: int = 1


@dataclass
class Conversation:
    thread: str
    index: int
    keys: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    orders: list[str] = field(default_factory=list)


async def deliver(
    send: Send, answers: list[Answer], thread: str, step: Step, server: int, servers: int
) -> None:
    """One step, as planned; a request that does not get a 200 is retried with the same key
    (at most 3 times), as a client would."""
    nxt = (server + 1) % servers

    async def once(kind: str, short: bool, on: int) -> Answer:
        answer = await send(thread, step.key, step.text, short, on)
        answer.kind = kind
        answers.append(answer)
        return answer

    if step.mode == "concurrent":
        pair = await asyncio.gather(
            once("concurrent", False, server), once("concurrent", False, nxt)
        )
        last = pair[0] if pair[0].status == 200 else pair[1]
    elif step.mode == "timeout":
        await once("timed_out", True, server)
        last = await once("retry", False, nxt)
    else:
        last = await once("first", False, server)
        if step.mode == "repeat" and last.status == 200:
            last = await once("repeat", False, nxt)
    tries = 0
    while last.status != 200 and tries < 3:
        tries += 1
        await asyncio.sleep(0.05 * tries)
        last = await once("retry", False, (server + tries) % servers)


async def converse(
    send: Send,
    settings: Settings,
    conversation: Conversation,
    answers: list[Answer],
    deadline: float,
) -> None:
    rng = random.Random(settings.seed * 1000 + conversation.index)
    n = 0
    while (n < settings.turns) if settings.turns else (time.monotonic() < deadline):
        n += 1
        step = plan_step(rng, conversation.index, n, settings.duplicates, settings.timeouts)
        conversation.keys.append(step.key)
        conversation.texts[step.key] = step.text
        if step.confirms:
            conversation.orders.append(step.confirms)
        server = (conversation.index + n) % settings.servers
        await deliver(send, answers, conversation.thread, step, server, settings.servers)


async def run_conversations(
    send: Send, settings: Settings, prefix: str
) -> tuple[list[Conversation], list[Answer], float]:
    conversations = [Conversation(f"{prefix}-{k}", k) for k in range(settings.clients)]
    answers: list[Answer] = []
    started = time.monotonic()
    deadline = started + settings.seconds
    await asyncio.gather(*(converse(send, settings, c, answers, deadline) for c in conversations))
    return conversations, answers, time.monotonic() - started


async def verify(
    send: Send, settings: Settings, conversations: Sequence[Conversation], answers: list[Answer]
) -> None:
    """Every key once more (must replay, same answer), on the next server; and the first key
    of each conversation with another text (must be refused)."""

    async def check(c: Conversation) -> None:
        for i, key in enumerate(c.keys):
            answer = await send(
                c.thread, key, c.texts[key], False, (c.index + i) % settings.servers
            )
            answer.kind = "verify"
            answers.append(answer)
        if c.keys:
            answer = await send(
                c.thread, c.keys[0], "a different text", False, c.index % settings.servers
            )
            answer.kind = "conflict"
            answers.append(answer)

    await asyncio.gather(*(check(c) for c in conversations))


async def read_committed(store: DurabilityStore, threads: Iterable[str]) -> dict[str, list[str]]:
    committed: dict[str, list[str]] = {}
    for thread in threads:
        turns: list[str] = []
        after = 0
        while True:
            page = await store.list_turns(thread, after_revision=after, limit=500)
            turns.extend(t.turn_id for t in page)
            if len(page) < 500:
                break
            after = page[-1].checkpoint.revision
        committed[thread] = turns
    return committed


# ---------------------------------------------------------------- the direct cell


def direct_sender(agent: CompiledAgent, short_timeout: float) -> Send:
    async def send(thread: str, key: str, text: str, short: bool, server: int) -> Answer:
        started = time.perf_counter()
        try:
            if short:
                async with asyncio.timeout(short_timeout):
                    result = await agent.run(thread_id=thread, turn_id=key, text=text)
            else:
                result = await agent.run(thread_id=thread, turn_id=key, text=text)
        except TimeoutError:
            return Answer(thread, key, "", None, seconds=time.perf_counter() - started)
        except KernelError as exc:
            status = 409 if exc.code == "TURN_ID_REUSED" else (503 if exc.retryable else 500)
            return Answer(
                thread,
                key,
                "",
                status,
                code=exc.code,
                error=str(exc),
                seconds=time.perf_counter() - started,
            )
        body = {
            "thread_id": result.thread_id,
            "turn_id": result.turn_id,
            "replayed": result.replayed,
            "response": result.response.model_dump(mode="json"),
            "checkpoint": {"revision": result.checkpoint.revision},
        }
        return Answer(
            thread,
            key,
            "",
            200,
            replayed=result.replayed,
            replayed_header=result.replayed,
            body=body,
            seconds=time.perf_counter() - started,
        )

    return send


# ---------------------------------------------------------------- the HTTP cell


def http_sender(clients: Sequence[Any], short_timeout: float) -> Send:
    import httpx

    async def send(thread: str, key: str, text: str, short: bool, server: int) -> Answer:
        client = clients[server % len(clients)]
        headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key}
        chosen = httpx.Timeout(short_timeout) if short else httpx.USE_CLIENT_DEFAULT
        started = time.perf_counter()
        try:
            response = await client.post(
                f"/v1/threads/{thread}/turns", json={"text": text}, headers=headers, timeout=chosen
            )
        except httpx.TimeoutException:
            return Answer(
                thread, key, "", None, seconds=time.perf_counter() - started, server=server
            )
        except httpx.HTTPError as exc:
            return Answer(
                thread,
                key,
                "",
                0,
                error=f"{type(exc).__name__}: {exc}",
                seconds=time.perf_counter() - started,
                server=server,
            )
        seconds = time.perf_counter() - started
        try:
            body = response.json()
        except ValueError:
            body = None
        header = response.headers.get("Idempotent-Replayed")
        answer = Answer(
            thread,
            key,
            "",
            response.status_code,
            seconds=seconds,
            server=server,
            replayed_header=None if header is None else header.lower() == "true",
        )
        if response.status_code == 200 and isinstance(body, dict):
            answer.body = body
            answer.replayed = body.get("replayed")
        elif isinstance(body, dict):
            answer.code = body.get("code")
            answer.error = str(body.get("detail") or body.get("title") or "")
        return answer

    return send


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def cpu(self) -> float | None:
        stat = read_proc_stat(self.process.pid)
        return None if stat is None else cpu_seconds(stat.ticks)


def start_servers(count: int, store: str, log: Path, app: str, directory: Path) -> list[Server]:
    servers = []
    for i in range(count):
        sock = free_socket()
        spec = {"store": store, "provider_log": str(log), "fd": sock.fileno(), "app": app}
        out = directory / f"server-{i}-{time.monotonic_ns()}.log"
        with out.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, __file__, "--serve", json.dumps(spec)],
                pass_fds=[sock.fileno()],
                stdout=stderr,
                stderr=stderr,
            )
        servers.append(Server(process, sock.getsockname()[1], out))
        sock.close()  # the child holds its copy
    return servers


async def wait_ready(servers: Sequence[Server], limit: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=2.0) as client:
        for s in servers:
            while True:
                if s.process.poll() is not None:
                    raise RuntimeError(f"server exited: {s.log.read_text()[-2000:]}")
                try:
                    if (await client.get(f"http://127.0.0.1:{s.port}/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server not ready: {s.log.read_text()[-2000:]}")
                await asyncio.sleep(0.05)


def stop_servers(servers: Sequence[Server]) -> list[int | None]:
    for s in servers:
        if s.process.poll() is None:
            s.process.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for s in servers:
        try:
            codes.append(s.process.wait(timeout=20))
        except subprocess.TimeoutExpired:
            s.process.kill()
            s.process.wait()
            codes.append(None)
    return codes


def serve(spec: dict[str, Any]) -> None:
    """A server process: the agent on the store, the app, uvicorn on the inherited socket;
    SIGTERM stops it gracefully."""
    import uvicorn

    async def main() -> None:
        module, _, name = str(spec["app"]).partition(":")
        http = importlib.import_module(module)
        store = await open_durability(spec["store"])
        try:
            agent = compile_agent(store, Path(spec["provider_log"]))
            app = getattr(http, name)(
                agent, store=store, authenticate=http.BearerTokens.from_secrets({USER: TOKEN})
            )
            sockets = [socket.socket(fileno=int(spec["fd"]))]
            options: dict[str, Any] = {"log_level": "warning", "access_log": False}
            if hasattr(http, "Server") and hasattr(http, "server_config"):
                # The service's own server: it drains running turns when asked to stop.
                config = http.server_config(app, host="127.0.0.1", port=0, **options)
                await http.Server(config).serve(sockets=sockets)
            else:
                config = uvicorn.Config(app, **options)
                await uvicorn.Server(config).serve(sockets=sockets)
        finally:
            await store.close()

    asyncio.run(main())


# ---------------------------------------------------------------- cells and stores


@dataclass
class StoreKind:
    """Where a cell's fresh store lives: a SQLite file in the run's directory, or a fresh
    schema on the PostgreSQL server (dropped afterwards)."""

    base: str
    directory: Path

    @property
    def backend(self) -> str:
        return "sqlite" if self.base == "sqlite" else "postgresql"

    def url(self, name: str) -> str:
        if self.base == "sqlite":
            return sqlite_url(self.directory / f"{name}.db")
        glue = "&" if "?" in self.base else "?"
        return f"{self.base}{glue}schema=ik_http_load_{name}_{os.getpid()}"

    async def create(self, url: str) -> None:
        options: dict[str, Any] = {} if self.base == "sqlite" else {"setup": True}
        store = await open_durability(url, **options)
        await store.close()

    async def drop(self, url: str) -> None:
        if self.base == "sqlite":
            return
        from intention_kernel.durability.factory import describe_store
        from intention_kernel.durability.postgres import drop_schema

        location = describe_store(url)
        assert location.dsn is not None
        await drop_schema(location.dsn, str(location.options["schema"]))


async def cell_checks(
    url: str, conversations: Sequence[Conversation], answers: Sequence[Answer], log: Path
) -> dict[str, list[str]]:
    store = await open_durability(url)
    try:
        committed = await read_committed(store, [c.thread for c in conversations])
    finally:
        await store.close()
    expected = {c.thread: c.keys for c in conversations}
    orders = [o for c in conversations for o in c.orders]
    return {
        "answers": check_answers(answers),
        "store": check_store(committed, expected),
        "provider": check_provider(read_provider_log(log), orders),
    }


def finish(
    side: str,
    settings: Settings,
    conversations: Sequence[Conversation],
    answers: Sequence[Answer],
    seconds: float,
    checks: dict[str, list[str]],
    cpu: dict[str, float | None],
    load: dict[str, Any],
) -> dict[str, Any]:
    summary = summarize(answers, seconds)
    requests = summary["requests"] or 1
    return {
        "side": side,
        "servers": settings.servers if side == "http" else None,
        **summary,
        "client_cpu_us_per_request": _us(cpu["client"], requests),
        "server_cpu_us_per_request": _us(cpu["server"], requests),
        "committed_keys": sum(len(c.keys) for c in conversations),
        "orders": sum(len(c.orders) for c in conversations),
        "checks": {
            name: {"ok": not found, "problems": found[:20], "count": len(found)}
            for name, found in checks.items()
        },
        "machine": load,
    }


def _us(value: float | None, requests: int) -> float | None:
    return None if value is None else round(value * 1e6 / requests, 1)


async def direct_cell(settings: Settings, kind: StoreKind) -> dict[str, Any]:
    url = kind.url("direct")
    log = kind.directory / f"provider-direct-{time.monotonic_ns()}.jsonl"
    await kind.create(url)
    try:
        store = await open_durability(url)
        try:
            agent = compile_agent(store, log)
            send = direct_sender(agent, settings.short_timeout)
            before, busy, cpu = machine(), machine_cpu(), self_cpu()
            conversations, answers, seconds = await run_conversations(send, settings, "direct")
            used = self_cpu() - cpu
            load = cell_machine(before, machine(), others_share(busy, machine_cpu(), used))
            await verify(send, settings, conversations, answers)
        finally:
            await store.close()
        checks = await cell_checks(url, conversations, answers, log)
    finally:
        await kind.drop(url)
    cpus: dict[str, float | None] = {"client": used, "server": None}
    return finish("direct", settings, conversations, answers, seconds, checks, cpus, load)


async def http_cell(settings: Settings, kind: StoreKind, app: str) -> dict[str, Any]:
    import httpx

    url = kind.url("http")
    log = kind.directory / f"provider-http-{time.monotonic_ns()}.jsonl"
    await kind.create(url)
    servers = start_servers(settings.servers, url, log, app, kind.directory)
    try:
        await wait_ready(servers)
        limits = httpx.Limits(
            max_connections=4 * settings.clients, max_keepalive_connections=4 * settings.clients
        )
        clients = [
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{s.port}", timeout=60.0, limits=limits)
            for s in servers
        ]
        try:
            send = http_sender(clients, settings.short_timeout)
            server_cpu = [s.cpu() for s in servers]
            before, busy, cpu = machine(), machine_cpu(), self_cpu()
            conversations, answers, seconds = await run_conversations(send, settings, "http")
            used = self_cpu() - cpu
            after_cpu = [s.cpu() for s in servers]
            served: float | None = 0.0
            for a, b in zip(after_cpu, server_cpu, strict=True):
                served = None if a is None or b is None or served is None else served + a - b
            ours = used + (served or 0.0)
            load = cell_machine(before, machine(), others_share(busy, machine_cpu(), ours))
            await verify(send, settings, conversations, answers)
        finally:
            for client in clients:
                await client.aclose()
    finally:
        codes = stop_servers(servers)
    try:
        checks = await cell_checks(url, conversations, answers, log)
        # uvicorn re-raises the SIGTERM it handled once it has shut down: -15 is graceful too.
        graceful = (0, -signal.SIGTERM)
        bad = [f"server {i} exited with {c}" for i, c in enumerate(codes) if c not in graceful]
        checks["servers"] = bad
    finally:
        await kind.drop(url)
    report = finish(
        "http",
        settings,
        conversations,
        answers,
        seconds,
        checks,
        {"client": used, "server": served},
        load,
    )
    report["server_exit_codes"] = codes
    return report


def cpu_total(cell: Mapping[str, Any]) -> float | None:
    """CPU per answered request of a cell: client plus servers (none for the direct cell)."""
    client, server = cell["client_cpu_us_per_request"], cell["server_cpu_us_per_request"]
    if client is None or (cell["side"] == "http" and server is None):
        return None
    return float(client) + float(server or 0.0)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


async def run_store(args: argparse.Namespace, base: str, directory: Path) -> dict[str, Any]:
    """The direct cell and the HTTP cell on one kind of store, side by side."""
    settings = Settings(
        clients=args.clients,
        turns=args.turns,
        seconds=args.seconds,
        duplicates=args.duplicates,
        timeouts=args.timeouts,
        short_timeout=args.short_timeout,
        seed=args.seed,
        servers=args.servers or (1 if base == "sqlite" else 2),
    )
    kind = StoreKind(base, directory)
    started = machine()
    direct = await direct_cell(Settings(**{**asdict(settings), "servers": 1}), kind)
    http = await http_cell(settings, kind, args.app)
    ok = all(c["ok"] for cell in (direct, http) for c in cell["checks"].values())
    return {
        "store": kind.backend,
        "machine_at_start": started,
        "machine_at_end": machine(),
        "settings": {
            **asdict(settings),
            "app": args.app,
            "server": "uvicorn, one worker per process (h11 unless httptools is installed)",
            "client": "httpx.AsyncClient, one process, one task per conversation",
            "direct": "CompiledAgent.run in one process, one task per conversation",
        },
        "cells": {"direct": direct, "http": http},
        "ratio_http_vs_direct": {
            "requests_per_s": ratio(http["requests_per_s"], direct["requests_per_s"]),
            "turns_per_s": ratio(http["turns_per_s"], direct["turns_per_s"]),
            "p50": ratio(http["latency"]["all"]["p50_ms"], direct["latency"]["all"]["p50_ms"]),
            "p99": ratio(http["latency"]["all"]["p99_ms"], direct["latency"]["all"]["p99_ms"]),
            "cpu_per_request": ratio(cpu_total(http), cpu_total(direct)),
        },
        "ok": ok,
    }


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    runs = [await run_store(args, base, directory) for base in args.store]
    return {
        "benchmark": "http_load",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": bool(args.quick) or (not args.turns and args.seconds < 10),
        "python": platform.python_version(),
        "runs": runs,
        "ok": all(r["ok"] for r in runs),
    }


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{'side':<8}{'servers':>8}{'clients':>8}{'requests':>9}{'gave up':>8}{'turns':>7}"
        f"{'req/s':>8}{'turns/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'client us':>10}{'server us':>10}"
        "  checks"
    )
    clients = report["settings"]["clients"]
    for side in ("direct", "http"):
        c = report["cells"][side]
        lat = c["latency"]["all"]
        failed = [name for name, check in c["checks"].items() if not check["ok"]]
        print(
            f"{side:<8}{c['servers'] or '-':>8}{clients:>8}{c['requests']:>9}{c['gave_up']:>8}"
            f"{c['turns']:>7}"
            f"{c['requests_per_s']:>8}{c['turns_per_s']:>8}{lat['p50_ms']:>8}{lat['p99_ms']:>8}"
            f"{c['client_cpu_us_per_request'] or '-':>10}"
            f"{c['server_cpu_us_per_request'] or '-':>10}"
            f"  {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}"
        )
    r = report["ratio_http_vs_direct"]
    print(
        f"http / direct: requests/s {r['requests_per_s']}, p50 {r['p50']}, p99 {r['p99']},"
        f" CPU per request {r['cpu_per_request']}"
        f" ({report['store']} store; latency of every answered request, repeats included;"
        " us = CPU per answered request; gave up = requests the client timed out)"
    )
    start, end = report["machine_at_start"], report["machine_at_end"]
    shares = [report["cells"][s]["machine"]["others_cpu_share"] for s in ("direct", "http")]
    print(
        f"load {start['loadavg'][0]} at start, {end['loadavg'][0]} at end on {start['cpus']}"
        f" cores; other work used {', '.join('-' if s is None else f'{s:.0%}' for s in shares)}"
        " of the cores during the cells (direct, http)"
    )
    for side in ("direct", "http"):
        for name, check in report["cells"][side]["checks"].items():
            for problem in check["problems"][:5]:
                print(f"  {side} {name}: {problem}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent conversations")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per cell")
    parser.add_argument(
        "--turns", type=int, default=0, help="turns per conversation (instead of --seconds)"
    )
    parser.add_argument(
        "--servers", type=int, default=0, help="server processes (default 1; 2 on PostgreSQL)"
    )
    parser.add_argument(
        "--store",
        action="append",
        help="sqlite (a file in --dir) or a postgresql:// URL; repeat it to run both",
    )
    parser.add_argument(
        "--duplicates", type=float, default=0.2, help="share of keys delivered twice"
    )
    parser.add_argument(
        "--timeouts", type=float, default=0.1, help="share of keys first sent with --short-timeout"
    )
    parser.add_argument("--short-timeout", type=float, default=0.002, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2 seconds per cell")
    parser.add_argument("--app", default=DEFAULT_APP, help="the app factory, module:function")
    parser.add_argument(
        "--dir", type=Path, help="for the SQLite files and logs (default: a temp dir)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick and not args.turns:
        args.seconds = min(args.seconds, 2.0)
    if args.clients < 1 or args.servers < 0 or args.turns < 0 or args.seconds <= 0:
        parser.error(
            "--clients must be at least 1, --servers, --turns at least 0, --seconds positive"
        )
    if not (args.duplicates >= 0 and args.timeouts >= 0 and args.duplicates + args.timeouts <= 1):
        parser.error("--duplicates and --timeouts are shares adding up to at most 1")
    args.store = args.store or ["sqlite"]
    for store in args.store:
        if store != "sqlite" and not store.startswith(("postgresql://", "postgres://")):
            parser.error("--store is sqlite or a postgresql:// URL")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return 0
    with tempfile.TemporaryDirectory(prefix="ik-http-load-", dir=args.dir) as tmp:
        report = asyncio.run(run(args, Path(tmp)))
    for one in report["runs"]:
        print()
        print_table(one)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    print("all checks passed" if report["ok"] else "CHECKS FAILED")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
