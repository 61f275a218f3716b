"""Webhook signatures: HMAC-SHA256 over ``"{timestamp}." + body`` with a shared secret.

The sender adds three headers; a receiver recomputes the signature over the raw body bytes it
received and refuses the request when it differs (tampered body, wrong secret) or when the
timestamp is too old (a replayed request)::

    X-IK-Event-Id:  evt_...            (the event id, for deduplication)
    X-IK-Timestamp: 1767312000         (Unix seconds when the request was signed)
    X-IK-Signature: v1=<hex digest>    (several comma-separated values during secret rotation)

Receiver example::

    from intention_kernel.relay import verify_signature

    ok = verify_signature(
        secret,
        timestamp=request.headers["X-IK-Timestamp"],
        body=await request.body(),
        signature=request.headers["X-IK-Signature"],
    )
    if not ok:
        return Response(status_code=401)  # the relay dead-letters a 4xx as rejected
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = [
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "sign",
    "verify_signature",
]

EVENT_ID_HEADER = "X-IK-Event-Id"
TIMESTAMP_HEADER = "X-IK-Timestamp"
SIGNATURE_HEADER = "X-IK-Signature"
_VERSION = "v1="


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """The ``X-IK-Signature`` value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(_key(secret), timestamp.encode() + b"." + body, hashlib.sha256)
    return _VERSION + digest.hexdigest()


def verify_signature(
    secret: str | bytes,
    *,
    timestamp: str,
    body: bytes,
    signature: str,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """Whether ``signature`` is valid for ``body`` and ``timestamp`` is within ``tolerance``
    seconds of ``now``. Constant-time comparison; never raises for malformed input."""
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance:
        return False
    expected = sign(secret, timestamp, body)
    return any(
        hmac.compare_digest(expected.encode(), candidate.strip().encode())
        for candidate in signature.split(",")
        if candidate.strip().startswith(_VERSION)
    )
