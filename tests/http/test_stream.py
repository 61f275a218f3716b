"""``Accept: text/event-stream``: the turn as server-sent events, as ``CompiledAgent.stream``.

The last event is ``turn.completed`` (the 200 body) or ``error`` (a problem document). A
submitted turn (the default) streams from its watch and does not depend on the connection (see
``test_submitted``); a turn run in the request (``busy="wait"``) is cancelled by the
cancellation rules when its client goes away, and the same key sent again gets the result with
the booking made at most once.
"""

from __future__ import annotations

import asyncio

from intention_kernel.contracts.errors import ModelGatewayError
from intention_kernel.contracts.gateway import ModelRequest
from intention_kernel.examples.travel_desk import scripted_model
from intention_kernel.http._sse import encode_item
from intention_kernel.kernel import StepProgress

from .support import (
    SEARCH,
    Desk,
    Live,
    app_for,
    bearer,
    events,
    is_problem,
    serve,
    to_confirmation,
    without_replayed,
)

STREAM = {"Accept": "text/event-stream"}


async def test_a_turn_streams_its_items_and_ends_with_the_result(live: Live, desk: Desk) -> None:
    interaction = await to_confirmation(live, "t-1")
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    answer = await live.post("t-1", "turn-yes", press, headers=STREAM)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    items = events(answer.text)
    names = [name for name, _ in items]
    assert names[0] == "step.started" and names[-1] == "turn.completed"
    assert (
        "step.started",
        {"step_id": items[0][1]["step_id"], "capability_id": "hotels.book"},
    ) in items
    finished = [data for name, data in items if name == "step.finished"]
    assert [(f["capability_id"], f["status"]) for f in finished] == [("hotels.book", "completed")]
    shown = ""
    for name, data in items:
        if name == "text.delta":
            shown = ("" if data["restarted"] else shown) + data["text"]
    final = items[-1][1]
    assert shown == final["response"]["text"]
    assert "Booked: Alfama Inn" in shown
    assert final["replayed"] is False and final["turn_id"] == "turn-yes"
    json_again = await live.post("t-1", "turn-yes", press)
    assert without_replayed(json_again.json()) == without_replayed(final)


async def test_a_held_confirmation_is_an_event(live: Live) -> None:
    await live.post("t-1", "k-1", SEARCH)
    await live.post("t-1", "k-2", {"text": "How much is Alfama Inn?"})
    items = events((await live.post("t-1", "k-3", {"text": "Book it"}, headers=STREAM)).text)
    held = [data for name, data in items if name == "confirmation.held"]
    assert len(held) == 1 and held[0]["kind"] == "confirmation" and "yes" in held[0]["options"]
    assert items[-1][1]["interaction"]["id"] == held[0]["interaction_id"]


async def test_a_replay_streams_the_stored_answer(live: Live, desk: Desk) -> None:
    first = await live.post("t-1", "turn-1", SEARCH)
    calls = desk.model.count()
    items = events((await live.post("t-1", "turn-1", SEARCH, headers=STREAM)).text)
    assert [name for name, _ in items] == ["text.delta", "turn.completed"]
    assert items[0][1] == {"text": first.json()["response"]["text"], "restarted": False}
    assert items[1][1]["replayed"] is True
    assert desk.model.count() == calls


async def test_a_refused_stream_keeps_its_status(live: Live) -> None:
    await live.post("t-1", "turn-1", SEARCH)
    answer = await live.post("t-1", "turn-1", {"text": "other"}, headers=STREAM)
    is_problem(answer, 409, "TURN_ID_REUSED")
    is_problem(await live.post("t-1", "turn-2", {"text": 3}, headers=STREAM), 422, "INVALID_TEXT")


async def test_a_failure_mid_stream_ends_with_an_error_event(desk: Desk) -> None:
    desk.model.broken.add("compose")
    async with serve(app_for(desk, busy="wait")) as live:
        answer = await live.post("t-1", "turn-1", SEARCH, headers=STREAM)
        items = events(answer.text)
        desk.model.broken.clear()
        again = await live.post("t-1", "turn-1", SEARCH)  # nothing committed: the retry runs
    assert [name for name, _ in items] == ["step.started", "step.finished", "error"]
    problem = items[-1][1]
    assert (problem["status"], problem["code"], problem["retryable"]) == (
        503,
        "MODEL_GATEWAY_FAILED",
        True,
    )
    assert "secret-internal-detail" not in answer.text and "Traceback" not in answer.text
    assert again.status_code == 200 and again.json()["replayed"] is False


