"""``NatsIngress`` against a private NATS server and a real SQLite store: published turns are
submitted to the inbox in publish order per thread and acknowledged once durable; a redelivered
message is the same request; a message the kernel refuses is dropped without holding its
partition back; an unavailable store is retried in place."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from intention_kernel.contracts.errors import DurabilityError, ErrorCode, InvalidInputError
from intention_kernel.ingress import NatsIngress, decode_turn, partition_of
from intention_kernel.kernel import CompiledAgent

from .support import STREAM, ensure_stream, private_nats, publish

PARTITIONS = 2


@pytest.fixture
async def nats_url(tmp_path: Path) -> AsyncIterator[str]:
    """A private NATS server's URL, with the ingress's stream made."""
    with private_nats(tmp_path) as server:
        url = f"nats://127.0.0.1:{server.port}"
        await ensure_stream(url)
        yield url


async def _requests(agent: CompiledAgent) -> list[Any]:
    assert agent.inbox is not None
    found: list[Any] = await agent.inbox.list_requests(limit=1000)
    return found


async def _until(agent: CompiledAgent, count: int, ingress: NatsIngress) -> None:
    """Wait until ``count`` messages were dealt with (submitted or refused)."""
    async with asyncio.timeout(30):
        while ingress.stats.submitted + ingress.stats.refused < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def _consumers_drained(url: str) -> None:
    """Every message delivered and acknowledged (an acknowledgement is sent without waiting
    for the server: it is counted within a few seconds, never lost from the count)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for index in range(PARTITIONS):
            deadline = asyncio.get_running_loop().time() + 5
            while True:
                info = await js.consumer_info(STREAM, f"ik-turns-{index}")
                if (info.num_pending, info.num_ack_pending) == (0, 0):
                    break
                assert asyncio.get_running_loop().time() < deadline, info
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


def _ingress(agent: CompiledAgent, url: str, submit: Any = None) -> NatsIngress:
    return NatsIngress(submit or agent.submit, url, partitions=PARTITIONS, ack_wait=2.0, retry=0.05)


async def _running(ingress: NatsIngress, count: int, agent: CompiledAgent) -> None:
    stopping = asyncio.Event()
    task = asyncio.create_task(ingress.run(stopping))
    try:
        await _until(agent, count, ingress)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)


async def test_published_turns_are_submitted_in_publish_order(
    agent: CompiledAgent, nats_url: str
) -> None:
    url = nats_url
    threads = ["alpha", "beta", "gamma", "delta"]
    assert {partition_of(t, PARTITIONS) for t in threads} == {0, 1}  # both partitions used
    turns = [(t, f"{t}-{i}", f"message {i}") for i in range(4) for t in threads]
    await publish(url, turns, PARTITIONS)
    ingress = _ingress(agent, url)
    await _running(ingress, len(turns), agent)
    assert ingress.stats.submitted == len(turns) and ingress.stats.refused == 0
    stored = await _requests(agent)
    assert len(stored) == len(turns)
    for thread in threads:
        mine = sorted((r for r in stored if r.thread_id == thread), key=lambda r: r.position)
        assert [r.turn_id for r in mine] == [f"{thread}-{i}" for i in range(4)]
        assert mine[0].text == "message 0"
        ingress_context = mine[0].host_context["ingress"]
        assert ingress_context["broker"] == "nats"
        assert ingress_context["subject"] == f"ik.turns.{partition_of(thread, PARTITIONS)}"
    await _consumers_drained(url)


async def test_a_redelivered_turn_is_the_same_request(agent: CompiledAgent, nats_url: str) -> None:
    url = nats_url
    # The same turn twice under two message ids (past the stream's duplicate window, say).
    turns = [("alpha", "t-1", "hello"), ("alpha", "t-1-again", "hello")]
    again = {"t-1-again": {"Nats-Msg-Id": "other-id", "Ik-Turn-Id": "t-1"}}
    await publish(url, turns, PARTITIONS, headers=again)
    ingress = _ingress(agent, url)
    await _running(ingress, 2, agent)
    assert ingress.stats.submitted == 2
    assert [r.turn_id for r in await _requests(agent)] == ["t-1"]
    await _consumers_drained(url)


