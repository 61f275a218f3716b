"""Read replicas: a store opened with a hot standby's ``read_url`` replays committed turns from
it, a standby that lags sends the replay to the primary, and tools pointed straight at a
standby read there while anything that writes is refused with ``STORE_READ_ONLY``.

A primary and an asynchronous streaming standby of the test's own (``tests.support.pg_cluster``:
``initdb``, ``pg_basebackup``, free loopback ports, the standby streaming through a forwarder
the test can cut). Both servers log every statement (``log_statement = all``), so "nothing on
the primary" is read from the primary's own log, not from the client's account of itself.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from intention_kernel.contracts.errors import DurabilityError, ErrorCode
from intention_kernel.durability.factory import open_durability
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.http import BearerTokens, hash_token
from intention_kernel.http.inspector import create_inspector
from intention_kernel.kernel import TurnCompleted
from tests.cli.support import cli
from tests.kernel.support import World, make_world, working
from tests.support.pg_cluster import Link, Node, primary_and_standby

LOOKUP = [{"capability": "orders.lookup", "input": {"order_id": "42"}}]
ASK = "where is 42"
TURNS = 5
TOKEN = "replica-operator-token-01"


def node_dsn(node: Node) -> str:
    return f"postgresql://postgres@127.0.0.1:{node.port}/postgres"


def store_url(node: Node, schema: str, read: Node | None = None) -> str:
    url = f"{node_dsn(node)}?schema={schema}"
    if read is not None:
        url += f"&read_url={quote(node_dsn(read), safe='')}"
    return url


def log_everything(*nodes: Node) -> None:
    for node in nodes:
        node.sql("ALTER SYSTEM SET log_statement = 'all'")
        node.sql("SELECT pg_reload_conf()")


class LogTail:
    """The statements a server logs from now on (``log_statement = all``)."""

    def __init__(self, node: Node) -> None:
        self.path: Path = node.log
        self.start = self.path.stat().st_size

    def statements(self, schema: str) -> list[str]:
        """The logged statements naming ``schema`` (an entry goes on over the lines up to
        the next one's timestamp)."""
        with open(self.path, encoding="utf-8", errors="replace") as log:
            log.seek(self.start)
            text = log.read()
        entries = re.split(r"\n(?=\d{4}-\d\d-\d\d )", text)
        return [
            entry
            for entry in entries
            if ("LOG:  statement: " in entry or "LOG:  execute " in entry)
            and f'"{schema}"' in entry
        ]


async def caught_up(primary: Node, standby: Node) -> None:
    """Until the standby has replayed everything the primary has written so far."""
    source = await asyncpg.connect(node_dsn(primary))
    replica = await asyncpg.connect(node_dsn(standby))
    try:
        lsn = await source.fetchval("SELECT pg_current_wal_lsn()")
        for _ in range(200):
            if await replica.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", lsn):
                return
            await asyncio.sleep(0.025)
        raise AssertionError("the standby did not catch up in 5 s")
    finally:
        await source.close()
        await replica.close()


@asynccontextmanager
async def world_on(url: str, **options: Any) -> AsyncIterator[World]:
    store = await open_durability(url, **options)
    try:
        world = make_world(store)
        world.say(ASK, LOOKUP)
        yield world
    finally:
        await store.close()


async def watched(world: World, turn_id: str) -> list[Any]:
    follow = world.agent.watch(thread_id="t1", turn_id=turn_id, poll_interval=0.05)
    return [item.item async for item in follow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Node, Node, Link]]:
    with primary_and_standby(synchronous=False) as (primary, standby, link):
        log_everything(primary, standby)
        yield primary, standby, link


# -------------------------------------------------------------------- replays