async def test_a_submitted_turn_that_fails_mid_stream_is_retried_in_the_stream(
    live: Live, desk: Desk
) -> None:
    model = scripted_model()
    composed: list[ModelRequest] = []

    def flaky(request: ModelRequest) -> object:
        composed.append(request)
        if len(composed) == 1:
            return ModelGatewayError("the provider is overloaded: secret-internal-detail")
        return model.complete(request)

    desk.model.inner.set("compose", flaky)
    answer = await live.post("t-1", "turn-1", SEARCH, headers=STREAM)
    items = events(answer.text)
    names = [name for name, _ in items]
    assert names[-1] == "turn.completed" and "error" not in names
    assert names.count("step.started") == 2  # the second attempt ran the search again
    shown = ""
    for name, data in items:
        if name == "text.delta":
            shown = ("" if data["restarted"] else shown) + data["text"]
    assert shown == items[-1][1]["response"]["text"]
    assert items[-1][1]["replayed"] is False
    assert len(composed) == 2 and "secret-internal-detail" not in answer.text


async def test_a_submitted_turn_that_fails_for_good_ends_with_an_error_event(
    live: Live, desk: Desk
) -> None:

    def refused(request: ModelRequest) -> object:
        return ModelGatewayError("refused: secret-internal-detail", retryable=False)

    desk.model.inner.set("compose", refused)
    answer = await live.post("t-1", "turn-1", SEARCH, headers=STREAM)
    items = events(answer.text)
    assert [name for name, _ in items] == ["step.started", "step.finished", "error"]
    problem = items[-1][1]
    assert (problem["status"], problem["code"], problem["retryable"]) == (
        502,
        "MODEL_GATEWAY_FAILED",
        False,
    )
    assert problem["state"] == "dead" and "secret-internal-detail" not in answer.text


async def test_a_client_that_leaves_mid_stream_cancels_a_turn_run_in_the_request(
    desk: Desk,
) -> None:
    async with serve(app_for(desk, busy="wait")) as live:
        await _leave_mid_stream(live, desk)


async def _leave_mid_stream(live: Live, desk: Desk) -> None:
    interaction = await to_confirmation(live, "t-1")
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    gate = desk.model.hold("compose")  # the booking is made, then the answer waits
    headers = {**bearer(), "Idempotency-Key": "turn-yes", **STREAM}
    seen: list[str] = []
    async with live.client.stream(
        "POST", "/v1/threads/t-1/turns", json=press, headers=headers
    ) as answer:
        async for line in answer.aiter_lines():
            seen.append(line)
            if line.startswith("data:") and '"status":"completed"' in line:
                break  # the booking step finished: leave now
    await asyncio.wait_for(gate.entered.wait(), 10)
    for _ in range(200):  # the server notices the disconnect and cancels the turn
        if len(live.service.turns) == 0:
            break
        await asyncio.sleep(0.05)
    assert len(live.service.turns) == 0
    gate.open()
    again = await live.post("t-1", "turn-yes", press)
    assert again.status_code == 200, again.text
    assert again.json()["replayed"] is False  # it had not committed: it ran now
    assert "Booked: Alfama Inn" in again.json()["response"]["text"]
    assert desk.provider.total_calls() == 1  # the booking was replayed from the ledger
    assert any("hotels.book" in line for line in seen)


def test_a_step_s_progress_is_an_event() -> None:
    frame = encode_item(StepProgress("s-1", "notes.add", "half way", 1.0, 2.0), "4.ab")
    assert frame.startswith(b"id: 4.ab\nevent: step.progress\n")
    assert events(frame.decode()) == [
        (
            "step.progress",
            {
                "step_id": "s-1",
                "capability_id": "notes.add",
                "message": "half way",
                "progress": 1.0,
                "total": 2.0,
            },
        )
    ]
