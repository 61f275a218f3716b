"""PostgreSQL: submits that claim, sent in groups, racing a worker's renewal of its claims.

A group statement takes its threads' advisory locks in thread order, and so does a renewal of
every claim a worker holds, whatever order it meets them in (here the reverse): neither waits
for the other in a cycle, and neither the submits nor the renewal fail. (With the renewal
locking in the order it met its claims, one run of this test had 6 deadlocks, each aborting a
statement after a second, which the statement's retry got past.)
"""

from __future__ import annotations

import asyncio

from intention_kernel.contracts.inbox import RequestState

from .conftest import open_store

THREADS = [f"t{n:02d}" for n in range(12)]


async def test_group_submits_and_a_renewal_locking_threads_in_another_order_both_go_through(
    dsn: str, schema: str
) -> None:
    submitter = await open_store(dsn, schema, max_size=4)
    renewer = await open_store(dsn, schema, max_size=2)  # another process's worker
    try:
        # The worker's claims, submitted (and so walked by its renewal) in reverse order.
        for thread_id in reversed(THREADS):
            await renewer.inbox.submit(thread_id, "u0", text="hello", fingerprint="fp")
        for _ in THREADS:
            assert await renewer.inbox.claim("w-other", ttl=60) is not None
        stop = asyncio.Event()
        renewals = 0

        async def renew() -> None:
            nonlocal renewals
            while not stop.is_set():
                renewed = await renewer.inbox.renew("w-other", ttl=60)
                assert len(renewed) == len(THREADS)
                renewals += 1

        renewing = asyncio.create_task(renew())
        try:
            for n in range(1, 16):
                submitted = await asyncio.gather(
                    *(
                        submitter.inbox.submit(
                            thread_id,
                            f"u{n}",
                            text="hello",
                            fingerprint="fp",
                            claimer="w1",
                            claim_ttl=30,
                        )
                        for thread_id in THREADS
                    )
                )
                # Behind the worker's claims: stored pending, in order, none claimed.
                assert all(r.state is RequestState.PENDING for r in submitted), submitted
        finally:
            stop.set()
            await renewing
        assert renewals > 0
        assert max(submitter.submit_groups) > 1, submitter.submit_groups
        for thread_id in THREADS:
            pending = await submitter.inbox.list_requests(
                state=RequestState.PENDING, thread_id=thread_id
            )
            assert [r.turn_id for r in pending] == [f"u{n}" for n in range(1, 16)]
    finally:
        await submitter.close()
        await renewer.close()
