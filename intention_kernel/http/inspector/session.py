"""Browser sessions of the inspector: a signed cookie, roles and the CSRF token.

Why a signed cookie rather than the bearer header: a browser sends no ``Authorization`` header
when it follows a link, so the principal pastes the token once at the login page and gets a
cookie holding who they are, their roles, a random CSRF token and an expiry, signed with
HMAC-SHA256 under the server's secret. The cookie is ``HttpOnly`` (no script reads it),
``SameSite=Strict`` (no other site sends it) and ``Secure`` over HTTPS. Every form carries the
session's CSRF token (a synchronizer token), compared in constant time on every POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from ...contracts.errors import ConfigurationError
from ..auth import Principal

__all__ = [
    "OPERATOR",
    "VIEWER",
    "Session",
    "SessionCodec",
    "inspector_role",
]

VIEWER = "viewer"
OPERATOR = "operator"
"""May also reconcile receipts. A principal without roles is a ``viewer`` (read only)."""

DEFAULT_LIFETIME = 8 * 3600


def inspector_role(principal: Principal) -> str | None:
    """``operator``, ``viewer`` or ``None`` (roles given, but neither of the inspector's)."""
    if OPERATOR in principal.roles:
        return OPERATOR
    if VIEWER in principal.roles or not principal.roles:
        return VIEWER
    return None


@dataclass(frozen=True, slots=True)
class Session:
    principal: Principal
    csrf: str
    expires: int

    @property
    def role(self) -> str:
        return inspector_role(self.principal) or VIEWER

    @property
    def operator(self) -> bool:
        return self.role == OPERATOR


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionCodec:
    """Signs and checks session (and pre-login) cookie values."""

    __slots__ = ("_key", "lifetime")

    def __init__(self, secret: bytes | str | None, lifetime: int = DEFAULT_LIFETIME) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)  # sessions end with the process
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if len(secret) < 32:
            raise ConfigurationError(
                "the session secret must be at least 32 bytes",
                context={"setting": "session_secret"},
            )
        if not 60 <= lifetime <= 7 * 86_400:
            raise ConfigurationError(
                "a session lasts from 60 seconds to 7 days",
                context={"setting": "session_lifetime"},
            )
        # A key of its own: the secret may serve elsewhere too.
        self._key = hmac.new(secret, b"intention-kernel inspector session", "sha256").digest()
        self.lifetime = lifetime

    def _sign(self, purpose: str, payload: bytes) -> str:
        body = _b64(payload)
        mac = hmac.new(self._key, f"{purpose}.{body}".encode("ascii"), hashlib.sha256)
        return f"{body}.{_b64(mac.digest())}"

    def _open(self, purpose: str, value: str | None) -> bytes | None:
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        expected = hmac.new(self._key, f"{purpose}.{body}".encode("ascii"), hashlib.sha256)
        try:
            if not hmac.compare_digest(_unb64(mac), expected.digest()):
                return None
            return _unb64(body)
        except ValueError:
            return None

    def issue(self, principal: Principal) -> tuple[str, Session]:
        session = Session(principal, secrets.token_urlsafe(32), int(time.time()) + self.lifetime)
        payload = {
            "p": principal.id,
            "r": sorted(principal.roles),
            "c": session.csrf,
            "e": session.expires,
        }
        return self._sign("session", json.dumps(payload).encode("utf-8")), session

    def read(self, value: str | None) -> Session | None:
        raw = self._open("session", value)
        if raw is None:
            return None
        try:
            payload = json.loads(raw)
            session = Session(
                Principal(payload["p"], frozenset(payload["r"])),
                str(payload["c"]),
                int(payload["e"]),
            )
        except (ValueError, KeyError, TypeError, ConfigurationError):
            return None
        return session if session.expires > time.time() else None

    def prelogin(self) -> tuple[str, str]:
        """A login form's CSRF token and the signed cookie that must come back with it."""
        token = secrets.token_urlsafe(32)
        payload = json.dumps({"c": token, "e": int(time.time()) + 3600}).encode("utf-8")
        return token, self._sign("login", payload)

    def check_prelogin(self, cookie: str | None, token: str) -> bool:
        raw = self._open("login", cookie)
        if raw is None:
            return False
        try:
            payload = json.loads(raw)
            expected, expires = str(payload["c"]), int(payload["e"])
        except (ValueError, KeyError, TypeError):
            return False
        return expires > time.time() and hmac.compare_digest(
            expected.encode("utf-8"), token.encode("utf-8")
        )
