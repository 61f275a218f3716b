"""Webhook signatures in the Standard Webhooks format (https://www.standardwebhooks.com).

Why this scheme: the message id, the timestamp and the body are all signed, so a captured
request cannot be replayed under another id or time, and receivers in any language verify it
with an off-the-shelf library (``standardwebhooks`` for Python, JavaScript, Go, ...). Three
headers go with every request::

    webhook-id:        evt_...        the event id: the receiver's dedupe key (signed)
    webhook-timestamp: 1767312000     Unix seconds when the request was signed
    webhook-signature: v1,<base64>    HMAC-SHA256 of "{id}.{timestamp}.{body}"; several
                                      space-separated values while a secret is rotated

The secret is ``whsec_`` followed by the base64 of the key (``new_secret()`` makes one). A
signature proves who sent a request, not that it is the first delivery: the relay delivers at
least once and an attacker may replay a captured request within the tolerance, so a receiver
remembers the ids it handled (see ``docs/relay.md``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Mapping, Sequence

from ..contracts.errors import ConfigurationError

__all__ = [
    "ID_HEADER",
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "new_secret",
    "sign",
    "signature_headers",
    "signing_key",
    "verify_headers",
    "verify_signature",
]

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"
_VERSION = "v1"
_TIMESTAMP_DIGITS = 20


def new_secret() -> str:
    """A fresh ``whsec_...`` secret with a 32-byte key."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signing_key(secret: str | bytes) -> bytes:
    """The HMAC key of a ``whsec_...`` secret (raw ``bytes`` are the key itself). Refuses
    anything else with ``ConfigurationError``, never quoting the secret."""
    if isinstance(secret, bytes):
        key = secret
    elif isinstance(secret, str) and secret.startswith(SECRET_PREFIX):
        try:
            key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            key = b""
    else:
        key = b""
    if len(key) < 16:
        raise ConfigurationError(
            "a webhook secret is 'whsec_' followed by the base64 of at least 16 bytes"
            " (make one with intention_kernel.relay.signing.new_secret())",
            context={"setting": "secret"},
        )
    return key


def sign(secret: str | bytes, msg_id: str, timestamp: str, body: bytes) -> str:
    """The ``webhook-signature`` value (``v1,<base64>``) of ``body`` sent as ``msg_id`` at
    ``timestamp``."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), content, hashlib.sha256).digest()
    return f"{_VERSION},{base64.b64encode(digest).decode()}"


def signature_headers(
    secret: str | bytes | Sequence[str | bytes],
    msg_id: str,
    body: bytes,
    *,
    now: float | None = None,
) -> dict[str, str]:
    """The three headers for a request; several secrets (during a rotation) sign it once
    each, so receivers on the old and on the new secret both accept it."""
    keys = [secret] if isinstance(secret, str | bytes) else list(secret)
    timestamp = str(int(time.time() if now is None else now))
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: " ".join(sign(key, msg_id, timestamp, body) for key in keys),
    }


def _tolerance(value: object) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            "the tolerance is a positive, finite number of seconds",
            context={"setting": "tolerance"},
        )
    return float(value)


def verify_signature(
    secret: str | bytes,
    *,
    msg_id: str,
    timestamp: str,
    body: bytes,
    signature: str,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """Whether one of the ``v1`` values in ``signature`` signs ``msg_id``, ``timestamp`` and
    ``body`` with ``secret``, and ``timestamp`` (whole Unix seconds) is within ``tolerance``
    seconds of ``now``. Constant-time comparison; never raises for a malformed header, but a
    bad ``tolerance`` or ``secret`` is a ``ConfigurationError`` (a NaN would accept any time).
    """
    allowed = _tolerance(tolerance)
    key = signing_key(secret)
    if not msg_id or not _is_unix_seconds(timestamp):
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > allowed:
        return False
    try:
        expected = sign(key, msg_id, timestamp, body).split(",", 1)[1].encode()
    except UnicodeEncodeError:  # a lone surrogate in the id: no sender could have signed it
        return False
    found = False
    for candidate in signature.split(" "):
        version, _, value = candidate.partition(",")
        if version == _VERSION and value and value.isascii():
            found |= hmac.compare_digest(expected, value.encode())
    return found


def _is_unix_seconds(timestamp: str) -> bool:
    """ASCII digits, at most ``_TIMESTAMP_DIGITS`` of them: ``int()`` refuses more than 4,300
    digits with ``ValueError``, and no honest timestamp has more than a dozen."""
    return 0 < len(timestamp) <= _TIMESTAMP_DIGITS and timestamp.isascii() and timestamp.isdigit()


def verify_headers(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """``verify_signature`` with the three headers of a request (names in any case)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    return verify_signature(
        secret,
        msg_id=lowered.get(ID_HEADER, ""),
        timestamp=lowered.get(TIMESTAMP_HEADER, ""),
        body=body,
        signature=lowered.get(SIGNATURE_HEADER, ""),
        tolerance=tolerance,
        now=now,
    )
