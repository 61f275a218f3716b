"""Refusals are RFC 9457 problem documents with the library's codes, and nothing a client
sends makes the service answer a bare 500 or show a traceback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from intention_kernel.http import Principal

from .support import SEARCH, Desk, Live, app_for, bearer, is_problem, serve


async def test_a_missing_idempotency_key_is_refused(live: Live, desk: Desk) -> None:
    problem = is_problem(await live.post("t-1", None, SEARCH), 400, "IDEMPOTENCY_KEY_REQUIRED")
    assert "Idempotency-Key" in problem["detail"]
    assert desk.model.count() == 0


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{not json", 400, "INVALID_JSON"),
        (b'{"text": NaN}', 400, "INVALID_JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 413, "PAYLOAD_TOO_LARGE"),
        (b"[" * 30_000 + b"]" * 30_000, 400, "INVALID_JSON"),
        (b'"just a string"', 422, "INVALID_INPUT"),
        (b'{"text": "hi", "admin": true}', 422, "INVALID_INPUT"),
        (b'{"text": 42}', 422, "INVALID_TEXT"),
        (b'{"text": "   "}', 422, "INVALID_TEXT"),
        (b'{"text": "a\\u0000b"}', 422, "INVALID_TEXT"),
        (b'{"text": "\\ud800"}', 422, "INVALID_TEXT"),
        (b'{"text": "", "selection": [1]}', 422, "INVALID_SELECTION"),
        (b'{"text": "' + b"x" * 20_000 + b'"}', 422, "INVALID_TEXT"),
    ],
    ids=[
        "broken",
        "nan",
        "too-large",
        "too-deep",
        "not-object",
        "unknown-member",
        "text-number",
        "blank",
        "nul",
        "surrogate",
        "selection-list",
        "text-too-long",
    ],
)
async def test_bad_bodies_are_problems(
    live: Live, desk: Desk, content: bytes, status: int, code: str
) -> None:
    headers = {**bearer(), "Idempotency-Key": "turn-1", "Content-Type": "application/json"}
    answer = await live.client.post("/v1/threads/t-1/turns", content=content, headers=headers)
    is_problem(answer, status, code)
    assert desk.model.count() == 0


async def test_a_declared_oversized_body_is_refused_before_it_is_read(desk: Desk) -> None:
    async with serve(app_for(desk, max_body_bytes=2048)) as live:
        answer = await live.post("t-1", "turn-1", {"text": "x" * 4000})
        problem = is_problem(answer, 413, "PAYLOAD_TOO_LARGE")
        assert "2048" in problem["detail"]


@pytest.mark.parametrize(
    ("path", "key", "code"),
    [
        ("/v1/threads/t-1/turns", "k" * 300, "INVALID_TURN_ID"),
        ("/v1/threads/t-1/turns", "", "INVALID_TURN_ID"),
        ("/v1/threads/" + "t" * 300 + "/turns", "turn-1", "INVALID_THREAD_ID"),
        ("/v1/threads/a%00b/turns", "turn-1", "INVALID_THREAD_ID"),
        ("/v1/threads/a%0Ab/turns", "turn-1", "INVALID_THREAD_ID"),
    ],
    ids=["long-key", "empty-key", "long-thread", "nul-thread", "newline-thread"],
)
async def test_bad_ids_are_problems(live: Live, path: str, key: str, code: str) -> None:
    headers = {**bearer(), "Idempotency-Key": key}
    answer = await live.client.post(path, json=SEARCH, headers=headers)
    is_problem(answer, 400, code)


HOSTILE: list[tuple[str, str, dict[str, str | bytes], Any]] = [
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": b"k\xff\xfe"}, SEARCH),
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": b"k\xe2\x80\xae"}, SEARCH),
    ("POST", "/v1/threads/t-1/turns", {"Authorization": b"Bearer \xff\xfe"}, SEARCH),
    ("POST", "/v1/threads/..%2F..%2Fetc/turns", {"Idempotency-Key": "k1"}, SEARCH),
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": "k1"}, {"selection": {"a": 10**400}}),
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": "k1"}, {"text": "\u202e" * 50}),
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": "k1", "Content-Length": "-1"}, None),
    ("POST", "/v1/threads/t-1/turns", {"Idempotency-Key": "k1"}, {"selection": "yes"}),
    (
        "POST",
        "/v1/threads/t-1/turns",
        {"Idempotency-Key": "k1"},
        {"text": "", "selection": {"interaction_id": "nope", "option": "yes"}},
    ),
    ("GET", "/v1/threads/t-1/turns?limit=-5", {}, None),
    ("GET", "/v1/threads/t-1/turns?after=99999999999999999999999", {}, None),
    ("GET", "/v1/threads/t-1/turns?limit=1e3", {}, None),
    ("DELETE", "/v1/threads/t-1", {}, None),
    ("GET", "/v1/nothing-here", {}, None),
    ("PUT", "/v1/threads/t-1/turns", {"Idempotency-Key": "k1"}, SEARCH),
]


@pytest.mark.parametrize(("method", "path", "headers", "body"), HOSTILE)
async def test_hostile_requests_never_cause_a_500(
    live: Live, method: str, path: str, headers: dict[str, str | bytes], body: Any
) -> None:
    sent = {
        name.encode(): value if isinstance(value, bytes) else value.encode()
        for name, value in {**bearer(), **headers}.items()
    }
    try:
        answer = await live.client.request(
            method, path, headers=sent, json=body if body is not None else None
        )
    except httpx.HTTPError:
        return  # the client itself refused to send it
    assert answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text
    if answer.status_code >= 400:
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["code"]


async def test_an_unexpected_error_is_internal_and_leaks_nothing(
    desk: Desk, caplog: pytest.LogCaptureFixture
) -> None:
    def authorize(principal: Principal, thread_id: str, action: str) -> bool:
        raise RuntimeError("db password is hunter2")

    async with serve(app_for(desk, authorize=authorize)) as live:
        answer = await live.post("t-1", "turn-1", SEARCH)
    problem = is_problem(answer, 500, "INTERNAL")
    assert "hunter2" not in answer.text and "RuntimeError" not in answer.text
    assert problem["retryable"] is False
    assert any("RuntimeError" in r.getMessage() or r.exc_info for r in caplog.records)
