"""PostgreSQL's inbox NOTIFY triggers and the ``LISTEN`` wake-up of workers and watchers in
other processes: two store objects on one schema stand for two processes (each has its own
pool, its own in-process wake-ups, and only the second listens)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from intention_kernel.cli._app import run
from intention_kernel.durability._inbox import Signal
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance.outbox import commit_events

from .conftest import open_store

Pair = tuple[PostgresDurability, PostgresDurability]
QUIET = 0.5
"""Seconds of silence that show no notification came (one arrives in a few milliseconds)."""


@pytest.fixture
async def pair(dsn: str, schema: str) -> AsyncIterator[Pair]:
    """A writer, and a store on the same schema that listens."""
    writer = await open_store(dsn, schema)
    try:
        listener = await PostgresDurability.open(dsn, schema=schema, max_size=2, listen=True)
        try:
            yield writer, listener
        finally:
            await listener.close()
    finally:
        await writer.close()


async def woken(signal: Signal, write: Callable[[], Awaitable[object]]) -> float:
    """Seconds from the write to the wake-up (the waiter would otherwise wait 5 s)."""
    mark = signal.mark()
    started = time.perf_counter()
    await write()
    await signal.wait(mark, 5)
    assert signal.mark() != mark, "the signal did not fire"
    return time.perf_counter() - started


async def submit(store: PostgresDurability, thread_id: str, turn_id: str) -> object:
    return await store.inbox.submit(thread_id, turn_id, text="hello", fingerprint="fp")


def generations(store: PostgresDurability) -> tuple[int, int]:
    return store.inbox.submitted.mark(), store.inbox.progressed.mark()


async def test_inbox_notify_is_off_by_default_and_switched_from_the_command_line(
    dsn: str, schema: str
) -> None:
    store = await open_store(dsn, schema)
    try:
        assert not await store.inbox_notify_enabled()
        await store.set_inbox_notify(True)
        await store.set_inbox_notify(True)  # idempotent
        assert await store.inbox_notify_enabled()
        await store.set_inbox_notify(False)
        await store.set_inbox_notify(False)
        assert not await store.inbox_notify_enabled()
    finally:
        await store.close()
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"

    def command(*args: str) -> bool:
        code, printed = await_cli(["inbox", "notify", *args, "--store", url, "--json"])
        assert code == 0, printed
        return bool(json.loads(printed)["inbox_notify"])

    assert await asyncio.to_thread(command) is False
    assert await asyncio.to_thread(command, "on") is True
    assert await asyncio.to_thread(command) is True
    assert await asyncio.to_thread(command, "off") is False


def await_cli(argv: list[str]) -> tuple[int, str]:
    """Run the command (it runs its own event loop) and return its exit code and output."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run(argv)
    return code, printed.getvalue()


async def test_a_listening_store_wakes_on_another_stores_inbox_writes_only_with_the_triggers(
    pair: Pair,
) -> None:
    writer, listener = pair
    assert listener.listening and not writer.listening
    # Triggers off (the default): a submit, progress and a commit reach nobody.
    before = generations(listener)
    await submit(writer, "quiet", "u1")
    await writer.inbox.append_progress("quiet", "u1", ['{"type": "x"}'])
    await commit_events(writer, "quiet", "u1", 0)
    await asyncio.sleep(QUIET)
    assert generations(listener) == before

    await writer.set_inbox_notify(True)
    inbox = listener.inbox
    # A submit wakes workers (and not watchers).
    watchers = inbox.progressed.mark()
    assert await woken(inbox.submitted, lambda: submit(writer, "t1", "u1")) < 1
    # A progress entry wakes watchers.
    items = ['{"type": "a"}', '{"type": "b"}']
    progress = writer.inbox.append_progress
    assert await woken(inbox.progressed, lambda: progress("t1", "u1", items)) < 1
    assert inbox.progressed.mark() != watchers
    # A claim notifies nobody; a release for a retry makes the request due again: both.
    claimed = await writer.inbox.claim("w1", ttl=30)
    assert claimed is not None and claimed.key == ("t1", "u1")
    watchers = inbox.progressed.mark()
    release = writer.inbox.release
    assert await woken(inbox.submitted, lambda: release("w1", "t1", "u1", retry_in=0)) < 1
    assert inbox.progressed.mark() != watchers
    # The commit marks the request done: watchers can read the result.
    assert await writer.inbox.claim("w1", ttl=30) is not None
    assert await woken(inbox.progressed, lambda: commit_events(writer, "t1", "u1", 0)) < 1
    # An operator's cancel makes a request dead, an operator's retry due again.
    await submit(writer, "t2", "u1")
    operator = writer.inbox
    cancel = lambda: operator.cancel("t2", "u1", actor="ops", note="not wanted")  # noqa: E731
    assert await woken(inbox.progressed, cancel) < 1
    retry = lambda: operator.retry("t2", "u1", actor="ops", note="wanted after all")  # noqa: E731
    assert await woken(inbox.submitted, retry) < 1
    # Inbox notifications do not wake relays (the outbox has its own channel).
    await listener.wait_for_events(0.01)  # the wake-up given at start
    waiting = asyncio.create_task(listener.wait_for_events(QUIET))
    await submit(writer, "t3", "u1")
    started = time.perf_counter()
    await waiting
    assert time.perf_counter() - started >= QUIET / 2
    # Switched off again: silence.
    await writer.set_inbox_notify(False)
    before = generations(listener)
    await submit(writer, "t4", "u1")
    await asyncio.sleep(QUIET)
    assert generations(listener) == before


async def test_the_listener_reopens_its_lost_connection_and_wakes_everyone(pair: Pair) -> None:
    writer, listener = pair
    await writer.set_inbox_notify(True)
    pid = listener._notifier._listener.get_server_pid()
    before = generations(listener)
    await writer.pool.execute("SELECT pg_terminate_backend($1)", pid)
    # Reopened at once; whatever was notified meanwhile was lost, so it wakes everyone.
    await listener.inbox.submitted.wait(before[0], 5)
    assert listener.listening
    assert listener._notifier._listener.get_server_pid() != pid
    assert generations(listener)[1] != before[1]
    assert await woken(listener.inbox.submitted, lambda: submit(writer, "t1", "u1")) < 1
