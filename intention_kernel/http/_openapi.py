"""The OpenAPI 3.1 document of the service, written by hand.

Why by hand: the routes are few and their shapes are the contract other programs are written
against (a load test, a deployment check); a literal document changes only on purpose.
"""

from __future__ import annotations

from typing import Any

from ..__version__ import __version__

__all__ = ["openapi_document"]

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": _ref("Problem")}},
    }


def _json(description: str, schema: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref(schema)}},
    }
    if headers:
        answer["headers"] = headers
    return answer


_THREAD = {
    "name": "thread_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "maxLength": 256},
}
_BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}}}

_SCHEMAS: dict[str, Any] = {
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
                "description": 'a button press: {"interaction_id": ..., "option": ...}',
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
            "kind": {"enum": ["answer", "clarification", "fallback"]},
            "citations": {"type": "array", "items": {"type": "string"}},
            "steps": {"type": "array", "items": _ref("Step")},
        },
    },
    "Interaction": {
        "type": "object",
        "required": ["id", "kind", "prompt", "options"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string"},
            "prompt": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}},
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
            "response": _ref("Response"),
            "interaction": {"oneOf": [_ref("Interaction"), {"type": "null"}]},
            "checkpoint": _ref("CheckpointSummary"),
        },
    },
    "Thread": {
        "type": "object",
        "required": ["thread_id", "checkpoint", "interaction"],
        "properties": {
            "thread_id": {"type": "string"},
            "checkpoint": {"oneOf": [_ref("CheckpointSummary"), {"type": "null"}]},
            "interaction": {"oneOf": [_ref("Interaction"), {"type": "null"}]},
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
                            },
                        },
                        "response": _ref("Response"),
                    },
                },
            },
            "next": {"type": ["integer", "null"], "description": "pass as after="},
        },
    },
    "Status": {"type": "object", "properties": {"status": {"type": "string"}}},
}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may change theirs)."""
    turn_errors = {
        "400": _problem("INVALID_JSON, IDEMPOTENCY_KEY_REQUIRED, INVALID_THREAD_ID, ..."),
        "401": _problem("UNAUTHENTICATED"),
        "403": _problem("FORBIDDEN"),
        "409": _problem("TURN_ID_REUSED: the key was used with another body"),
        "413": _problem("PAYLOAD_TOO_LARGE"),
        "422": _problem("INVALID_INPUT, INVALID_TEXT, INVALID_SELECTION"),
        "500": _problem("INTERNAL"),
        "502": _problem("MODEL_GATEWAY_FAILED: the model provider's answer is final"),
        "503": {
            **_problem(
                "TURN_TIMEOUT, LOCK_TIMEOUT, SHUTTING_DOWN, MODEL_GATEWAY_FAILED: retry with the"
                " same key"
            ),
            "headers": _RETRY_AFTER,
        },
    }
    read_errors = {
        "400": _problem("INVALID_THREAD_ID, INVALID_INPUT"),
        "401": _problem("UNAUTHENTICATED"),
        "403": _problem("FORBIDDEN"),
        "404": _problem("THREAD_NOT_FOUND"),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "intention-kernel", "version": __version__},
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/v1/threads/{thread_id}/turns": {
                "post": {
                    "operationId": "runTurn",
                    "summary": "Run a turn once; the same Idempotency-Key replays it",
                    "security": _BEARER,
                    "parameters": [
                        _THREAD,
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "description": "the turn id: the same on every retry",
                            "schema": {"type": "string", "maxLength": 256},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("TurnRequest")}},
                    },
                    "responses": {
                        "200": {
                            "description": "the committed (or replayed) turn; with Accept:"
                            " text/event-stream, server-sent events ending in turn.completed"
                            " or error",
                            "headers": {
                                "Idempotent-Replayed": {
                                    "schema": {"type": "string", "enum": ["true", "false"]}
                                }
                            },
                            "content": {
                                "application/json": {"schema": _ref("TurnResult")},
                                "text/event-stream": {"schema": {"type": "string"}},
                            },
                        },
                        **turn_errors,
                    },
                },
                "get": {
                    "operationId": "listTurns",
                    "summary": "Committed turns in commit order",
                    "security": _BEARER,
                    "parameters": [
                        _THREAD,
                        {"name": "after", "in": "query", "schema": {"type": "integer"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                    ],
                    "responses": {"200": _json("a page of turns", "TurnPage"), **read_errors},
                },
            },
            "/v1/threads/{thread_id}": {
                "get": {
                    "operationId": "getThread",
                    "summary": "Checkpoint summary and pending interaction",
                    "security": _BEARER,
                    "parameters": [_THREAD],
                    "responses": {"200": _json("the thread", "Thread"), **read_errors},
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "The process answers",
                    "security": [],
                    "responses": {"200": _json("alive", "Status")},
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "ready",
                    "summary": "The store answers and the instance is not shutting down",
                    "security": [],
                    "responses": {
                        "200": _json("ready", "Status"),
                        "503": {**_problem("not ready"), "headers": _RETRY_AFTER},
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.1"}},
                }
            },
        },
    }
