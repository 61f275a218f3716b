"""threads, thread show, turns, events, status: normal output, --json and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from intention_kernel.durability.postgres import MIGRATIONS as PG_MIGRATIONS
from intention_kernel.durability.sqlite._schema import SCHEMA_VERSION as SQLITE_VERSION

from .conftest import Seeded
from .support import cli, cli_json, sql


def test_threads_lists_every_thread_with_json_and_pages(seeded: Seeded) -> None:
    human = cli("threads", "--store", seeded.store)
    assert human.exit_code == 0, human.stderr
    for thread in ("t-ok", "t-wait", "t-unc"):
        assert thread in human.stdout
    data = cli_json("threads", "--store", seeded.store)
    rows = {t["thread_id"]: t for t in data["threads"]}
    assert rows["t-ok"]["revision"] == 2 and rows["t-ok"]["turns"] == 2
    assert rows["t-ok"]["fingerprint"] == "agent@1"
    assert rows["t-unc"]["revision"] == 0 and rows["t-unc"]["uncertain_receipts"] == 1
    first = cli_json("threads", "--store", seeded.store, "--limit", "2")
    assert [t["thread_id"] for t in first["threads"]] == ["t-ok", "t-unc"]
    assert first["next_after"] == "t-unc"
    rest = cli_json("threads", "--store", seeded.store, "--after", "t-unc")
    assert [t["thread_id"] for t in rest["threads"]] == ["t-wait"]
    assert rest["next_after"] is None
    only = cli_json("threads", "--store", seeded.store, "--uncertain")
    assert [t["thread_id"] for t in only["threads"]] == ["t-unc"]
    assert (
        cli_json("threads", "--store", seeded.store, "--prefix", "t-w")["threads"][0]["thread_id"]
        == "t-wait"
    )


def test_store_from_environment_and_url(seeded: Seeded) -> None:
    result = cli("status", env={"IK_STORE": seeded.store})
    assert result.exit_code == 0, result.stderr
    assert "uncertain receipts 1" in result.stdout
    if seeded.path is not None:
        url = cli("status", env={"IK_STORE": f"sqlite:///{seeded.path}"})
        assert url.exit_code == 0 and "threads            3" in url.stdout


def test_thread_show(seeded: Seeded) -> None:
    human = cli("thread", "show", "t-wait", "--store", seeded.store)
    assert human.exit_code == 0, human.stderr
    assert "revision 1" in human.stdout and "Refund 42 EUR?" in human.stdout
    data = cli_json("thread", "show", "t-ok", "--store", seeded.store)
    cp = data["checkpoint"]
    assert cp["revision"] == 2 and cp["agent_fingerprint"] == "agent@1"
    assert cp["messages"] == 2 and cp["facts"][0]["type"] == "order"
    assert data["receipts"][0]["status"] == "completed"
    unc = cli_json("thread", "show", "t-unc", "--store", seeded.store)
    assert unc["checkpoint"] is None and unc["receipts"][0]["status"] == "uncertain"


def test_turns_show_input_and_response(seeded: Seeded) -> None:
    data = cli_json("turns", "t-ok", "--store", seeded.store)
    assert [(t["turn_id"], t["input"]) for t in data["turns"]] == [
        ("turn-1", "charge me"),
        ("turn-2", "thanks"),
    ]
    assert data["turns"][0]["response"]["charge"] == {"charge_id": "ch_1"}
    human = cli("turns", "t-ok", "--store", seeded.store)
    assert "charge me" in human.stdout
    page = cli_json("turns", "t-ok", "--store", seeded.store, "--after-revision", "1")
    assert [t["turn_id"] for t in page["turns"]] == ["turn-2"]


def test_events_with_delivery_state(sqlite_seeded: Seeded) -> None:
    seeded = sqlite_seeded
    assert seeded.path is not None
    positions = [r[0] for r in sql(seeded.path, "SELECT position FROM ik_outbox ORDER BY 1")]
    sql(
        seeded.path,
        "UPDATE ik_outbox SET delivered_at = '2026-01-01T00:00:00+00:00' WHERE position = ?",
        [positions[0]],
    )
    sql(
        seeded.path,
        "UPDATE ik_outbox SET dead = 1, attempts = 10 WHERE position = ?",
        [positions[1]],
    )
    data = cli_json("events", "--store", seeded.store, "--thread", "t-ok")
    states = [e["state"] for e in data["events"]]
    assert states == ["delivered", "dead", "pending"]
    turn = cli_json("events", "--store", seeded.store, "--thread", "t-ok", "--turn", "turn-2")
    assert {e["turn_id"] for e in turn["events"]} == {"turn-2"}
    human = cli("events", "--store", seeded.store)
    assert "delivered" in human.stdout and "dead" in human.stdout
    status = cli_json("status", "--store", seeded.store)
    expected = {
        "backend": "sqlite",
        "dead_events": 1,
        "schema_version": SQLITE_VERSION,
        "threads": 3,
        "turns": 3,
        "uncertain_receipts": 1,
        "undelivered_events": 2,
    }
    assert {key: status[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["thread", "show", "nope"], "THREAD_NOT_FOUND", 2),
        (["turns", "nope"], "THREAD_NOT_FOUND", 2),
        (["thread", "show", ""], "INVALID_THREAD_ID", 2),
    ],
)
def test_unknown_or_invalid_thread(
    seeded: Seeded, args: list[str], code: str, exit_code: int
) -> None:
    result = cli(*args, "--store", seeded.store)
    assert result.exit_code == exit_code
    assert f"[{code}]" in result.stderr and "Traceback" not in result.stderr
    data = cli_json(*args, "--store", seeded.store, code=exit_code)
    assert data["error"]["code"] == code


def test_store_errors(tmp_path: Path) -> None:
    missing = cli("status", "--store", str(tmp_path / "none.db"))
    assert missing.exit_code == 2 and "[STORE_NOT_FOUND]" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    nothing = cli("status", env={"IK_STORE": ""})
    assert nothing.exit_code == 2 and "[STORE_REQUIRED]" in nothing.stderr
    scheme = cli("status", "--store", "mysql://db/x")
    assert scheme.exit_code == 2 and "[UNSUPPORTED_STORE]" in scheme.stderr
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    broken = cli("status", "--store", str(garbage))
    assert broken.exit_code == 3 and "Traceback" not in broken.stderr, broken.stderr
    newer = tmp_path / "newer.db"
    assert cli("migrate", "--store", str(newer)).exit_code == 0
    sql(newer, "INSERT INTO ik_schema (version, applied_at) VALUES (99, 'x')")
    too_new = cli("status", "--store", str(newer))
    assert too_new.exit_code == 3 and "[STORE_SCHEMA_TOO_NEW]" in too_new.stderr
    dry = cli("migrate", "--store", str(newer), "--dry-run")
    assert dry.exit_code == 3 and "[STORE_SCHEMA_TOO_NEW]" in dry.stderr


def test_migrate_dry_run_then_apply(empty: Seeded) -> None:
    store = empty.store
    if empty.backend == "postgres":
        missing = cli("status", "--store", store)
        assert missing.exit_code == 3 and "[STORE_SCHEMA_MISSING]" in missing.stderr
        assert "intention-kernel migrate" in missing.stderr
    latest = SQLITE_VERSION if empty.backend == "sqlite" else len(PG_MIGRATIONS)
    names = [f"{n}: schema version {n}" for n in range(1, latest + 1)]
    dry = cli_json("migrate", "--store", store, "--dry-run")
    assert dry["pending"] == names and dry["version"] == 0
    assert empty.path is None or not empty.path.exists()
    human = cli("migrate", "--store", store, "--dry-run")
    assert f"would apply {latest} migration" in human.stdout
    applied = cli_json("migrate", "--store", store)
    assert applied["applied"] == names and applied["version"] == latest
    again = cli("migrate", "--store", store)
    assert again.exit_code == 0 and f"up to date (version {latest})" in again.stdout
    status = cli_json("status", "--store", store)
    assert status["threads"] == 0 and status["backend"] == empty.backend.replace(
        "postgres", "postgresql"
    )


def test_postgres_errors() -> None:
    from tests.support.postgres import require_postgres

    dsn = require_postgres()
    down = cli("status", "--store", "postgresql://nobody@127.0.0.1:1/none")
    assert down.exit_code == 3 and "[STORE_UNAVAILABLE]" in down.stderr
    bad = cli("status", "--store", f"{dsn}?schema=Not-An-Identifier")
    assert bad.exit_code == 2 and "[INVALID_CONFIGURATION]" in bad.stderr
    data = cli_json("status", "--store", "postgres://nobody@127.0.0.1:1/none", code=3)
    assert data["error"]["code"] == "STORE_UNAVAILABLE"
