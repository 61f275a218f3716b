"""The sides of ``bench/inflight.py``, each run in a fresh process (``child``).

A side is a ``Turn``: ``turn(slot, n, wait, effects)`` runs turn ``n`` on the slot's own
thread (workflow ids for DBOS), sleeping ``wait`` seconds as its model call between opening
the turn and committing it, with ``effects`` (0 or 1) external writes:

- ours: ``with_turn`` on the PostgreSQL store; the operation sleeps, runs its effect with
  ``run_effect`` and commits the ~2 KB reply and ~4 KB state (``_payloads``);
- LangGraph: a one-node graph with ``AsyncPostgresSaver``; the node sleeps, calls the provider
  when the turn has an effect and returns the same reply and state;
- DBOS: a workflow (id = the turn) whose first step sleeps and returns the reply (the model
  call), then one step calling the provider when the turn has an effect.

``drive`` seeds every slot's thread with one turn without a wait (``SEED_AT_ONCE`` at a
time, so the process has not yet held many turns at once), collects garbage, reads the
resident memory, says ``ready``, waits for ``go``, then keeps ``in_flight`` turns going until
``seconds`` have passed (or ``cap`` turns have started) and every started turn has ended.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import sys
import threading
import time
import tracemalloc
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypedDict

from _capture import Recorder
from _inflight_plan import effects_of, model_wait, percentile, rss_bytes
from _measure import self_cpu
from _payloads import EFFECT_RESPONSE, REPLY, STATE, operation
from peers import DATABASES, with_db

SEED_AT_ONCE = 32
SCHEMA = "ik_bench_inflight"
Turn = Callable[[int, int, float, int], Awaitable[None]]
COUNTER = Recorder(keep=False)
"""Counts the asyncpg statements of the timed window (ours; the peers use psycopg)."""


class RssPeak:
    """The highest resident size of this process, read every 20 ms on a thread."""

    def __init__(self) -> None:
        self.peak = rss_bytes()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, rss_bytes())

    def start(self) -> RssPeak:
        self.thread.start()
        return self

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return max(self.peak, rss_bytes())


async def drive(turn: Turn, spec: dict[str, Any]) -> dict[str, Any]:
    in_flight, seconds, cap = int(spec["in_flight"]), float(spec["seconds"]), int(spec["cap"])
    gate = asyncio.Semaphore(SEED_AT_ONCE)

    async def seed(slot: int) -> None:
        async with gate:
            await turn(slot, 0, 0.0, 0)

    await asyncio.gather(*(seed(s) for s in range(in_flight)))
    gc.collect()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if spec.get("tracemalloc"):
        tracemalloc.start()
    base, peak = rss_bytes(), RssPeak().start()
    overheads = array("d")
    errors: Counter[str] = Counter()
    state = {"started": 0, "done": 0, "in_window": 0}
    cpu, started = self_cpu(), time.monotonic()
    COUNTER.active = True
    deadline = started + seconds

    async def slot_loop(slot: int) -> None:
        n = 0
        while time.monotonic() < deadline and not (cap and state["started"] >= cap):
            n += 1
            state["started"] += 1
            wait, at = model_wait(slot, n), time.monotonic()
            try:
                await turn(slot, n, wait, effects_of(slot, n))
            except Exception as exc:
                errors[type(exc).__name__] += 1
                continue
            end = time.monotonic()
            state["done"] += 1
            state["in_window"] += end <= deadline
            overheads.append(end - at - wait)

    await asyncio.gather(*(slot_loop(s) for s in range(in_flight)))
    elapsed, used = time.monotonic() - started, self_cpu() - cpu
    COUNTER.active = False
    traced = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else None
    tracemalloc.stop()
    capped = bool(cap and state["started"] >= cap)
    return {
        "turns": state["done"],
        "in_window": state["in_window"],
        "seconds": elapsed,
        "capped": capped,
        "cpu": used,
        "statements": COUNTER.count,
        "errors": dict(errors),
        "rss_base": base,
        "rss_peak": peak.stop(),
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "traced_peak": traced,
        "overhead_ms_p50": _ms(percentile(overheads, 0.5)),
        "overhead_ms_p99": _ms(percentile(overheads, 0.99)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


# ---------------------------------------------------------------- the sides


def _sent_since(before: Counter[int], now: Counter[int]) -> dict[str, int]:
    """Statements by the number of turns they carried, sent since ``before``."""
    sent = Counter(now)
    sent.subtract(before)
    return {str(k): v for k, v in sorted(sent.items()) if v}


async def ours(spec: dict[str, Any]) -> dict[str, Any]:
    from intention_kernel.durability import open_durability

    url = with_db(spec["dsn"], DATABASES["ours"]) + f"?schema={SCHEMA}"
    store: Any = await open_durability(
        url, setup=True, lease_ttl=float(spec["lease_ttl"]), max_size=int(spec["pool"])
    )
    ops = (operation(0), operation(1))
    tag = f"if{os.getpid()}"

    async def waiting(wait: float, effects: int, scope: Any) -> None:
        if wait and scope.prior_result is None:
            await asyncio.sleep(wait)  # the model call, between open and commit
        await ops[effects](scope)

    async def turn(slot: int, n: int, wait: float, effects: int) -> None:
        await store.with_turn(f"{tag}-{slot}", f"t{n}", partial(waiting, wait, effects))

    turns = store.roles.turns
    groups, renewals = Counter(store.commit_groups), int(turns.renewals.statements)
    acquires = Counter(store.acquire_groups)
    try:
        report = await drive(turn, spec)
        report["renewal_statements"] = int(turns.renewals.statements) - renewals
        report["commit_statements_by_size"] = _sent_since(groups, store.commit_groups)
        report["acquire_statements_by_size"] = _sent_since(acquires, store.acquire_groups)
        return report
    finally:
        await store.close()


class GraphState(TypedDict, total=False):
    message: str
    wait: float
    effects: int
    reply: dict[str, Any]
    facts: dict[str, Any]
    effect: dict[str, Any] | None


async def provider_call() -> dict[str, Any]:
    """The external write of a peer's one-effect turn: answers at once (as ``_payloads``)."""
    return dict(EFFECT_RESPONSE)


