"""The first thing to run: ``python -m intention_kernel.demo`` (or ``scripts/demo``).

A scripted conversation with the travel desk example agent on the embedded default store: a
question answered; a booking proposed and held for confirmation; an unrelated question answered
meanwhile; the confirmation accepted and the booking made once; the same turn delivered again
and replayed; a provider that applies a booking but loses the response (the outcome is
``uncertain``, never retried) and an operator who reconciles it. No network, no API key, no
server: the model is scripted and the provider is a fake that honours idempotency keys.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from .contracts import DurabilityStore, EffectAuthority, ReceiptStatus
from .contracts.ids import new_id
from .durability.sqlite import SQLiteDurability
from .examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from .kernel import CompiledAgent, Kernel, TurnResult, provider_idempotency_key

__all__ = ["main", "open_store"]

TENANT = "demo"
ACTOR = "ann@example.com"


async def open_store(directory: Path) -> tuple[DurabilityStore, str]:
    """The embedded default store (SQLite) in ``directory``; returns it and a description."""
    path = directory / "demo.db"
    return await SQLiteDurability.open(path), f"SQLite ({path})"


class Conversation:
    """Runs turns and prints them as a transcript."""

    def __init__(self, agent: CompiledAgent, provider: FakeHotelProvider, thread: str) -> None:
        self.agent = agent
        self.thread = thread
        self.provider = provider
        self.turns = 0
        self.last: TurnResult | None = None

    async def say(self, text: str, **kw: Any) -> TurnResult:
        self.turns += 1
        return await self.turn(f"turn-{self.turns}", text, **kw)

    async def turn(
        self,
        turn_id: str,
        text: str,
        selection: Mapping[str, JsonValue] | None = None,
        *,
        show: bool = True,
    ) -> TurnResult:
        if show:
            if selection is not None:
                _line("user", f'[presses "{selection["option"]}" on {selection["interaction_id"]}]')
            else:
                _line("user", text)
        result = await self.agent.run(
            thread_id=self.thread,
            turn_id=turn_id,
            text=text,
            selection=selection,
            host_context={"actor": ACTOR, "tenant": TENANT},
        )
        if show:
            _line("agent", result.response.text)
        self.last = result
        return result


def _line(who: str, text: str) -> None:
    body = textwrap.wrap(text.replace("\n", " "), 88) or [""]
    print(f"   {who:>6} > {body[0]}")
    for more in body[1:]:
        print(f"   {'':>6}   {more}")


def _note(text: str) -> None:
    print(f"   {'':>6}   [{text}]")


def _check(condition: bool, what: str) -> None:
    if not condition:
        print(f"\nDEMO CHECK FAILED: {what}", file=sys.stderr)
        raise SystemExit(1)


async def run(store: DurabilityStore, where: str) -> None:
    provider = FakeHotelProvider()
    kernel = Kernel(durability=store, model=scripted_model(), ports={"hotels": provider})
    agent = kernel.compile(build_agent())
    thread = new_id("traveller")  # a fresh conversation, also in a reused --dir
    talk = Conversation(agent, provider, thread)
    print("intention-kernel demo: a travel desk agent, one durable transaction per turn")
    print(f"store: {where}; model: scripted; provider: a fake that honours idempotency keys\n")

    print("1. A question is answered")
    await talk.say("Find me a hotel in Lisbon for 2 nights")
    await talk.say("How much is the Alfama Inn?")

    print("\n2. A booking is proposed and held for confirmation")
    proposed = await talk.say("Book it")
    interaction = proposed.checkpoint.interaction
    _check(interaction is not None, "the booking waits for a confirmation")
    assert interaction is not None
    _note(f"agenda: {[(a.capability_id, str(a.status)) for a in proposed.checkpoint.agenda]}")
    _note(f"provider calls so far: {provider.total_calls()}")
    _check(provider.total_calls() == 0, "nothing is booked before consent")

    print("\n3. An unrelated question is answered meanwhile")
    meanwhile = await talk.say("Is breakfast included?")
    _check(meanwhile.checkpoint.interaction == interaction, "the confirmation is still pending")
    _note(f"still pending: {interaction.id} ({interaction.kind})")

    print(f"\n4. The confirmation is accepted (a button in the UI, pressed by {ACTOR})")
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    talk.turns += 1
    accepting_turn = f"turn-{talk.turns}"
    booked = await talk.turn(accepting_turn, "", selection)
    decisions = booked.checkpoint.metadata.get("decisions")
    approval = decisions[-1] if isinstance(decisions, list) and decisions else {}
    assert isinstance(approval, dict)
    _note(
        f"approval: {approval.get('decision')} by {approval.get('actor')} at "
        f"{str(approval.get('answered_at'))[:19]}, digest {str(approval.get('digest'))[:16]}..."
    )
    _note(f"provider calls: {provider.total_calls()}")
    _check(provider.total_calls() == 1, "the booking reached the provider once")

    print("\n5. The same turn is delivered again (a client retry)")
    again = await talk.turn(accepting_turn, "", selection, show=False)
    _note(
        f"{accepting_turn} again: replayed={again.replayed}, same answer="
        f"{again.response == booked.response}, provider calls: {provider.total_calls()}"
    )
    _check(again.replayed and provider.total_calls() == 1, "a retried turn runs nothing")

    print("\n6. The provider books but the response is lost: the outcome is uncertain")
    await talk.say("Find a hotel in Porto for 1 night")
    await talk.say("How much is Ribeira Rooms?")
    await talk.say("Book it")
    provider.lose_next_response = True
    _note("the provider will apply the next booking, then drop the connection")
    lost = await talk.say("yes")
    _check("being verified" in lost.response.text, "the user is told it is being verified")
    [receipt] = await store.list_receipts(thread_id=thread, status=ReceiptStatus.UNCERTAIN)
    stored = await store.read_outbox(thread_id=thread, turn_id=lost.turn_id)
    audit = [e.event.type for e in stored if e.event.type == "effect.uncertain"]
    _check(audit == ["effect.uncertain"], "operators get an audit event")
    _note(f"receipt {receipt.idempotency_key}: {receipt.status}; outbox event {audit[0]}")
    key = provider_idempotency_key(
        EffectAuthority(receipt.idempotency_key, receipt.id), tenant=TENANT, thread=thread
    )
    await talk.say("Book it")
    retry = await talk.say("yes")
    _note(f"provider calls for this booking: {provider.calls[key]} (never retried while uncertain)")
    _check("being verified" in retry.response.text, "an uncertain write is not retried")
    _check(provider.calls[key] == 1, "no blind retry")

    print("\n7. An operator reconciles it from the provider's records")
    found = provider.find(key)
    _check(found is not None, "the provider has the booking")
    _line("ops", f"provider has {found} for key {key[:19]}...")
    await store.reconcile(
        thread,
        receipt.idempotency_key,
        "completed",
        value=found,
        note="booking found in the provider's dashboard",
        actor="ops@example.com",
    )
    _line("ops", "store.reconcile(..., 'completed') recorded with an audit entry")
    await talk.say("Book it")
    done = await talk.say("yes")
    _check("Booked: Ribeira Rooms" in done.response.text, "the reconciled booking is reported")
    per_key = dict(provider.calls)
    _note(f"provider calls per booking key: {sorted(per_key.values())}")
    _check(sorted(per_key.values()) == [1, 1], "every booking reached the provider exactly once")
    print(f"\nDone: {talk.turns} turns committed; every booking reached the provider exactly once.")


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m intention_kernel.demo", description=__doc__)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for demo.db (default: a temporary directory, removed afterwards)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="intention-kernel-demo-") as temp:
        directory = args.dir if args.dir is not None else Path(temp)
        directory.mkdir(parents=True, exist_ok=True)
        store, where = await open_store(directory)
        try:
            await run(store, where)
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
