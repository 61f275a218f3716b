"""``intention-kernel outbox ...`` on real stores: the same ``--store``/``IK_STORE``, ``--json``,
error lines and exit codes as every other command, and one duration grammar for both prunes."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from intention_kernel.cli._app import run
from intention_kernel.cli._common import CliError, parse_duration
from intention_kernel.relay import OutboxSource, Partition

from .conftest import Seeded
from .support import cli


def _dead_letter_one(seeded: Seeded) -> int:
    """Dead-letter the first event through the store's own API; returns its position."""

    async def main() -> int:
        store = await seeded.open()
        try:
            assert isinstance(store, OutboxSource)
            [event] = await store.claim("ops-test", limit=1, lease=30)
            await store.record_failure(
                "ops-test",
                event.position,
                error="consumer rejected it",
                retry_in=1,
                max_attempts=1,
                permanent=True,
            )
            return event.position
        finally:
            await store.close()

    return asyncio.run(main())


def test_relay_stats_dead_requeue_and_prune_through_ik_store(
    seeded: Seeded, tmp_path: Path
) -> None:
    env = {"IK_STORE": seeded.store}

    def outbox_json(*args: str) -> dict[str, object]:
        result = cli("outbox", *args, "--json", env=env)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        parsed: dict[str, object] = json.loads(result.stdout)
        return parsed

    assert outbox_json("stats")["pending"] == 4
    position = _dead_letter_one(seeded)
    dead = outbox_json("dead")["events"]
    assert isinstance(dead, list) and [e["position"] for e in dead] == [position]
    assert dead[0]["last_error"] == "consumer rejected it"
    human = cli("outbox", "dead", env=env)
    assert human.exit_code == 0 and "consumer rejected it" in human.stdout
    assert outbox_json("stats")["blocked_threads"] == 1
    assert outbox_json("requeue", "--position", str(position)) == {"requeued": 1}

    sink = tmp_path / "events.jsonl"
    report = outbox_json("relay", "--sink", sink.as_uri(), "--once")
    assert report["delivered"] == 4 and report["sink_unavailable"] is False
    assert len(sink.read_text().splitlines()) == 4
    stats = outbox_json("stats")
    assert (stats["pending"], stats["delivered"], stats["dead"]) == (0, 4, 0)

    assert outbox_json("prune", "--older-than", "2w") == {
        "pruned": 0,
        "older_than_seconds": 14 * 86_400.0,
    }
    old = datetime.now(UTC) - timedelta(days=30)
    micros = (old - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    seeded.execute(
        "UPDATE ik_outbox SET delivered_at = ?, delivered_us = ?",
        "UPDATE {s}.outbox SET delivered_at = $1",
        *((old, micros) if seeded.backend == "sqlite" else (old,)),
    )
    pruned = cli("outbox", "prune", "--older-than", "2w", env=env)
    assert pruned.exit_code == 0, pruned.stderr
    assert "pruned 4 delivered event(s) older than 2w" in pruned.stdout
    assert outbox_json("stats")["delivered"] == 0


def test_both_prune_commands_take_weeks(sqlite_seeded: Seeded) -> None:
    store = ["--store", sqlite_seeded.store]
    assert cli("prune", "--older-than", "2w", *store).exit_code == 0
    assert cli("outbox", "prune", "--older-than", "2w", *store).exit_code == 0
    for command in (["prune"], ["outbox", "prune"]):
        bad = cli(*command, "--older-than", "soon", *store)
        assert bad.exit_code == 2 and "error: [INVALID_DURATION]" in bad.stderr


def test_usage_and_store_errors_use_the_common_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["outbox", "stats"]) == 2  # no --store, no IK_STORE
    assert "error: [STORE_REQUIRED]" in capsys.readouterr().err
    assert run(["outbox", "stats", "--store", str(tmp_path / "none.db")]) == 2
    assert "error: [STORE_NOT_FOUND]" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    assert run(["outbox", "stats", "--store", "mysql://db/app", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "UNSUPPORTED_STORE" and "postgresql://" in error["message"]
    assert run(["outbox", "dead", "--store", "postgresql://db:port/app"]) == 2
    assert "error: [INVALID_CONFIGURATION]" in capsys.readouterr().err
    assert run(["outbox", "prune", "--store", "memory://"]) == 2  # --older-than is required
    assert "--older-than" in capsys.readouterr().err
    assert run(["outbox", "requeue", "--store", "memory://", "--position", "x"]) == 2
    relay = ["outbox", "relay", "--store", "memory://", "--sink", "kafka://broker/topic"]
    assert run(relay) == 2
    assert "error: [INVALID_SINK_URL]" in capsys.readouterr().err
    assert run(["outbox", "check-sink", "--sink", "stdout://", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True}


DURATIONS = [
    ("45s", 45),
    ("90m", 5_400),
    ("12h", 43_200),
    ("30d", 2_592_000),
    ("2w", 1_209_600),
    ("1.5h", 5_400),
    (" 7d ", 604_800),
    ("0s", 0),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "90", "-1d", "2x", "1w2d", "d"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(CliError) as caught:
        parse_duration(text)
    assert caught.value.code == "INVALID_DURATION"


def test_a_partitioned_relay_once_gives_its_lease_up_and_stats_list_leases(
    seeded: Seeded, tmp_path: Path
) -> None:
    env = {"IK_STORE": seeded.store}
    sink = tmp_path / "events.jsonl"
    once = cli(
        "outbox",
        "relay",
        "--sink",
        sink.as_uri(),
        "--partition",
        "0/1",
        "--once",
        "--json",
        env=env,
    )
    assert once.exit_code == 0, once.stderr
    assert json.loads(once.stdout)["delivered"] == 4  # one partition of one: every thread
    stats = cli("outbox", "stats", "--json", env=env)
    assert json.loads(stats.stdout)["partitions"] == []  # the lease was given up on exit

    async def hold() -> None:
        store = await seeded.open()
        try:
            assert isinstance(store, OutboxSource)
            await store.hold_partition("relay-x", Partition(1, 2), lease=60)
        finally:
            await store.close()

    asyncio.run(hold())
    [lease] = json.loads(cli("outbox", "stats", "--json", env=env).stdout)["partitions"]
    assert (lease["count"], lease["index"], lease["holder"], lease["live"]) == (
        2,
        1,
        "relay-x",
        True,
    )
    human = cli("outbox", "stats", env=env)
    assert human.exit_code == 0 and "1/2" in human.stdout and "relay-x" in human.stdout
    bad = cli("outbox", "relay", "--sink", sink.as_uri(), "--partition", "2/2", env=env)
    assert bad.exit_code == 2 and "i/n" in bad.stderr + bad.stdout
