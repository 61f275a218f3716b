"""RFC 9457 problem details: every error the service answers, with the library's stable codes.

Why one mapping: a client branches on ``code`` and ``retryable``, and a retrying client must be
told the same thing for the same condition whichever route hit it. A ``KernelError``'s message
is safe to show (it never holds payloads or driver output); anything else is a bug, logged here
and answered as ``INTERNAL`` with no detail, so no traceback or internal text reaches a client.
A ``ModelGatewayError``'s message is the exception: it quotes the provider and names the
service's configuration (the key's environment variable), which is the operator's business, so
it is logged and the client gets a fixed text, 502 when the provider's answer is final and 503
with the provider's ``Retry-After`` when it may pass. A dead turn request (its worker gave up) is
answered as the failure that killed it, never retryable with the same key: only an operator's
retry runs it again.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from starlette.responses import Response

from ..contracts.errors import (
    DurabilityError,
    EffectUncertainError,
    ErrorCode,
    InvalidIdError,
    InvalidInputError,
    KernelError,
    ModelGatewayError,
    TurnConflictError,
    TurnTimeoutError,
)

__all__ = [
    "PROBLEM_TYPE",
    "HttpProblem",
    "dead_problem",
    "problem_for",
    "problem_response",
    "safe_error",
]

logger = logging.getLogger("intention_kernel.http")

PROBLEM_TYPE = "urn:intention-kernel:problem:"
"""A problem's ``type`` is this prefix followed by its code (a URN: nothing to dereference)."""

RETRY_AFTER_SECONDS = 1
"""What ``Retry-After`` says for a retryable answer: soon, with the same ``Idempotency-Key``."""

RETRY_SAME_KEY = "retry with the same Idempotency-Key"

_TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    500: "Internal error",
    501: "Not implemented",
    502: "Bad gateway",
    503: "Service unavailable",
}

# Codes of turns that collided with a stored one, and store refusals that pass when retried.
_CONFLICT = {
    ErrorCode.TURN_ID_REUSED,
    ErrorCode.TURN_EXPIRED,
    ErrorCode.TURN_ALREADY_COMMITTED,
    ErrorCode.CHECKPOINT_REVISION_CONFLICT,
}
_UNAVAILABLE = {
    ErrorCode.LOCK_TIMEOUT,
    ErrorCode.LEASE_LOST,
    ErrorCode.STORE_BUSY,
    ErrorCode.STORE_UNAVAILABLE,
    ErrorCode.SCOPE_CLOSED,
}
# Codes of requests a kernel refuses as they are: a dead request with one is answered 422.
_REFUSED_INPUT = {
    ErrorCode.INVALID_INPUT,
    ErrorCode.INVALID_TEXT,
    ErrorCode.INVALID_SELECTION,
    ErrorCode.NOT_SERIALIZABLE,
    ErrorCode.NON_FINITE_NUMBER,
    ErrorCode.VALUE_TOO_DEEP,
    ErrorCode.INTEGER_OUT_OF_RANGE,
    ErrorCode.PAYLOAD_TOO_LARGE,
    ErrorCode.INTERACTION_NOT_ACTIVE,
    ErrorCode.INTERACTION_OPTION_UNKNOWN,
    ErrorCode.EDIT_INVALID,
    ErrorCode.EDIT_NOT_ALLOWED,
}
# A completion of a parked step: a token that does not complete it, a step nothing waits on, one
# whose wait is over.
_EXTERNAL = {
    ErrorCode.EXTERNAL_TOKEN_INVALID: 403,
    ErrorCode.EXTERNAL_UNKNOWN: 404,
    ErrorCode.EXTERNAL_EXPIRED: 410,
}
_EDIT_CODES = (ErrorCode.EDIT_INVALID, ErrorCode.EDIT_NOT_ALLOWED)
_EDIT_SHOWN = ("reason", "fields", "editable", "problems", "refusal")
"""What a refused edit tells the client (``kernel._pipeline.edits``)."""
# Codes that are retried while attempts remain: a request dead of one ran out of them.
_RETRIED = {
    *_UNAVAILABLE,
    ErrorCode.STORE_ERROR,
    ErrorCode.TURN_TIMEOUT,
    ErrorCode.EFFECT_UNCERTAIN,
}
_DEAD = "the turn request is dead: only an operator's retry runs it again"


