"""``POST /v1/threads/{thread_id}/turns``: the Idempotency-Key is the turn id, over a real server.

Each retry semantic of the issue has its test here, on SQLite and PostgreSQL: a first request
runs; the same key replays with ``Idempotent-Replayed: true`` and runs nothing; the same key
with another body is ``TURN_ID_REUSED``; concurrent duplicates run once; a timeout says to
retry with the same key, and that retry gets the result; an uncertain write is answered.
"""

from __future__ import annotations

import asyncio

from intention_kernel.contracts.checkpoint import Interaction
from intention_kernel.http._turns import interaction_json

from .support import (
    BOOK,
    QUOTE,
    SEARCH,
    Desk,
    Live,
    app_for,
    is_problem,
    serve,
    to_confirmation,
    without_replayed,
)


async def test_the_first_request_runs_the_turn(live: Live, desk: Desk) -> None:
    answer = await live.post("t-1", "turn-1", SEARCH)
    assert answer.status_code == 200, answer.text
    assert answer.headers["idempotent-replayed"] == "false"
    body = answer.json()
    assert set(body) == {
        "thread_id",
        "turn_id",
        "replayed",
        "response",
        "interaction",
        "checkpoint",
    }
    assert (body["thread_id"], body["turn_id"], body["replayed"]) == ("t-1", "turn-1", False)
    assert body["response"]["text"].startswith("In Lisbon for 2 nights: Alfama Inn")
    assert set(body["response"]) == {"text", "kind", "citations", "steps"}
    assert [s["capability_id"] for s in body["response"]["steps"]] == ["hotels.search"]
    assert body["interaction"] is None
    assert body["checkpoint"]["revision"] == 1
    assert body["checkpoint"]["facts"][0]["type"] == "offers@1"
    assert "value" not in body["checkpoint"]["facts"][0]  # a summary: no fact values
    assert desk.model.count("interpret") == 1


async def test_the_same_key_replays_and_runs_nothing(live: Live, desk: Desk) -> None:
    first = await live.post("t-1", "turn-1", SEARCH)
    calls = desk.model.count()
    again = await live.post("t-1", "turn-1", SEARCH)
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["replayed"] is True
    assert without_replayed(again.json()) == without_replayed(first.json())
    assert desk.model.count() == calls  # no model call, nothing ran


async def test_the_same_key_with_another_body_is_turn_id_reused(live: Live, desk: Desk) -> None:
    await live.post("t-1", "turn-1", SEARCH)
    reused = await live.post("t-1", "turn-1", {"text": "Find a hotel in Porto"})
    problem = is_problem(reused, 409, "TURN_ID_REUSED")
    assert problem["retryable"] is False
    assert problem["instance"] == "/v1/threads/t-1/turns"
    assert desk.model.count("interpret") == 1


async def test_concurrent_requests_with_one_key_run_it_once(live: Live, desk: Desk) -> None:
    gate = desk.model.hold("interpret")
    first = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))
    await asyncio.wait_for(gate.entered.wait(), 10)
    second = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))
    other = asyncio.create_task(live.post("t-1", "turn-1", {"text": "something else"}))
    await asyncio.sleep(0.3)  # both reached the server and wait
    assert not second.done()
    is_problem(await other, 409, "TURN_ID_REUSED")  # refused at once, while the turn runs
    gate.open()
    answers = [await first, await second]
    assert [a.status_code for a in answers] == [200, 200]
    assert sorted(a.headers["idempotent-replayed"] for a in answers) == ["false", "true"]
    assert without_replayed(answers[0].json()) == without_replayed(answers[1].json())
    assert desk.model.count("interpret") == 1


async def test_a_timed_out_turn_says_retry_with_the_same_key(desk: Desk) -> None:
    async with serve(app_for(desk, turn_timeout=0.5)) as live:
        gate = desk.model.hold("compose")
        late = await live.post("t-1", "turn-1", SEARCH)
        problem = is_problem(late, 503, "TURN_TIMEOUT")
        assert problem["retryable"] is True
        assert "Idempotency-Key" in problem["detail"]
        assert late.headers["retry-after"].isdigit()
        gate.open()
        again = await live.post("t-1", "turn-1", SEARCH)
        assert again.status_code == 200, again.text
        assert again.json()["response"]["text"].startswith("In Lisbon for 2 nights")


async def test_an_uncertain_write_is_answered_and_never_repeated(live: Live, desk: Desk) -> None:
    interaction = await to_confirmation(live, "t-1")
    desk.provider.lose_next_response = True
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    answer = await live.post("t-1", "turn-yes", press)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "being verified" in body["response"]["text"]
    assert [s["status"] for s in body["response"]["steps"]] == ["uncertain"]
    assert [r["status"] for r in body["checkpoint"]["receipts"]] == ["uncertain"]
    again = await live.post("t-1", "turn-yes", press)
    assert again.headers["idempotent-replayed"] == "true"
    assert desk.provider.total_calls() == 1


async def test_a_conversation_books_once(live: Live, desk: Desk) -> None:
    await live.post("t-1", "k-1", SEARCH)
    await live.post("t-1", "k-2", QUOTE)
    held = await live.post("t-1", "k-3", BOOK)
    interaction = held.json()["interaction"]
    assert interaction["prompt"].startswith("Please confirm")
    assert interaction["expires_at"] is None  # the desk's consent does not expire
    assert desk.provider.total_calls() == 0
    for _ in range(3):
        done = await live.post("t-1", "k-4", {"text": "yes"})
        assert done.status_code == 200
        assert "Booked: Alfama Inn" in done.json()["response"]["text"]
    assert desk.provider.total_calls() == 1
    assert done.json()["interaction"] is None


def test_an_interaction_shows_when_its_consent_expires() -> None:
    asked = Interaction(
        id="ia-1",
        kind="confirmation",
        prompt="Pay 5 EUR?",
        options=["yes", "no"],
        turn_id="u1",
        data={"expires_at": "2026-06-01T09:01:00+00:00"},
    )
    shown = interaction_json(asked)
    assert shown is not None and shown["expires_at"] == "2026-06-01T09:01:00+00:00"
