"""The first thing to run: ``python -m intention_kernel.demo`` (or ``scripts/demo``).

A scripted conversation with the travel desk example agent on the embedded default store: a
question answered; a booking proposed and held for confirmation; an unrelated question answered
meanwhile; the confirmation accepted and the booking made once; the same turn delivered again
and replayed; a provider that applies a booking but loses the response (the outcome is
``uncertain``, never retried) and an operator who reconciles it; a worker process killed with
``kill -9`` in the middle of a turn, and the thread carrying on intact; last, a turn submitted
to the inbox whose worker process is killed after it made the booking, and a second worker
finishing the turn on its own (no caller retries, the booking is not made again). No network,
no API key, no server: the model is scripted and the provider is a fake that honours
idempotency keys.

``--model openai:gpt-4.1-mini`` (any model string of ``docs/models.md``, with its key set) runs
the first steps on that provider instead: the question, the booking held for consent, the
unrelated question, the acceptance and the replay, checked by their structure rather than by
their wording.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import JsonValue

from ._demo_parts import ACTOR, TENANT, Conversation, check, line, note, open_store, travel_desk
from ._demo_workers import finish_submitted_turn, kill_mid_turn, run_inbox_worker, run_worker
from .contracts import ConfigurationError, DurabilityStore, EffectAuthority, ReceiptStatus
from .contracts.ids import new_id
from .examples.travel_desk import scripted_model
from .kernel import provider_idempotency_key

__all__ = ["cli", "main", "open_store"]


async def run(store: DurabilityStore, where: str, directory: Path) -> None:
    agent, provider = travel_desk(store, scripted_model())
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
    check(interaction is not None, "the booking waits for a confirmation")
    assert interaction is not None
    note(f"agenda: {[(a.capability_id, str(a.status)) for a in proposed.checkpoint.agenda]}")
    note(f"provider calls so far: {provider.total_calls()}")
    check(provider.total_calls() == 0, "nothing is booked before consent")

    print("\n3. An unrelated question is answered meanwhile")
    meanwhile = await talk.say("Is breakfast included?")
    check(meanwhile.checkpoint.interaction == interaction, "the confirmation is still pending")
    note(f"still pending: {interaction.id} ({interaction.kind})")

    print(f"\n4. The confirmation is accepted (a button in the UI, pressed by {ACTOR})")
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    talk.turns += 1
    accepting_turn = f"turn-{talk.turns}"
    booked = await talk.turn(accepting_turn, "", selection)
    decisions = booked.checkpoint.metadata.get("decisions")
    approval = decisions[-1] if isinstance(decisions, list) and decisions else {}
    assert isinstance(approval, dict)
    note(
        f"approval: {approval.get('decision')} by {approval.get('actor')} at "
        f"{str(approval.get('answered_at'))[:19]}, digest {str(approval.get('digest'))[:16]}..."
    )
    note(f"provider calls: {provider.total_calls()}")
    check(provider.total_calls() == 1, "the booking reached the provider once")

    print("\n5. The same turn is delivered again (a client retry)")
    again = await talk.turn(accepting_turn, "", selection, show=False)
    note(
        f"{accepting_turn} again: replayed={again.replayed}, same answer="
        f"{again.response == booked.response}, provider calls: {provider.total_calls()}"
    )
    check(again.replayed and provider.total_calls() == 1, "a retried turn runs nothing")

    print("\n6. The provider books but the response is lost: the outcome is uncertain")
    await talk.say("Find a hotel in Porto for 1 night")
    await talk.say("How much is Ribeira Rooms?")
    await talk.say("Book it")
    provider.lose_next_response = True
    note("the provider will apply the next booking, then drop the connection")
    lost = await talk.say("yes")
    check("being verified" in lost.response.text, "the user is told it is being verified")
    [receipt] = await store.list_receipts(thread_id=thread, status=ReceiptStatus.UNCERTAIN)
    stored = await store.read_outbox(thread_id=thread, turn_id=lost.turn_id)
    audit = [e.event.type for e in stored if e.event.type == "effect.uncertain"]
    check(audit == ["effect.uncertain"], "operators get an audit event")
    note(f"receipt {receipt.idempotency_key}: {receipt.status}; outbox event {audit[0]}")
    key = provider_idempotency_key(
        EffectAuthority(receipt.idempotency_key, receipt.id), tenant=TENANT, thread=thread
    )
    await talk.say("Book it")
    retry = await talk.say("yes")
    note(f"provider calls for this booking: {provider.calls[key]} (never retried while uncertain)")
    check("being verified" in retry.response.text, "an uncertain write is not retried")
    check(provider.calls[key] == 1, "no blind retry")

    print("\n7. An operator reconciles it from the provider's records")
    found = provider.find(key)
    check(found is not None, "the provider has the booking")
    line("ops", f"provider has {found} for key {key[:19]}...")
    await store.reconcile(
        thread,
        receipt.idempotency_key,
        "completed",
        value=found,
        note="booking found in the provider's dashboard",
        actor="ops@example.com",
    )
    line("ops", "store.reconcile(..., 'completed') recorded with an audit entry")
    await talk.say("Book it")
    done = await talk.say("yes")
    check("Booked: Ribeira Rooms" in done.response.text, "the reconciled booking is reported")
    per_key = dict(provider.calls)
    note(f"provider calls per booking key: {sorted(per_key.values())}")
    check(sorted(per_key.values()) == [1, 1], "every booking reached the provider exactly once")

    print("\n8. A worker process is killed mid-turn (kill -9): nothing committed is lost")
    await kill_mid_turn(talk, store, directory)
    check(sorted(provider.calls.values()) == [1, 1], "no booking ran again")

    print("\n9. A submitted turn finishes on its own: its worker is killed, another finishes it")
    await finish_submitted_turn(talk, store, directory)
    print(f"\nDone: {talk.turns} turns committed; every booking reached the provider exactly once.")


async def run_with_model(store: DurabilityStore, where: str, model: str) -> None:
    """The consent and replay promises with a real model (its wording is its own)."""
    agent, provider = travel_desk(store, model)
    talk = Conversation(agent, provider, new_id("traveller"))
    print("intention-kernel demo: a travel desk agent on a real model")
    print(f"store: {where}; model: {model}; provider: a fake that honours idempotency keys\n")
    await talk.say("Find me a hotel in Lisbon for 2 nights")
    await talk.say("How much is the Alfama Inn?")
    proposed = await talk.say("Book it")
    interaction = proposed.checkpoint.interaction
    if interaction is None or interaction.kind != "confirmation":
        note("the model did not propose the booking this time; nothing was booked")
        check(provider.total_calls() == 0, "nothing is booked without consent")
        return
    check(provider.total_calls() == 0, "nothing is booked before consent")
    meanwhile = await talk.say("Is breakfast included?")
    check(meanwhile.checkpoint.interaction == interaction, "the confirmation is still pending")
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    talk.turns += 1
    accepting = f"turn-{talk.turns}"
    booked = await talk.turn(accepting, "", selection)
    check(provider.total_calls() == 1, "the booking reached the provider once")
    again = await talk.turn(accepting, "", selection, show=False)
    check(again.replayed and provider.total_calls() == 1, "a retried turn runs nothing")
    usage = booked.usage
    note(
        f"the accepting turn: {usage.model_calls} model call(s), {usage.input_tokens} input and"
        f" {usage.output_tokens} output tokens; its replay: {again.usage.model_calls} calls"
    )


def _next_command(kept: Path | None) -> str:
    """What to try after the demo: the operator command line on the store it left."""
    script = Path(sys.executable).parent / "intention-kernel"
    command = "intention-kernel"
    if script.exists():
        with contextlib.suppress(ValueError):
            command = str(script.relative_to(Path.cwd()))
        command = command if command != "intention-kernel" else str(script)
    extra = ""
    if importlib.util.find_spec("typer") is None:
        extra = " (after: pip install 'intention-kernel[cli]')"
    if kept is None:
        return (
            "next: scripts/demo --dir demo-store keeps the store; then"
            f" {command} threads --store demo-store/demo.db{extra}"
        )
    return f"next: {command} threads --store {kept / 'demo.db'}{extra}"


def _directory(path: Path) -> bool:
    """Make the demo's directory (private); ``True`` if it was created."""
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"--dir {path} is not a directory", context={"setting": "--dir"})
    if path.exists():
        return False
    path.mkdir(mode=0o700, parents=True)
    return True


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m intention_kernel.demo", description=__doc__)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for demo.db (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a model string such as openai:gpt-4.1-mini (its key in the usual variable);"
        " default: the scripted model, offline",
    )
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--inbox-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dir is not None and args.worker:
        parser.error("--worker takes the directory itself")
    if args.inbox_worker:
        await run_inbox_worker(Path(args.inbox_worker))
        return
    if args.worker:
        directory, thread, turn_id = args.worker
        await run_worker(Path(directory), thread, turn_id, "Is breakfast included?")
        return
    with tempfile.TemporaryDirectory(prefix="intention-kernel-demo-") as temp:
        directory = args.dir.absolute() if args.dir is not None else Path(temp)
        created = _directory(directory)
        try:
            store, where = await open_store(directory)
        except ConfigurationError:
            if created:
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        try:
            if args.model is None:
                await run(store, where, directory)
            else:
                await run_with_model(store, where, args.model)
        finally:
            await store.close()
    print(_next_command(None if args.dir is None else directory))


def cli(argv: Sequence[str] | None = None) -> int:
    """``main`` with a configuration mistake (no key, unknown model) as one line, exit 2."""
    try:
        asyncio.run(main(argv))
    except ConfigurationError as exc:
        print(f"error: [{exc.code}] {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
