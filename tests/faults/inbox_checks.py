"""The inbox kill campaign's checks: what the store, the provider and the workers' log say.

``check`` reads the store back through its public API (requests, committed turns, receipts,
outbox, heads), takes the provider process's call counts and the workers' O_APPEND log
(``inbox_worker``), and records violations of RELIABILITY.md b.1 in a ``kit.Report``. The
kit's ``check_invariants`` reads a PostgreSQL schema written by its own fixed turns (three
events each, the conformance effect keys); these are the same invariants for kernel turns on
any store.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intention_kernel.contracts.inbox import InboxRequest, RequestState
from intention_kernel.contracts.receipts import EffectReceipt
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.durability.factory import open_durability
from intention_kernel.kernel import Response, StepSummary

from .inbox_worker import PARTS, PAY
from .kit import Report

__all__ = ["Planned", "StoreState", "check", "read_store", "store_checks"]

UNCERTAIN_WORDS = "being verified"
"""How a turn words a write whose outcome is unknown (the kernel's ``uncertain`` reason)."""


@dataclass(frozen=True)
class Planned:
    """One submitted turn request."""

    thread: str
    turn: str
    text: str
    order: str | None = None
    """The order a proposal or its ``yes`` is about."""
    writes: int = 0
    """Writes the turn makes: those of a ``yes`` (0 for look-ups and proposals)."""

    @property
    def keys(self) -> list[str]:
        return [f"{PAY}:{self.order}:{part}" for part in PARTS[: self.writes]]


@dataclass
class StoreState:
    requests: list[InboxRequest]
    turns: dict[str, list[DurableTurnResult]]
    receipts: dict[tuple[str, str], EffectReceipt]
    outbox: dict[str, Counter[str]]
    heads: dict[str, int | None]


async def read_store(url: str, options: dict[str, Any], threads: set[str]) -> StoreState:
    """Every request (position order), and per thread its committed turns (revision order),
    receipts, outbox events per turn and head revision."""
    store = await open_durability(url, **options)
    try:
        inbox = store.inbox  # type: ignore[attr-defined]
        requests: list[InboxRequest] = []
        while batch := await inbox.list_requests(
            after_position=requests[-1].position if requests else 0, limit=1000
        ):
            requests.extend(batch)
        state = StoreState(requests, {}, {}, {}, {})
        for thread in sorted(threads):
            turns: list[DurableTurnResult] = []
            while batch := await store.list_turns(
                thread, after_revision=turns[-1].checkpoint.revision if turns else 0, limit=1000
            ):
                turns.extend(batch)
            state.turns[thread] = turns
            for receipt in await store.list_receipts(thread_id=thread, limit=1000):
                state.receipts[(thread, receipt.idempotency_key)] = receipt
            events = await store.read_outbox(thread_id=thread, limit=10_000)
            state.outbox[thread] = Counter(e.event.turn_id for e in events)
            head = await store.load_checkpoint(thread)
            state.heads[thread] = None if head is None else head.revision
        return state
    finally:
        await store.close()


async def check(
    report: Report,
    *,
    url: str,
    options: dict[str, Any],
    db: Path | None,
    planned: list[Planned],
    records: list[dict[str, Any]],
    kills: dict[int, float],
    provider: dict[str, Any],
    outage: tuple[float, float] | None = None,
) -> None:
    """Record every violation in ``report`` and the campaign's figures in its ``figures``.

    ``records`` is the workers' log, ``kills`` the killed worker pids with the monotonic time
    just before each ``kill -9``, ``provider`` the provider process's ``stats()``, ``outage``
    the monotonic times the store went away and was back (a failover): a write started before
    it was back and ended after it went away may be uncertain too."""
    state, requests, committed = await store_checks(
        report,
        url=url,
        options=options,
        db=db,
        planned=planned,
        records=records,
        kills=kills,
        outage=outage,
    )
    calls = Counter(
        {tuple(k.replace("|", "\t").split("\t")): n for k, n in provider["calls"].items()}
    )
    interrupted = _interrupted(records, kills) | _in_outage(records, outage)
    _ledger(report, state, planned, requests, committed, calls, interrupted, provider)
    states = Counter(str(r.state) for r in state.requests)
    reclaimed = [r for r in state.requests if r.attempts > 1]
    report.figures.update(
        {
            "turns_committed": len(committed),
            "requests_done": states["done"],
            "requests_dead": states["dead"],
            "reclaims": sum(r.attempts - 1 for r in reclaimed),
            "requests_reclaimed": len(reclaimed),
            "receipts": len(state.receipts),
            "receipts_uncertain": sum(
                1 for r in state.receipts.values() if str(r.status) == "uncertain"
            ),
            "writes_interrupted_by_kills": len(interrupted),
            "kills_around_a_commit": len(_around_commit(records, kills)),
            "provider_calls": sum(calls.values()),
        }
    )


async def store_checks(
    report: Report,
    *,
    url: str,
    options: dict[str, Any],
    db: Path | None,
    planned: list[Planned],
    records: list[dict[str, Any]],
    kills: dict[int, float],
    outage: tuple[float, float] | None = None,
) -> tuple[
    StoreState, dict[tuple[str, str], InboxRequest], dict[tuple[str, str], DurableTurnResult]
]:
    """The checks of the store every inbox campaign makes (I1-I4, I8's integrity check, I9's
    settled requests); the store as read, its requests and its committed turns by key."""
    state = await read_store(url, options, {p.thread for p in planned})
    requests = {(r.thread_id, r.turn_id): r for r in state.requests}
    committed = {(t.thread_id, t.turn_id): t for lane in state.turns.values() for t in lane}
    _settled(report, planned, requests)
    _atomic(report, state, requests, committed)
    _ordered(report, state, planned)
    _serialized(report, records, kills, outage)
    commits = Counter((r["thread_id"], r["turn_id"]) for r in records if r["ev"] == "committed")
    for (thread, turn), n in commits.items():
        if n > 1:
            report.add("I1", f"{thread}/{turn} committed {n} times")
    if db is not None:
        conn = sqlite3.connect(db, timeout=10)
        try:
            if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                report.add("I8", "PRAGMA integrity_check failed")
        finally:
            conn.close()
    return state, requests, committed


def _settled(
    report: Report, planned: list[Planned], requests: dict[tuple[str, str], InboxRequest]
) -> None:
    """I9: every request done or dead; I8: a dead one with a typed code."""
    for p in planned:
        request = requests.get((p.thread, p.turn))
        if request is None:
            report.add("I9", f"{p.thread}/{p.turn} has no request")
        elif request.state not in (RequestState.DONE, RequestState.DEAD):
            report.add("I9", f"{p.thread}/{p.turn} left {request.state}")
        elif request.state is RequestState.DEAD and request.error_code in (None, "INTERNAL"):
            report.add("I8", f"{p.thread}/{p.turn} dead with {request.error_code}: {request.error}")


def _atomic(
    report: Report,
    state: StoreState,
    requests: dict[tuple[str, str], InboxRequest],
    committed: dict[tuple[str, str], DurableTurnResult],
) -> None:
    """I4: ``done`` if and only if committed; outbox events exactly for committed turns."""
    for (thread, turn), request in requests.items():
        if (request.state is RequestState.DONE) != ((thread, turn) in committed):
            was = "committed" if (thread, turn) in committed else "not committed"
            report.add("I4", f"{thread}/{turn} is {request.state} and {was}")
    for thread, counts in state.outbox.items():
        for turn in counts:
            if (thread, turn) not in committed:
                report.add("I4", f"{thread}/{turn} has outbox events but no commit")
    for thread, turn in committed:
        if not state.outbox[thread][turn]:
            report.add("I4", f"{thread}/{turn} committed without outbox events")


def _ordered(report: Report, state: StoreState, planned: list[Planned]) -> None:
    """I3: per thread revisions 1..n, the head at n, and the commit order is the submission
    order of the done requests."""
    by_position = sorted(state.requests, key=lambda r: r.position)
    for thread in {p.thread for p in planned}:  # each thread's submits are in plan order
        stored = [r.turn_id for r in by_position if r.thread_id == thread]
        if stored != [p.turn for p in planned if p.thread == thread]:
            report.add("I3", f"{thread}: the inbox's positions are not the submission order")
    for thread, lane in state.turns.items():
        revisions = [t.checkpoint.revision for t in lane]
        if revisions != list(range(1, len(lane) + 1)):
            report.add("I3", f"{thread} revisions {revisions}")
        if state.heads[thread] != (len(lane) or None):
            report.add("I3", f"{thread} head {state.heads[thread]} for {len(lane)} turns")
        done = [
            r.turn_id for r in by_position if r.thread_id == thread and r.state is RequestState.DONE
        ]
        order = [t.turn_id for t in lane]
        if order != done:
            pairs = zip([*order, ""], [*done, ""], strict=False)
            at = next(i for i, (a, b) in enumerate(pairs) if a != b)
            report.add(
                "I3",
                f"{thread}: commits from #{at + 1} are {order[at : at + 3]}, the done"
                f" requests in submission order {done[at : at + 3]}",
            )


def _serialized(
    report: Report,
    records: list[dict[str, Any]],
    kills: dict[int, float],
    outage: tuple[float, float] | None = None,
) -> None:
    """I2: per thread, one lease holder at a time: a holder runs from ``entered`` to its
    ``committing`` (the commit gives the lease back) or, killed, to the kill. A holder that
    ended otherwise (a typed error before its commit) has no known end and is left out. A
    holder that held through an ``outage`` may have lost its lease meanwhile (it could not
    renew it): another may enter, and the first one's commit is fenced."""
    entered: dict[tuple[int, str, str], float] = {}
    ended: dict[tuple[int, str, str], float] = {}
    for r in records:
        if r["ev"] in ("entered", "committing"):
            key = (int(r["pid"]), str(r["thread_id"]), str(r["turn_id"]))
            (entered if r["ev"] == "entered" else ended)[key] = float(r["at"])
    holds: dict[str, list[tuple[float, float, int, str]]] = {}
    for key, start in entered.items():
        pid, thread, turn = key
        end = ended.get(key, kills.get(pid))
        if end is not None:
            holds.setdefault(thread, []).append((start, end, pid, turn))
    for thread, spans in holds.items():
        spans.sort()
        _, end, pid, turn = spans[0]
        for start, until, other, next_turn in spans[1:]:
            if start < end and not _lost_in(outage, spans, end, pid, turn):
                report.add(
                    "I2",
                    f"{thread}: {other} entered {next_turn} {end - start:.3f}s before"
                    f" {pid} left {turn}",
                )
            if until > end:
                end, pid, turn = until, other, next_turn


def _lost_in(
    outage: tuple[float, float] | None,
    spans: list[tuple[float, float, int, str]],
    end: float,
    pid: int,
    turn: str,
) -> bool:
    """Whether the hold of ``pid`` on ``turn`` (ending at ``end``) spanned the outage's start."""
    if outage is None:
        return False
    began = next(s for s, e, p, t in spans if (e, p, t) == (end, pid, turn))
    return began < outage[1] and end > outage[0]


def _interrupted(records: list[dict[str, Any]], kills: dict[int, float]) -> set[str]:
    """Keys whose ``run_effect`` a killed worker had started and not ended."""
    started = {(int(r["pid"]), r["key"]) for r in records if r["ev"] == "effect"}
    ended = {(int(r["pid"]), r["key"]) for r in records if r["ev"] == "effected"}
    return {key for pid, key in started - ended if pid in kills}


def _in_outage(records: list[dict[str, Any]], outage: tuple[float, float] | None) -> set[str]:
    """Keys whose ``run_effect`` began before the store was back and ended after it went (a
    call cancelled then is answered ``uncertain`` by the ledger when its step runs again)."""
    if outage is None:
        return set()
    gone, back = outage
    began: dict[tuple[Any, Any], float] = {}
    for r in records:
        if r["ev"] == "effect":
            began.setdefault((r["pid"], r["key"]), r["at"])  # the first call
    return {
        r["key"]
        for r in records
        if r["ev"] == "effected"
        and r["at"] >= gone
        and began.get((r["pid"], r["key"]), math.inf) <= back
    }


def _around_commit(
    records: list[dict[str, Any]], kills: dict[int, float]
) -> set[tuple[int, str, str]]:
    """Commits a kill cut between ``committing`` and ``committed`` (before or after COMMIT)."""

    def marks(ev: str) -> set[tuple[int, str, str]]:
        return {(int(r["pid"]), r["thread_id"], r["turn_id"]) for r in records if r["ev"] == ev}

    entered, left = marks("committing"), marks("committed")
    return {e for e in entered - left if e[0] in kills}


def _ledger(
    report: Report,
    state: StoreState,
    planned: list[Planned],
    requests: dict[tuple[str, str], InboxRequest],
    committed: dict[tuple[str, str], DurableTurnResult],
    calls: Counter[tuple[str, ...]],
    interrupted: set[str],
    provider: dict[str, Any],
) -> None:
    """I5: a prepared row before each call, at most one call per key, a completed receipt
    after exactly one; uncertainty only where a kill interrupted the write, told to the user;
    a committed write's receipts final (I4)."""
    for item in provider["unprepared"]:
        report.add("I5a", f"provider called without a prepared receipt: {item}")
    for (thread, key), n in calls.items():
        if n > 1:
            report.add("I5b", f"{thread}/{key} called {n} times")
    owner = {(p.thread, k): p for p in planned for k in p.keys}
    for (thread, key), receipt in state.receipts.items():
        p = owner.get((thread, key))
        if p is None:
            report.add("I5c", f"{thread}/{key} is no planned write")
            continue
        request = requests.get((p.thread, p.turn))
        dead = request is not None and request.state is RequestState.DEAD
        stored = committed.get((p.thread, p.turn))
        n = calls[(thread, key)]
        status = str(receipt.status)
        if status == "completed" and n != 1:
            report.add("I5b", f"{thread}/{key} completed after {n} calls")
        elif status == "failed" and n:
            report.add("I5c", f"{thread}/{key} failed after {n} calls")
        elif status == "prepared" and not dead:
            report.add("I5c", f"{thread}/{key} left prepared, its request {_state(request)}")
        elif status == "uncertain":
            if key not in interrupted:
                report.add("I5c", f"{thread}/{key} uncertain, but no kill interrupted it")
            if stored is None and not dead:
                report.add("I5c", f"{thread}/{key} uncertain; its turn neither committed nor dead")
            elif stored is not None and not _verifying(stored):
                said = Response.model_validate(stored.response).text
                report.add("I5c", f"{thread}/{key} uncertain; the turn said {said!r}")
    for p in planned:
        stored = committed.get((p.thread, p.turn))
        if stored is None or not p.writes:
            continue
        statuses = [_status(state.receipts.get((p.thread, k))) for k in p.keys]
        if _pay_steps(stored, "completed") and statuses != ["completed"] * len(p.keys):
            report.add("I4", f"{p.thread}/{p.turn} committed its write with receipts {statuses}")
        if "prepared" in statuses:
            report.add("I4", f"{p.thread}/{p.turn} committed with a prepared receipt")


def _state(request: InboxRequest | None) -> str:
    return "missing" if request is None else str(request.state)


def _status(receipt: EffectReceipt | None) -> str | None:
    return None if receipt is None else str(receipt.status)


def _pay_steps(stored: DurableTurnResult, status: str) -> list[StepSummary]:
    steps = Response.model_validate(stored.response).steps
    return [s for s in steps if s.capability_id == PAY and str(s.status) == status]


def _verifying(stored: DurableTurnResult) -> bool:
    """The turn told the user its write is being verified (an ``uncertain`` pay step)."""
    return bool(_pay_steps(stored, "uncertain")) and UNCERTAIN_WORDS in json.dumps(stored.response)