async def test_committed_turns_replay_from_the_standby_with_no_statement_on_the_primary(
    cluster: tuple[Node, Node, Link],
) -> None:
    primary, standby, _ = cluster
    schema = "ik_replica_replay"
    async with world_on(store_url(primary, schema), setup=True) as first:
        ran = [await first.run(f"u{n}", ASK) for n in range(TURNS)]
        assert not any(r.replayed for r in ran) and first.shop.total() == TURNS
    await caught_up(primary, standby)
    async with world_on(store_url(primary, schema, read=standby)) as again:
        on_primary, on_standby = LogTail(primary), LogTail(standby)
        replayed = [await again.run(f"u{n}", ASK) for n in range(TURNS)]
        assert all(r.replayed for r in replayed)
        assert [r.response.text for r in replayed] == [r.response.text for r in ran]
        assert again.gateway.calls == [] and again.shop.total() == 0
        assert on_primary.statements(schema) == []
        assert len(on_standby.statements(schema)) >= TURNS
        # A new turn is not on the standby: it runs on the primary, once.
        fresh = await again.run("u-new", ASK)
        assert not fresh.replayed and again.shop.total() == 1
        assert on_primary.statements(schema)


async def test_a_lagging_standby_sends_the_replay_to_the_primary() -> None:
    """The link cut: a turn committed after it is not on the standby; its replay is the
    primary's committed result (never a second run), a watch of it ends with that result,
    and new turns run on the primary. The standby down: replays go to the primary."""
    schema = "ik_replica_lag"
    with primary_and_standby(synchronous=False) as (primary, standby, link):
        log_everything(primary)
        url = store_url(primary, schema, read=standby)
        async with world_on(url, setup=True) as world:
            before = await world.run("u1", ASK)
            await caught_up(primary, standby)
            link.cut()
            after = await world.run("u2", ASK)  # committed on the primary alone
            assert not before.replayed and not after.replayed
            assert world.shop.total() == 2 and world.gateway.count("interpret") == 2
        async with world_on(store_url(standby, schema)) as standby_only:
            assert await standby_only.durability.get_turn("t1", "u1") is not None
            assert await standby_only.durability.get_turn("t1", "u2") is None  # it lags
        async with world_on(url) as again:
            on_primary = LogTail(primary)
            replayed = await again.run("u2", ASK)
            assert replayed.replayed and replayed.response.text == after.response.text
            assert again.gateway.calls == [] and again.shop.total() == 0
            assert on_primary.statements(schema)  # it was answered there
            on_primary = LogTail(primary)
            assert (await again.run("u1", ASK)).replayed
            assert on_primary.statements(schema) == []  # the standby had that one
            items = await watched(again, "u2")
            assert isinstance(items[-1], TurnCompleted)
            assert items[-1].result.response.text == after.response.text
            fresh = await again.run("u3", ASK)
            assert not fresh.replayed and again.shop.total() == 1
            standby.kill()  # a standby that is down: replays go to the primary
            assert (await again.run("u1", ASK)).replayed and again.shop.total() == 1
            with pytest.raises(DurabilityError) as down:  # a listing is the standby's
                await again.durability.list_turns("t1")
            assert down.value.code is ErrorCode.STORE_UNAVAILABLE


# -------------------------------------------------------------------- tools on a standby


async def seed(primary: Node, standby: Node, schema: str) -> None:
    """A direct run, a turn submitted and run by a worker (with progress), and a request left
    pending; then the standby has it all."""
    async with world_on(store_url(primary, schema), setup=True) as world:
        await world.run("u1", ASK)
        await world.agent.submit(thread_id="t1", turn_id="u2", text=ASK)
        async with working(world):
            items = await asyncio.wait_for(watched(world, "u2"), 20)
        assert isinstance(items[-1], TurnCompleted)
        await world.agent.submit(thread_id="t2", turn_id="w1", text=ASK)
    await caught_up(primary, standby)


READERS = [
    ["threads"],
    ["thread", "show", "t1"],
    ["turns", "t1"],
    ["events"],
    ["receipts"],
    ["status"],
    ["inbox", "list"],
    ["inbox", "stats"],
]
WRITERS = [
    ["prune", "--older-than", "0s"],
    ["inbox", "cancel", "--thread", "t2", "--turn", "w1", "--actor", "ops", "--note", "x"],
]


