"""The MCP kill campaign's checks: the store, the MCP server's own record and the workers' log.

The store-wide invariants (every request settled, done if and only if committed, commit order,
one lease holder at a time, one commit per turn) are the inbox campaign's checks
(``inbox_checks``), reused. What is particular to MCP is checked against what the server
itself recorded (``executions.jsonl``: one line per execution, with the ``_meta`` key it was
sent), not against what the workers believe:

- I5b: the server executed each key (and each note) at most once; a ``completed`` receipt
  after exactly one execution;
- I5a: every call left a worker after its ``prepared`` row (the worker's log, in order), and
  the server executed nothing no worker called;
- I5c: every receipt ``completed`` or ``uncertain`` (``failed`` and a lasting ``prepared`` are
  violations: the server never refused and was never away); an ``uncertain`` receipt is one a
  kill cut between the start of its step and its recorded outcome, and one the server
  executed is one a kill cut between its call and its record (the killed worker logged
  ``calling`` for its key, and not ``recorded``); its turn told the user "being verified".
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from intention_kernel.contracts.inbox import InboxRequest, RequestState
from intention_kernel.contracts.receipts import EffectAuthority
from intention_kernel.contracts.turns import DurableTurnResult
from intention_kernel.kernel import Response, provider_idempotency_key

from .inbox_checks import (
    UNCERTAIN_WORDS,
    Planned,
    StoreState,
    _interrupted,
    store_checks,
)
from .kit import Report
from .mcp_worker import ADD, TENANT, ledger_key

__all__ = ["check", "executions"]


def executions(state: Path) -> list[dict[str, Any]]:
    """The server's record: every execution, in order, across the campaign."""
    path = state / "executions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _thread(title: str) -> str:
    """The thread a note belongs to: its title is ``<thread>-n<number>``."""
    return title.rsplit("-", 1)[0]


def provider_key(thread: str, title: str) -> str:
    """The ``_meta`` key the server is sent for the note ``title`` of ``thread``."""
    authority = EffectAuthority(ledger_key(title), "any")
    return provider_idempotency_key(authority, tenant=TENANT, thread=thread)


async def check(
    report: Report,
    *,
    url: str,
    options: dict[str, Any],
    db: Path | None,
    planned: list[Planned],
    records: list[dict[str, Any]],
    kills: dict[int, float],
    executed: list[dict[str, Any]],
) -> None:
    """Record every violation in ``report`` and the campaign's figures in its ``figures``."""
    state, requests, committed = await store_checks(
        report, url=url, options=options, db=db, planned=planned, records=records, kills=kills
    )
    counts = _executions(report, planned, executed)
    _calls(report, records, counts)
    _receipts(report, state, planned, requests, committed, records, kills, counts)
    statuses = Counter(str(r.status) for r in state.receipts.values())
    report.figures.update(
        {
            "turns_committed": len(committed),
            "requests_done": sum(r.state is RequestState.DONE for r in state.requests),
            "requests_dead": sum(r.state is RequestState.DEAD for r in state.requests),
            "reclaims": sum(r.attempts - 1 for r in state.requests),
            "receipts": dict(statuses),
            "server_executions": len(executed),
            "keys_executed": len(counts),
            "most_executions_of_a_key": max(counts.values(), default=0),
            "writes_interrupted_by_kills": len(_interrupted(records, kills)),
        }
    )


def _executions(
    report: Report, planned: list[Planned], executed: list[dict[str, Any]]
) -> Counter[str]:
    """I5b from the server's record: per key and per note at most once, under its own key."""
    expected = {provider_key(p.thread, str(p.order)): str(p.order) for p in planned if p.writes}
    keys: Counter[str] = Counter()
    titles: Counter[str] = Counter()
    for line in executed:
        key, title = str(line.get("key")), str(line["arguments"]["title"])
        keys[key] += 1
        titles[title] += 1
        if expected.get(key) != title:
            report.add("I5b", f"note {title} executed under key {key}, not its own")
    for title, n in titles.items():
        if n > 1:
            report.add(
                "I5b",
                f"note {title} (key {provider_key(_thread(title), title)}) executed {n} times",
            )
    return keys