class HttpProblem(Exception):
    """An answer that is an error: raised by a route, turned into ``application/problem+json``."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"[{code}] {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retryable = retryable
        self.headers = dict(headers or {})
        if retryable and status in (409, 429, 503):
            self.headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
        self.extra = dict(extra or {})

    def document(self, instance: str | None = None) -> dict[str, Any]:
        """The problem document (RFC 9457 members plus ``code`` and ``retryable``)."""
        body: dict[str, Any] = {
            "type": PROBLEM_TYPE + self.code,
            "title": _TITLES.get(self.status, "Error"),
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            "retryable": self.retryable,
        }
        if instance is not None:
            body["instance"] = instance
        body.update(self.extra)
        return body


def problem_response(problem: HttpProblem, instance: str | None = None) -> Response:
    return Response(
        json.dumps(problem.document(instance), ensure_ascii=False, separators=(",", ":")),
        status_code=problem.status,
        headers=problem.headers,
        media_type="application/problem+json",
    )


def _from_kernel(exc: KernelError) -> HttpProblem:
    code = exc.code
    field = exc.context.get("field")
    extra = {"field": field} if isinstance(field, str) else None
    if isinstance(exc, TurnTimeoutError):
        return HttpProblem(
            503,
            str(code),
            "the turn did not finish in time; it may have committed: "
            f"{RETRY_SAME_KEY} to get its result (nothing runs twice)",
            retryable=True,
        )
    if code == ErrorCode.INVALID_CURSOR:
        return HttpProblem(400, str(code), exc.message, extra=extra)
    if code == ErrorCode.REQUEST_NOT_FOUND:
        return HttpProblem(404, str(code), "no such turn: it was neither submitted nor committed")
    if code == ErrorCode.REQUEST_DEAD:
        error_code = exc.context.get("error_code")
        return dead_problem(error_code if isinstance(error_code, str) else None, None)
    if code in _EXTERNAL:
        return HttpProblem(_EXTERNAL[code], str(code), exc.message, extra=extra)
    if code == ErrorCode.NOT_SUPPORTED:
        return HttpProblem(501, str(code), exc.message)
    if isinstance(exc, InvalidIdError):
        return HttpProblem(400, str(code), exc.message, extra=extra)
    if code in _EDIT_CODES:
        # Which fields, and why: the client's form marks them (no value is ever echoed).
        shown = {k: v for k, v in exc.context.items() if k in _EDIT_SHOWN}
        return HttpProblem(422, str(code), exc.message, extra={**(extra or {}), **shown})
    if isinstance(exc, InvalidInputError):
        return HttpProblem(422, str(code), exc.message, extra=extra)
    if isinstance(exc, TurnConflictError) and code in _CONFLICT:
        return HttpProblem(409, str(code), exc.message, retryable=exc.retryable)
    if code in _UNAVAILABLE or (isinstance(exc, DurabilityError) and exc.retryable):
        return HttpProblem(503, str(code), f"{exc.message}; {RETRY_SAME_KEY}", retryable=True)
    if isinstance(exc, EffectUncertainError):
        return HttpProblem(
            503,
            str(code),
            f"a write of this turn is being verified; it is never repeated: {RETRY_SAME_KEY} later",
            retryable=True,
        )
    if isinstance(exc, ModelGatewayError):
        return _from_gateway(exc)
    if exc.retryable:
        return HttpProblem(503, str(code), f"{exc.message}; {RETRY_SAME_KEY}", retryable=True)
    return HttpProblem(500, str(code), exc.message)


def _from_gateway(exc: ModelGatewayError) -> HttpProblem:
    """502 (final: a rejected key, a bad request, a used-up quota) or 503 with the wait the
    provider asked for; the provider's text and the configuration hint go to the log only."""
    context = exc.context
    logger.log(
        logging.WARNING if exc.retryable else logging.ERROR,
        "model gateway failed (%s, retryable=%s, kind=%s, status=%s, provider=%s, task=%s): %s",
        exc.code,
        exc.retryable,
        context.get("kind"),
        context.get("status"),
        context.get("provider"),
        context.get("task"),
        exc.message,
    )
    if not exc.retryable:
        return HttpProblem(
            502,
            str(exc.code),
            "the model provider refused this turn; retrying the same request will not help"
            " (the cause is in the service's log)",
        )
    return HttpProblem(
        503,
        str(exc.code),
        f"the model provider is unavailable for now; {RETRY_SAME_KEY}",
        retryable=True,
        headers={"Retry-After": str(_retry_after_seconds(context.get("retry_after")))},
    )


