"""What an operator meets first: suggested commands that run as printed, consistent exit codes,
``--json`` for every error, whole ids, ``--version``, clear PostgreSQL errors, no secrets."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from intention_kernel import __version__
from intention_kernel.cli._app import run
from tests.support.postgres import require_postgres

from .conftest import Seeded
from .support import cli, cli_json, commit_turn, open_sqlite

SECRET = "pw-s3cret-x"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"intention-kernel {__version__}"


def test_events_of_an_unknown_thread_is_an_error_like_turns(seeded: Seeded) -> None:
    for args in (["events", "--thread", "nope"], ["turns", "nope"]):
        result = cli(*args, "--store", seeded.store)
        assert result.exit_code == 2 and "[THREAD_NOT_FOUND]" in result.stderr
    known = cli_json("events", "--thread", "t-wait", "--store", seeded.store)
    assert [e["thread_id"] for e in known["events"]] == ["t-wait"]


def test_usage_errors_honour_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["threads", "--limit", "0", "--store", "memory://", "--json"]) == 2
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["code"] == "USAGE_ERROR" and "--limit" in error["message"]
    assert run(["threads", "--limit", "0", "--store", "memory://"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [USAGE_ERROR]") and "--limit" in err
    assert "intention-kernel threads --help" in err


def test_suggested_commands_run_as_printed(sqlite_seeded: Seeded, tmp_path: Path) -> None:
    """Each ``resolve`` of ``thread diagnose`` is a command line that works when pasted, with
    the store given by --store or by IK_STORE."""
    sink = (tmp_path / "events.jsonl").as_uri()
    for n, env in enumerate(({}, {"IK_STORE": sqlite_seeded.store})):

        async def one_more_turn(n: int = n) -> None:
            store = await sqlite_seeded.open()
            try:
                await commit_turn(store, "t-ok", f"turn-more-{n}")
            finally:
                await store.close()

        asyncio.run(one_more_turn())
        store = [] if env else ["--store", sqlite_seeded.store]
        result = cli("thread", "diagnose", "t-ok", "--json", *store, env=env)
        [finding] = [
            f for f in json.loads(result.stdout)["findings"] if f["kind"] == "undelivered_events"
        ]
        command = finding["resolve"].split(": ", 1)[1].replace("URL", sink)
        argv = shlex.split(command)
        assert argv[0] == "intention-kernel"
        result = cli(*argv[1:], "--once", env=env)
        assert result.exit_code == 0, (command, result.stdout, result.stderr)
        assert "delivered" in result.stdout


def test_long_ids_are_never_cut(tmp_path: Path) -> None:
    path = tmp_path / "ids.db"
    threads = [f"traveller_01a23c0b27ac40b32db0bac4060{n}" for n in range(2)]

    async def seed() -> None:
        store = await open_sqlite(path)
        try:
            for thread in threads:
                await commit_turn(store, thread, "turn-1")
        finally:
            await store.close()

    asyncio.run(seed())
    for command in (["threads"], ["events"], ["receipts", "--status", "all"]):
        result = cli(*command, "--store", str(path), env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.stderr
        assert "…" not in result.stdout, result.stdout
        if command != ["receipts", "--status", "all"]:
            for thread in threads:
                assert thread in result.stdout, result.stdout


def test_prune_says_how_many_more(sqlite_seeded: Seeded, tmp_path: Path) -> None:
    path = tmp_path / "many.db"

    async def seed() -> None:
        store = await open_sqlite(path)
        try:
            for n in range(25):
                await commit_turn(store, f"t-{n:02d}", "turn-1")
                await commit_turn(store, f"t-{n:02d}", "turn-2")
        finally:
            await store.close()

    asyncio.run(seed())
    result = cli("prune", "--older-than", "0s", "--dry-run", "--store", str(path))
    assert result.exit_code == 0, result.stderr
    assert "would remove 25 turn record(s)" in result.stdout
    assert "… and 5 more (--json lists them all)" in result.stdout


def test_postgres_errors_name_the_database_and_the_role() -> None:
    dsn = require_postgres()
    base = dsn.split("://", 1)[1].split("/", 1)[0].split("@")[-1]
    missing_db = cli("status", "--store", f"postgresql://postgres@{base}/no_such_db_x")
    assert missing_db.exit_code == 2, missing_db.stderr
    assert "[INVALID_CONFIGURATION]" in missing_db.stderr
    assert 'database "no_such_db_x" does not exist' in missing_db.stderr
    missing_role = cli("status", "--store", f"postgresql://nobody_x:{SECRET}@{base}/test")
    assert missing_role.exit_code == 2 and "nobody_x" in missing_role.stderr
    assert SECRET not in missing_role.stderr + missing_role.stdout


@pytest.mark.parametrize("empty", ["postgres"], indirect=True)  # only its URL has a password
def test_no_command_prints_a_password(seeded: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    parts = urlsplit(seeded.store)
    netloc = f"{parts.username or 'postgres'}:{SECRET}@{parts.hostname}:{parts.port or 5432}"
    with_password = parts._replace(netloc=netloc).geturl()
    outputs: list[str] = []
    for args in (
        ["thread", "diagnose", "t-unc"],
        ["thread", "diagnose", "t-ok"],
        ["thread", "diagnose", "t-ok", "--json"],
        ["status"],
        ["outbox", "relay", "--sink", "stdout://", "--once"],
    ):
        result = cli(*args, "--store", with_password)
        assert result.exit_code in (0, 1, 4), (args, result.stdout, result.stderr)
        outputs += [result.stdout, result.stderr]
    down = parts._replace(netloc=f"postgres:{SECRET}@127.0.0.1:1").geturl()
    result = cli("status", "--store", down)
    assert result.exit_code == 3
    outputs += [result.stdout, result.stderr]
    with caplog.at_level(logging.DEBUG):
        cli("outbox", "relay", "--sink", "stdout://", "--once", "--store", with_password)
    outputs += [r.getMessage() for r in caplog.records]
    for text in outputs:
        assert SECRET not in text, text
    assert any("postgres:***@" in text for text in outputs)