async def test_a_refused_message_is_dropped_and_its_partition_goes_on(
    agent: CompiledAgent, nats_url: str
) -> None:
    url = nats_url
    partition = partition_of("alpha", PARTITIONS)
    nc = await nats.connect(url)
    js = nc.jetstream()
    subject = f"ik.turns.{partition}"
    await js.publish(subject, b'{"thread_id": "alpha", "text": "x"}')  # no turn id
    await js.publish(subject, b"{not json", headers={"Ik-Turn-Id": "bad-json"})
    await js.publish(subject, b'{"thread_id": ""}', headers={"Ik-Turn-Id": "bad-thread"})
    await js.publish(
        subject, b'{"thread_id": "alpha", "extra": 1}', headers={"Ik-Turn-Id": "bad-member"}
    )
    await js.publish(subject, b'{"thread_id": "alpha", "text": "a"}', headers={"Ik-Turn-Id": "t"})
    await js.publish(subject, b'{"thread_id": "alpha", "text": "b"}', headers={"Ik-Turn-Id": "t"})
    await js.publish(
        subject, b'{"thread_id": "alpha", "text": "after"}', headers={"Ik-Turn-Id": "ok"}
    )
    await nc.close()
    ingress = _ingress(agent, url)
    await _running(ingress, 7, agent)
    # Four malformed, one TURN_ID_REUSED ("t" with another text); the rest submitted.
    assert (ingress.stats.refused, ingress.stats.submitted) == (5, 2)
    assert [r.turn_id for r in await _requests(agent)] == ["t", "ok"]
    await _consumers_drained(url)


async def test_an_unavailable_store_is_retried_in_place(
    agent: CompiledAgent, nats_url: str
) -> None:
    failures = 3

    async def flaky(**request: Any) -> Any:
        nonlocal failures
        if request["turn_id"] == "t-0" and failures:
            failures -= 1
            raise DurabilityError(
                "the store is away", code=ErrorCode.STORE_UNAVAILABLE, retryable=True
            )
        return await agent.submit(**request)

    url = nats_url
    turns = [("alpha", f"t-{i}", f"m {i}") for i in range(3)]
    await publish(url, turns, PARTITIONS)
    ingress = _ingress(agent, url, flaky)
    await _running(ingress, 3, agent)
    assert (ingress.stats.retried, ingress.stats.submitted) == (3, 3)
    stored = sorted(await _requests(agent), key=lambda r: r.position)
    assert [r.turn_id for r in stored] == ["t-0", "t-1", "t-2"]  # t-0 held the rest back


@pytest.mark.parametrize(
    ("body", "turn_id", "code"),
    [
        (b'{"thread_id": "a"}', None, "INVALID_INPUT"),
        (b"[1]", "t", "INVALID_INPUT"),
        (b'{"thread_id": "a", "text": 1}', "t", "INVALID_INPUT"),
        (b'{"thread_id": "a", "host_context": []}', "t", "INVALID_INPUT"),
        (b'{"thread_id": "a", "text": NaN}', "t", "INVALID_JSON"),
        (b"x" * (256 * 1024 + 1), "t", "INVALID_INPUT"),
    ],
)
def test_a_message_that_is_not_a_turn_is_refused(
    body: bytes, turn_id: str | None, code: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        decode_turn(body, turn_id)
    assert refused.value.code == code


def test_partitions_spread_threads_and_never_move_one() -> None:
    counts = [0] * 4
    for i in range(4000):
        counts[partition_of(f"thread-{i}", 4)] += 1
    assert min(counts) > 800  # about 1,000 each
    assert partition_of("thread-7", 4) == partition_of("thread-7", 4)
    with pytest.raises(ValueError, match="positive"):
        partition_of("t", 0)


async def test_a_consumer_that_would_break_order_is_refused(
    agent: CompiledAgent, nats_url: str
) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig

    from intention_kernel.contracts.errors import ConfigurationError

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_consumer(
        STREAM,
        ConsumerConfig(
            durable_name="ik-turns-0",
            filter_subject="ik.turns.0",
            ack_policy=AckPolicy.EXPLICIT,
            max_ack_pending=100,
        ),
    )
    await nc.close()
    with pytest.raises(ConfigurationError) as refused:
        await _ingress(agent, nats_url).run(asyncio.Event())
    assert refused.value.context["consumer"] == "ik-turns-0"
