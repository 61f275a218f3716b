"""The store URL forms and refusals of ``durability.factory``, on real SQLite files and the real
PostgreSQL server: the one place a URL becomes a store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.durability.factory import (
    describe_store,
    open_durability,
    read_schema_info,
    sqlite_url,
)
from intention_kernel.durability.memory import MemoryDurability
from intention_kernel.durability.postgres import PostgresDurability
from intention_kernel.durability.sqlite import SQLiteDurability
from tests.support.postgres import drop_schema, require_postgres, scratch_schema

CWD = Path.cwd()
HOME = Path.home()

# url -> (backend, SQLite path, PostgreSQL DSN as the driver gets it, options from the URL)
ACCEPTED: list[tuple[str, str, Path | None, str | None, dict[str, Any]]] = [
    ("memory://", "memory", None, None, {}),
    ("memory://?lock_timeout=5", "memory", None, None, {"lock_timeout": 5.0}),
    ("sqlite:///app.db", "sqlite", CWD / "app.db", None, {}),
    ("sqlite:///data/app.db", "sqlite", CWD / "data/app.db", None, {}),
    ("sqlite:////var/lib/app.db", "sqlite", Path("/var/lib/app.db"), None, {}),
    ("sqlite:///~/app.db", "sqlite", HOME / "app.db", None, {}),
    ("sqlite:////tmp/a%20b.db", "sqlite", Path("/tmp/a b.db"), None, {}),
    ("SQLITE:////tmp/x.db", "sqlite", Path("/tmp/x.db"), None, {}),
    (
        "sqlite:////tmp/x.db?lock_timeout=2.5&busy_timeout=9",
        "sqlite",
        Path("/tmp/x.db"),
        None,
        {"lock_timeout": 2.5, "busy_timeout": 9.0},
    ),
    ("postgresql://u@db:5432/app", "postgresql", None, "postgresql://u@db:5432/app", {}),
    ("postgres://u@db/app", "postgresql", None, "postgresql://u@db/app", {}),
    (
        "postgresql://u:pw@db/app?schema=support",
        "postgresql",
        None,
        "postgresql://u:pw@db/app",
        {"schema": "support"},
    ),
    (
        "postgresql://db/app?sslmode=disable&schema=s&listen=1&application_name=a%20b",
        "postgresql",
        None,
        "postgresql://db/app?sslmode=disable&application_name=a%20b",
        {"schema": "s", "listen": True},
    ),
    (
        "postgresql://db/app?listen=off&lock_timeout=3&statement_timeout=0.5",
        "postgresql",
        None,
        "postgresql://db/app",
        {"listen": False, "lock_timeout": 3.0, "statement_timeout": 0.5},
    ),
    (
        "postgresql://u@h1:5432,[::1]:5433/app",
        "postgresql",
        None,
        "postgresql://u@h1:5432,[::1]:5433/app",
        {},
    ),
    (
        "postgresql:///app?host=/run/postgresql",
        "postgresql",
        None,
        "postgresql:///app?host=/run/postgresql",
        {},
    ),
]


@pytest.mark.parametrize(("url", "backend", "path", "dsn", "options"), ACCEPTED)
def test_accepted_url_forms(
    url: str, backend: str, path: Path | None, dsn: str | None, options: dict[str, Any]
) -> None:
    location = describe_store(url)
    assert location.backend == backend
    assert location.path == path
    if dsn is not None:
        assert location.dsn == dsn
    assert dict(location.options) == options
    if location.dsn is not None:
        assert "schema=" not in location.dsn and "listen=" not in location.dsn
    assert "pw" not in repr(location)


# url -> the setting the refusal names (``url``: the URL as a whole)
REFUSED: list[tuple[str, str]] = [
    ("", "url"),
    ("nonsense", "url"),
    ("/var/lib/app.db", "url"),
    ("mysql://db/app", "url"),
    ("redis://x", "url"),
    ("memory://somewhere", "url"),
    ("memory://?schema=x", "url"),
    ("sqlite://host/app.db", "url"),
    ("sqlite:///:memory:", "url"),
    ("sqlite:///", "url"),
    ("sqlite:///file:app.db", "url"),
    ("sqlite:////tmp/x.db#frag", "url"),
    ("sqlite:////tmp/x.db?schema=x", "schema"),
    ("sqlite:////tmp/x.db?lock_timeout=soon", "lock_timeout"),
    ("postgresql://db:notaport/app", "url"),
    ("postgresql://db:99999/app", "url"),
    ("postgresql://postgres@:::/x", "url"),
    ("postgresql://u@[::1/app", "url"),
    ("postgresql://u@h1:5432,h2:0/app", "url"),
    ("postgresql://u@h/app?port=70000", "port"),
    ("postgresql://db/app?listen=maybe", "listen"),
    ("postgresql://db/app?lock_timeout=-1", "lock_timeout"),
    ("postgresql://db/app?statement_timeout=inf", "statement_timeout"),
    ("postgresql://db/app?schema=a&schema=b", "schema"),
]


@pytest.mark.parametrize(("url", "setting"), REFUSED)
def test_refused_urls_name_the_setting(url: str, setting: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        describe_store(url)
    assert caught.value.context.get("setting") == setting


def test_an_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        describe_store("mysql://u:secret@db/app")
    message = str(caught.value)
    for scheme in ("memory://", "sqlite://", "postgresql://", "postgres://"):
        assert scheme in message
    assert "secret" not in str(caught.value.to_json())


async def test_open_refuses_the_same_setting_in_the_url_and_as_an_argument(
    tmp_path: Path,
) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("memory://?lock_timeout=1", {"lock_timeout": 2}, "lock_timeout"),
        (f"{sqlite_url(tmp_path / 'a.db')}?busy_timeout=1", {"busy_timeout": 2}, "busy_timeout"),
        ("postgresql://127.0.0.1/test?schema=a", {"schema": "b"}, "schema"),
    ]
    for url, options, setting in cases:
        with pytest.raises(ConfigurationError) as caught:
            await open_durability(url, **options)
        assert caught.value.context == {"setting": setting}
    assert not (tmp_path / "a.db").exists()


async def test_a_bad_schema_name_is_refused_before_connecting() -> None:
    # Port 1: nothing listens there, so only a check before connecting can answer this.
    with pytest.raises(ConfigurationError) as caught:
        await open_durability("postgresql://127.0.0.1:1/test?schema=Bad-Name")
    assert caught.value.context == {"setting": "schema"}


async def test_sqlite_urls_and_paths_open_real_files(tmp_path: Path) -> None:
    path = tmp_path / "dir with space" / "app.db"
    path.parent.mkdir()
    url = sqlite_url(path)
    assert url.startswith("sqlite:////") and " " not in url
    assert describe_store(url).path == path
    store = await open_durability(f"{url}?lock_timeout=7", busy_timeout=2)
    try:
        assert isinstance(store, SQLiteDurability) and store.path == path
        assert store.lock_timeout == 7.0
    finally:
        await store.close()
    assert path.exists()
    assert (await read_schema_info(url)).pending == ()
    missing = await read_schema_info(sqlite_url(tmp_path / "none.db"))
    assert missing.version == 0 and missing.pending
    assert not (tmp_path / "none.db").exists()


async def test_memory_url_and_options() -> None:
    store = await open_durability("memory://?lock_timeout=4")
    assert isinstance(store, MemoryDurability) and store.lock_timeout == 4.0
    await store.close()
    assert (await read_schema_info("memory://")).version == 0


@pytest.fixture
def pg_url() -> str:
    return require_postgres()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_the_schema_parameter_never_reaches_the_driver(pg_url: str, scheme: str) -> None:
    schema = scratch_schema("ik_factory_x")
    dsn = scheme + "://" + pg_url.split("://", 1)[1]
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}&lock_timeout=3"
    try:
        assert (await read_schema_info(url)).version == 0
        store = await open_durability(url, setup=True, max_size=2)
        try:
            assert isinstance(store, PostgresDurability) and store.schema == schema
            assert store.lock_timeout == 3.0
        finally:
            await store.close()
        conn = await asyncpg.connect(pg_url)
        try:
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
                schema,
            )
        finally:
            await conn.close()
        assert {"turns", "receipts", "outbox", "schema_migrations"} <= {
            row["table_name"] for row in tables
        }
        assert (await read_schema_info(url)).pending == ()
    finally:
        await drop_schema(pg_url, schema)


async def test_listen_from_the_url_opens_a_listening_store(pg_url: str) -> None:
    schema = scratch_schema("ik_factory_x")
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}&listen=1"
    try:
        store = await open_durability(url, setup=True, max_size=2)
        await store.close()
    finally:
        await drop_schema(pg_url, schema)


def test_a_missing_postgres_extra_gives_the_install_hint() -> None:
    code = (
        "import asyncio, sys\n"
        "sys.modules['asyncpg'] = None\n"
        "from intention_kernel.contracts import ConfigurationError\n"
        "from intention_kernel.durability.factory import open_durability\n"
        "try:\n"
        "    asyncio.run(open_durability('postgresql://127.0.0.1/test'))\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'intention-kernel[postgres]'" in done.stdout


# ---------------------------------------------------------------- operator issues (read-only
# opening, typed refusals, silent acceptance, file modes, secrets)


def _schema_one(path: Path) -> None:
    import sqlite3

    from intention_kernel.durability.sqlite._schema import MIGRATIONS

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("CREATE TABLE ik_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        conn.execute("INSERT INTO ik_schema VALUES (1, '2025-01-01T00:00:00+00:00')")
    finally:
        conn.close()


async def test_opening_without_migrating_refuses_a_missing_or_older_schema(tmp_path: Path) -> None:
    from intention_kernel.contracts.errors import ErrorCode, StoreSchemaError

    old, empty, missing = tmp_path / "v1.db", tmp_path / "empty.db", tmp_path / "none.db"
    _schema_one(old)
    empty.touch()
    before = old.read_bytes()
    for path in (old, empty, missing):
        with pytest.raises(StoreSchemaError) as caught:
            await open_durability(sqlite_url(path), migrate=False)
        assert caught.value.code is ErrorCode.STORE_SCHEMA_MISSING
        with pytest.raises(StoreSchemaError):
            await SQLiteDurability.open(path, migrate=False)
    assert old.read_bytes() == before and empty.stat().st_size == 0 and not missing.exists()
    assert (await read_schema_info(sqlite_url(old))).version == 1
    store = await open_durability(sqlite_url(old))  # migrating is the default
    await store.close()
    current = await open_durability(sqlite_url(old), migrate=False)
    await current.close()


OPEN_REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("postgresql://postgres@[::1/x", {}, "url"),
    ("postgresql://postgres@127.0.0.1/test?port=99999", {}, "port"),
    ("postgresql://postgres@127.0.0.1/test?port=5432,x", {}, "port"),
    ("postgresql://postgres@127.0.0.1/test", {"min_size": 5, "max_size": 2}, "min_size"),
    ("postgresql://postgres@127.0.0.1/test", {"max_size": 0}, "max_size"),
    ("postgresql://postgres@127.0.0.1/test", {"min_size": "x"}, "min_size"),
    ("postgresql://postgres@127.0.0.1/test", {"bogus": 1}, "bogus"),
    ("postgresql://postgres@127.0.0.1/test?sslmode=bogus", {}, "url"),
    ("sqlite:////tmp/x.db", {"bogus": 1}, "bogus"),
    ("sqlite:////tmp/x.db", {"setup": True}, "setup"),
    ("memory://", {"bogus": 1}, "bogus"),
]


@pytest.mark.parametrize(("url", "options", "setting"), OPEN_REFUSED)
async def test_open_refuses_bad_settings_with_a_typed_error(
    url: str, options: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await _open_and_close(url, **options)
    assert caught.value.context.get("setting") == setting, caught.value


async def _open_and_close(url: str, **options: Any) -> None:
    store = await open_durability(url, **options)
    await store.close()


async def test_read_schema_info_refuses_a_port_out_of_range() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await read_schema_info("postgresql:///test?host=127.0.0.1&port=99999")
    assert caught.value.context.get("setting") == "port"


async def test_sqlite_refuses_a_missing_directory_and_a_ram_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IK_SQLITE_ALLOW_RAM", raising=False)
    nested = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(ConfigurationError) as caught:
        await open_durability(sqlite_url(nested))
    assert "does not exist" in caught.value.message
    assert not (tmp_path / "no").exists()
    shm = Path("/dev/shm") / f"ik-factory-{tmp_path.name}.db"
    with pytest.raises(ConfigurationError) as ram:
        await open_durability(sqlite_url(shm))
    assert ram.value.context.get("filesystem") == "tmpfs"
    assert _missing(shm) and _missing(Path(f"{shm}.locks"))


def _missing(path: Path) -> bool:
    return not path.exists()


def test_a_keyword_dsn_is_not_taken_for_a_file_name() -> None:
    for text in ("host=db user=app dbname=agents", "dbname=agents", "host=/run/postgresql"):
        with pytest.raises(ConfigurationError) as caught:
            sqlite_url(text)
        assert "postgresql://" in caught.value.message


async def test_sqlite_files_are_private_to_their_owner(tmp_path: Path) -> None:

    from intention_kernel.contracts import DurableTurnResult, KernelCheckpoint

    path = tmp_path / "app.db"
    store = await open_durability(sqlite_url(path))

    async def operation(scope: Any) -> DurableTurnResult:
        result = DurableTurnResult(
            thread_id=scope.thread_id,
            turn_id=scope.turn_id,
            trace_id="t",
            response={},
            checkpoint=KernelCheckpoint(revision=1, agent_fingerprint="fp"),
        )
        await scope.commit(result, outbox=[])
        return result

    try:
        await store.with_turn("thread-1", "turn-1", operation)
        modes = _modes(tmp_path)  # while open: -wal and -shm exist
    finally:
        await store.close()
    locks = modes.pop("app.db.locks")
    assert {"app.db", "app.db-wal", "app.db-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, modes
    assert locks == 0o700


async def test_a_group_lock_directory_gives_group_lock_files(tmp_path: Path) -> None:

    path = tmp_path / "shared.db"
    (tmp_path / "shared.db.locks").mkdir(mode=0o770)
    (tmp_path / "shared.db.locks").chmod(0o2770)
    store = await open_durability(sqlite_url(path))
    try:
        async with store.turn("thread-1", "turn-1"):
            pass
    finally:
        await store.close()
    [lock] = [mode for name, mode in _modes(tmp_path).items() if name.endswith(".lock")]
    assert lock == 0o660


def _modes(directory: Path) -> dict[str, int]:
    """Permission bits of the store's files, the lock directory and the lock files in it."""
    import stat

    found = [*directory.glob("*.db*"), *directory.glob("*.db.locks/*")]
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in found}


