"""Two ``intention-kernel serve`` processes on one PostgreSQL store: a streamed write turn whose
client leaves after each event in turn, and rejoins on the other process with
``Last-Event-ID``. The turn runs once whatever the client does: the hotel is called once per
booking, no receipt is uncertain, and the rejoined client gets the events it missed, then the
result."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from .served_bookings import ANSWER, bookings
from .two_instances import AUTH, postgres_pair

Event = tuple[str | None, str, Any]


def _read(answer: httpx.Response, limit: int | None = None) -> list[Event]:
    """The ``(id, event, data)`` of a stream as they arrive, ``limit`` of them at most."""
    found: list[Event] = []
    fields: dict[str, str] = {}
    if limit == 0:
        return found
    for line in answer.iter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "event" in fields:
            found.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
            if limit is not None and len(found) >= limit:
                break
        fields = {}
    return found


def _shown(events: list[Event]) -> str:
    shown = ""
    for _, name, data in events:
        if name == "text.delta":
            shown = ("" if data["restarted"] else shown) + data["text"]
    return shown


def _ask(url: str, thread: str, room: int) -> dict[str, Any]:
    """Ask to book ``room`` on ``thread``: the confirmation the press answers."""
    asked = httpx.post(
        f"{url}/v1/threads/{thread}/turns",
        json={"text": f"book room {room}"},
        headers={**AUTH, "Idempotency-Key": f"{thread}-ask"},
        timeout=30,
    )
    assert asked.status_code == 200, asked.text
    interaction = asked.json()["interaction"]
    assert interaction is not None
    return {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}


def _press(url: str, thread: str, body: dict[str, Any], leave_after: int | None) -> list[Event]:
    """Stream the press on ``url``; leave after ``leave_after`` events (``None``: stay)."""
    headers = {**AUTH, "Idempotency-Key": f"{thread}-yes", "Accept": "text/event-stream"}
    with httpx.stream(
        "POST", f"{url}/v1/threads/{thread}/turns", json=body, headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200, answer.read()
        return _read(answer, leave_after)


def _rejoin(url: str, thread: str, last: str | None) -> list[Event]:
    headers = dict(AUTH)
    if last is not None:
        headers["Last-Event-ID"] = last
    with httpx.stream(
        "GET", f"{url}/v1/threads/{thread}/turns/{thread}-yes/events", headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200, answer.read()
        return _read(answer)


def test_a_stream_left_at_each_event_rejoins_on_the_other_instance(tmp_path: Path) -> None:
    log = tmp_path / "bookings"
    with postgres_pair(tmp_path, "ik_http_rejoin") as (first, other):
        whole = _press(first, "ref", _ask(first, "ref", 10), None)
        names = [name for _, name, _ in whole]
        assert names[:2] == ["step.started", "step.finished"], names
        assert names[-1] == "turn.completed" and names.count("text.delta") > 2
        for leave in range(len(whole)):  # after 0, 1, ... events, the result not yet seen
            thread = f"left-{leave}"
            room = 11 + leave  # two digits, as the reference's: the same pieces of text
            press = _ask(first, thread, room)
            before = _press(first, thread, press, leave)
            last = before[-1][0] if before else None
            after = _rejoin(other, thread, last)
            result = after[-1][2]
            seen = [name for _, name, _ in before + after]
            # The rejoined stream goes on exactly where the client left: the same events.
            assert seen == names, leave
            assert result["turn_id"] == f"{thread}-yes"
            assert result["response"]["text"] == ANSWER.format(room=room)
            assert _shown(before + after) == result["response"]["text"]
            receipts = result["checkpoint"]["receipts"]
            assert [r["status"] for r in receipts] == ["completed"], receipts
        calls = Counter(bookings(log))
        assert len(calls) == len(whole) + 1  # one booking per turn, the reference's too
        assert set(calls.values()) == {1}, calls  # each one called once
