"""The Python floor: a bare asyncpg client sending the store's recorded statements.

``Replayer`` sends the statements of one recorded turn (see ``_capture.Recorder``) again for a
new turn on one dedicated connection, with the same substitutions the pgbench script makes
(see ``_capture``): the recorded thread id and turn id become the client's thread and turn
``t<n>`` (inside JSON texts and arrays too), each random token a fresh one per turn, the
loaded revision ``n`` and its successor ``n + 1``, a timestamp the current time, and an
integer the server returned earlier in the turn (the lease epoch) the value it returns now.

No library code runs: no pool, no timeouts, no retries, no validation, no encoding. What the
store costs on top of this is the price of its promises and of its Python; what this costs is
the floor for any asyncio client of asyncpg on the machine.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import uuid
from typing import Any

from _capture import _TOKEN, Call

__all__ = ["Replayer"]


class Replayer:
    def __init__(self, calls: list[Call], *, thread_id: str, turn_id: str, loaded_revision: int):
        self.calls = calls
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.loaded = loaded_revision
        self.pattern = re.compile(
            "|".join([re.escape(thread_id), re.escape(turn_id), _TOKEN.pattern])
        )
        # Integers a statement returned that later statements send back: (call, column).
        self.returned: dict[int, tuple[int, str]] = {}
        for index, call in enumerate(calls):
            if call.method == "fetchrow" and call.result is not None:
                seen: dict[int, list[str]] = {}
                for name, value in dict(call.result).items():
                    if type(value) is int and value >= 2:
                        seen.setdefault(value, []).append(name)
                for value, names in seen.items():
                    if len(names) == 1:
                        self.returned.setdefault(value, (index, names[0]))

    def _string(self, text: str, thread: str, turn: str, tokens: dict[str, str]) -> str:
        def swap(match: re.Match[str]) -> str:
            found = match.group(0)
            if found == self.thread_id:
                return thread
            if found == self.turn_id:
                return turn
            if found not in tokens:
                tokens[found] = (
                    str(uuid.uuid4()) if "-" in found else os.urandom(16).hex()[: len(found)]
                )
            return tokens[found]

        return self.pattern.sub(swap, text)

    def _value(
        self,
        value: Any,
        top: bool,
        thread: str,
        n: int,
        tokens: dict[str, str],
        rows: list[Any],
    ) -> Any:
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return value
        if isinstance(value, int):
            if not top:
                return value
            index, column = self.returned.get(value, (len(rows), ""))
            if index < len(rows):  # returned by a statement sent before this one
                return rows[index][column]
            if value == self.loaded:
                return n
            if value == self.loaded + 1:
                return n + 1
            return value
        if isinstance(value, str):
            return self._string(value, thread, f"t{n}", tokens)
        if isinstance(value, dt.datetime):
            return dt.datetime.now(dt.UTC)
        if isinstance(value, list | tuple):
            return [self._value(v, False, thread, n, tokens, rows) for v in value]
        return value

    async def turn(self, conn: Any, thread: str, n: int) -> None:
        """Send the recorded statements for turn ``t<n>`` of ``thread`` (which loads revision
        ``n``)."""
        tokens: dict[str, str] = {}
        rows: list[Any] = []
        for call in self.calls:
            args = [self._value(a, True, thread, n, tokens, rows) for a in call.args]
            rows.append(await getattr(conn, call.method)(call.query, *args))
