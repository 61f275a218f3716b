"""Record the statements a PostgreSQL store sends, and replay them as a ``pgbench`` script.

``Recorder`` patches asyncpg's query methods (``Connection`` and ``PreparedStatement``) while it
is active and keeps every statement sent with its arguments and its result. It sees whatever the
store does - pooled or not, prepared or not - without reaching into the store.

``build_script`` turns the statements of one recorded turn into a ``pgbench`` script that sends
the same statements with the same parameters on the same kind of thread:

- each ``$n`` becomes a pgbench variable (a bind parameter under ``-M prepared``, as asyncpg sends
  it) cast to the parameter's type as the server described it;
- the recorded thread id becomes ``:tp || :client_id`` (one thread per client) and the recorded
  turn id ``'t' || :n``, where ``:n`` counts the client's turns: deterministic, increasing ids,
  as the store's own benchmark uses, never random ones (a random key lands on a random index
  page and adds a full-page image to the WAL after every checkpoint);
- a random token (16 to 32 hex digits or a UUID, such as a lease owner or a receipt id) becomes
  an md5 of the client, the turn and the token (the same token always the same expression), so
  it still differs per turn;
- a timestamp parameter becomes ``clock_timestamp()``;
- an integer the server returned earlier in the turn (an epoch, a revision) is read back with
  ``\\gset`` and sent on, as the store does; the loaded revision and its successor can also come
  from ``:n`` (each thread is seeded with one turn, so the revision loaded by turn ``n`` is
  ``n``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from asyncpg.connection import Connection
from asyncpg.prepared_stmt import PreparedStatement

_CONNECTION_METHODS = ("execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany")
_PREPARED_METHODS = ("fetch", "fetchrow", "fetchval", "fetchmany", "executemany")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|(?<![0-9a-f])[0-9a-f]{16,32}(?![0-9a-f])"
)


@dataclass
class Call:
    method: str
    query: str
    args: tuple[Any, ...]
    result: Any


@dataclass
class Recorder:
    """Records statements while ``active``; ``calls`` in the order they were sent, and
    ``count``, the statements they executed on the server (as ``pg_stat_statements`` counts
    them: ``BEGIN`` and ``COMMIT`` are statements, an ``executemany`` one per row of
    arguments). With ``keep=False`` it only counts (a benchmark's timed window)."""

    calls: list[Call] = field(default_factory=list)
    active: bool = False
    keep: bool = True
    count: int = 0

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        saved: list[tuple[type, str, Any]] = []
        targets = ((Connection, _CONNECTION_METHODS), (PreparedStatement, _PREPARED_METHODS))
        for cls, names in targets:
            for name in names:
                original = getattr(cls, name)
                saved.append((cls, name, original))
                setattr(cls, name, self._wrap(name, original, prepared=cls is PreparedStatement))
        try:
            yield self
        finally:
            for cls, name, original in saved:
                setattr(cls, name, original)

    def _wrap(self, name: str, original: Any, *, prepared: bool) -> Any:
        recorder = self

        async def method(target: Any, *args: Any, **kwargs: Any) -> Any:
            result = await original(target, *args, **kwargs)
            if recorder.active:
                recorder.count += _executions(name, args[0 if prepared else 1 :])
                if not recorder.keep:
                    return result
                if prepared:
                    query, values = target.get_query(), args
                else:
                    query, values = args[0], args[1:]
                if name in ("executemany", "fetchmany"):  # one call, many rows of arguments:
                    rows = list(values[0]) if values else [()]  # one execution each
                    for row in rows or [()]:
                        recorder.calls.append(Call(name, query, tuple(row), result))
                else:
                    recorder.calls.append(Call(name, query, tuple(values), result))
            return result

        return method


def _executions(method: str, rest: tuple[Any, ...]) -> int:
    """Statements one call executes: an ``executemany`` runs its statement once per row of
    arguments (counted when the rows are a sized collection, else as one)."""
    if method == "executemany" and rest and isinstance(rest[0], Sized):
        return len(rest[0])
    return 1


@dataclass
class Script:
    text: str
    variables: dict[str, str]
    statements: int

    def pgbench_args(self) -> list[str]:
        out: list[str] = []
        for name, value in self.variables.items():
            out += ["-D", f"{name}={value}"]
        return out


def _rows(call: Call, columns: list[str]) -> list[dict[str, Any]]:
    """The recorded result as rows of named columns."""
    if call.method == "fetchval":
        return [{columns[0]: call.result}] if columns else []
    if call.method == "fetchrow":
        return [] if call.result is None else [dict(call.result)]
    if call.method in ("fetch", "fetchmany"):
        return [dict(r) for r in call.result]
    return []


class _Builder:
    def __init__(self, thread_id: str, turn_id: str, loaded_revision: int) -> None:
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.loaded_revision = loaded_revision
        self.variables: dict[str, str] = {"tp": "", "n": "0"}
        self.by_value: dict[str, str] = {}
        self.returned: dict[int, str] = {}  # integer value -> pgbench variable holding it
        self.tokens: dict[str, int] = {}

    def constant(self, text: str) -> str:
        name = self.by_value.get(text)
        if name is None:
            name = f"v{len(self.by_value) + 1}"
            self.by_value[text] = name
            self.variables[name] = text
        return f"(:{name})::text"

    def string(self, text: str) -> str:
        pattern = "|".join([re.escape(self.thread_id), re.escape(self.turn_id), _TOKEN.pattern])
        pieces: list[str] = []
        last = 0
        for match in re.finditer(pattern, text):
            if match.start() > last:
                pieces.append(self.constant(text[last : match.start()]))
            found = match.group(0)
            if found == self.thread_id:
                pieces.append("(:tp)::text || (:client_id)::text")
            elif found == self.turn_id:
                pieces.append("'t' || (:n)::text")
            else:
                k = self.tokens.setdefault(found, len(self.tokens) + 1)
                digest = f"md5((:client_id)::text || '.' || (:n)::text || '.{k}')"
                if "-" in found:
                    pieces.append(f"{digest}::uuid::text")
                else:
                    pieces.append(f"substr({digest}, 1, {len(found)})")
            last = match.end()
        if last < len(text) or not pieces:
            pieces.append(self.constant(text[last:]))
        return " || ".join(pieces)

    def integer(self, value: int, top: bool) -> str:
        if not top:
            return str(value)
        if value in self.returned:
            return f"(:{self.returned[value]})::bigint"
        if value == self.loaded_revision:
            return "(:n)::bigint"
        if value == self.loaded_revision + 1:
            return "((:n)::bigint + 1)"
        return str(value)

    def value(self, value: Any, top: bool = True) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return self.integer(value, top)
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, dt.datetime):
            return "clock_timestamp()"
        if isinstance(value, list | tuple):
            if not value:
                return "'{}'"
            return "ARRAY[" + ", ".join(self.value(v, False) for v in value) + "]"
        if isinstance(value, dict):
            return self.string(json.dumps(value))
        if isinstance(value, bytes):
            return self.constant("\\x" + value.hex())
        return self.string(str(value))

    def learn(self, index: int, rows: list[dict[str, Any]]) -> list[str]:
        """Integers one returned row holds that later statements may send back."""
        if len(rows) != 1:
            return []
        seen: dict[int, list[str]] = {}
        for name, value in rows[0].items():
            if type(value) is int and value >= 2 and _IDENT.match(name):
                seen.setdefault(value, []).append(name)
        learned = []
        for value, names in seen.items():
            if len(names) == 1:  # ambiguous values are not bound
                self.returned[value] = f"s{index}_{names[0]}"
                learned.append(names[0])
        return learned


