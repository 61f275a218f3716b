"""``MemoryInspection``: the ``InspectionStorage`` role of the test-only memory store.

It mirrors the SQLite rules so tests of operator tooling can run in memory; the lease is the
thread's ``asyncio.Lock`` and has no deadline. Uncertain counts include ``prepared`` receipts of
threads whose lock nobody holds (interrupted, see ``_ledger.needs_operator``).
"""

from __future__ import annotations

from datetime import datetime

from ...contracts.errors import CheckpointCorruptError
from ...contracts.inspect import LeaseInfo, PruneReport, SchemaInfo, StoreStatus, ThreadSummary
from ...contracts.receipts import EffectReceipt, ReceiptStatus
from ...contracts.turns import DurableTurnResult
from .._documents import PRUNED_TURN, decode_model, is_pruned, unreadable, unreadable_receipt
from ..storage import ThreadQuery
from ._state import MemoryStore

__all__ = ["MemoryInspection"]

_LIVE = (ReceiptStatus.UNCERTAIN, ReceiptStatus.PREPARED)


class MemoryInspection:
    """``InspectionStorage`` over a ``MemoryStore``."""

    def __init__(self, state: MemoryStore) -> None:
        self.state = state

    def _receipts(self) -> list[EffectReceipt]:
        """Every receipt; a corrupt one as a placeholder (``uncertain``: it needs an operator)."""
        receipts = []
        for (thread_id, key), text in self.state.receipts.items():
            try:
                receipts.append(decode_model(EffectReceipt, text, what="receipt"))
            except CheckpointCorruptError as exc:
                receipts.append(
                    unreadable_receipt(
                        thread_id=thread_id, idempotency_key=key, reason=unreadable(exc)
                    )
                )
        return receipts

    def _head_fingerprint(self, thread_id: str) -> tuple[str | None, str | None]:
        """``(agent fingerprint, None)`` of the thread's head, or ``(None, why unreadable)``."""
        head = self.state.heads.get(thread_id)
        if head is None:
            return None, None
        turn = self.state.turns.get((thread_id, head[1]))
        if turn is None:
            return None, "unreadable: the thread's head points at a missing turn"
        try:
            result = decode_model(DurableTurnResult, turn.result_json, what="turn result")
        except CheckpointCorruptError as exc:
            return None, unreadable(exc)
        return result.checkpoint.agent_fingerprint, None

    def _thread_ids(self) -> set[str]:
        return set(self.state.heads) | {thread for thread, _ in self.state.receipts}

    async def list_threads(self, query: ThreadQuery) -> list[ThreadSummary]:
        prefix, after = query.prefix, query.after
        ids = sorted(
            t
            for t in self._thread_ids()
            if t > (after or "") and (not prefix or t.startswith(prefix))
        )
        receipts = self._receipts()
        rows: list[ThreadSummary] = []
        for thread_id in ids:
            if len(rows) == query.limit:
                break
            head = self.state.heads.get(thread_id)
            fingerprint, corrupt = self._head_fingerprint(thread_id)
            committed, pending = self.state.head_facts.get(thread_id, (None, None))
            commits = [at for (t, _), at in self.state.committed_at.items() if t == thread_id]
            summary = ThreadSummary(
                thread_id=thread_id,
                revision=0 if head is None else head[0],
                head_turn_id=None if head is None else head[1],
                fingerprint=fingerprint,
                turns=sum(
                    1
                    for (t, _), row in self.state.turns.items()
                    if t == thread_id and not is_pruned(row.result_json)
                ),
                last_commit_at=max(commits, default=None),
                uncertain_receipts=sum(
                    1
                    for r in receipts
                    if r.thread_id == thread_id and self.state.awaits_operator(r)
                ),
                corrupt=corrupt,
                pending_interaction=pending,
            )
            if query.keeps(summary, fingerprint=committed, has_head=head is not None):
                rows.append(summary)
        return rows

    async def status(self) -> StoreStatus:
        deliveries = [self.state.deliveries.get(p) for p in range(1, len(self.state.outbox) + 1)]
        live = [
            d for p, d in enumerate(deliveries, start=1) if self.state.outbox[p - 1] is not None
        ]
        return StoreStatus(
            schema_version=0,
            threads=len(self._thread_ids()),
            turns=sum(1 for row in self.state.turns.values() if not is_pruned(row.result_json)),
            uncertain_receipts=sum(1 for r in self._receipts() if self.state.awaits_operator(r)),
            undelivered_events=sum(1 for d in live if d is None or not d.done),
            dead_events=sum(1 for d in live if d is not None and d.dead),
            backend="memory",
            corrupt_threads=sum(
                1 for thread_id in self.state.heads if self._head_fingerprint(thread_id)[1]
            ),
        )

    async def schema_info(self) -> SchemaInfo:
        return SchemaInfo(version=0, supported=0)

    async def lease_info(self, thread_id: str) -> LeaseInfo:
        return LeaseInfo(
            thread_id=thread_id,
            held=self.state.lease_held(thread_id),
            epoch=self.state.epochs.get(thread_id),
            mechanism="asyncio.Lock in this process",
        )

    async def prune_records(self, older_than: datetime, dry_run: bool) -> PruneReport:
        report = PruneReport(cutoff=older_than, dry_run=dry_run)
        receipts = self._receipts()
        live = {(r.thread_id, r.turn_id) for r in receipts if r.status in _LIVE}
        live |= {(thread, head[1]) for thread, head in self.state.heads.items()}
        # An unreadable receipt may be live: every turn of its thread is kept.
        unknown = {r.thread_id for r in receipts if (r.error or "").startswith("unreadable")}
        for key, at in sorted(self.state.committed_at.items(), key=lambda item: item[1]):
            if at >= older_than or is_pruned(self.state.turns[key].result_json):
                continue
            if key in live or key[0] in unknown:
                report.kept_turns += 1
                continue
            report.turns.append(key)
        for position, state in sorted(self.state.deliveries.items()):
            text = self.state.outbox[position - 1]
            if text is None or state.dead or state.delivered_at is None:
                continue
            if state.delivered_at < older_than:
                report.events.append(position)
        if not dry_run:
            for key in report.turns:
                self.state.turns[key].result_json = PRUNED_TURN
            for position in report.events:
                self.state.outbox[position - 1] = None
                del self.state.deliveries[position]
        return report
