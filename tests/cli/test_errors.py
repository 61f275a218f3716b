"""Every command's error paths, table-driven: a user mistake ends with one ``error: [CODE]`` line
on stderr (one JSON error document on stdout with ``--json``) and its exit code, never a
traceback. Each row runs in-process through ``run``; a few run as a real console script too."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from intention_kernel.cli._app import run
from intention_kernel.durability.sqlite._schema import MIGRATIONS

from .conftest import Seeded

ROOT = Path(__file__).resolve().parents[2]
KEY = "payments.charge:o-9"
DEEP = "[" * 5000 + "]" * 5000

# Every command that opens an existing store, without its --store.
OPENING: dict[str, list[str]] = {
    "threads": ["threads"],
    "thread show": ["thread", "show", "t-1"],
    "thread diagnose": ["thread", "diagnose", "t-1"],
    "turns": ["turns", "t-1"],
    "events": ["events"],
    "status": ["status"],
    "prune": ["prune", "--older-than", "30d"],
    "receipts": ["receipts"],
    "reconcile": ["reconcile", "t-1", "k-1", "--not-applied", "--note", "n", "--actor", "a"],
    "check-compat": ["check-compat", "--agent", "tests.cli.agents:current"],
    "outbox relay": ["outbox", "relay", "--sink", "stdout://", "--once"],
    "outbox stats": ["outbox", "stats"],
    "outbox dead": ["outbox", "dead"],
    "outbox requeue": ["outbox", "requeue"],
    "outbox prune": ["outbox", "prune", "--older-than", "2w"],
}


def schema_one(path: Path) -> None:
    """A SQLite store as the first release wrote it (schema version 1)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("CREATE TABLE ik_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        conn.execute("INSERT INTO ik_schema VALUES (1, '2025-01-01T00:00:00+00:00')")
    finally:
        conn.close()


@dataclass(frozen=True)
class BadStore:
    make: Callable[[Path], str]
    code: str
    exit_code: int
    migrate_code: str | None = None
    """What ``migrate`` says instead (``None``: the same; ``""``: it succeeds)."""


def _file(content: bytes) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        path = tmp / "store.db"
        path.write_bytes(content)
        return str(path)

    return make


def _schema_one(tmp: Path) -> str:
    schema_one(tmp / "v1.db")
    return str(tmp / "v1.db")


BAD_STORES: dict[str, BadStore] = {
    "missing file": BadStore(lambda t: str(t / "none.db"), "STORE_NOT_FOUND", 2, ""),
    "unknown scheme": BadStore(lambda t: "mysql://db/app", "UNSUPPORTED_STORE", 2),
    "port out of range": BadStore(
        lambda t: "postgresql://u@db:99999/app", "INVALID_CONFIGURATION", 2
    ),
    "malformed host": BadStore(
        lambda t: "postgresql://postgres@[::1/x", "INVALID_CONFIGURATION", 2
    ),
    "port parameter out of range": BadStore(
        lambda t: "postgresql://postgres@127.0.0.1/test?port=99999", "INVALID_CONFIGURATION", 2
    ),
    "keyword DSN": BadStore(
        lambda t: "host=127.0.0.1 user=postgres dbname=test", "INVALID_CONFIGURATION", 2
    ),
    "schema 1": BadStore(_schema_one, "STORE_SCHEMA_MISSING", 3, ""),
    "empty file": BadStore(_file(b""), "STORE_SCHEMA_MISSING", 3, ""),
    "not a database": BadStore(_file(b"not a database" * 100), "STORE_SCHEMA_MISSING", 3),
    "missing directory": BadStore(
        lambda t: f"sqlite:///{t}/no/such/dir/x.db", "STORE_NOT_FOUND", 2, "INVALID_CONFIGURATION"
    ),
    "tmpfs": BadStore(
        lambda t: "/dev/shm/ik-test-x.db", "STORE_NOT_FOUND", 2, "INVALID_CONFIGURATION"
    ),
}


def invoke(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = run(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_error(
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: str,
    exit_code: int,
    *,
    as_json: bool = True,
) -> None:
    status, out, err = invoke(capsys, args)
    assert "Traceback" not in out + err
    assert (status, code) == (exit_code, code), (args, out, err)
    assert f"error: [{code}]" in err, (args, err)
    assert len(err.strip().splitlines()) <= 2, err  # the error line (and a usage hint)
    if not as_json:
        return
    status, out, err = invoke(capsys, [*args, "--json"])
    assert status == exit_code, (args, out, err)
    assert json.loads(out)["error"]["code"] == code, (args, out)


@pytest.fixture(autouse=True)
def _no_store_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IK_STORE", raising=False)


@pytest.mark.parametrize("bad", sorted(BAD_STORES))
@pytest.mark.parametrize("command", sorted(OPENING))
def test_every_opening_command_refuses_a_bad_store(
    command: str, bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = BAD_STORES[bad]
    store = row.make(tmp_path)
    before = Path(store).read_bytes() if Path(store).is_file() else None
    check_error(capsys, [*OPENING[command], "--store", store], row.code, row.exit_code)
    assert (Path(store).read_bytes() if Path(store).is_file() else None) == before
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", sorted(OPENING))
def test_every_opening_command_needs_a_store(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_error(capsys, OPENING[command], "STORE_REQUIRED", 2)


@pytest.mark.parametrize("bad", sorted(BAD_STORES))
def test_migrate_refuses_a_bad_store(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = BAD_STORES[bad]
    store = row.make(tmp_path)
    if row.migrate_code == "":
        return  # migrate creates or upgrades it: tested in test_read_only.py
    code = row.migrate_code or row.code
    exit_code = 2 if code == "INVALID_CONFIGURATION" else row.exit_code
    check_error(capsys, ["migrate", "--store", store], code, exit_code)
    check_error(capsys, ["migrate", "--dry-run", "--store", store], code, exit_code)
    assert not (tmp_path / "no").exists()
    assert not Path("/dev/shm/ik-test-x.db").exists()


# args (the store is appended), code, exit code, whether --json applies
COMMAND_ERRORS: list[tuple[list[str], str, int, bool]] = [
    (["turns", "nope"], "THREAD_NOT_FOUND", 2, True),
    (["events", "--thread", "nope"], "THREAD_NOT_FOUND", 2, True),
    (["thread", "show", "nope"], "THREAD_NOT_FOUND", 2, True),
    (["thread", "diagnose", "nope"], "THREAD_NOT_FOUND", 2, True),
    (["thread", "show", ""], "INVALID_THREAD_ID", 2, True),
    (["turns", "x" * 300], "INVALID_THREAD_ID", 2, True),
    (
        ["reconcile", "t-unc", KEY, "--completed", "--note", "n", "--actor", "a"],
        "VALUE_REQUIRED",
        2,
        True,
    ),
    (
        ["reconcile", "t-unc", KEY, "--completed", "--value", DEEP, "--note", "n", "--actor", "a"],
        "INVALID_JSON",
        2,
        True,
    ),
    (
        ["reconcile", "t-unc", KEY, "--completed", "--value", "{x", "--note", "n", "--actor", "a"],
        "INVALID_JSON",
        2,
        True,
    ),
    (
        ["reconcile", "t-unc", KEY, "--completed", "--not-applied", "--note", "n", "--actor", "a"],
        "INVALID_OUTCOME",
        2,
        True,
    ),
    (
        ["reconcile", "t-unc", KEY, "--not-applied", "--value", "1", "--note", "n", "--actor", "a"],
        "INVALID_OUTCOME",
        2,
        True,
    ),
    (["reconcile", "t-unc", KEY, "--not-applied"], "AUDIT_REQUIRED", 2, True),
    (
        [
            "reconcile",
            "t-ok",
            "payments.charge:zzz",
            "--not-applied",
            "--note",
            "n",
            "--actor",
            "a",
        ],
        "RECEIPT_NOT_FOUND",
        2,
        True,
    ),
    (["check-compat", "--agent", "tests.cli.broken_agent:agent"], "INVALID_AGENT", 2, True),
    (["check-compat", "--agent", "tests.cli.agents:failing_factory"], "INVALID_AGENT", 2, True),
    (["check-compat", "--agent", "tests.cli.agents:not_an_agent"], "INVALID_AGENT", 2, True),
    (["check-compat", "--agent", "nonsense"], "INVALID_AGENT", 2, True),
    (["check-compat", "--agent", "no_such_module:x"], "AGENT_NOT_FOUND", 2, True),
    (
        ["thread", "diagnose", "t-ok", "--agent", "tests.cli.broken_agent:x"],
        "INVALID_AGENT",
        2,
        True,
    ),
    (["prune", "--older-than", "soon"], "INVALID_DURATION", 2, True),
    (["prune", "--older-than", "99999999999w"], "INVALID_DURATION", 2, True),
    (["outbox", "prune", "--older-than", "90"], "INVALID_DURATION", 2, True),
    (["outbox", "relay", "--sink", "bogus://x"], "INVALID_SINK_URL", 2, True),
    (
        ["outbox", "relay", "--sink", "stdout://", "--claim-ttl", "nan"],
        "INVALID_CONFIGURATION",
        2,
        True,
    ),
    (["outbox", "requeue", "--position", "x"], "USAGE_ERROR", 2, True),
    (["threads", "--limit", "0"], "USAGE_ERROR", 2, True),
    (["receipts", "--status", "bogus"], "USAGE_ERROR", 2, True),
    (["reconcile", "t-unc"], "USAGE_ERROR", 2, True),
    (["threads", "--no-such-option"], "USAGE_ERROR", 2, True),
]


@pytest.mark.parametrize(
    ("args", "code", "exit_code", "as_json"),
    COMMAND_ERRORS,
    ids=[" ".join(a[:3])[:40] for a, *_ in COMMAND_ERRORS],
)
def test_command_errors(
    sqlite_seeded: Seeded,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: str,
    exit_code: int,
    as_json: bool,
) -> None:
    check_error(capsys, [*args, "--store", sqlite_seeded.store], code, exit_code, as_json=as_json)
    if args[0] == "reconcile":  # nothing was recorded
        _, out, _ = invoke(capsys, ["receipts", "--json", "--store", sqlite_seeded.store])
        assert [r["status"] for r in json.loads(out)["receipts"]] == ["uncertain"]


NO_STORE_ERRORS: list[tuple[list[str], str, int, bool]] = [
    (["no-such-command"], "USAGE_ERROR", 2, True),
    (["outbox", "check-sink", "--sink", "bogus://x"], "INVALID_SINK_URL", 2, True),
    (
        ["outbox", "check-sink", "--sink", "webhook+https://h/p?secret_env=NO_SUCH_ENV_X"],
        "INVALID_CONFIGURATION",
        2,
        True,
    ),
    (["outbox", "check-sink"], "USAGE_ERROR", 2, True),
    (["demo", "--dir", "/dev/shm/ik-demo-test"], "INVALID_CONFIGURATION", 2, False),
]


@pytest.mark.parametrize(("args", "code", "exit_code", "as_json"), NO_STORE_ERRORS)
def test_errors_without_a_store(
    capsys: pytest.CaptureFixture[str], args: list[str], code: str, exit_code: int, as_json: bool
) -> None:
    check_error(capsys, args, code, exit_code, as_json=as_json)


def test_demo_refuses_a_file_as_its_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    check_error(
        capsys, ["demo", "--dir", str(tmp_path / "file")], "INVALID_CONFIGURATION", 2, as_json=False
    )


def test_an_unexpected_failure_is_one_line_too(
    sqlite_seeded: Seeded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from intention_kernel.cli import _maintenance as maintenance

    def broken(store: object) -> object:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(maintenance, "inspector", broken)
    check_error(capsys, ["status", "--store", sqlite_seeded.store], "INTERNAL_ERROR", 3)


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--store", "postgresql://postgres@[::1/x"],
        ["status", "--store", "postgresql://postgres@127.0.0.1/test?port=99999"],
        ["check-compat", "--agent", "tests.cli.broken_agent:agent", "--store", "memory://"],
        [
            "reconcile",
            "t",
            "k",
            "--completed",
            "--value",
            DEEP,
            "--note",
            "n",
            "--actor",
            "a",
            "--store",
            "memory://",
        ],
        ["threads", "--limit", "0", "--store", "memory://"],
    ],
)
def test_the_console_script_prints_no_traceback(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "intention_kernel.cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "error: [" in done.stderr
    assert json.loads(done.stdout)["error"]["code"]
