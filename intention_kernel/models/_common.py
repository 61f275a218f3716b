"""What every gateway does the same way: the prompt, the answer's name, reading the answer,
naming the model, classifying HTTP failures, and keeping secrets out of error messages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from pydantic import JsonValue

from ..contracts.errors import ModelGatewayError
from ..contracts.gateway import ModelOutputDelta, ModelRequest
from ._providers import PROVIDERS
from ._retry import Failure

__all__ = [
    "TASK_GUIDES",
    "NotTheAPI",
    "answer_name",
    "http_failure",
    "model_name",
    "not_the_api",
    "parse_json",
    "redact",
    "render",
    "restarted",
    "retry_after",
    "stream_checked",
]

TASK_GUIDES: dict[str, str] = {
    "interpret": (
        "Read the user's message (`text`, or the button in `selection`) in its `context` "
        "(recent messages, known facts, the agenda and the pending interaction). Answer what the "
        "user wants done: each intention names one capability `id` from `capabilities` with an "
        "`input` that matches its `input_schema`, using only values the user or the facts give. "
        "If the user answers the pending interaction, set `answer.option` to one of its "
        "`options`. For a message that needs no capability, leave `intentions` empty and write a "
        "short `reply`. When the next step depends on what a capability returns (a balance, a "
        "search), plan only the steps you can decide now and set `more` to true: you will be "
        "shown their `results` and can plan the rest. With `results` present, plan only what "
        "they still call for (nothing already done), or nothing."
    ),
    "repair": (
        "Your previous interpretation (`previous`) of the user's message (`text`) had the "
        "`problems` listed. Answer a corrected interpretation: each intention names one "
        "capability `id` from `capabilities` with an `input` that matches its `input_schema`."
    ),
    "compose": (
        "Write the reply to the user's message (`text`) from what happened this turn: the "
        "`outcomes` of the steps, `notes`, `updates`, `clarifications` and the pending "
        "`interaction`. Say only what these say; never claim an action that has no completed "
        "outcome. List in `citations` the `evidence_id` of every outcome you rely on. If "
        "`problems` is present, your previous reply had them: fix them."
    ),
}
"""What each kernel task asks of the model, added after the agent's own instructions."""

_SECRET = re.compile(
    r"(sk-[A-Za-z0-9_\-]{6,}|sk-ant-[A-Za-z0-9_\-]{6,}|AIza[0-9A-Za-z_\-]{10,}|gsk_[A-Za-z0-9]{6,}"
    r"|xai-[A-Za-z0-9]{6,}|hf_[A-Za-z0-9]{6,}|(?i:bearer)\s+\S+|(?i:api[_-]?key)[=:]\s*[A-Za-z0-9_\-]{8,})"
)


def render(request: ModelRequest, guides: Mapping[str, str]) -> tuple[str, str]:
    """The system text (the agent's instructions, then the task's guide) and the user text (the
    request's input as compact JSON, in the kernel's key order so prompt caches match)."""
    system = "\n\n".join(p for p in (request.system.strip(), guides.get(request.task, "")) if p)
    user = json.dumps(request.input, ensure_ascii=False, separators=(",", ":"))
    return system, user


def restarted() -> ModelOutputDelta:
    """What a stream yields before retrying after it had yielded deltas: drop them."""
    return ModelOutputDelta(text="", restarted=True)


class NotTheAPI(Exception):
    """A 200 answer in another format than the API's (a proxy's or captive portal's page, a
    wrong ``base_url``): the SDKs hand such a body over as a string."""

    def __init__(self, content_type: str | None) -> None:
        super().__init__(content_type)
        self.content_type = redact(content_type or "no content type", 80)


def not_the_api(provider: str, exc: NotTheAPI) -> Failure:
    """Retryable: a proxy or portal in the way may be gone on the next try."""
    return Failure(
        "server",
        True,
        f"{provider}: the server answered {exc.content_type}, not the API's JSON: "
        "check the base URL and any proxy in between",
    )


