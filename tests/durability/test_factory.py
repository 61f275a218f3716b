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
from intention_kernel.testing.postgres import drop_schema, require_postgres, scratch_schema

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
