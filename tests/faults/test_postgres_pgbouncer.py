"""F11: the adapter behind PgBouncer in transaction mode (no session state is needed).

Needs Debian's ``pgbouncer`` installed (the test installs nothing); without it the test is
skipped locally and fails under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from intention_kernel.contracts.errors import ConfigurationError, ErrorCode
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.testing.conformance import Provider, commit_simple, effect
from intention_kernel.testing.conformance.outbox import commit_events
from tests.support.postgres import drop_schema, scratch_schema

from . import kit
from .test_postgres_kill import test_kill_9_at_every_crash_point as kill_matrix
from .test_postgres_processes import test_one_thread_hammered_by_4_processes as hammer
from .test_postgres_processes import test_same_turn_from_8_processes_runs_once as same_turn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def bouncer(dsn: str) -> Iterator[str]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        reason = "pgbouncer is not installed (apt-get install -y pgbouncer)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    target = urlsplit(dsn)
    db = target.path.lstrip("/") or "postgres"
    user = target.username or "postgres"
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ik-pgbouncer-"))
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    (workdir / "pgbouncer.ini").write_text(
        f"""[databases]
{db} = host={target.hostname or "127.0.0.1"} port={target.port or 5432} dbname={db}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir}/users.txt
pool_mode = transaction
default_pool_size = 6
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = {workdir}/pgbouncer.log
"""
    )
    run_as = None
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        run_as = "postgres"
        uid = pwd.getpwnam(run_as).pw_uid
        for path in [workdir, *workdir.iterdir()]:
            os.chown(path, uid, -1)
    process = subprocess.Popen(
        [binary, str(workdir / "pgbouncer.ini")],
        user=run_as,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"pgbouncer did not start: {(workdir / 'pgbouncer.log').read_text()}")
            time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{port}/{db}"
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def through_bouncer(monkeypatch: pytest.MonkeyPatch) -> None:
    # PgBouncer 1.18 (Debian 12) does not support protocol-level prepared statements.
    monkeypatch.setattr(kit, "WORKER_OPTIONS", {"statement_cache_size": 0})


@pytest.fixture
def bounced_schema(bouncer: str, dsn: str) -> Iterator[str]:
    """A schema migrated through the pooler (advisory lock at transaction level only)."""
    name = scratch_schema("ik_bouncer")

    async def migrate() -> None:
        stores = await asyncio.gather(
            *(
                PostgresDurability.open(
                    bouncer, schema=name, setup=True, statement_cache_size=0, max_size=1
                )
                for _ in range(3)
            )
        )
        for store in stores:
            await store.close()

    asyncio.run(migrate())
    yield name
    asyncio.run(drop_schema(dsn, name))


def test_turns_and_effects_through_pgbouncer(bouncer: str, bounced_schema: str) -> None:
    async def main() -> None:
        store = await PostgresDurability.open(
            bouncer, schema=bounced_schema, statement_cache_size=0, max_size=4
        )
        provider = Provider()
        for i in range(10):
            await commit_simple(
                store, "b", f"turn-{i}", effects=[(effect(f"k{i}"), provider.returning(i))]
            )
        _, _, replayed = await commit_simple(store, "b", "turn-3")
        assert replayed and provider.total() == 10
        assert len(await store.list_turns("b")) == 10
        await store.close()

    asyncio.run(main())


@pytest.mark.usefixtures("through_bouncer")
def test_same_turn_from_8_processes_through_pgbouncer(bouncer: str, bounced_schema: str) -> None:
    same_turn(bouncer, bounced_schema)


@pytest.mark.usefixtures("through_bouncer")
def test_hammered_thread_through_pgbouncer(bouncer: str, bounced_schema: str) -> None:
    hammer(bouncer, bounced_schema)


@pytest.mark.usefixtures("through_bouncer")
def test_kill_9_through_pgbouncer(bouncer: str, bounced_schema: str) -> None:
    kill_matrix(bouncer, bounced_schema)  # the same crash-point matrix, through the pooler


def test_outbox_claims_work_and_listen_is_refused_through_pgbouncer(
    bouncer: str, bounced_schema: str
) -> None:
    """Claims are single statements (fine through the pooler); LISTEN is session state the
    pooler cannot keep, so ``listen=True`` is refused at open with a clear error."""

    async def main() -> None:
        store = await PostgresDurability.open(
            bouncer, schema=bounced_schema, statement_cache_size=0, max_size=2
        )
        try:
            await commit_events(store, "o", "turn-1", 3)
            batch = await store.claim("relay-a", limit=10, lease=30)
            assert [e.event.sequence for e in batch] == [0, 1, 2]
            assert await store.mark_delivered("relay-a", [e.position for e in batch]) == 3
        finally:
            await store.close()
        with pytest.raises(ConfigurationError, match="LISTEN") as refused:
            await PostgresDurability.open(
                bouncer, schema=bounced_schema, statement_cache_size=0, listen=True
            )
        assert refused.value.code == ErrorCode.INVALID_CONFIGURATION

    asyncio.run(main())


def test_turns_look_up_no_type_through_pgbouncer(
    bouncer: str, bounced_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg looks a type up on its first use, turning JIT off for the lookup with a session
    setting the pooler sends to another server connection: the lookup then runs JIT-compiled
    (about 0.9 s) inside a turn holding its lease. The store's connections learn the types
    when they open (``init_connection``), so turns of every kind look up none."""
    lookups: list[list[int]] = []
    lookup = asyncpg.Connection._introspect_types

    async def recorded(self: Any, typeoids: Any, *rest: Any) -> Any:
        lookups.append(sorted(typeoids))
        return await lookup(self, typeoids, *rest)

    async def main() -> None:
        store = await PostgresDurability.open(
            bouncer, schema=bounced_schema, statement_cache_size=0, min_size=3, max_size=3
        )
        monkeypatch.setattr(asyncpg.Connection, "_introspect_types", recorded)
        try:
            provider = Provider()
            await asyncio.gather(
                *(
                    commit_simple(
                        store, f"t{i}", "turn-1", effects=[(effect("k"), provider.returning(i))]
                    )
                    for i in range(6)
                )
            )
            await commit_events(store, "o", "turn-1", 3)
            batch = await store.claim("relay-t", limit=100, lease=30)
            positions = [e.position for e in batch]
            assert len(positions) >= 3
            assert await store.mark_delivered("relay-t", positions) == len(positions)
            assert provider.total() == 6
        finally:
            await store.close()

    asyncio.run(main())
    assert lookups == []
