"""Turns that do not depend on their connection: with a turn inbox (SQLite and PostgreSQL) the
service submits each turn, its in-process workers run it, and a request only follows it.

A plain request waits for the commit; ``Prefer: respond-async`` answers 202 with the turn's
``Location``; a stream's events carry the watch's cursors as ids, so a client that disconnected
rejoins with ``Last-Event-ID`` and gets what it missed, the turn having run once. The
busy-thread policies: ``enqueue`` keeps arrival order, ``reject`` answers 409 ``THREAD_BUSY``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.http import Principal

from .support import (
    BOOK,
    QUOTE,
    SEARCH,
    Desk,
    Live,
    app_for,
    bearer,
    is_problem,
    serve,
    to_confirmation,
    without_replayed,
)

STREAM = {"Accept": "text/event-stream"}
ASYNC = {"Prefer": "respond-async"}


def frames(text: str) -> list[tuple[str | None, str, Any]]:
    """The ``(id, event, data)`` of a server-sent events body (comments skipped)."""
    found = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
        if "event" in lines:
            found.append((lines.get("id"), lines["event"], json.loads(lines["data"])))
    return found


def shown_text(items: list[tuple[str | None, str, Any]]) -> str:
    shown = ""
    for _, name, data in items:
        if name == "text.delta":
            shown = ("" if data["restarted"] else shown) + data["text"]
    return shown


def seq(event_id: str | None) -> int:
    assert event_id is not None
    return int(event_id.split(".")[0])


async def settled(live: Live, thread: str, turn: str) -> dict[str, Any]:
    """``GET`` the turn until it is done or dead."""
    async with asyncio.timeout(20):
        while True:
            answer = await live.client.get(f"/v1/threads/{thread}/turns/{turn}", headers=bearer())
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            if body["state"] in ("done", "dead"):
                return body
            await asyncio.sleep(0.05)


def press(interaction: dict[str, Any]) -> dict[str, Any]:
    return {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}


async def test_a_turn_is_submitted_and_its_commit_waited_for(live: Live, desk: Desk) -> None:
    answer = await live.post("t-1", "turn-1", SEARCH)
    assert answer.status_code == 200, answer.text
    assert answer.headers["idempotent-replayed"] == "false"
    assert answer.json()["replayed"] is False
    assert answer.json()["response"]["text"].startswith("In Lisbon for 2 nights")
    state = await live.client.get("/v1/threads/t-1/turns/turn-1", headers=bearer())
    body = state.json()
    assert (body["state"], body["attempts"], body["error_code"]) == ("done", 1, None)
    assert body["position"] >= 1 and body["finished_at"] is not None
    assert body["result"]["replayed"] is True  # a read runs nothing
    assert without_replayed(body["result"]) == without_replayed(answer.json())
    again = await live.post("t-1", "turn-1", SEARCH)
    assert again.headers["idempotent-replayed"] == "true"
    assert without_replayed(again.json()) == without_replayed(answer.json())
    assert desk.model.count("interpret") == 1
    request = await desk.store.inbox.get("t-1", "turn-1")  # type: ignore[attr-defined]
    assert str(request.state) == "done" and request.host_context["actor"] == "alice"


async def test_respond_async_answers_202_and_the_turn_goes_on(live: Live, desk: Desk) -> None:
    gate = desk.model.hold("interpret")
    accepted = await live.post("t-1", "turn-1", SEARCH, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["location"] == "/v1/threads/t-1/turns/turn-1"
    assert accepted.headers["preference-applied"] == "respond-async"
    assert accepted.headers["idempotent-replayed"] == "false"
    body = accepted.json()
    assert (body["thread_id"], body["turn_id"], body["result"]) == ("t-1", "turn-1", None)
    assert body["state"] in ("pending", "running") and body["position"] >= 1
    await asyncio.wait_for(gate.entered.wait(), 10)
    running = (await live.client.get(accepted.headers["location"], headers=bearer())).json()
    assert (running["state"], running["attempts"]) == ("running", 1)
    gate.open()
    done = await settled(live, "t-1", "turn-1")
    assert done["state"] == "done"
    assert done["result"]["response"]["text"].startswith("In Lisbon for 2 nights")
    repeated = await live.post("t-1", "turn-1", SEARCH, headers=ASYNC)
    assert repeated.status_code == 202 and repeated.headers["idempotent-replayed"] == "true"
    assert repeated.json()["state"] == "done" and repeated.json()["result"] == done["result"]
    plain = await live.post("t-1", "turn-1", SEARCH)
    assert plain.status_code == 200 and plain.headers["idempotent-replayed"] == "true"
    assert desk.model.count("interpret") == 1


async def test_a_client_that_gives_up_does_not_stop_its_turn(live: Live, desk: Desk) -> None:
    gate = desk.model.hold("compose")
    headers = {**bearer(), "Idempotency-Key": "turn-1"}
    with pytest.raises(httpx.ReadTimeout):
        await live.client.post("/v1/threads/t-1/turns", json=SEARCH, headers=headers, timeout=0.5)
    await asyncio.wait_for(gate.entered.wait(), 10)
    gate.open()
    assert (await settled(live, "t-1", "turn-1"))["state"] == "done"
    again = await live.post("t-1", "turn-1", SEARCH)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert desk.model.count("interpret") == desk.model.count("compose") == 1


async def test_a_stream_carries_cursors_and_rejoins_after_a_disconnect(
    live: Live, desk: Desk
) -> None:
    interaction = await to_confirmation(live, "t-1")
    composed = desk.model.count("compose")
    gate = desk.model.hold("compose")  # the booking is made, then the answer waits
    headers = {**bearer(), "Idempotency-Key": "turn-yes", **STREAM}
    seen = ""
    async with live.client.stream(
        "POST", "/v1/threads/t-1/turns", json=press(interaction), headers=headers
    ) as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            seen += line + "\n"
            if line.startswith("data:") and '"status":"completed"' in line:
                break  # the booking step finished: leave now
    before = frames(seen + "\n")
    assert [name for _, name, _ in before] == ["step.started", "step.finished"]
    assert all(event_id is not None for event_id, _, _ in before)
    assert seq(before[0][0]) < seq(before[1][0])
    await asyncio.wait_for(gate.entered.wait(), 10)  # the turn goes on without its client
    url = "/v1/threads/t-1/turns/turn-yes/events"
    rejoin = asyncio.create_task(
        live.client.get(url, headers={**bearer(), "Last-Event-ID": str(before[-1][0])})
    )
    await asyncio.sleep(0.2)
    gate.open()
    rejoined = await rejoin
    assert rejoined.status_code == 200, rejoined.text
    assert rejoined.headers["content-type"].startswith("text/event-stream")
    after = frames(rejoined.text)
    names = [name for _, name, _ in after]
    assert names[-1] == "turn.completed" and "step.started" not in names
    assert set(names[:-1]) == {"text.delta"}
    assert all(seq(event_id) >= seq(before[-1][0]) for event_id, _, _ in after)
    result = after[-1][2]
    assert shown_text(after) == result["response"]["text"]
    assert "Booked: Alfama Inn" in result["response"]["text"]
    assert [r["status"] for r in result["checkpoint"]["receipts"]] == ["completed"]
    assert desk.provider.total_calls() == 1 and desk.model.count("compose") == composed + 1
    assert (await settled(live, "t-1", "turn-yes"))["attempts"] == 1
    # From the first event on, with ?after=: everything after it, the same result.
    whole = await live.client.get(url, params={"after": before[0][0]}, headers=bearer())
    again = frames(whole.text)
    assert again[0][1] == "step.finished"
    assert again[-1][2] == result


async def test_a_replayed_stream_is_its_answer_and_result(live: Live, desk: Desk) -> None:
    first = await live.post("t-1", "turn-1", SEARCH, headers=STREAM)
    items = frames(first.text)
    assert [name for _, name, _ in items][:2] == ["step.started", "step.finished"]
    assert items[-1][2]["replayed"] is False
    replay = frames((await live.post("t-1", "turn-1", SEARCH, headers=STREAM)).text)
    assert [name for _, name, _ in replay] == ["text.delta", "turn.completed"]
    assert replay[0][2] == {"text": shown_text(items), "restarted": False}
    assert replay[1][2]["replayed"] is True and replay[1][0] == items[-1][0]
    # Following the committed turn's events replays its recorded progress.
    followed = await live.client.get("/v1/threads/t-1/turns/turn-1/events", headers=bearer())
    assert [name for _, name, _ in frames(followed.text)] == [name for _, name, _ in items]


async def test_unknown_turns_and_foreign_cursors_are_problems(live: Live, desk: Desk) -> None:
    for path in ("/v1/threads/t-1/turns/nope", "/v1/threads/t-1/turns/nope/events"):
        is_problem(await live.client.get(path, headers=bearer()), 404, "REQUEST_NOT_FOUND")
    one = frames((await live.post("t-1", "turn-1", SEARCH, headers=STREAM)).text)
    await live.post("t-1", "turn-2", QUOTE)
    url = "/v1/threads/t-1/turns/turn-2/events"
    for cursor in (str(one[0][0]), "garbage", "1." + "0" * 12):
        answer = await live.client.get(url, headers={**bearer(), "Last-Event-ID": cursor})
        is_problem(answer, 400, "INVALID_CURSOR")
    is_problem(
        await live.client.get(url, params={"after": str(one[0][0])}, headers=bearer()),
        400,
        "INVALID_CURSOR",
    )
    is_problem(
        await live.client.get("/v1/threads/t-1/turns/" + "k" * 300, headers=bearer()),
        400,
        "INVALID_TURN_ID",
    )


async def test_reading_a_turn_needs_read_on_its_thread(desk: Desk) -> None:
    asked: list[tuple[str, str, str]] = []

    def authorize(principal: Principal, thread_id: str, action: str) -> bool:
        asked.append((principal.id, thread_id, action))
        return principal.id == "alice"

    async with serve(app_for(desk, authorize=authorize)) as live:
        await live.post("t-1", "turn-1", SEARCH)
        for path in ("/v1/threads/t-1/turns/turn-1", "/v1/threads/t-1/turns/turn-1/events"):
            is_problem(await live.client.get(path, headers=bearer("bob")), 403, "FORBIDDEN")
            is_problem(await live.client.get(path), 401, "UNAUTHENTICATED")
    assert ("bob", "t-1", "read") in asked


async def test_reject_refuses_a_turn_while_the_thread_is_busy(desk: Desk) -> None:
    gate = desk.model.hold("compose")
    async with serve(app_for(desk, busy="reject")) as live:
        slow = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))
        await asyncio.wait_for(gate.entered.wait(), 10)
        started = time.monotonic()
        refused = await live.post("t-1", "turn-2", QUOTE)
        problem = is_problem(refused, 409, "THREAD_BUSY")
        assert time.monotonic() - started < 2  # at once, not after the running turn
        assert problem["retryable"] is True and refused.headers["retry-after"].isdigit()
        queued = await live.post("t-1", "turn-3", QUOTE, headers=ASYNC)
        is_problem(queued, 409, "THREAD_BUSY")
        duplicate = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))  # joins
        await asyncio.sleep(0.2)
        assert not duplicate.done()
        gate.open()
        first, second = await slow, await duplicate
        assert (first.status_code, second.status_code) == (200, 200)
        assert second.headers["idempotent-replayed"] == "true"
        later = await live.post("t-1", "turn-2", QUOTE)  # the thread is free again
        assert later.status_code == 200, later.text
    turns = await desk.store.list_turns("t-1")
    assert [t.turn_id for t in turns] == ["turn-1", "turn-2"]


async def test_enqueue_runs_a_threads_turns_in_arrival_order(desk: Desk) -> None:
    gate = desk.model.hold("interpret")
    async with serve(app_for(desk, worker_settings={"concurrency": 4})) as live:
        first = asyncio.create_task(live.post("t-1", "k-search", SEARCH))
        await asyncio.wait_for(gate.entered.wait(), 10)
        quote = await live.post("t-1", "k-quote", QUOTE, headers=ASYNC)
        book = asyncio.create_task(live.post("t-1", "k-book", BOOK))
        await asyncio.sleep(0.2)
        assert quote.status_code == 202 and quote.json()["state"] == "pending"
        assert not first.done() and not book.done()
        gate.open()
        booked = await book
        assert (await first).status_code == 200
    assert booked.status_code == 200, booked.text
    assert booked.json()["interaction"]["prompt"].startswith("Please confirm")  # after the quote
    turns = await desk.store.list_turns("t-1")
    assert [t.turn_id for t in turns] == ["k-search", "k-quote", "k-book"]


async def test_without_workers_a_turn_waits_for_a_worker_elsewhere(desk: Desk) -> None:
    async with serve(app_for(desk, workers=0)) as live:
        accepted = await live.post("t-1", "turn-1", SEARCH, headers=ASYNC)
        assert accepted.status_code == 202
        await asyncio.sleep(0.3)
        state = await live.client.get(accepted.headers["location"], headers=bearer())
        assert state.json()["state"] == "pending" and desk.model.count() == 0
        waiting = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))
        worker = desk.agent.worker(poll_interval=0.05)  # another process's worker, say
        running = asyncio.create_task(worker.run())
        answer = await waiting
        worker.stop()
        await asyncio.wait_for(running, 10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["idempotent-replayed"] == "true"  # the first delivery submitted it


def test_bad_policies_and_worker_settings_are_refused(desk: Desk) -> None:
    for options in (
        {"busy": "queue"},
        {"workers": -1},
        {"workers": 1000},
        {"worker_settings": {"concurrency": 0}},
        {"worker_settings": {"claim_ttl": float("nan")}},
    ):
        with pytest.raises(ConfigurationError):
            app_for(desk, **options)
