"""Named states parse what earlier versions stored and write it back byte for byte."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from intention_kernel import (
    AgendaStatus,
    ConfirmationMode,
    EffectKind,
    HoldReason,
    KernelCheckpoint,
    Response,
    StepStatus,
)

# As written before the states had names (compact JSON, as the stores keep it), and a step
# parked for an external completion as it is written now.
STORED_CHECKPOINT = (
    '{"schema_version":1,"revision":3,"agent_fingerprint":"ik1-abc","messages":[],'
    '"omitted_messages":0,"facts":[],"agenda":['
    '{"id":"u:step-1","capability_id":"payments.charge","capability_version":"1.0.0",'
    '"input":{"order_id":"42"},"status":"awaiting_confirmation","reason":"needs your '
    'confirmation","created_turn_id":"u","data":{"missing":[]}},'
    '{"id":"u:step-2","capability_id":"payments.refund","capability_version":"1.0.0",'
    '"input":{},"status":"needs_confirmation","reason":null,"created_turn_id":"u","data":{}},'
    '{"id":"u:step-3","capability_id":"orders.ask","capability_version":"1.0.0","input":{},'
    '"status":"needs_input","reason":null,"created_turn_id":"u","data":{}},'
    '{"id":"u:step-4","capability_id":"orders.track","capability_version":"1.0.0","input":{},'
    '"status":"waiting_for_fact","reason":"needs order@1 first","created_turn_id":"u",'
    '"data":{"missing":["order@1"],"seen":{}}},'
    '{"id":"u:step-5","capability_id":"payments.settle","capability_version":"1.0.0",'
    '"input":{},"status":"awaiting_external","reason":null,"created_turn_id":"u",'
    '"data":{"missing":[],"external_key":"bank-1","payload":{},"approval":null,'
    '"expires_at":"2026-06-01T10:00:00+00:00"}}'
    '],"interaction":null,"receipts":[],"metadata":{}}'
)


def _stored_response() -> str:
    steps = [
        {"step_id": f"step-{n}", "capability_id": "c", "status": status, "reason": None}
        for n, status in enumerate(s.value for s in StepStatus)
    ]
    return json.dumps(
        {
            "text": "ok",
            "kind": "answer",
            "citations": [],
            "evidence": [],
            "steps": steps,
            "interaction": None,
        },
        separators=(",", ":"),
    )


def test_a_stored_checkpoint_round_trips_byte_for_byte() -> None:
    checkpoint = KernelCheckpoint.model_validate_json(STORED_CHECKPOINT)
    assert [a.status for a in checkpoint.agenda] == list(AgendaStatus)
    assert all(isinstance(a.status, AgendaStatus) for a in checkpoint.agenda)
    assert checkpoint.model_dump_json() == STORED_CHECKPOINT
    dumped = checkpoint.model_dump(mode="json")
    assert json.dumps(dumped, separators=(",", ":")) == STORED_CHECKPOINT
    # The python form holds members, which the standard encoder writes as their values.
    python = json.dumps(checkpoint.model_dump(), separators=(",", ":"), default=str)
    assert python == STORED_CHECKPOINT


def test_a_stored_response_round_trips_with_every_step_status() -> None:
    stored = _stored_response()
    response = Response.model_validate_json(stored)
    assert [s.status for s in response.steps] == list(StepStatus)
    assert response.model_dump_json() == stored


def test_an_unknown_agenda_status_is_still_refused() -> None:
    broken = STORED_CHECKPOINT.replace('"needs_input"', '"napping"')
    with pytest.raises(ValidationError):
        KernelCheckpoint.model_validate_json(broken)


def test_members_are_their_stored_strings() -> None:
    waiting: str = StepStatus.WAITING_FOR_FACT
    assert waiting == "waiting_for_fact"
    assert f"{EffectKind.WRITE}" == "write" and str(ConfirmationMode.REQUIRED) == "required"
    assert {"uncertain": 1}[StepStatus.UNCERTAIN] == 1  # same hash as the string
    # A held step's reason is a step status and an agenda status by the same name.
    for reason in HoldReason:
        spellings: set[str] = {StepStatus(reason), AgendaStatus(reason), reason, reason.value}
        assert len(spellings) == 1
