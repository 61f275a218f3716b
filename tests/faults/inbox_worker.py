"""A worker process for the inbox kill campaign (``test_inbox_kill_campaign``).

It opens the store by URL, compiles a small agent and runs ``agent.worker(...)`` until SIGTERM
(which drains it). The campaign forks it (``start``) or runs it as a script with one JSON
argument (``python tests/faults/inbox_worker.py '{"url": ...}'``).

The agent's turns make 0, 1 or 2 writes against the provider process through
``context.run_effect``. Texts are deterministic, so a rerun is the same request:

- ``look up order O``: a read, no write.
- ``pay order O in N writes``: proposes the write ``payments.pay`` (held for consent).
- ``yes``: accepts it; the step runs ``N`` writes with keys ``O:a`` (and ``O:b``).

The worker appends JSON lines to ``log`` (O_APPEND, one ``write`` each): ``effect`` before a
``run_effect`` starts and ``effected`` after it ended in this process, ``prepared`` /
``recorded`` at the ledger's crash points (a ``prepared`` row is committed / the final
receipt is), ``entered`` when the turn holds the thread's lease, ``committing`` /
``committed`` around the turn's commit (the crash points, which here only log, with the
system-wide monotonic time). ``IK_PLANTED_BUG=done_before_commit`` or ``claims_busy_threads``
(SQLite) runs the store with that planted bug (``tests.support.planted_inbox``): the campaign
must catch it. ``spec["submit"]`` makes the worker process submit those requests itself (the
campaign's submitting variant). As a script it needs the repository root on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine, Mapping
from multiprocessing.process import BaseProcess
from typing import Any

from pydantic import BaseModel, JsonValue

from intention_kernel._crashpoints import AnyCrashPoint, CrashPoint, set_crash_hook
from intention_kernel.contracts import DurabilityStore, EffectAuthority, ModelRequest
from intention_kernel.contracts.errors import EffectUncertainError, KernelError
from intention_kernel.durability.factory import describe_store, open_durability
from intention_kernel.kernel import (
    CapabilityContext,
    CompiledAgent,
    Completed,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.testing import ScriptedModelGateway
from tests.faults.kit import CTX, call_provider

__all__ = ["PAY", "append", "build_agent", "main", "start"]

PAY = "payments.pay"
PARTS = ("a", "b")
_LOOK = re.compile(r"look up order (\S+)")
_PAY = re.compile(r"pay order (\S+) in ([12]) writes?")


class Lookup(BaseModel):
    order: str


class Payment(BaseModel):
    order: str
    writes: int


class Note(BaseModel):
    text: str


class Provider:
    """Calls the provider process: the SQLite kit's HTTP provider (``{"http": url, "db":
    path}``) or the PostgreSQL kit's socket provider (``{"socket": path}``)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)

    async def call(self, thread_id: str, authority: EffectAuthority) -> JsonValue:
        """The call, with up to ``latency`` seconds of network time on either side of it."""
        latency = float(self.spec.get("latency", 0.0))
        await asyncio.sleep(random.uniform(0, latency))
        if "socket" in self.spec:
            value: JsonValue = await call_provider(self.spec["socket"], thread_id, authority)
        else:
            value = await asyncio.to_thread(self._post, thread_id, authority.idempotency_key)
        await asyncio.sleep(random.uniform(0, latency))
        return value

    def _post(self, thread_id: str, key: str) -> JsonValue:
        body = json.dumps({"db": self.spec["db"], "thread": thread_id, "key": key}).encode()
        request = urllib.request.Request(f"{self.spec['http']}/call", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            value: JsonValue = json.loads(response.read())["value"]
        return value


def append(path: str, record: dict[str, Any]) -> None:
    """One JSON line, appended with one ``write`` (lines of concurrent processes never mix)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def build_agent(
    store: DurabilityStore, provider: Provider | None = None, log: str | None = None
) -> CompiledAgent:
    """The campaign's agent over ``store`` (``provider`` may be ``None`` for submitting)."""
    pid = os.getpid()

    def note(record: dict[str, Any]) -> None:
        if log is not None:  # ``at``: the system-wide monotonic clock, as the kills' times
            append(log, {**record, "pid": pid, "at": time.monotonic()})

    async def look(context: CapabilityContext, query: Lookup) -> Completed:
        return Completed(output=Note(text="open"), text=f"Order {query.order} is open.")

    async def pay(context: CapabilityContext, payment: Payment) -> Completed:
        assert provider is not None, "a submitting process runs no turns"
        thread_id = context.turn.thread_id
        values: list[JsonValue] = []
        for part in PARTS[: payment.writes]:
            key = f"{PAY}:{payment.order}:{part}"
            note({"ev": "effect", "thread": thread_id, "key": key})
            try:
                done = await context.run_effect(
                    f"{payment.order}:{part}", lambda a: provider.call(thread_id, a)
                )
            except EffectUncertainError:
                note({"ev": "effected", "thread": thread_id, "key": key, "outcome": "uncertain"})
                raise
            except BaseException as exc:
                note({"ev": "effected", "thread": thread_id, "key": key, "outcome": repr(exc)})
                raise
            note({"ev": "effected", "thread": thread_id, "key": key, "outcome": "ok"})
            values.append(done.value)
        return Completed(
            output=Note(text=json.dumps(values)),
            text=f"Paid order {payment.order} in {payment.writes} writes.",
        )

    def interpret(request: ModelRequest) -> JsonValue:
        text = str(request.input["text"])
        intentions: list[JsonValue] = []
        if found := _LOOK.fullmatch(text):
            intentions = [{"capability": "orders.look", "input": {"order": found[1]}}]
        elif found := _PAY.fullmatch(text):
            payment = {"order": found[1], "writes": int(found[2])}
            intentions = [{"capability": PAY, "input": payment}]
        answer: JsonValue = {"option": "yes"} if text == "yes" else None
        return {"intentions": intentions, "answer": answer, "reply": None}

    def compose(request: ModelRequest) -> JsonValue:
        outcomes = request.input["outcomes"]
        assert isinstance(outcomes, list)
        texts = [str(o["text"]) for o in outcomes if isinstance(o, dict) and o.get("text")]
        ids: list[JsonValue] = [
            str(o["evidence_id"]) for o in outcomes if isinstance(o, dict) and o["evidence_id"]
        ]
        return {"text": " ".join(texts) or "Okay.", "citations": ids}

    agent = define_agent(
        id="campaign",
        version="1.0.0",
        description="Orders and payments for the inbox kill campaign.",
        instructions="Look orders up and pay them.",
        capabilities=[
            define_capability(
                id="orders.look",
                version="1.0.0",
                description="Look up an order.",
                input=Lookup,
                output=Note,
                execute=look,
            ),
            define_capability(
                id=PAY,
                version="1.0.0",
                description="Pay an order in one or two writes.",
                input=Payment,
                output=Note,
                effect="write",
                confirmation="required",
                execute=pay,
            ),
        ],
    )
    gateway = ScriptedModelGateway({"interpret": interpret, "compose": compose})
    return Kernel(durability=store, model=gateway).compile(agent)


def _log_points(log: str) -> None:
    """Log the lease's, the ledger's and the commit's crash points, with the system-wide
    monotonic time (nothing is killed here)."""
    pid = os.getpid()
    names: dict[AnyCrashPoint, str] = {
        CrashPoint.LEASE_ACQUIRED: "entered",
        CrashPoint.EFFECT_PREPARED: "prepared",
        CrashPoint.RECEIPT_RECORDED: "recorded",
        CrashPoint.INSIDE_COMMIT: "committing",
        CrashPoint.AFTER_COMMIT: "committed",
    }

    def hook(point: AnyCrashPoint, info: dict[str, Any]) -> None:
        name = names.get(point)
        if name is not None:
            record = {k: str(v) for k, v in info.items()}
            append(log, {"ev": name, "pid": pid, "at": time.monotonic(), **record})

    set_crash_hook(hook)


async def _open(spec: Mapping[str, Any]) -> DurabilityStore:
    options: dict[str, Any] = dict(spec.get("options") or {})
    planted = os.environ.get("IK_PLANTED_BUG")
    if not planted:
        return await open_durability(spec["url"], **options)
    location = describe_store(spec["url"])
    from tests.support.planted_inbox import ClaimsBusyThreadsSQLite, DoneBeforeCommitSQLite

    planted_stores = {
        "done_before_commit": DoneBeforeCommitSQLite,
        "claims_busy_threads": ClaimsBusyThreadsSQLite,
    }
    if planted not in planted_stores or location.path is None:
        raise SystemExit(f"no planted bug {planted!r} for {location.backend}")
    return await planted_stores[planted].open(location.path, **options)


async def _submit_own(
    spec: Mapping[str, Any], agent: CompiledAgent, worker_id: str, log: str
) -> None:
    """``spec["submit"]``: this slot's requests, submitted in order (again from the start
    after a kill: a submit is idempotent); ``handed`` when the submit gave the turn to this
    process's worker, ``submitted`` once all of them are stored."""
    own: list[list[str]] = spec.get("submit") or []
    if not own:
        return
    await asyncio.sleep(0)  # the worker is running first, so it can be handed turns
    for thread, turn, text in own:
        while True:
            try:
                request = await agent.submit(thread_id=thread, turn_id=turn, text=text)
                break
            except KernelError as exc:  # the store busy: the same submit again
                append(log, {"ev": "submit_failed", "pid": os.getpid(), "code": str(exc.code)})
                await asyncio.sleep(0.05)
        if request.claimed_by == worker_id and request.attempts == 1:
            append(log, {"ev": "handed", "pid": os.getpid(), "thread_id": thread, "turn_id": turn})
    append(log, {"ev": "submitted", "pid": os.getpid(), "slot": spec["slot"]})


TERMINATED: list[bool] = [False]
"""SIGTERM arrived before the worker was built (it then stops at once)."""


async def main(spec: Mapping[str, Any]) -> None:
    """Run a worker until SIGTERM (drain) or SIGINT."""
    log: str = spec["log"]
    _log_points(log)
    store = await _open(spec)
    try:
        agent = build_agent(store, Provider(spec["provider"]), log)
        worker = agent.worker(**spec["worker"])
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        if TERMINATED[0]:
            worker.stop()
        append(log, {"ev": "started", "pid": os.getpid(), "worker": worker.worker_id})
        running = loop.create_task(worker.run())
        submitting = loop.create_task(_submit_own(spec, agent, worker.worker_id, log))
        try:
            await running
        finally:
            submitting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await submitting
        append(log, {"ev": "stopped", "pid": os.getpid(), "completed": worker.completed})
    finally:
        with contextlib.suppress(Exception):
            await store.close()


Main = Callable[[Mapping[str, Any]], Coroutine[Any, Any, None]]


def _run(spec: Mapping[str, Any], run: Main = main) -> None:
    signal.signal(signal.SIGTERM, lambda *_: TERMINATED.__setitem__(0, True))
    os.environ.update(spec.get("env") or {})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    asyncio.run(run(spec))


def start(spec: Mapping[str, Any], run: Main = main) -> BaseProcess:
    """Fork a worker process running ``run(spec)`` (this module's ``main`` by default; the
    MCP campaign's worker brings its own), with the SIGTERM and environment set-up."""
    process = CTX.Process(target=_run, args=(dict(spec), run), daemon=True)
    process.start()
    return process


if __name__ == "__main__":
    _run(json.loads(sys.argv[1]))