def _bind(query: str, rendered: dict[int, str]) -> str:
    """Each ``$n`` of the query replaced by its rendered expression."""
    return re.sub(r"\$(\d+)\b", lambda m: rendered[int(m.group(1))], query).strip()


async def build_script(
    conn: Any, calls: list[Call], *, thread_id: str, turn_id: str, loaded_revision: int
) -> Script:
    """A pgbench script sending ``calls`` (one recorded turn), see the module docstring."""
    builder = _Builder(thread_id, turn_id, loaded_revision)
    lines = ["\\set n :n + 1"]
    for index, call in enumerate(calls, start=1):
        if re.search(r"(?<!:):[A-Za-z0-9_]", call.query):
            raise ValueError(f"a statement holds a pgbench variable pattern: {call.query[:80]}")
        columns: list[str] = []
        types: list[str] = []
        if call.args or call.method != "execute":
            statement = await conn.prepare(call.query)
            columns = [a.name for a in statement.get_attributes()]
            types = [
                str(await conn.fetchval("SELECT format_type($1::oid, NULL)", p.oid))
                for p in statement.get_parameters()
            ]
        rendered = {
            n: f"({builder.value(v)})::{types[n - 1]}" if n <= len(types) else builder.value(v)
            for n, v in enumerate(call.args, start=1)
        }
        sql = _bind(call.query, rendered)
        sql = sql.rstrip(";")
        learned = builder.learn(index, _rows(call, columns))
        lines.append(f"{sql}\n\\gset s{index}_" if learned else f"{sql};")
    return Script("\n".join(lines) + "\n", builder.variables, len(calls))


__all__ = ["Call", "Recorder", "Script", "asyncpg", "build_script"]
