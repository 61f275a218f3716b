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


Template = tuple[Any, ...]
"""How to build one argument for a turn, decided once from the recorded value (see ``_compile``)."""


class Replayer:
    """Sends one recorded turn again, each argument built from a template made once (so the
    floor pays a join of a few pieces per argument, not a scan of the recorded texts)."""

    def __init__(self, calls: list[Call], *, thread_id: str, turn_id: str, loaded_revision: int):
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.loaded = loaded_revision
        self.pattern = re.compile(
            "|".join([re.escape(thread_id), re.escape(turn_id), _TOKEN.pattern])
        )
        self.tokens: dict[str, tuple[int, bool, int]] = {}
        # Integers a statement returned that later statements send back: (call, column).
        self.returned: dict[int, tuple[int, str]] = {}
        self.statements: list[tuple[str, str, list[Template]]] = []
        for index, call in enumerate(calls):
            args = [self._compile(a, True, index) for a in call.args]
            self.statements.append((call.method, call.query, args))
            if call.method == "fetchrow" and call.result is not None:
                seen: dict[int, list[str]] = {}
                for name, value in dict(call.result).items():
                    if type(value) is int and value >= 2:
                        seen.setdefault(value, []).append(name)
                for value, names in seen.items():
                    if len(names) == 1:
                        self.returned.setdefault(value, (index, names[0]))

    def _compile(self, value: Any, top: bool, index: int) -> Template:
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return ("const", value)
        if isinstance(value, int):
            if not top:
                return ("const", value)
            if value in self.returned:  # returned by a statement sent before this one
                return ("returned", *self.returned[value])
            if value == self.loaded:
                return ("n", 0)
            if value == self.loaded + 1:
                return ("n", 1)
            return ("const", value)
        if isinstance(value, str):
            return ("text", self._pieces(value))
        if isinstance(value, dt.datetime):
            return ("now",)
        if isinstance(value, list | tuple):
            return ("list", [self._compile(v, False, index) for v in value])
        return ("const", value)

    def _pieces(self, text: str) -> list[tuple[str, Any]]:
        pieces: list[tuple[str, Any]] = []
        last = 0
        for match in self.pattern.finditer(text):
            if match.start() > last:
                pieces.append(("lit", text[last : match.start()]))
            found = match.group(0)
            if found == self.thread_id:
                pieces.append(("thread", None))
            elif found == self.turn_id:
                pieces.append(("turn", None))
            else:
                token = self.tokens.setdefault(found, (len(self.tokens), "-" in found, len(found)))
                pieces.append(("token", token))
            last = match.end()
        if last < len(text) or not pieces:
            pieces.append(("lit", text[last:]))
        return pieces

    def _build(self, template: Template, values: dict[str, Any], rows: list[Any]) -> Any:
        kind = template[0]
        if kind == "const":
            return template[1]
        if kind == "text":
            out = []
            for piece, arg in template[1]:
                if piece == "lit":
                    out.append(arg)
                elif piece == "token":
                    key, is_uuid, length = arg
                    if key not in values:
                        values[key] = (
                            str(uuid.uuid4()) if is_uuid else os.urandom(16).hex()[:length]
                        )
                    out.append(values[key])
                else:
                    out.append(values[piece])
            return "".join(out)
        if kind == "n":
            return values["n"] + template[1]
        if kind == "returned":
            return rows[template[1]][template[2]]
        if kind == "now":
            return dt.datetime.now(dt.UTC)
        return [self._build(t, values, rows) for t in template[1]]

    async def turn(self, conn: Any, thread: str, n: int) -> None:
        """Send the recorded statements for turn ``t<n>`` of ``thread`` (which loads revision
        ``n``)."""
        values: dict[Any, Any] = {"thread": thread, "turn": f"t{n}", "n": n}
        rows: list[Any] = []
        for method, query, templates in self.statements:
            args = [self._build(t, values, rows) for t in templates]
            rows.append(await getattr(conn, method)(query, *args))
