"""The first thing to run: ``python -m intention_kernel.demo`` (or ``scripts/demo``).

A scripted conversation with the travel desk example agent on the embedded default store: a
question answered; a booking proposed and held for confirmation; an unrelated question answered
meanwhile; the confirmation accepted and the booking made once; the same turn delivered again
and replayed; a provider that applies a booking but loses the response (the outcome is
``uncertain``, never retried) and an operator who reconciles it; a worker process killed with
``kill -9`` in the middle of a turn, and the thread carrying on intact. No network, no API key,
no server: the model is scripted and the provider is a fake that honours idempotency keys.

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
import os
import signal
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from .contracts import ConfigurationError, DurabilityStore, EffectAuthority, ReceiptStatus
from .contracts.gateway import ModelGateway, ModelRequest, ModelResponse
from .contracts.ids import new_id
from .durability.sqlite import SQLiteDurability
from .examples.travel_desk import FakeHotelProvider, build_agent, scripted_model
from .kernel import CompiledAgent, Kernel, TurnResult, provider_idempotency_key

__all__ = ["cli", "main", "open_store"]

TENANT = "demo"
ACTOR = "ann@example.com"


MID_TURN = "mid-turn"
"""What the worker process prints once its turn is running (the parent then kills it)."""


async def open_store(directory: Path) -> tuple[DurabilityStore, str]:
    """The embedded default store (SQLite) in ``directory``; returns it and a description."""
    path = directory / "demo.db"
    return await SQLiteDurability.open(path), f"SQLite ({path})"


def _travel_desk(store: DurabilityStore, model: ModelGateway | str) -> tuple[CompiledAgent, Any]:
    provider = FakeHotelProvider()
    kernel = Kernel(durability=store, model=model, ports={"hotels": provider})
    return kernel.compile(build_agent()), provider


class _Stalling:
    """The worker's model: says it is in the middle of the turn, then never answers."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        print(MID_TURN, flush=True)
        await asyncio.sleep(3600)
        raise AssertionError("the demo kills this process first")


async def _worker(directory: Path, thread: str, turn_id: str, text: str) -> None:
    """Another process on the same store, running one turn until it is killed."""
    store, _ = await open_store(directory)
    agent, _ = _travel_desk(store, _Stalling())
    await agent.run(
        thread_id=thread,
        turn_id=turn_id,
        text=text,
        host_context={"actor": ACTOR, "tenant": TENANT},
    )


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


async def _kill_mid_turn(talk: Conversation, store: DurabilityStore, directory: Path) -> None:
    """Promise 3: a worker process killed with SIGKILL mid-turn loses nothing committed, leaves
    nothing half-written, and the same turn delivered again runs once."""
    thread = talk.thread
    before = await store.load_checkpoint(thread)
    committed = len(await store.list_turns(thread, limit=1000))
    _check(before is not None, "the thread has committed turns")
    assert before is not None
    talk.turns += 1
    turn_id, text = f"turn-{talk.turns}", "Is breakfast included?"
    _line("user", f"{text}  (this turn runs in a worker process)")
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "intention_kernel.demo", "--worker", str(directory)),
        *(thread, turn_id),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        started = await asyncio.wait_for(worker.stdout.readline(), 30)
        _check(started.decode().strip() == MID_TURN, "the worker started the turn")
        os.kill(worker.pid, signal.SIGKILL)  # kill -9: no cleanup code runs in the worker
        await asyncio.wait_for(worker.wait(), 30)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    _note(f"worker pid {worker.pid} killed with SIGKILL while its turn was running")
    _note("(it was inside the model call, holding the thread's lease)")
    after = await store.load_checkpoint(thread)
    kept = len(await store.list_turns(thread, limit=1000))
    _check(
        after is not None and after.revision == before.revision and kept == committed,
        "the killed turn left nothing half-written",
    )
    _note(f"the thread is as it was: revision {before.revision}, {kept} turns committed")
    again = await talk.turn(turn_id, text, show=False)
    _note(f"{turn_id} delivered again, here (the kernel released the dead worker's lease):")
    _line("agent", again.response.text)
    _check(again.checkpoint.revision == before.revision + 1, "the turn ran again, once")
    _note(f"committed once, revision {before.revision + 1}: nothing committed was lost")


async def run(store: DurabilityStore, where: str, directory: Path) -> None:
    agent, provider = _travel_desk(store, scripted_model())
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

    print("\n8. A worker process is killed mid-turn (kill -9): nothing committed is lost")
    await _kill_mid_turn(talk, store, directory)
    _check(sorted(provider.calls.values()) == [1, 1], "no booking ran again")
    print(f"\nDone: {talk.turns} turns committed; every booking reached the provider exactly once.")


async def run_with_model(store: DurabilityStore, where: str, model: str) -> None:
    """The consent and replay promises with a real model (its wording is its own)."""
    agent, provider = _travel_desk(store, model)
    talk = Conversation(agent, provider, new_id("traveller"))
    print("intention-kernel demo: a travel desk agent on a real model")
    print(f"store: {where}; model: {model}; provider: a fake that honours idempotency keys\n")
    await talk.say("Find me a hotel in Lisbon for 2 nights")
    await talk.say("How much is the Alfama Inn?")
    proposed = await talk.say("Book it")
    interaction = proposed.checkpoint.interaction
    if interaction is None or interaction.kind != "confirmation":
        _note("the model did not propose the booking this time; nothing was booked")
        _check(provider.total_calls() == 0, "nothing is booked without consent")
        return
    _check(provider.total_calls() == 0, "nothing is booked before consent")
    meanwhile = await talk.say("Is breakfast included?")
    _check(meanwhile.checkpoint.interaction == interaction, "the confirmation is still pending")
    selection: dict[str, JsonValue] = {"interaction_id": interaction.id, "option": "yes"}
    talk.turns += 1
    accepting = f"turn-{talk.turns}"
    booked = await talk.turn(accepting, "", selection)
    _check(provider.total_calls() == 1, "the booking reached the provider once")
    again = await talk.turn(accepting, "", selection, show=False)
    _check(again.replayed and provider.total_calls() == 1, "a retried turn runs nothing")
    usage = booked.usage
    _note(
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
    args = parser.parse_args(argv)
    if args.dir is not None and args.worker:
        parser.error("--worker takes the directory itself")
    if args.worker:
        directory, thread, turn_id = args.worker
        await _worker(Path(directory), thread, turn_id, "Is breakfast included?")
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
