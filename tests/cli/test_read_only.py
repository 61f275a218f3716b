"""Only ``migrate`` changes a schema: every other command refuses a missing or older one, says
which command to run, and leaves the store as it found it (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from intention_kernel.durability.factory import read_schema_info
from intention_kernel.durability.sqlite._schema import SCHEMA_VERSION

from .conftest import Seeded
from .support import cli, cli_json
from .test_errors import schema_one

READERS = [
    ["threads"],
    ["status"],
    ["receipts"],
    ["events"],
    ["turns", "t-1"],
    ["outbox", "stats"],
    ["prune", "--older-than", "30d"],
]


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT max(version) FROM ik_schema").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("args", READERS, ids=[a[0] for a in READERS])
def test_a_schema_1_sqlite_store_is_not_migrated_by_reading(
    args: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "v1.db"
    schema_one(path)
    result = cli(*args, "--store", str(path))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "[STORE_SCHEMA_MISSING]" in result.stderr
    assert f"intention-kernel migrate --store {path}" in result.stderr
    assert _version(path) == 1


def test_status_on_an_empty_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    result = cli("status", "--store", str(path))
    assert result.exit_code == 3 and "[STORE_SCHEMA_MISSING]" in result.stderr
    assert path.stat().st_size == 0
    assert not (tmp_path / "empty.db.locks").exists()


def test_migrate_then_read(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    schema_one(path)
    dry = cli_json("migrate", "--dry-run", "--store", str(path))
    assert dry["version"] == 1 and _version(path) == 1
    applied = cli_json("migrate", "--store", str(path))
    assert applied["version_before"] == 1 and applied["version"] == SCHEMA_VERSION
    assert cli_json("threads", "--store", str(path)) == {"threads": [], "next_after": None}


@pytest.mark.parametrize("empty", ["postgres"], indirect=True)
def test_postgres_reading_commands_create_no_schema(empty: Seeded) -> None:
    for args in READERS:
        result = cli(*args, "--store", empty.store)
        assert result.exit_code == 3, (args, result.stdout, result.stderr)
        assert (
            "[STORE_SCHEMA_MISSING]" in result.stderr
            and "intention-kernel migrate" in result.stderr
        )
    assert asyncio.run(read_schema_info(empty.store)).version == 0
