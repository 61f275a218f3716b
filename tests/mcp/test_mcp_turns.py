"""MCP tools in real turns, against the notes server in its own process (stdio and HTTP).

A read answers in one turn; a write is held for consent to its exact arguments and runs once
after "yes"; the same turn delivered again calls nothing; a write whose answer is lost (the
server exits right after executing it, or never answers) is ``uncertain`` and never sent
again; the server's ``isError`` and a rejected request are failed steps the model is told
about, and may be asked again. The server counts its own executions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from intention_kernel.contracts import ReceiptStatus
from intention_kernel.kernel import StepStatus
from intention_kernel.mcp import IDEMPOTENCY_META_KEY

from .support import TRANSPORTS, accept, executions, http_server, notes_desk, notes_target


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_read_tool_answers_in_one_turn(transport: str, tmp_path: Path) -> None:
    async with notes_target(transport, tmp_path) as target, notes_desk(target, tmp_path) as desk:
        result = await desk.run("turn-1", "show note 7")
        [step] = result.response.steps
        assert step.status is StepStatus.COMPLETED and step.capability_id == "notes.lookup_note"
        assert "Note 7: buy milk." in result.response.text
        assert result.checkpoint.interaction is None
        [evidence] = result.response.evidence
        assert evidence.source == "mcp:notes/lookup_note"
        again = await desk.run("turn-1", "show note 7")
        assert again.replayed and again.response.text == result.response.text
    assert executions(tmp_path) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_write_waits_for_consent_to_its_arguments_and_runs_once(
    transport: str, tmp_path: Path
) -> None:
    async with notes_target(transport, tmp_path) as target, notes_desk(target, tmp_path) as desk:
        proposed = await desk.run("turn-1", "add a milk note")
        [held] = proposed.response.steps
        assert held.status == "awaiting_confirmation"
        interaction = proposed.checkpoint.interaction
        assert interaction is not None
        assert "title: milk" in interaction.prompt and "body: buy 2 litres" in interaction.prompt
        assert "MCP tool add_note of notes" in interaction.prompt
        assert "destructive" not in interaction.prompt  # the tool says it is not
        assert executions(tmp_path) == []

        done = await desk.run("turn-2", "", selection=accept(proposed))
        [step] = done.response.steps
        assert step.status is StepStatus.COMPLETED
        [executed] = executions(tmp_path)
        assert executed["arguments"] == {"title": "milk", "body": "buy 2 litres"}
        assert executed["key"].startswith("ik-")  # the ledger's provider key, in _meta
        [receipt] = done.checkpoint.receipts
        assert receipt.status is ReceiptStatus.COMPLETED
        assert isinstance(receipt.value, dict)
        assert receipt.value["structured"] == {"note_id": "n-4", "title": "milk"}

        again = await desk.run("turn-2", "", selection=accept(proposed))
        assert again.replayed and again.response.text == done.response.text
        assert len(executions(tmp_path)) == 1


async def test_a_destructive_tool_says_so_in_its_question(tmp_path: Path) -> None:
    async with notes_target("stdio", tmp_path) as target, notes_desk(target, tmp_path) as desk:
        proposed = await desk.run("turn-1", "delete note 3")
        interaction = proposed.checkpoint.interaction
        assert interaction is not None
        assert "MCP tool delete_note of notes" in interaction.prompt
        assert "destructive" in interaction.prompt and "note_id: 3" in interaction.prompt
        declined = await desk.run("turn-2", "", selection=accept(proposed, "no"))
        assert declined.checkpoint.interaction is None
    assert executions(tmp_path) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_lost_answer_is_uncertain_and_the_server_executes_it_once(
    transport: str, tmp_path: Path
) -> None:
    async with notes_target(transport, tmp_path) as target, notes_desk(target, tmp_path) as desk:
        proposed = await desk.run("turn-1", "add a milk note")
        (tmp_path / "drop-after").touch()  # the server exits right after executing the write
        lost = await desk.run("turn-2", "", selection=accept(proposed))
        [step] = lost.response.steps
        assert step.status is StepStatus.UNCERTAIN
        [receipt] = lost.checkpoint.receipts
        assert receipt.status is ReceiptStatus.UNCERTAIN
        stored = await desk.store.get_receipt("t1", receipt.idempotency_key)
        assert stored is not None and stored.status is ReceiptStatus.UNCERTAIN

        again = await desk.run("turn-2", "", selection=accept(proposed))
        assert again.replayed
        # Asked again in a new turn: "being verified", nothing is sent.
        asked = await desk.run("turn-3", "add a milk note")
        retried = await desk.run("turn-4", "", selection=accept(asked))
        assert [s.status for s in retried.response.steps] == [StepStatus.UNCERTAIN]
    [executed] = executions(tmp_path)
    assert executed["key"] == receipt_provider_key(executed)


def receipt_provider_key(executed: dict[str, str]) -> str:
    """The key the server was sent is the one it recorded: never empty, never another."""
    assert executed["key"].startswith("ik-") and len(executed["key"]) <= 64
    return executed["key"]


async def test_a_call_that_never_answers_is_uncertain(tmp_path: Path) -> None:
    async with (
        notes_target("stdio", tmp_path) as target,
        notes_desk(target, tmp_path, call_timeout=1.0) as desk,
    ):
        proposed = await desk.run("turn-1", "add a milk note")
        (tmp_path / "hold").touch()  # the server executes it and never answers
        lost = await desk.run("turn-2", "", selection=accept(proposed))
        assert [s.status for s in lost.response.steps] == [StepStatus.UNCERTAIN]
        assert "being verified" in lost.response.text
    assert len(executions(tmp_path)) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_error_result_is_a_failed_step_the_model_is_told(
    transport: str, tmp_path: Path
) -> None:
    async with notes_target(transport, tmp_path) as target, notes_desk(target, tmp_path) as desk:
        proposed = await desk.run("turn-1", "archive note 5")
        failed = await desk.run("turn-2", "", selection=accept(proposed))
        [step] = failed.response.steps
        assert step.status is StepStatus.FAILED
        assert step.reason is not None and "locked by another editor" in step.reason
        compose = desk.model.calls[-1]
        assert compose.task == "compose" and "locked by another editor" in str(compose.input)
        [receipt] = failed.checkpoint.receipts if failed.checkpoint.receipts else [None]
        stored = await desk.store.list_receipts(thread_id="t1")
        assert [r.status for r in stored] == [ReceiptStatus.FAILED]  # may be asked again
        assert receipt is None or receipt.status is ReceiptStatus.FAILED

        # A rejected request (a JSON-RPC error) is refused the same way, and nothing crashes.
        proposed = await desk.run("turn-3", "pin note 9")
        refused = await desk.run("turn-4", "", selection=accept(proposed))
        [step] = refused.response.steps
        assert step.status is StepStatus.FAILED
        assert step.reason is not None and "unknown note" in step.reason


async def test_a_write_that_cannot_be_sent_is_not_applied_and_may_run_again(
    tmp_path: Path,
) -> None:
    async with http_server(tmp_path) as server, notes_desk(server.url, tmp_path) as desk:
        proposed = await desk.run("turn-1", "add a milk note")
        await server.stop()  # the server is gone before "yes": the request cannot leave
        failed = await desk.run("turn-2", "", selection=accept(proposed))
        [step] = failed.response.steps
        assert step.status is StepStatus.FAILED
        assert step.reason is not None and "nothing was changed" in step.reason
        [receipt] = await desk.store.list_receipts(thread_id="t1")
        assert receipt.status is ReceiptStatus.FAILED
    assert executions(tmp_path) == []


async def test_an_oversized_result_fails_the_step_and_binary_content_is_an_artifact(
    tmp_path: Path,
) -> None:
    async with notes_target("stdio", tmp_path) as target, notes_desk(target, tmp_path) as desk:
        big = await desk.run("turn-1", "export everything")
        [step] = big.response.steps
        assert step.status is StepStatus.FAILED and step.retryable is False
        picture = await desk.run("turn-2", "picture of note 2")
        [step] = picture.response.steps
        assert step.status is StepStatus.COMPLETED
        content = step.artifacts["mcp_content"]
        assert isinstance(content, list) and len(content) == 1
        [image] = content
        assert isinstance(image, dict)
        assert image["type"] == "image" and image["mime_type"] == "image/png"
        assert "A picture of note 2." in picture.response.text


def test_the_meta_field_is_namespaced() -> None:
    assert IDEMPOTENCY_META_KEY == "io.intention-kernel/idempotency-key"