def stream_checked(headers: Mapping[str, str]) -> None:
    """Raise ``NotTheAPI`` unless a streamed answer is server-sent events."""
    found = headers.get("content-type")
    if (found or "").split(";")[0].strip().lower() != "text/event-stream":
        raise NotTheAPI(found)


def answer_name(task: str) -> str:
    """The name of the response format or tool: the task, in the characters providers allow."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", task)[:64] or "answer"


def parse_json(text: str | None) -> JsonValue:
    """The answer's JSON, or ``None`` when it is not JSON (the kernel then asks for a repair)."""
    if not text:
        return None
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        return None
    return value


def model_name(requested: str | None, default: str, prefixes: tuple[str, ...]) -> str:
    """The model to ask: the request's (without one of this gateway's prefixes) or the default.

    A request naming another provider's model (``anthropic:...`` sent to the OpenAI gateway) is
    refused: it would otherwise reach the wrong provider under a wrong name.
    """
    if not requested:
        return default
    prefix, sep, rest = requested.partition(":")
    if sep and prefix in prefixes:
        return rest
    if sep and prefix in PROVIDERS:
        raise ModelGatewayError(
            f"this gateway serves {'/'.join(prefixes)} models, not {requested!r}; "
            "build a gateway for it with resolve_model",
            retryable=False,
            context={"kind": "configuration"},
        )
    return requested


def redact(text: object, limit: int = 300) -> str:
    """A provider's error text, safe for a message: no key-like tokens, bounded length."""
    cleaned = _SECRET.sub("[redacted]", " ".join(str(text).split()))
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms``, ``retry-after`` as seconds or an
    HTTP date), or ``None``."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


_SPENT = frozenset(
    {
        # OpenAI: the error type of every billing 429, and the codes that name the cause.
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "organization_usage_limit_exceeded",
        # Anthropic: the billing type, and the ``error.details.error_code`` of a spend-limit 429.
        "billing_error",
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
    }
)
"""Error types and codes that say the account cannot spend more: a 429 with one of them is
final (retrying does not restore access until someone adds credit or raises a limit)."""


def http_failure(
    provider: str,
    status: int,
    *,
    headers: Mapping[str, str] | None = None,
    detail: str = "",
    codes: Iterable[str | None] = (),
    key_hint: str = "the API key",
) -> Failure:
    """Classify an HTTP error status. ``codes`` are the provider's error type and codes (a 429
    is a rate limit or a spent account, told apart only by them). ``detail`` (the provider's
    message) is shown, redacted, only where it tells what is wrong with the request; never for
    credential errors."""
    wait = retry_after(headers)
    said = f": {redact(detail)}" if detail else ""
    spent = sorted({c for c in codes if c in _SPENT})
    if status == 429 and spent:
        return Failure(
            "quota",
            False,
            f"{provider}: the account's credit, quota or spend limit is used up "
            f"(429 {', '.join(spent)}){said}",
            status,
        )
    if status == 429:
        return Failure("rate_limit", True, f"{provider}: rate limited (429)", status, wait)
    if status in (503, 529):
        return Failure("overloaded", True, f"{provider}: overloaded ({status})", status, wait)
    if status >= 500 or status in (408, 409):
        return Failure("server", True, f"{provider}: server error ({status})", status, wait)
    if status == 401:
        return Failure(
            "authentication",
            False,
            f"{provider} rejected the credentials (401): check {key_hint}",
            status,
        )
    if status == 403:
        return Failure(
            "permission",
            False,
            f"{provider} refused access (403): {key_hint} may not use this model or endpoint",
            status,
        )
    if status == 404:
        return Failure(
            "not_found",
            False,
            f"{provider} found no such model or endpoint (404): check the model name and the "
            f"base URL{said}",
            status,
        )
    if status == 402:
        return Failure("quota", False, f"{provider}: payment required (402){said}", status)
    return Failure(
        "bad_request", False, f"{provider} rejected the request ({status}){said}", status
    )
