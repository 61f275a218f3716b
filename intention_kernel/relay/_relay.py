"""``OutboxRelay``: deliver committed outbox events to a sink, at least once, in order per thread.

One relay loop: claim a batch from the ``OutboxSource`` (a short transaction), publish it in
rounds of at most one event per thread (so a sink may send a round concurrently without
reordering a thread; a sink that ``keeps_order`` gets the whole batch in one round), mark what
the sink acknowledged, record failures, release the rest.
Several relays (ids) can share one store; the source's claim rule keeps them apart.

Failure handling, by sink outcome:

* ``retry``: the event's attempt is counted with backoff; its thread waits, others flow; after
  ``max_attempts`` it is dead-lettered with the last error.
* ``reject``: dead-lettered at once with the reason.

A dead event keeps its thread waiting (order per thread is promised) until ``requeue``.
* ``unavailable``: the sink is down or did not answer in time (a hung broker looks connected);
  the batch is released without counting attempts and the relay pauses with backoff (logged,
  counted in ``stats``), so an outage never dead-letters the backlog and never turns into a
  crash loop.

A claim that answers too late to leave time for one publish within the lease gives its batch
back at once (``BatchReport.slow_claim``, ``stats.slow_claims``, a warning saying why) and the
relay backs off, instead of claiming the same batch again and again without progress.

With a ``partition`` (``Partition(i, n)``) the relay holds a lease on its share of the threads
and claims only those (``contracts.outbox`` has the rule): N relays split a store's threads, and
when one stops or dies its share goes to the next live one within one ``claim_ttl``. The lease
is renewed every ``claim_ttl / 3`` seconds (before every claim while it serves more or less than
its own share); a graceful stop gives it up at once.

``stop()`` is graceful: the current round finishes, its acknowledgements are recorded and the
rest of the batch is released. Cancelling the task instead behaves like a crash: nothing more is
written and the claims expire after ``claim_ttl`` (events are then re-delivered with the same id).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from .._crashpoints import RelayCrashPoint, crash_point
from ..contracts.errors import ConfigurationError, KernelError
from ..contracts.events import KernelEvent, StoredEvent
from ..contracts.ids import new_id
from ..contracts.outbox import (
    OutboxNotifier,
    OutboxSource,
    OutboxStats,
    Partition,
    delivery_order,
)
from ..contracts.sinks import EventSink, OutcomeKind, PublishOutcome
from ..telemetry import RelayTelemetry
from ._backoff import Backoff
from ._share import Share
from ._stats import BatchReport, RelayStats

__all__ = ["BatchReport", "OutboxRelay", "RelayStats"]

logger = logging.getLogger("intention_kernel.relay")

Wakeup = Callable[[float], Awaitable[None]]


class OutboxRelay:
    """Delivers a store's outbox to one sink. See the module docstring for the guarantees."""

    def __init__(
        self,
        source: OutboxSource,
        sink: EventSink,
        *,
        relay_id: str | None = None,
        batch_size: int = 100,
        claim_ttl: float = 30.0,
        max_attempts: int = 10,
        backoff: Backoff | None = None,
        poll_interval: float = 1.0,
        publish_timeout: float | None = None,
        wakeup: Wakeup | None = None,
        meter_provider: object | None = None,
        partition: Partition | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 10_000:
            raise ConfigurationError("batch_size must be an integer in [1, 10000]")
        if claim_ttl <= 0 or poll_interval <= 0:
            raise ConfigurationError("claim_ttl and poll_interval must be positive seconds")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError("max_attempts must be a positive integer")
        publish_timeout = claim_ttl / 3 if publish_timeout is None else publish_timeout
        if not 0 < publish_timeout < claim_ttl * 0.9:
            raise ConfigurationError("publish_timeout must be positive and below 0.9 * claim_ttl")
        if partition is not None and not isinstance(partition, Partition):
            raise ConfigurationError("partition must be a Partition, e.g. Partition.parse('0/3')")
        self.source = source
        self.sink = sink
        self.relay_id = relay_id or new_id("relay")
        self.batch_size = batch_size
        self.claim_ttl = claim_ttl
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.poll_interval = poll_interval
        self.publish_timeout = publish_timeout
        if wakeup is None and isinstance(source, OutboxNotifier):
            wakeup = source.wait_for_events
        self._wakeup = wakeup
        self.partition = partition
        self._keeps_order = getattr(sink, "keeps_order", False) is True
        self.stats = RelayStats()
        self._share = (
            None if partition is None else Share(source, self.relay_id, partition, claim_ttl)
        )
        # ik.relay.delivery.lag and ik.relay.dead_letters; the global meter provider by default.
        self.telemetry = RelayTelemetry(self.relay_id, meter_provider=meter_provider)
        self._stopping = asyncio.Event()
        self._woken = asyncio.Event()

    # ---------------------------------------------------------------- control

    def stop(self) -> None:
        """Ask ``run()`` to finish the current round, release the rest and return. A stopped
        relay stays stopped; create a new one to start again."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wake(self) -> None:
        """Poll now instead of at the next interval (e.g. right after a commit)."""
        self._woken.set()

    async def run(self) -> None:
        """Deliver until ``stop()``; store errors and sink outages back off, never crash."""
        try:
            await self._deliver()
        finally:
            if self._stopping.is_set():
                await self.give_up_partition()

    async def give_up_partition(self) -> None:
        """End the partition lease now (``run()`` does on a graceful stop; call it after
        ``run_once()`` calls): the next relay serves this one's share at once."""
        if self._share is not None:
            await self._share.give_up()
            self.stats.partitions = ()

    async def _deliver(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                report = await self.run_once()
            except (KernelError, OSError) as exc:
                failures += 1
                self.stats.source_errors += 1
                self._note_failure(f"outbox source failed: {exc}")
                delay = self.backoff.delay(failures)
                logger.warning("relay %s: store error, retrying in %.1fs", self.relay_id, delay)
                await self._sleep(delay)
                continue
            if report.sink_unavailable or report.slow_claim:
                failures += 1
                delay = self.backoff.delay(failures)
                logger.warning(
                    "relay %s: %s (%s), pausing %.1fs",
                    self.relay_id,
                    "sink unavailable" if report.sink_unavailable else "claim too slow",
                    self.stats.last_error,
                    delay,
                )
                await self._sleep(delay)
                continue
            failures = 0
            if report.claimed < self.batch_size:
                await self._idle()

    async def run_once(self) -> BatchReport:
        """Claim one batch and deliver it; returns what happened."""
        report = BatchReport()
        if self._stopping.is_set():
            return report
        # The store starts the lease after this moment, so a deadline from here is safe; the
        # margin covers the last mark and clock drift between relay and store.
        partitions = None
        if self._share is not None:
            partitions = await self._share.current()
            self.stats.partitions = tuple(sorted(partitions.served))
        started = time.monotonic()
        deadline = started + self.claim_ttl * 0.9 - self.publish_timeout
        if partitions is None:  # a source written before partitions keeps working
            batch = await self.source.claim(
                self.relay_id, limit=self.batch_size, lease=self.claim_ttl
            )
        else:
            batch = await self.source.claim(
                self.relay_id, limit=self.batch_size, lease=self.claim_ttl, partitions=partitions
            )
        report.claimed = len(batch)
        if not batch:
            return report
        crash_point(RelayCrashPoint.RELAY_CLAIMED, relay_id=self.relay_id, claimed=len(batch))
        self.stats.batches += 1
        if time.monotonic() >= deadline:
            return await self._give_back_slow_claim(batch, time.monotonic() - started, report)
        queues: dict[str, deque[StoredEvent]] = {}
        for stored in delivery_order(batch):  # whatever order the source returned
            queues.setdefault(stored.event.thread_id, deque()).append(stored)
        while queues and not self._stopping.is_set() and not report.sink_unavailable:
            if time.monotonic() >= deadline:  # the claim would expire mid-round: give it back
                break
            await self._round(queues, report)
        leftover = [stored.position for queue in queues.values() for stored in queue]
        if leftover:
            report.released += await self.source.release(self.relay_id, leftover)
            self.stats.released += len(leftover)
        if not report.sink_unavailable:
            self.stats.consecutive_failures = 0
        return report

    async def _give_back_slow_claim(
        self, batch: list[StoredEvent], took: float, report: BatchReport
    ) -> BatchReport:
        """The claim itself used the time the lease leaves for publishing: no round can start
        safely, so the batch goes back, and the relay says so and backs off (a store that
        claims this slowly would otherwise be asked again at once, forever)."""
        reason = (
            f"claim of {len(batch)} events took {took:.1f}s, leaving no time to publish"
            f" within claim_ttl={self.claim_ttl:g}s (publish_timeout={self.publish_timeout:g}s):"
            " batch released unpublished; raise claim_ttl or lower batch_size"
        )
        report.released += await self.source.release(
            self.relay_id, [stored.position for stored in batch]
        )
        report.slow_claim = True
        self.stats.released += len(batch)
        self.stats.slow_claims += 1
        self._note_failure(reason)
        logger.warning("relay %s: %s", self.relay_id, reason)
        return report

    # ---------------------------------------------------------------- passthroughs

    async def prune(self, older_than: float) -> int:
        """Delete events delivered more than ``older_than`` seconds ago (retention)."""
        return await self.source.prune(older_than)

    async def requeue(
        self, positions: Sequence[int] | None = None, *, thread_id: str | None = None
    ) -> int:
        return await self.source.requeue(positions, thread_id=thread_id)

    async def dead_letters(self, *, limit: int = 100) -> list[StoredEvent]:
        return await self.source.dead_letters(limit=limit)

    async def outbox_stats(self) -> OutboxStats:
        return await self.source.outbox_stats()

    # ---------------------------------------------------------------- one round

    async def _round(self, queues: dict[str, deque[StoredEvent]], report: BatchReport) -> None:
        """Publish the head of every thread (the whole batch to a sink that ``keeps_order``),
        acknowledge what went out, and take a failed thread's events out of the batch."""
        if self._keeps_order:
            sent_now = delivery_order(e for queue in queues.values() for e in queue)
        else:
            sent_now = [queue[0] for queue in queues.values()]
        outcomes = await self._publish([stored.event for stored in sent_now])
        acked: list[StoredEvent] = []
        stopped: set[str] = set()  # threads whose earlier event in this call did not go out
        for stored, outcome in zip(sent_now, outcomes, strict=True):
            thread_id = stored.event.thread_id
            if thread_id in stopped:
                continue  # after a failure of its thread: not acknowledged, whatever it says
            queue = queues[thread_id]
            if outcome.kind is OutcomeKind.OK:
                queue.popleft()
                acked.append(stored)
                if not queue:
                    del queues[thread_id]
                continue
            stopped.add(thread_id)
            if outcome.kind is OutcomeKind.UNAVAILABLE:
                report.sink_unavailable = True
                self.stats.sink_outages += 1
                self._note_failure(outcome.describe())
                continue  # stays queued: released with the rest of the batch
            queue.popleft()
            await self._record_failure(stored, outcome, report)
            rest = [later.position for later in queue]  # held back behind the failed event
            del queues[thread_id]
            if rest:
                report.released += await self.source.release(self.relay_id, rest)
                self.stats.released += len(rest)
        if acked:
            crash_point(RelayCrashPoint.RELAY_ACKED, relay_id=self.relay_id, acked=len(acked))
            await self.source.mark_delivered(self.relay_id, [e.position for e in acked])
            crash_point(RelayCrashPoint.RELAY_MARKED, relay_id=self.relay_id, acked=len(acked))
            report.delivered += len(acked)
            self.stats.delivered += len(acked)
            self.telemetry.delivered([e.event for e in acked])
            self.stats.last_delivery_at = datetime.now(UTC)

    async def _publish(self, events: list[KernelEvent]) -> list[PublishOutcome]:
        """Ask the sink; a timeout, a crash or a wrong answer becomes ``unavailable``."""
        try:
            async with asyncio.timeout(self.publish_timeout):
                outcomes = await self.sink.publish(events)
        except TimeoutError:
            reason = f"sink did not answer within {self.publish_timeout:g}s"
            return [PublishOutcome.unavailable(reason)] * len(events)
        except Exception as exc:  # a sink must not raise; never let one crash the relay
            reason = f"sink raised {type(exc).__name__}"
            logger.exception("relay %s: %s", self.relay_id, reason)
            return [PublishOutcome.unavailable(reason)] * len(events)
        if len(outcomes) != len(events):
            reason = f"sink returned {len(outcomes)} outcomes for {len(events)} events"
            return [PublishOutcome.unavailable(reason)] * len(events)
        return outcomes

    async def _record_failure(
        self, stored: StoredEvent, outcome: PublishOutcome, report: BatchReport
    ) -> None:
        permanent = outcome.kind is OutcomeKind.REJECT
        error = outcome.describe()
        updated = await self.source.record_failure(
            self.relay_id,
            stored.position,
            error=error,
            retry_in=self.backoff.delay(stored.attempts + 1),
            max_attempts=self.max_attempts,
            permanent=permanent,
        )
        self._note_failure(error)
        if updated is None:
            logger.warning("relay %s: claim on %s expired", self.relay_id, stored.event.id)
        elif updated.dead:
            self.telemetry.dead_lettered(str(outcome.kind))
            report.dead_lettered += 1
            self.stats.dead_lettered += 1
            logger.error(
                "relay %s: event %s dead-lettered after %d attempts: %s",
                self.relay_id,
                stored.event.id,
                updated.attempts,
                error,
            )
        else:
            report.retried += 1
            self.stats.retried += 1
            logger.info(
                "relay %s: event %s failed (attempt %d): %s",
                self.relay_id,
                stored.event.id,
                updated.attempts,
                error,
            )

    # ---------------------------------------------------------------- waiting

    def _note_failure(self, error: str) -> None:
        self.stats.consecutive_failures += 1
        self.stats.last_error = error
        self.stats.recent = [*self.stats.recent[-9:], error]

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but return at once on ``stop()``."""
        try:
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        except TimeoutError:
            pass

    async def _idle(self) -> None:
        """Wait up to ``poll_interval`` for a wake-up, a store notification or ``stop()``."""
        waiters: list[asyncio.Future[object]] = [
            asyncio.ensure_future(self._stopping.wait()),
            asyncio.ensure_future(self._woken.wait()),
        ]
        if self._wakeup is not None:
            waiters.append(asyncio.ensure_future(self._wakeup(self.poll_interval)))
        try:
            await asyncio.wait(
                waiters, timeout=self.poll_interval, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            self._woken.clear()
