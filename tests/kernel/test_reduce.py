"""Pure reduction rules: bounded receipts and agenda, versioned facts with lineage."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from intention_kernel.contracts import AgendaItem, EffectReceipt, Interaction, ReceiptStatus
from intention_kernel.kernel._pipeline.reduce import bound_agenda, bound_receipts

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _receipt(n: int, status: ReceiptStatus) -> EffectReceipt:
    return EffectReceipt(
        id=f"r{n}",
        thread_id="t",
        idempotency_key=f"k{n}",
        capability_id="c",
        turn_id="u",
        status=status,
        attempts=1,
        created_at=NOW,
        updated_at=NOW,
    )


@given(st.lists(st.sampled_from(list(ReceiptStatus)), max_size=60), st.integers(1, 10))
def test_receipts_keep_every_uncertain_one_and_the_newest_others(
    statuses: list[ReceiptStatus], limit: int
) -> None:
    receipts = [_receipt(n, s) for n, s in enumerate(statuses)]
    kept = bound_receipts(receipts[: len(receipts) // 2], receipts[len(receipts) // 2 :], limit)
    uncertain = [r for r in receipts if r.status is ReceiptStatus.UNCERTAIN]
    others = [r for r in receipts if r.status is not ReceiptStatus.UNCERTAIN]
    assert [r for r in kept if r.status is ReceiptStatus.UNCERTAIN] == uncertain
    assert [r for r in kept if r.status is not ReceiptStatus.UNCERTAIN] == others[-limit:]


def test_agenda_is_bounded_but_keeps_the_item_the_interaction_waits_on() -> None:
    items = [
        AgendaItem(id=f"a{n}", capability_id="c", status="waiting_for_fact", created_turn_id="u")
        for n in range(30)
    ]
    interaction = Interaction(
        id="i", kind="confirmation", prompt="ok?", agenda_item_id="a0", turn_id="u"
    )
    kept = bound_agenda(items, interaction, 5)
    assert [a.id for a in kept] == ["a0", "a26", "a27", "a28", "a29"]
    assert bound_agenda(items[:3], None, 5) == items[:3]
    assert [a.id for a in bound_agenda(items, None, 5)] == [f"a{n}" for n in range(25, 30)]
    assert len(bound_agenda(items, interaction, 20)) == 20
    assert [a.id for a in bound_agenda(items, interaction, 1)] == ["a0"]
    newest = interaction.model_copy(update={"agenda_item_id": "a28"})
    assert [a.id for a in bound_agenda(items, newest, 3)] == ["a27", "a28", "a29"]


@given(st.integers(0, 30), st.integers(1, 25), st.one_of(st.none(), st.integers(0, 29)))
def test_agenda_never_exceeds_its_limit(size: int, limit: int, pinned: int | None) -> None:
    items = [
        AgendaItem(id=f"a{n}", capability_id="c", status="waiting_for_fact", created_turn_id="u")
        for n in range(size)
    ]
    interaction = (
        None
        if pinned is None
        else Interaction(
            id="i", kind="confirmation", prompt="ok?", agenda_item_id=f"a{pinned}", turn_id="u"
        )
    )
    kept = bound_agenda(items, interaction, limit)
    assert len(kept) == min(size, limit)
    assert kept == [a for a in items if a in kept]  # order kept
    if pinned is not None and pinned < size:
        assert f"a{pinned}" in {a.id for a in kept}
