"""The travel desk example agent, on every durability adapter."""

from __future__ import annotations

from intention_kernel.contracts import DurabilityStore, EffectAuthority, ReceiptStatus
from intention_kernel.examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from intention_kernel.kernel import (
    CompiledAgent,
    Guidance,
    Kernel,
    TurnResult,
    provider_idempotency_key,
)
from intention_kernel.testing import MemoryDurability

HOST = {"actor": "ann@example.com", "tenant": "acme"}
DESK_FINGERPRINT = "ik1-46c638e1bf0da58e6a093b382aed6ed747e548a9b9519ee0215200cdd60ba2c9"
"""The desk's fingerprint when its capabilities were written in the long form
(``define_capability`` with ``SearchQuery``, ``QuoteRequest``, ``BookingRequest`` and
``DeskQuestion`` input models): stored conversations carry it, so it must not move."""


def _desk(durability: DurabilityStore) -> tuple[CompiledAgent, FakeHotelProvider]:
    provider = FakeHotelProvider()
    kernel = Kernel(durability=durability, model=scripted_model(), ports={"hotels": provider})
    return kernel.compile(build_agent()), provider


async def _say(agent: CompiledAgent, turn: str, text: str, thread: str = "t1") -> TurnResult:
    return await agent.run(thread_id=thread, turn_id=turn, text=text, host_context=HOST)


def test_the_short_form_keeps_the_long_forms_contract() -> None:
    agent = build_agent()
    compiled = Kernel(durability=MemoryDurability(), model=scripted_model()).compile(agent)
    assert compiled.fingerprint == DESK_FINGERPRINT
    titles = {c.id: c.input_schema.model_json_schema()["title"] for c in agent.capabilities}
    assert titles == {
        "hotels.search": "SearchQuery",
        "hotels.quote": "QuoteRequest",
        "hotels.book": "BookingRequest",
        "desk.faq": "DeskQuestion",
    }
    # What the interpreting model is told is not in the fingerprint: it is unchanged too.
    assert [(c.id, c.description) for c in agent.capabilities] == [
        ("hotels.search", "Search hotels in a city for a number of nights."),
        ("hotels.quote", "Quote the total price of one hotel from the search."),
        ("hotels.book", "Book the quoted stay."),
        ("desk.faq", "Answer a question about breakfast, check-in or cancellation."),
    ]
    [search, quote, *_] = agent.capabilities
    assert search.guidance == Guidance(when_to_use="the user looks for a place to stay")
    hotel = quote.input_schema.model_json_schema()["properties"]["hotel"]
    assert hotel["description"] == "hotel name or id from the search"


async def test_search_quote_confirm_book(durability: DurabilityStore) -> None:
    agent, provider = _desk(durability)
    found = await _say(agent, "1", "Find me a hotel in Lisbon for 2 nights")
    assert "Alfama Inn (120 EUR/night)" in found.response.text
    quoted = await _say(agent, "2", "How much is the Alfama Inn?")
    assert "240 EUR" in quoted.response.text
    held = await _say(agent, "3", "Book it")
    assert held.checkpoint.interaction is not None
    assert "quote_id: Q-alfama-inn-2n" in held.checkpoint.interaction.prompt
    assert provider.total_calls() == 0
    faq = await _say(agent, "4", "Is breakfast included?")
    assert faq.checkpoint.interaction == held.checkpoint.interaction
    booked = await _say(agent, "5", "yes")
    assert booked.response.text == "Booked: Alfama Inn, 2 nights, 240 EUR (booking BK-1001)."
    [key] = provider.calls
    assert provider.calls[key] == 1
    # The provider key carries the tenant and thread namespace, derived from the ledger key.
    [receipt] = [r for r in booked.checkpoint.receipts if r.status is ReceiptStatus.COMPLETED]
    authority = EffectAuthority(receipt.idempotency_key, receipt.id)
    assert key == provider_idempotency_key(authority, tenant="acme", thread="t1")


async def test_a_new_quote_after_the_proposal_means_asking_again(
    durability: DurabilityStore,
) -> None:
    agent, provider = _desk(durability)
    await _say(agent, "1", "Find me a hotel in Lisbon for 2 nights")
    await _say(agent, "2", "How much is the Alfama Inn?")
    await _say(agent, "3", "Book it")
    await _say(agent, "4", "How much is the Alfama Inn?")  # quote@1 replaced: revision 2
    changed = await _say(agent, "5", "yes")
    assert provider.total_calls() == 0
    assert "Something changed since you were asked" in changed.response.text
    booked = await _say(agent, "6", "yes")
    assert booked.response.text.startswith("Booked: Alfama Inn")
    assert provider.total_calls() == 1


async def test_a_lost_response_is_verified_then_reconciled(durability: DurabilityStore) -> None:
    agent, provider = _desk(durability)
    await _say(agent, "1", "Find a hotel in Porto for 1 night")
    await _say(agent, "2", "How much is Ribeira Rooms?")
    await _say(agent, "3", "Book it")
    provider.lose_next_response = True
    lost = await _say(agent, "4", "yes")
    assert "being verified" in lost.response.text
    [receipt] = await durability.list_receipts(thread_id="t1", status=ReceiptStatus.UNCERTAIN)
    key = provider_idempotency_key(
        EffectAuthority(receipt.idempotency_key, receipt.id), tenant="acme", thread="t1"
    )
    booking = provider.find(key)
    assert booking is not None
    await durability.reconcile(
        "t1", receipt.idempotency_key, "completed", value=booking, note="found", actor="ops"
    )
    await _say(agent, "5", "Book it")
    done = await _say(agent, "6", "yes")
    assert done.response.text == "Booked: Ribeira Rooms, 1 night, 95 EUR (booking BK-1001)."
    assert provider.total_calls() == 1