async def langgraph(spec: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg_pool import AsyncConnectionPool

    async def node(state: GraphState) -> GraphState:
        if state.get("wait"):
            await asyncio.sleep(state["wait"])  # the model call
        effect = await provider_call() if state.get("effects") else None
        return {"reply": REPLY, "facts": STATE, "effect": effect}

    builder = StateGraph(GraphState)
    builder.add_node("answer", node)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    url = with_db(spec["dsn"], DATABASES["langgraph"])
    kwargs = {"autocommit": True, "prepare_threshold": 0}
    pool_of = AsyncConnectionPool(
        url, min_size=1, max_size=int(spec["pool"]), kwargs=kwargs, open=False
    )
    async with pool_of as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        tag = f"lgif{os.getpid()}"

        async def turn(slot: int, n: int, wait: float, effects: int) -> None:
            config: RunnableConfig = {"configurable": {"thread_id": f"{tag}-{slot}"}}
            message: GraphState = {"message": f"turn {n}", "wait": wait, "effects": effects}
            await graph.ainvoke(message, config)

        return await drive(turn, spec)


async def dbos(spec: dict[str, Any]) -> dict[str, Any]:
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": "ik-bench-inflight",
        "system_database_url": with_db(spec["dsn"], DATABASES["dbos"]),
        "sys_db_pool_size": int(spec["pool"]),
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    async def model_call(wait: float) -> dict[str, Any]:
        if wait:
            await asyncio.sleep(wait)
        return dict(REPLY)

    @DBOS.step()
    async def send_email(request: dict[str, Any]) -> dict[str, Any]:
        return await provider_call()

    @DBOS.workflow()
    async def workflow(thread: str, state: dict[str, Any], wait: float, effects: int) -> Any:
        reply = await model_call(wait)
        effect = await send_email({"to": "a@example.com", "subject": "hello"}) if effects else None
        return {**reply, "effect": effect, "state": state}

    DBOS.launch()
    tag = f"dbosif{os.getpid()}"

    async def turn(slot: int, n: int, wait: float, effects: int) -> None:
        with SetWorkflowID(f"{tag}-{slot}-t{n}"):
            await workflow(f"{tag}-{slot}", STATE, wait, effects)

    try:
        return await drive(turn, spec)
    finally:
        DBOS.destroy()


SIDES: dict[str, Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]] = {
    "ours": ours,
    "langgraph": langgraph,
    "dbos": dbos,
}


def child(spec: dict[str, Any]) -> None:
    with COUNTER.installed():
        report = asyncio.run(SIDES[spec["kind"]](spec))
    print(json.dumps(report), flush=True)