def _calls(report: Report, records: list[dict[str, Any]], counts: Counter[str]) -> None:
    """I5a: a worker called the server only after the key's ``prepared`` row (its own log, in
    order); every execution was called by a worker."""
    prepared: set[tuple[int, str]] = set()
    keys = {str(r["key"]) for r in records if r["ev"] == "prepared"}
    titles = {k: k.rsplit(":", 1)[-1] for k in keys}
    by_provider = {provider_key(_thread(t), t): k for k, t in titles.items()}
    called: set[str] = set()
    for r in records:
        if r["ev"] == "prepared":
            prepared.add((int(r["pid"]), str(r["key"])))
        elif r["ev"] == "calling":
            called.add(r["provider_key"])
            key = by_provider.get(r["provider_key"])
            if key is None or (int(r["pid"]), key) not in prepared:
                report.add("I5a", f"{r['pid']} called {r['provider_key']} before its prepared row")
    for key in counts:
        if key not in called:
            report.add("I5a", f"the server executed {key}, which no worker called")


def _cut(records: list[dict[str, Any]], kills: dict[int, float]) -> set[str]:
    """Ledger keys whose write a kill cut: the killed worker had begun the step (``effect``,
    logged before ``run_effect``: a kill right after the ``prepared`` row committed may come
    before its log line) and had not ``recorded`` its outcome."""
    recorded = {(int(r["pid"]), str(r["key"])) for r in records if r["ev"] == "recorded"}
    began = {(int(r["pid"]), str(r["key"])) for r in records if r["ev"] == "effect"}
    return {key for pid, key in began - recorded if pid in kills}


def _receipts(
    report: Report,
    state: StoreState,
    planned: list[Planned],
    requests: dict[tuple[str, str], InboxRequest],
    committed: dict[tuple[str, str], DurableTurnResult],
    records: list[dict[str, Any]],
    kills: dict[int, float],
    counts: Counter[str],
) -> None:
    """I5c and I4: what each receipt says against the kills and the server's count."""
    cut = _cut(records, kills)
    recorded = {(int(r["pid"]), str(r["key"])) for r in records if r["ev"] == "recorded"}
    in_call = {(int(r["pid"]), str(r["provider_key"])) for r in records if r["ev"] == "calling"}
    owner = {(p.thread, ledger_key(str(p.order))): p for p in planned if p.writes}
    uncertain = Counter[str]()
    for (thread, key), receipt in state.receipts.items():
        p = owner.get((thread, key))
        if p is None:
            report.add("I5c", f"{thread}/{key} is no planned write")
            continue
        pkey = provider_key(thread, str(p.order))
        n, status = counts[pkey], str(receipt.status)
        request = requests.get((p.thread, p.turn))
        dead = request is not None and request.state is RequestState.DEAD
        if status == "completed" and n != 1:
            report.add("I5b", f"{thread}/{key} completed after {n} executions")
        elif status == "failed":
            report.add("I5c", f"{thread}/{key} failed ({receipt.error}) after {n} executions")
        elif status == "prepared" and not dead:
            report.add("I5c", f"{thread}/{key} left prepared")
        elif status == "uncertain":
            killed_in_call = any(
                pid in kills and (pid, key) not in recorded for pid, k in in_call if k == pkey
            )
            uncertain["executed" if n else "not_executed"] += 1
            uncertain["call_in_flight_at_a_kill" if killed_in_call else "killed_before_call"] += 1
            if key not in cut:
                report.add("I5c", f"{thread}/{key} uncertain, but no kill cut its write")
            if n and not killed_in_call:
                report.add("I5c", f"{thread}/{key} executed, uncertain, no kill in its call")
            stored = committed.get((p.thread, p.turn))
            if stored is None and not dead:
                report.add("I5c", f"{thread}/{key} uncertain; its turn neither committed nor dead")
            elif stored is not None and not _verifying(stored):
                said = Response.model_validate(stored.response).text
                report.add("I5c", f"{thread}/{key} uncertain; the turn said {said!r}")
    for p in planned:
        stored = committed.get((p.thread, p.turn))
        if stored is None or not p.writes:
            continue
        found = state.receipts.get((p.thread, ledger_key(str(p.order))))
        ended = None if found is None else str(found.status)
        if ended not in ("completed", "uncertain"):
            report.add("I4", f"{p.thread}/{p.turn} committed its write with receipt {ended}")
        elif _steps(stored, "completed") and ended != "completed":
            report.add("I4", f"{p.thread}/{p.turn} completed its step with receipt {ended}")
    report.figures["uncertain"] = dict(uncertain)


def _steps(stored: DurableTurnResult, status: str) -> list[Any]:
    steps = Response.model_validate(stored.response).steps
    return [s for s in steps if s.capability_id == ADD and str(s.status) == status]


def _verifying(stored: DurableTurnResult) -> bool:
    """The turn told the user its write is being verified (an ``uncertain`` step)."""
    return bool(_steps(stored, "uncertain")) and UNCERTAIN_WORDS in json.dumps(stored.response)
