"""The schemas of the OpenAPI document (``_openapi``): the shapes of bodies and answers."""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMAS", "ref"]

_REF = "#/components/schemas/"


def ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "required": ["type", "title", "status", "detail", "code", "retryable"],
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"type": "string"},
            "retryable": {"type": "boolean"},
            "instance": {"type": "string"},
        },
    },
    "TurnRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "default": ""},
            "selection": {
                "type": ["object", "null"],
                "description": 'a button press: {"interaction_id": ..., "option": ...};'
                ' "edits": {field: value} approves a confirmation with edited arguments'
                " where the capability allows it",
            },
        },
    },
    "Step": {
        "type": "object",
        "required": ["step_id", "capability_id", "status"],
        "properties": {
            "step_id": {"type": "string"},
            "capability_id": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": ["string", "null"]},
            "artifacts": {"type": "object"},
            "retryable": {
                "type": "boolean",
                "description": "on a failed step that raised or timed out: may asking again help",
            },
        },
    },
    "Response": {
        "type": "object",
        "required": ["text", "kind", "citations", "steps"],
        "properties": {
            "text": {"type": "string"},
            "kind": {"enum": ["answer", "clarification", "fallback", "budget_exceeded"]},
            "citations": {"type": "array", "items": {"type": "string"}},
            "steps": {"type": "array", "items": ref("Step")},
        },
    },
    "Interaction": {
        "type": "object",
        "required": ["id", "kind", "prompt", "options", "expires_at"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string"},
            "prompt": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}},
            "expires_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "CheckpointSummary": {
        "type": "object",
        "required": ["revision"],
        "properties": {
            "revision": {"type": "integer"},
            "schema_version": {"type": "integer"},
            "agent_fingerprint": {"type": "string"},
            "messages": {"type": "integer"},
            "omitted_messages": {"type": "integer"},
            "facts": {"type": "array", "items": {"type": "object"}},
            "agenda": {"type": "array", "items": {"type": "object"}},
            "receipts": {"type": "array", "items": {"type": "object"}},
        },
    },
    "TurnResult": {
        "type": "object",
        "required": ["thread_id", "turn_id", "replayed", "response", "interaction", "checkpoint"],
        "properties": {
            "thread_id": {"type": "string"},
            "turn_id": {"type": "string"},
            "replayed": {"type": "boolean"},
            "response": ref("Response"),
            "interaction": {"oneOf": [ref("Interaction"), {"type": "null"}]},
            "checkpoint": ref("CheckpointSummary"),
        },
    },
    "Thread": {
        "type": "object",
        "required": ["thread_id", "checkpoint", "interaction"],
        "properties": {
            "thread_id": {"type": "string"},
            "checkpoint": {"oneOf": [ref("CheckpointSummary"), {"type": "null"}]},
            "interaction": {"oneOf": [ref("Interaction"), {"type": "null"}]},
        },
    },
    "TurnPage": {
        "type": "object",
        "required": ["turns", "next"],
        "properties": {
            "turns": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["turn_id", "revision", "trace_id", "input", "answer", "response"],
                    "properties": {
                        "turn_id": {"type": "string"},
                        "revision": {"type": "integer"},
                        "trace_id": {"type": "string"},
                        "input": {
                            "type": ["string", "null"],
                            "description": "what the user said; for a button press, what was"
                            " chosen (e.g. 'accepted: Please confirm: ...')",
                        },
                        "answer": {
                            "type": ["object", "null"],
                            "description": "the answer the turn gave to an interaction",
                            "properties": {
                                "decision": {"type": "string"},
                                "option": {"type": "string"},
                                "via": {"type": "string", "enum": ["selection", "text"]},
                                "actor": {"type": ["string", "null"]},
                                "answered_at": {"type": "string"},
                                "question": {"type": "string"},
                                "interaction_id": {"type": "string"},
                                "capability_id": {"type": "string"},
                                "edited": {"type": "array", "items": {"type": "string"}},
                                "proposed_question": {"type": "string"},
                            },
                        },
                        "response": ref("Response"),
                    },
                },
            },
            "next": {"type": ["integer", "null"], "description": "pass as after="},
        },
    },
    "TurnStatus": {
        "type": "object",
        "required": ["thread_id", "turn_id", "state", "attempts", "error_code", "result"],
        "properties": {
            "thread_id": {"type": "string"},
            "turn_id": {"type": "string"},
            "state": {"enum": ["pending", "running", "done", "dead"]},
            "position": {
                "type": ["integer", "null"],
                "description": "the request's place in submission order (null: run directly)",
            },
            "attempts": {"type": "integer", "description": "times a worker claimed it"},
            "submitted_at": {"type": ["string", "null"], "format": "date-time"},
            "not_before": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "error_code": {
                "type": ["string", "null"],
                "description": "the code of the last failed attempt (kept once a retry worked)",
            },
            "error": {"type": ["string", "null"]},
            "result": {
                "oneOf": [ref("TurnResult"), {"type": "null"}],
                "description": "once committed: what POST .../turns answers",
            },
        },
    },
    "ExternalCompletion": {
        "type": "object",
        "additionalProperties": False,
        "required": ["result"],
        "properties": {"result": {"description": "the outcome, any JSON: context.external.result"}},
    },
    "ExternalAccepted": {
        "type": "object",
        "required": ["thread_id", "key", "turn_id", "state"],
        "properties": {
            "thread_id": {"type": "string"},
            "key": {"type": "string"},
            "turn_id": {"type": "string", "description": "<key>@completed"},
            "state": {"type": "string", "enum": ["pending", "running", "done", "dead"]},
        },
    },
    "Status": {"type": "object", "properties": {"status": {"type": "string"}}},
}
