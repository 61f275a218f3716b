"""``max_agenda`` is the number of agenda items kept, the pending interaction's item included."""

from __future__ import annotations

from intention_kernel.contracts import DurabilityStore
from intention_kernel.kernel import KernelLimits

from .support import make_world, support_agent
from .writes import CHARGE, REFUND, Payments


async def test_the_agenda_keeps_exactly_max_agenda_items(durability: DurabilityStore) -> None:
    world = make_world(
        durability,
        agent=support_agent([CHARGE, REFUND]),
        ports={"payments": Payments()},
        limits=KernelLimits(max_agenda=5),
    )
    first = None
    for n in range(1, 8):
        text = f"charge {n}"
        world.say(
            text, [{"capability": "payments.charge", "input": {"order_id": str(n), "amount": n}}]
        )
        result = await world.run(f"turn-{n}", text)
        first = first or result.checkpoint.interaction
        assert len(result.checkpoint.agenda) == min(n, 5)
    assert first is not None
    agenda = result.checkpoint.agenda
    # The item the pending question waits on stays; the oldest of the others go first.
    assert agenda[0].id == first.agenda_item_id
    assert [a.input["order_id"] for a in agenda] == ["1", "4", "5", "6", "7"]
    assert result.checkpoint.interaction == first
