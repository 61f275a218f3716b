"""Two ``intention-kernel serve`` processes on one PostgreSQL store, and a thread with a slow
turn in progress: the busy-thread policy holds across instances, since each instance reads the
thread's state from the store's turn inbox, not from its own memory.

With ``--busy reject`` a turn posted on the other instance is refused at once (409
``THREAD_BUSY``, ``Retry-After``), stores nothing, and is accepted with the same key once the
slow turn committed. With ``--busy enqueue`` turns posted alternately on the two instances,
each after the previous one was accepted, commit in the order they arrived."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from .two_instances import AUTH, postgres_pair

ASYNC = {"Prefer": "respond-async"}
SLOW = 4.0
"""Seconds the slow turn's model takes: far above what a refusal or a submit may take."""


@contextmanager
def _instances(tmp_path: Path, busy: str) -> Iterator[tuple[str, str]]:
    """Two serve processes with ``--busy busy`` on a scratch schema: their URLs."""
    with postgres_pair(tmp_path, f"ik_http_busy_{busy}", "--busy", busy) as urls:
        yield urls[0], urls[1]


def _post(
    url: str, thread: str, turn: str, text: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/threads/{thread}/turns",
        json={"text": text},
        headers={**AUTH, "Idempotency-Key": turn, **(headers or {})},
        timeout=30,
    )


def _state(url: str, thread: str, turn: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/threads/{thread}/turns/{turn}", headers=AUTH, timeout=10)


def _until(url: str, thread: str, turn: str, state: str, within: float = 20) -> dict[str, Any]:
    """``GET`` the turn on ``url`` until it is in ``state`` (or done or dead)."""
    deadline = time.monotonic() + within
    while True:
        answer = _state(url, thread, turn)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        if body["state"] in (state, "done", "dead"):
            assert body["state"] == state, body
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def _committed(url: str, thread: str) -> list[tuple[str, int]]:
    """The thread's committed ``(turn_id, revision)``, in commit order, page after page."""
    found: list[tuple[str, int]] = []
    after: int | None = None
    while True:
        params = {"limit": "2"} if after is None else {"limit": "2", "after": str(after)}
        answer = httpx.get(
            f"{url}/v1/threads/{thread}/turns", params=params, headers=AUTH, timeout=10
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        found += [(turn["turn_id"], turn["revision"]) for turn in body["turns"]]
        if body["next"] is None:
            return found
        after = body["next"]


def _refused_busy(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = answer.json()
    assert (problem["code"], problem["retryable"]) == ("THREAD_BUSY", True), problem
    assert answer.headers["retry-after"].isdigit(), answer.headers
    return problem


def test_reject_refuses_on_one_instance_a_turn_running_through_the_other(
    tmp_path: Path,
) -> None:
    thread = "busy-reject"
    with _instances(tmp_path, "reject") as (first, other):
        accepted = _post(first, thread, "slow", f"slow {SLOW}", ASYNC)
        assert accepted.status_code == 202, accepted.text
        _until(other, thread, "slow", "running")  # seen from the other instance
        started = time.monotonic()
        refused = _post(other, thread, "later", "slow 0")
        took = time.monotonic() - started
        _refused_busy(refused)
        assert took < 1.0, took  # at once, not after the slow turn
        _refused_busy(_post(other, thread, "later", "slow 0", ASYNC))
        # The refusals came while the slow turn ran, and stored nothing.
        assert _state(first, thread, "slow").json()["state"] == "running"
        missing = _state(other, thread, "later")
        assert (missing.status_code, missing.json()["code"]) == (404, "REQUEST_NOT_FOUND")
        # A delivery of the turn already submitted is never refused: it follows it.
        slow = _post(first, thread, "slow", f"slow {SLOW}")
        assert slow.status_code == 200, slow.text
        assert slow.headers["idempotent-replayed"] == "true"
        assert slow.json()["response"]["text"] == f"Waited {SLOW} s."
        later = _post(other, thread, "later", "slow 0")  # the same key, now the thread is free
        assert later.status_code == 200, later.text
        assert later.headers["idempotent-replayed"] == "false"
        assert later.json()["response"]["text"] == "Waited 0 s."
        assert later.json()["checkpoint"]["revision"] == 2
        assert _committed(first, thread) == [("slow", 1), ("later", 2)]
        assert _committed(other, thread) == [("slow", 1), ("later", 2)]


def test_enqueue_commits_turns_posted_on_both_instances_in_arrival_order(
    tmp_path: Path,
) -> None:
    thread = "busy-enqueue"
    turns = [("k0", f"slow {SLOW}")] + [(f"k{n}", "slow 0") for n in range(1, 7)]
    with _instances(tmp_path, "enqueue") as urls:
        positions = []
        for n, (turn, text) in enumerate(turns):
            accepted = _post(urls[n % 2], thread, turn, text, ASYNC)  # first, other, first, ...
            assert accepted.status_code == 202, accepted.text
            assert accepted.headers["idempotent-replayed"] == "false"
            body = accepted.json()
            positions.append(body["position"])
            if n == 0:
                _until(urls[1], thread, turn, "running")  # the others arrive while it runs
            else:
                assert body["state"] == "pending", body
        assert positions == sorted(positions) and len(set(positions)) == len(turns), positions
        # Still running: every later turn was accepted behind it, none ran before it.
        assert _state(urls[1], thread, "k0").json()["state"] == "running"
        last, _ = turns[-1]
        followed = _post(urls[1], thread, last, turns[-1][1])  # follows it to its commit
        assert followed.status_code == 200, followed.text
        assert followed.headers["idempotent-replayed"] == "true"  # the first one submitted it
        for n, (turn, text) in enumerate(turns):
            done = _until(urls[(n + 1) % 2], thread, turn, "done", within=5)
            assert (done["attempts"], done["error_code"]) == (1, None), done
            result = done["result"]
            assert result["response"]["text"] == f"Waited {text.split()[1]} s."
            assert result["checkpoint"]["revision"] == n + 1
        expected = [(turn, n + 1) for n, (turn, _) in enumerate(turns)]
        assert _committed(urls[0], thread) == expected
        assert _committed(urls[1], thread) == expected