def test_the_command_line_reads_a_standby_and_refuses_to_write_there(
    cluster: tuple[Node, Node, Link],
) -> None:
    primary, standby, _ = cluster
    schema = "ik_replica_cli"
    asyncio.run(seed(primary, standby, schema))
    url = store_url(standby, schema)
    for args in READERS:
        result = cli(*args, "--store", url, "--json")
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
    listed = json.loads(cli("threads", "--store", url, "--json").stdout)
    assert [row["thread_id"] for row in listed["threads"]] == ["t1"]
    turns = json.loads(cli("turns", "t1", "--store", url, "--json").stdout)
    assert len(turns["turns"]) == 2
    on_standby = LogTail(standby)
    for args in WRITERS:
        result = cli(*args, "--store", url)
        assert result.exit_code == 3, (args, result.stdout, result.stderr)
        assert "[STORE_READ_ONLY]" in result.stderr, (args, result.stderr)
    assert on_standby.statements(schema)  # they did reach it, and it refused
    # A schema to create (or migrate) on a standby: refused, nothing made. One that is up to
    # date has nothing to write: migrate says so.
    absent = store_url(standby, "ik_replica_absent")
    result = cli("migrate", "--store", absent)
    assert result.exit_code == 3 and "[STORE_READ_ONLY]" in result.stderr, result.stderr
    assert (
        json.loads(cli("migrate", "--store", absent, "--dry-run", "--json").stdout)["version"] == 0
    )
    assert cli("migrate", "--store", url).stdout.startswith("schema is up to date")
    pending = json.loads(
        cli("inbox", "list", "--store", store_url(primary, schema), "--json").stdout
    )
    assert [r["state"] for r in pending["requests"] if r["turn_id"] == "w1"] == ["pending"]


async def test_a_store_on_a_standby_replays_and_watches_and_refuses_new_work(
    cluster: tuple[Node, Node, Link],
) -> None:
    primary, standby, _ = cluster
    schema = "ik_replica_store"
    await seed(primary, standby, schema)
    async with world_on(store_url(standby, schema)) as world:
        replayed = await world.run("u1", ASK)
        assert replayed.replayed
        items = await watched(world, "u2")  # progress and result, all read on the standby
        assert isinstance(items[-1], TurnCompleted) and len(items) > 1
        refusals = [
            world.run("u3", ASK),
            world.agent.submit(thread_id="t1", turn_id="u4", text=ASK),
            world.durability.setup(),  # type: ignore[attr-defined]
        ]
        for refused in refusals:
            with pytest.raises(DurabilityError) as caught:
                await refused
            assert caught.value.code is ErrorCode.STORE_READ_ONLY
        assert world.gateway.calls == [] and world.shop.total() == 0  # nothing half-done
    for options in ({"listen": True}, {"setup": True}):
        with pytest.raises(DurabilityError) as caught:
            await open_durability(store_url(standby, schema), **options)
        assert caught.value.code is ErrorCode.STORE_READ_ONLY, options
    async with await PostgresDurability.open(node_dsn(primary), schema=schema) as writer:
        assert await writer.get_turn("t1", "u3") is None
        assert await writer.inbox.get("t1", "u4") is None


async def test_the_inspector_reads_a_standby(
    cluster: tuple[Node, Node, Link], tmp_path: Path
) -> None:
    primary, standby, _ = cluster
    schema = "ik_replica_inspector"
    await seed(primary, standby, schema)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ops {hash_token(TOKEN)} operator\n")
    async with world_on(store_url(standby, schema)) as world:
        inspector = create_inspector(
            world.durability,
            authenticate=BearerTokens.from_file(tokens),
            agent=world.agent,
            session_secret="replica-test-session-secret-0123456789",
        )
        app = Starlette(routes=[Mount("/inspect", app=inspector)])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            form = await client.get("/inspect/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None, form.text
            answer = await client.post(
                "/inspect/login",
                data={"csrf": csrf.group(1), "next": "/inspect/threads", "token": TOKEN},
            )
            assert answer.status_code == 303, answer.text
            for path, shown in [
                ("/inspect/threads", "t1"),
                ("/inspect/thread?id=t1", "u2"),
                ("/inspect/requests", "w1"),
                ("/inspect/receipts", "Uncertain"),
            ]:
                page = await client.get(path)
                assert page.status_code == 200, (path, page.text[:2000])
                assert shown in page.text, (path, page.text[:2000])
