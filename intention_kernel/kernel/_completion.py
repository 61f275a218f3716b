"""Completion tokens: what a capability hands a third party so that it, and nobody else, may
complete one parked step (``POST /v1/threads/{thread_id}/external/{key}``).

Why a MAC over the thread and the key, and nothing stored: the service checks a token against
the path it is posted to, so it completes that key of that thread only; and a key completes once
(its turn ``<key>@completed`` is one inbox request), so the first completion spends the token
and a repeat of it only replays. Why the same token every time for the same thread and key: a
capability that runs again (its turn retried after a crash) hands out the token it handed out
before. Why several secrets: the first signs and all check, so a secret is rotated without
refusing the tokens already handed out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from ..contracts.errors import ConfigurationError

__all__ = ["MIN_SECRET_BYTES", "TOKEN_PREFIX", "CompletionTokens"]

TOKEN_PREFIX = "ikc1."
"""Every completion token starts so: a service tells it from a bearer token by it."""
MIN_SECRET_BYTES = 32
_DOMAIN = b"intention-kernel external completion\x00"


def _secret(value: object) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    if not isinstance(raw, bytes) or len(raw) < MIN_SECRET_BYTES:
        raise ConfigurationError(
            f"a completion secret is at least {MIN_SECRET_BYTES} bytes (bytes or text)",
            context={"setting": "completion_secret"},
        )
    return raw


class CompletionTokens:
    """Signs and checks completion tokens with ``Kernel(completion_secret=...)``."""

    __slots__ = ("_secrets",)
    PREFIX = TOKEN_PREFIX

    def __init__(self, secrets: Sequence[bytes | str]) -> None:
        if not secrets:
            raise ConfigurationError(
                "completion_secret names no secret", context={"setting": "completion_secret"}
            )
        self._secrets = tuple(_secret(s) for s in secrets)

    @classmethod
    def configure(cls, value: object) -> CompletionTokens | None:
        """From a ``completion_secret`` setting: one secret, a sequence (the first signs,
        every one checks: rotation), or ``None`` for an agent that hands out no tokens."""
        if value is None:
            return None
        if isinstance(value, bytes | str):
            return cls([value])
        if isinstance(value, list | tuple):
            return cls(value)
        raise ConfigurationError(
            "completion_secret is bytes, text, or a list of them",
            context={"setting": "completion_secret"},
        )

    @staticmethod
    def _mac(secret: bytes, thread_id: str, key: str) -> bytes:
        message = _DOMAIN + thread_id.encode("utf-8") + b"\x00" + key.encode("utf-8")
        return hmac.new(secret, message, hashlib.sha256).digest()

    def sign(self, thread_id: str, key: str) -> str:
        """The token that completes ``key`` of ``thread_id``."""
        mac = self._mac(self._secrets[0], thread_id, key)
        return TOKEN_PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    def verify(self, token: object, thread_id: str, key: str) -> bool:
        """Whether ``token`` completes ``key`` of ``thread_id`` (every secret is tried, with
        no early exit, so the timing tells nothing)."""
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 64:
            return False
        encoded = token[len(TOKEN_PREFIX) :].encode("ascii", "replace")
        try:
            given = base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))
        except ValueError:
            return False
        found = False
        for secret in self._secrets:
            found |= hmac.compare_digest(given, self._mac(secret, thread_id, key))
        return found

    def __repr__(self) -> str:
        return f"CompletionTokens({len(self._secrets)} secret(s))"
