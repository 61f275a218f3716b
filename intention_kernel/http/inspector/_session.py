"""Browser sessions of the inspector: server-side sessions, roles and the CSRF token.

Why a cookie rather than the bearer header: a browser sends no ``Authorization`` header when it
follows a link, so the principal pastes the token once at the login page and gets a cookie.
Why the cookie holds only a random session id: a session must end when the operator logs out,
when the token is removed or when the roles change, at once and not at the cookie's expiry. So
the session (principal, CSRF token, expiry, how to check the token again) lives in this
process's ``SessionStore``; every request looks it up and asks the authenticator again. The
cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site sends it) and
``Secure`` over HTTPS. Every form carries the session's CSRF token (a synchronizer token),
compared in constant time on every POST. The login form's own token is bound to a short-lived
cookie signed with HMAC-SHA256 under the server's secret (``SessionCodec``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from ...contracts.errors import ConfigurationError
from .._auth import Principal

__all__ = [
    "OPERATOR",
    "VIEWER",
    "Recheck",
    "Session",
    "SessionCodec",
    "SessionStore",
    "inspector_role",
]

VIEWER = "viewer"
OPERATOR = "operator"
"""May also reconcile receipts. A principal without roles is a ``viewer`` (read only)."""

DEFAULT_LIFETIME = 8 * 3600
MAX_SESSIONS = 10_000
"""Sessions kept per process; past it, the one closest to its expiry ends first."""

Recheck = Callable[[], Awaitable[Principal | None]]
"""Asks the authenticator again for the token the session was started with (``None``: the
token is no longer valid)."""


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
    """Signs and checks the login form's cookie; holds the sessions' lifetime."""

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


@dataclass(slots=True)
class _Entry:
    session: Session
    recheck: Recheck


class SessionStore:
    """This process's sessions by random id: started at login, looked up on every request
    (the token checked again), ended at logout, expiry, token removal or a role change."""

    __slots__ = ("_entries", "lifetime", "limit")

    def __init__(self, lifetime: int = DEFAULT_LIFETIME, limit: int = MAX_SESSIONS) -> None:
        self._entries: dict[str, _Entry] = {}
        self.lifetime = lifetime
        self.limit = limit

    def __len__(self) -> int:
        return len(self._entries)

    def start(self, principal: Principal, recheck: Recheck) -> tuple[str, Session]:
        """A new session: its id (the cookie's value, 256 random bits) and the session."""
        now = time.time()
        for sid in [k for k, e in self._entries.items() if e.session.expires <= now]:
            del self._entries[sid]
        while len(self._entries) >= self.limit:
            oldest = min(self._entries, key=lambda k: self._entries[k].session.expires)
            del self._entries[oldest]
        sid = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), int(now) + self.lifetime)
        self._entries[sid] = _Entry(session, recheck)
        return sid, session

    async def get(self, sid: str | None) -> Session | None:
        """The live session of ``sid``, with the principal as the authenticator sees it now;
        ``None`` (and the session ended) when it expired, the token is no longer valid or
        the principal lost the inspector's roles. A role change applies at once."""
        if not sid or len(sid) > 128:
            return None
        entry = self._entries.get(sid)
        if entry is None:
            return None
        if entry.session.expires <= time.time():
            self.end(sid)
            return None
        principal = await entry.recheck()
        if self._entries.get(sid) is not entry:
            return None  # ended while the authenticator was asked
        if principal is None or principal.id != entry.session.principal.id:
            self.end(sid)
            return None
        if inspector_role(principal) is None:
            self.end(sid)
            return None
        if principal != entry.session.principal:
            entry.session = replace(entry.session, principal=principal)
        return entry.session

    def end(self, sid: str | None) -> None:
        if sid:
            self._entries.pop(sid, None)
