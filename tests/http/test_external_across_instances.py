"""Two ``intention-kernel serve`` processes on one PostgreSQL store: a write hands the hotel a
completion token and the step parks; the hotel completes it on the *other* process. The
completion resumes the step in a new turn (the write replays: the hotel was called once), a
duplicate completion replays, another result is refused, a token for another thread or key is
refused with nothing written; a second parked step times out in exactly one turn, after which
its completion is refused."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from .served_bookings import bookings, callbacks
from .two_instances import AUTH, postgres_pair


def _turn(url: str, thread: str, turn: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(
        f"{url}/v1/threads/{thread}/turns",
        json=body,
        headers={**AUTH, "Idempotency-Key": turn},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _park(url: str, thread: str, room: int, wait: float) -> dict[str, Any]:
    """Ask to hold ``room``, press yes: the hotel is told and the step parks."""
    asked = _turn(url, thread, f"{thread}-ask", {"text": f"reserve room {room} wait {wait}"})
    interaction = asked["interaction"]
    assert interaction is not None, asked
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    return _turn(url, thread, f"{thread}-yes", press)


def _complete(url: str, thread: str, key: str, result: Any, **auth: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/threads/{thread}/external/{key}", json={"result": result}, timeout=30, **auth
    )


def _settled(url: str, thread: str, turn: str, within: float = 30.0) -> dict[str, Any]:
    """The turn's state once it is done (polled on ``url``)."""
    deadline = time.monotonic() + within
    while True:
        answer = httpx.get(f"{url}/v1/threads/{thread}/turns/{turn}", headers=AUTH, timeout=30)
        if answer.status_code == 200 and answer.json()["state"] == "done":
            body: dict[str, Any] = answer.json()
            return body
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.1)


def _turn_ids(url: str, thread: str) -> list[str]:
    page = httpx.get(f"{url}/v1/threads/{thread}/turns", headers=AUTH, timeout=30)
    assert page.status_code == 200, page.text
    return [turn["turn_id"] for turn in page.json()["turns"]]


def _completion_of(url: str, log: Path, thread: str, key: str, other: str) -> None:
    """The hotel completes ``key`` on ``other``: refusals first, then the completion."""
    [[_, _, token]] = [c for c in callbacks(log) if c[:2] == [thread, key]]
    good = {"Authorization": f"Bearer {token}"}
    unauthenticated = _complete(other, thread, key, {"status": "confirmed"})
    assert unauthenticated.status_code == 401, unauthenticated.text
    # The token completes this key of this thread only, and a forged one nothing.
    for wrong_thread, wrong_key, headers in (
        ("elsewhere", key, good),
        (thread, "hold-99", good),
        (thread, key, {"Authorization": f"Bearer {token[:-2]}AA"}),
    ):
        refused = _complete(
            other, wrong_thread, wrong_key, {"status": "confirmed"}, headers=headers
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "EXTERNAL_TOKEN_INVALID"
    assert _turn_ids(url, thread) == [f"{thread}-ask", f"{thread}-yes"]  # nothing written
    # A callback that can only be a URL: the token as ?token=.
    accepted = _complete(other, thread, key, {"status": "confirmed"}, params={"token": token})
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["Idempotent-Replayed"] == "false"
    body = accepted.json()
    assert accepted.headers["Location"] == f"/v1/threads/{thread}/turns/{key}%40completed"
    assert (body["thread_id"], body["key"], body["turn_id"]) == (thread, key, f"{key}@completed")
    assert body["state"] in ("pending", "running", "done")


def test_a_parked_step_is_completed_on_the_other_instance(tmp_path: Path) -> None:
    log = tmp_path / "bookings"
    with postgres_pair(tmp_path, "ik_http_external") as (first, other):
        parked = _park(first, "stay", 7, 120)
        assert parked["response"]["text"] == "The hotel is asked to hold room 7."
        assert [a["status"] for a in parked["checkpoint"]["agenda"]] == ["awaiting_external"]

        _completion_of(first, log, "stay", "hold-7", other)
        done = _settled(first, "stay", "hold-7@completed")
        result = done["result"]
        assert result["response"]["text"] == "Room 7 held: confirmed."
        assert result["checkpoint"]["agenda"] == []
        # The write that told the hotel ran once, before parking; resumed, it replayed.
        assert Counter(bookings(log)) == {"rooms.reserve:hold:7": 1}

        # The hotel calls back again: the same completion replays, on either instance.
        [[_, _, token]] = callbacks(log)
        for url in (first, other):
            again = _complete(
                url,
                "stay",
                "hold-7",
                {"status": "confirmed"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert again.status_code == 202, again.text
            assert again.headers["Idempotent-Replayed"] == "true"
            assert again.json()["state"] == "done"
        changed = _complete(other, "stay", "hold-7", {"status": "refused"}, params={"token": token})
        assert changed.status_code == 409, changed.text
        assert changed.json()["code"] == "TURN_ID_REUSED"

        # A step nobody completes: its timeout turn runs once, then a completion is late.
        _park(first, "late", 8, 1.5)
        timed_out = _settled(other, "late", "hold-8@timeout")["result"]
        assert timed_out["response"]["text"] == (
            "Hold a room until the hotel confirms it did not complete in time:"
            " I have stopped waiting for it."
        )
        assert timed_out["checkpoint"]["agenda"] == []
        [[_, _, late_token]] = [c for c in callbacks(log) if c[0] == "late"]
        late = _complete(
            other, "late", "hold-8", {"status": "confirmed"}, params={"token": late_token}
        )
        assert late.status_code == 404, late.text
        assert late.json()["code"] == "EXTERNAL_UNKNOWN"
        time.sleep(1.0)  # both schedulers had their round: the timer is not fired again
        assert _turn_ids(first, "late") == ["late-ask", "late-yes", "hold-8@timeout"]
        assert Counter(bookings(log)) == {
            "rooms.reserve:hold:7": 1,
            "rooms.reserve:hold:8": 1,
        }