async def test_postgres_names_a_missing_database_or_role(pg_url: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(pg_url)
    host = f"{parts.hostname}:{parts.port or 5432}"
    cases = [
        (f"postgresql://{parts.username or 'postgres'}@{host}/no_such_db_x", "no_such_db_x"),
        (f"postgresql://no_such_role_x:pw-secret-1@{host}/test", "no_such_role_x"),
    ]
    for url, name in cases:
        with pytest.raises(ConfigurationError) as caught:
            await _open_and_close(url)
        assert name in caught.value.message and "pw-secret-1" not in str(caught.value)
        assert caught.value.context.get("setting") == "url"


def test_redact_hides_passwords_in_urls_and_keyword_dsns() -> None:
    from intention_kernel.durability.factory import redact

    cases = {
        "postgresql://app:s3cret@db/agents": "postgresql://app:***@db/agents",
        "see postgres://u:p%40ss@h:5/d?x=1 now": "see postgres://u:***@h:5/d?x=1 now",
        "postgresql://db/app?password=s3cret&sslmode=require": (
            "postgresql://db/app?password=***&sslmode=require"
        ),
        "host=db password=s3cret user=u": "host=db password=*** user=u",
        "nats://tok:en@127.0.0.1:4222/x": "nats://tok:***@127.0.0.1:4222/x",
        "postgresql://app@db/agents": "postgresql://app@db/agents",
    }
    for text, expected in cases.items():
        assert redact(text) == expected