def _retry_after_seconds(asked: object) -> int:
    """``Retry-After`` for a wait the provider asked for: whole seconds, rounded up, at least
    ``RETRY_AFTER_SECONDS`` (also when it asked for none or for something unusable)."""
    if isinstance(asked, bool) or not isinstance(asked, int | float) or not math.isfinite(asked):
        return RETRY_AFTER_SECONDS
    return max(RETRY_AFTER_SECONDS, math.ceil(asked))


def safe_error(error_code: str | None, error: str | None) -> str | None:
    """What a client may read of a request's stored failure: a kernel's message is safe, a
    model provider's words and an unexpected error's name are the operator's business."""
    if error is None or error_code in (str(ErrorCode.MODEL_GATEWAY_FAILED), "INTERNAL"):
        return None
    return error


def dead_problem(
    error_code: str | None, error: str | None, attempts: int | None = None
) -> HttpProblem:
    """The answer for a dead turn request: the failure that killed it (502 for a model
    provider, 409 for a conflict, 422 for a refused request), or 500 ``REQUEST_DEAD`` when it
    ran out of attempts on a failure that is retried (or has none); never ``retryable``."""
    extra: dict[str, Any] = {"state": "dead", "error_code": error_code}
    if attempts is not None:
        extra["attempts"] = attempts
    said = safe_error(error_code, error)
    detail = f"{_DEAD} ({said})" if said else _DEAD
    if error_code == ErrorCode.MODEL_GATEWAY_FAILED:
        return HttpProblem(
            502, error_code, f"the model provider refused this turn; {_DEAD}", extra=extra
        )
    if error_code in _CONFLICT:
        return HttpProblem(409, str(error_code), detail, extra=extra)
    if error_code in _EDIT_CODES and said:
        # A refused edit runs nothing and keeps the confirmation open: answer it again.
        detail = f"{said}; nothing ran and the confirmation still waits for an answer"
    if error_code in _REFUSED_INPUT:
        return HttpProblem(422, str(error_code), detail, extra=extra)
    if error_code == "INTERNAL":
        return HttpProblem(500, "INTERNAL", f"an unexpected error occurred; {_DEAD}", extra=extra)
    known = error_code in ErrorCode.__members__ and error_code not in _RETRIED
    return HttpProblem(500, str(error_code) if known else "REQUEST_DEAD", detail, extra=extra)


def problem_for(exc: BaseException) -> HttpProblem:
    """The problem that answers ``exc``; an unexpected one is logged and answered ``INTERNAL``."""
    if isinstance(exc, HttpProblem):
        return exc
    if isinstance(exc, KernelError):
        return _from_kernel(exc)
    logger.error("unexpected %s while answering a request", type(exc).__name__, exc_info=exc)
    return HttpProblem(500, "INTERNAL", "an unexpected error occurred; it was logged")
