"""``Share``: a partitioned relay's lease on its share of the threads (``contracts.outbox``).

Why its own object: the lease is renewed on its own clock (every ``claim_ttl / 3``, and before
every claim while the relay serves more or less than its own partition, so a returning relay
gets its share back within one batch), and given up on a graceful stop.
"""

from __future__ import annotations

import logging
import time

from ..contracts.errors import KernelError
from ..contracts.outbox import OutboxSource, Partition, Partitions

__all__ = ["Share"]

logger = logging.getLogger("intention_kernel.relay")


class Share:
    """One relay's partition lease and what it serves now."""

    def __init__(
        self, source: OutboxSource, relay_id: str, partition: Partition, lease: float
    ) -> None:
        self.source = source
        self.relay_id = relay_id
        self.partition = partition
        self.lease = lease
        self._served: Partitions | None = None
        self._renewed_at = 0.0

    async def current(self) -> Partitions:
        """What the relay serves now, asking the store when the lease is due or the relay
        serves another share than its own."""
        now = time.monotonic()
        own = self._served is not None and self._served.served == {self.partition.index}
        if self._served is None or not own or now - self._renewed_at >= self.lease / 3:
            served = await self.source.hold_partition(
                self.relay_id, self.partition, lease=self.lease
            )
            self._renewed_at = now
            if self._served is None or served.served != self._served.served:
                self._log(served)
            self._served = served
        return self._served

    async def give_up(self) -> None:
        """End the lease now, so the next relay serves this share at once (it would expire
        after ``lease`` seconds anyway)."""
        if self._served is None:
            return
        self._served = None
        try:
            await self.source.release_partition(self.relay_id, self.partition)
        except (KernelError, OSError) as exc:
            logger.warning("relay %s: partition lease not given up: %s", self.relay_id, exc)

    def _log(self, served: Partitions) -> None:
        if not served.served:
            logger.warning(
                "relay %s: partition %s is held by another live relay; waiting for its lease",
                self.relay_id,
                self.partition,
            )
        else:
            logger.info(
                "relay %s: serving partitions %s of %d",
                self.relay_id,
                ",".join(map(str, sorted(served.served))),
                served.count,
            )
