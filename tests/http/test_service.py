"""Reads, health, readiness, the OpenAPI document and graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import time

from starlette.routing import Route

from intention_kernel.http._openapi import openapi_document

from .support import SEARCH, Desk, Live, app_for, bearer, is_problem, serve, to_confirmation


async def test_health_readiness_and_openapi_need_no_token(live: Live) -> None:
    assert (await live.client.get("/healthz")).json() == {"status": "ok"}
    ready = await live.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    document = json.loads((await live.client.get("/openapi.json")).text)
    assert document["openapi"].startswith("3.1")
    served = {
        (route.path, method.lower())
        for route in live.app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {(path, m) for path, item in document["paths"].items() for m in item}
    assert documented == served
    for item in document["paths"].values():
        for operation in item.values():
            for answer in operation["responses"].values():
                for media in answer.get("content", {}).values():
                    ref = media["schema"].get("$ref")
                    if ref:
                        assert ref.split("/")[-1] in document["components"]["schemas"]
    assert openapi_document() == document


async def test_a_thread_reads_its_summary_and_pending_interaction(live: Live) -> None:
    is_problem(await live.client.get("/v1/threads/t-1", headers=bearer()), 404, "THREAD_NOT_FOUND")
    is_problem(
        await live.client.get("/v1/threads/t-1/turns", headers=bearer()), 404, "THREAD_NOT_FOUND"
    )
    interaction = await to_confirmation(live, "t-1")
    thread = (await live.client.get("/v1/threads/t-1", headers=bearer())).json()
    assert thread["thread_id"] == "t-1"
    assert thread["interaction"] == interaction
    assert thread["checkpoint"]["revision"] == 3
    assert [a["status"] for a in thread["checkpoint"]["agenda"]] == ["awaiting_confirmation"]


async def test_the_history_pages_in_commit_order(live: Live) -> None:
    await to_confirmation(live, "t-1")
    url = "/v1/threads/t-1/turns"
    first = (await live.client.get(url, params={"limit": 2}, headers=bearer())).json()
    assert [t["turn_id"] for t in first["turns"]] == ["k-search", "k-quote"]
    assert first["turns"][0]["input"] == SEARCH["text"]
    assert first["turns"][0]["response"]["text"].startswith("In Lisbon")
    assert first["next"] == 2
    rest = await live.client.get(url, params={"after": first["next"], "limit": 2}, headers=bearer())
    assert [t["turn_id"] for t in rest.json()["turns"]] == ["k-book"]
    assert rest.json()["next"] is None
    for bad in ({"limit": "0"}, {"limit": "101"}, {"after": "-1"}, {"limit": "x"}):
        is_problem(await live.client.get(url, params=bad, headers=bearer()), 400, "INVALID_INPUT")


async def test_readiness_fails_when_the_store_is_closed(live: Live, desk: Desk) -> None:
    await desk.store.close()
    ready = await live.client.get("/readyz")
    problem = is_problem(ready, 503, "SCOPE_CLOSED")
    assert problem["retryable"] is True and ready.headers["retry-after"]
    assert (await live.client.get("/healthz")).status_code == 200  # alive, not ready


async def test_a_draining_instance_is_not_ready_and_takes_no_turn(live: Live, desk: Desk) -> None:
    await live.service.begin_shutdown()
    is_problem(await live.client.get("/readyz"), 503, "SHUTTING_DOWN")
    refused = await live.post("t-1", "turn-1", SEARCH)
    assert "Idempotency-Key" in is_problem(refused, 503, "SHUTTING_DOWN")["detail"]
    assert desk.model.count() == 0


async def test_a_running_turn_finishes_within_the_grace(desk: Desk) -> None:
    gate = desk.model.hold("compose")
    async with serve(app_for(desk, shutdown_grace=10)) as live:
        running = asyncio.create_task(live.post("t-1", "turn-1", SEARCH))
        await asyncio.wait_for(gate.entered.wait(), 10)
        live.server.should_exit = True  # what SIGTERM does
        await asyncio.sleep(0.3)
        assert live.service.turns.draining and not running.done()
        gate.open()  # the turn finishes within the grace
        answer = await asyncio.wait_for(running, 10)
    assert answer.status_code == 200 and answer.json()["replayed"] is False
    assert (await desk.store.load_checkpoint("t-1")) is not None


async def test_a_turn_past_the_grace_is_cancelled_and_retried(desk: Desk) -> None:
    interaction = None
    async with serve(app_for(desk)) as live:
        interaction = await to_confirmation(live, "t-1")
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    gate = desk.model.hold("compose")  # the booking is made, then the turn hangs
    async with serve(app_for(desk, shutdown_grace=0.5)) as live:
        running = asyncio.create_task(live.post("t-1", "turn-yes", press))
        await asyncio.wait_for(gate.entered.wait(), 10)
        started = time.monotonic()
        live.server.should_exit = True
        answer = await asyncio.wait_for(running, 10)
        waited = time.monotonic() - started
    problem = is_problem(answer, 503, "SHUTTING_DOWN")
    assert problem["retryable"] is True and "Idempotency-Key" in problem["detail"]
    assert 0.4 < waited < 5
    gate.open()
    async with serve(app_for(desk)) as live:  # another instance takes the retry
        again = await live.post("t-1", "turn-yes", press)
    assert again.status_code == 200 and "Booked: Alfama Inn" in again.json()["response"]["text"]
    assert desk.provider.total_calls() == 1
