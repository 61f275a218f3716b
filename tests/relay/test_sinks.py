"""Sink URLs, the built-in stdout/file sinks and the command line."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from intention_kernel.cli._app import run
from intention_kernel.contracts import ConfigurationError, ErrorCode, KernelEvent
from intention_kernel.relay import OutboxRelay, OutcomeKind, open_sink
from intention_kernel.relay.sinks._file import FileSink
from intention_kernel.relay.sinks._stdout import StdoutSink
from intention_kernel.testing import MemoryDurability

from ._support import commit_workload, first_delivery_order, run_until_drained

BAD_URLS = [
    "",
    "kafka://127.0.0.1:9092/topic",
    "http://127.0.0.1/hook",
    "127.0.0.1:4222",
    "stdout://somewhere",
    "stdout://?x=1",
    "file://relative.jsonl",
    "file:///",
    "file:///tmp/",
    "file:///no/such/dir/out.jsonl",
    "file:///tmp/out.jsonl?fsync=0",
    "webhook+http://127.0.0.1:8080/hook",
    "webhook+http://127.0.0.1:8080/hook?secret_env=",
    "webhook+http://127.0.0.1:99999/hook?secret_env=IK_TEST_SECRET",
    "webhook+http://user:pw@127.0.0.1/hook?secret_env=IK_TEST_SECRET",
    "webhook+http:///hook?secret_env=IK_TEST_SECRET",
    "webhook+http://127.0.0.1/hook?secret_env=IK_TEST_SECRET&timeout=abc",
    "nats://127.0.0.1:4222",
    "nats://127.0.0.1:4222/orders.events",
    "nats://127.0.0.1:4222/orders.*?stream=ORDERS",
    "nats://127.0.0.1:4222/orders?stream=bad.name",
    "nats://127.0.0.1:4222/orders?stream=A&stream=B",
    "nats://127.0.0.1:abc/orders?stream=A",
    "redis://127.0.0.1:6379/0",
    "redis://127.0.0.1:6379/zero?stream=s",
    "redis://127.0.0.1:6379/0?stream=s&maxlen=-3",
    "redis://127.0.0.1:6379/0?stream=s&unknown=1",
    "stdout://#fragment",
]


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Standard Webhooks secret ("whsec_" + base64 of the key) whose key holds "s3cret".
    monkeypatch.setenv("IK_TEST_SECRET", "whsec_czNjcmV0LWtleS0wMTIzNDU2Nzg5")


@pytest.mark.parametrize("url", BAD_URLS)
def test_unknown_or_malformed_sink_urls_are_refused_at_start(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_sink(url)
    assert caught.value.code == ErrorCode.INVALID_SINK_URL
    assert "s3cret" not in str(caught.value.to_json())


def test_credentials_never_appear_in_the_error() -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_sink("redis://user:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in json.dumps(caught.value.to_json())


def test_a_missing_webhook_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IK_TEST_SECRET")
    with pytest.raises(ConfigurationError) as caught:
        open_sink("webhook+http://127.0.0.1:8080/hook?secret_env=IK_TEST_SECRET")
    assert caught.value.code == ErrorCode.INVALID_CONFIGURATION
    assert caught.value.context == {"secret_env": "IK_TEST_SECRET"}


@pytest.mark.parametrize(
    "url",
    [
        "stdout://",
        "webhook+https://hooks.example/path?secret_env=IK_TEST_SECRET&timeout=3",
        "nats://127.0.0.1:4222/orders.events?stream=ORDERS",
        "redis://127.0.0.1:6379/0?stream=orders&maxlen=1000",
        "rediss://127.0.0.1/1?stream=orders",
    ],
)
async def test_valid_sink_urls_open_without_connecting(url: str) -> None:
    sink = open_sink(url)
    await sink.close()


async def test_file_sink_appends_json_lines_in_thread_order(tmp_path: Path) -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=4, turns=5, per_turn=3)
    path = tmp_path / "events.jsonl"
    sink = open_sink(path.as_uri())
    assert isinstance(sink, FileSink)
    relays = [OutboxRelay(store, sink, batch_size=7, poll_interval=0.01) for _ in range(2)]
    await run_until_drained(store, relays)
    await sink.close()
    lines = path.read_text().splitlines()
    events = [KernelEvent.model_validate_json(line) for line in lines]
    assert len(events) == 60
    assert first_delivery_order(events) == committed


async def test_file_sink_reports_an_unwritable_file_as_unavailable(tmp_path: Path) -> None:
    store = MemoryDurability()
    await commit_workload(store, threads=1, turns=1, per_turn=1)
    target = tmp_path / "gone"
    target.mkdir()
    sink = FileSink(target / "events.jsonl")
    target.rmdir()
    event = (await store.read_outbox())[0].event
    outcomes = await sink.publish([event])
    assert outcomes[0].kind is OutcomeKind.UNAVAILABLE
    await sink.close()


async def test_stdout_sink_writes_one_line_per_event() -> None:
    store = MemoryDurability()
    committed = await commit_workload(store, threads=2, turns=1, per_turn=2)
    buffer = io.BytesIO()
    relay = OutboxRelay(store, StdoutSink(buffer))
    assert (await relay.run_once()).delivered == 4
    events = [KernelEvent.model_validate_json(x) for x in buffer.getvalue().splitlines()]
    assert first_delivery_order(events) == committed


def test_cli_refuses_an_unknown_sink(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["outbox", "check-sink", "--sink", "bogus://x"]) == 2
    assert "[INVALID_SINK_URL]" in capsys.readouterr().err
    relay = ["outbox", "relay", "--store", "memory://", "--sink", "file://rel"]
    assert run(relay) == 2
    assert run(["outbox", "stats", "--store", "mysql://db"]) == 2
    assert "[UNSUPPORTED_STORE]" in capsys.readouterr().err
    assert run(["outbox", "check-sink", "--sink", "stdout://"]) == 0


def test_cli_runs_one_batch_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sink = (tmp_path / "out.jsonl").as_uri()
    once = ["outbox", "relay", "--store", "memory://", "--sink", sink, "--once", "--json"]
    assert run(once) == 0
    assert json.loads(capsys.readouterr().out)["claimed"] == 0
    assert run(["outbox", "stats", "--store", "memory://", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pending"] == 0
    assert run(["outbox", "prune", "--store", "memory://", "--older-than", "7d"]) == 0
    assert run(["outbox", "requeue", "--store", "memory://"]) == 0
    assert run(["outbox", "dead", "--store", "memory://"]) == 0


async def test_cli_relay_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    sink = (tmp_path / "out.jsonl").as_uri()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "intention_kernel.cli",
        "outbox",
        "relay",
        "--store",
        "memory://",
        "--sink",
        sink,
        "--poll-interval",
        "0.05",
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 20)
    assert b"started" in line
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    rest = await proc.stderr.read()
    assert b"stopped" in rest
