"""The OpenAPI 3.1 document of the service, written by hand.

Why by hand: the routes are few and their shapes are the contract other programs are written
against (a load test, a deployment check); a literal document changes only on purpose.
"""

from __future__ import annotations

from typing import Any

from ..__version__ import __version__
from ._openapi_schemas import SCHEMAS as _SCHEMAS
from ._openapi_schemas import ref as _ref

__all__ = ["openapi_document"]


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
_TURN = {
    "name": "turn_id",
    "in": "path",
    "required": True,
    "description": "the Idempotency-Key the turn was posted with",
    "schema": {"type": "string", "maxLength": 256},
}
_LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "description": "rejoin after this event (the id of the last event received)",
    "schema": {"type": "string", "maxLength": 64},
}
_EVENTS = {
    "description": "server-sent events (id: the cursor to rejoin after), ending in"
    " turn.completed or error",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may change theirs)."""
    turn_errors = {
        "400": _problem("INVALID_JSON, IDEMPOTENCY_KEY_REQUIRED, INVALID_THREAD_ID, ..."),
        "401": _problem("UNAUTHENTICATED"),
        "403": _problem("FORBIDDEN"),
        "409": {
            **_problem(
                "TURN_ID_REUSED: the key was used with another body; THREAD_BUSY (busy=reject):"
                " the thread has a turn in progress or waiting"
            ),
            "headers": _RETRY_AFTER,
        },
        "413": _problem("PAYLOAD_TOO_LARGE"),
        "422": _problem("INVALID_INPUT, INVALID_TEXT, INVALID_SELECTION"),
        "500": _problem("INTERNAL, REQUEST_DEAD: a dead turn request"),
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
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "completionToken": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "token",
                    "description": "a completion token (context.completion_token), also"
                    " accepted as Authorization: Bearer ikc1...",
                },
            },
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
                        {
                            "name": "Prefer",
                            "in": "header",
                            "description": "respond-async: answer 202 once the turn is"
                            " submitted, without waiting for it",
                            "schema": {"type": "string"},
                        },
                        {
                            **_LAST_EVENT_ID,
                            "description": "with Accept: text/event-stream, rejoin the turn's"
                            " events after this one",
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
                        "202": {
                            "description": "Prefer: respond-async: the turn is submitted and"
                            " runs without this request; Location names its state",
                            "headers": {
                                "Location": {"schema": {"type": "string"}},
                                "Preference-Applied": {"schema": {"type": "string"}},
                                "Idempotent-Replayed": {
                                    "schema": {"type": "string", "enum": ["true", "false"]}
                                },
                            },
                            "content": {"application/json": {"schema": _ref("TurnStatus")}},
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
            "/v1/threads/{thread_id}/turns/{turn_id}": {
                "get": {
                    "operationId": "getTurn",
                    "summary": "A turn's state and, once committed, its result",
                    "security": _BEARER,
                    "parameters": [_THREAD, _TURN],
                    "responses": {
                        "200": _json("the turn", "TurnStatus"),
                        **read_errors,
                        "404": _problem("REQUEST_NOT_FOUND: neither submitted nor committed"),
                    },
                }
            },
            "/v1/threads/{thread_id}/turns/{turn_id}/events": {
                "get": {
                    "operationId": "turnEvents",
                    "summary": "A turn's progress and result as server-sent events, from any"
                    " instance; Last-Event-ID rejoins",
                    "security": _BEARER,
                    "parameters": [
                        _THREAD,
                        _TURN,
                        _LAST_EVENT_ID,
                        {"name": "after", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": _EVENTS,
                        **read_errors,
                        "400": _problem("INVALID_CURSOR: the event id is not one of this turn's"),
                        "404": _problem("REQUEST_NOT_FOUND: neither submitted nor committed"),
                        "501": _problem("NOT_SUPPORTED: the store keeps no turn inbox"),
                        "503": {**_problem("SHUTTING_DOWN"), "headers": _RETRY_AFTER},
                    },
                }
            },
            "/v1/threads/{thread_id}/external/{key}": {
                "post": {
                    "operationId": "completeExternal",
                    "summary": "Complete a step parked with AwaitingExternal; the same"
                    " completion again replays",
                    "security": [*_BEARER, {"completionToken": []}],
                    "parameters": [
                        _THREAD,
                        {
                            "name": "key",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "maxLength": 200},
                        },
                        {
                            "name": "token",
                            "in": "query",
                            "description": "the completion token, for a callback that can only"
                            " be a URL (else Authorization: Bearer ikc1...)",
                            "schema": {"type": "string", "maxLength": 64},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("ExternalCompletion")}},
                    },
                    "responses": {
                        "202": {
                            **_json("the completion is submitted", "ExternalAccepted"),
                            "headers": {
                                "Location": {"schema": {"type": "string"}},
                                "Idempotent-Replayed": {
                                    "schema": {"type": "string", "enum": ["true", "false"]}
                                },
                            },
                        },
                        "400": _problem("INVALID_JSON, INVALID_ID, INVALID_THREAD_ID"),
                        "401": _problem("UNAUTHENTICATED"),
                        "403": _problem(
                            "FORBIDDEN; EXTERNAL_TOKEN_INVALID: the token does not complete"
                            " this key of this thread"
                        ),
                        "404": _problem("EXTERNAL_UNKNOWN: no step waits for this key"),
                        "409": _problem(
                            "TURN_ID_REUSED: the key was completed with another result"
                        ),
                        "410": _problem("EXTERNAL_EXPIRED: the step's timeout passed"),
                        "413": _problem("PAYLOAD_TOO_LARGE"),
                        "422": _problem("INVALID_INPUT, NOT_SERIALIZABLE, ..."),
                        "503": {
                            **_problem("SHUTTING_DOWN, STORE_UNAVAILABLE"),
                            "headers": _RETRY_AFTER,
                        },
                    },
                }
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
