"""Who may do what: the principal of a request, bearer tokens, the authorization hook.

Why tokens are kept only as digests: a configuration file or a process dump must not hand out
the secrets it checks. A token is compared by its SHA-256 digest against every configured
digest with ``hmac.compare_digest``, so neither a match nor its position leaks through timing.
Why a tokens file is read again when it changes: removing a line (or changing its roles) must
take effect at once, for API requests and the inspector's sessions alike, without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from starlette.requests import Request

from ..contracts.errors import ConfigurationError

__all__ = [
    "Authenticator",
    "Authorizer",
    "BearerTokens",
    "Principal",
    "allow_any",
    "hash_token",
    "resolve",
]

T = TypeVar("T")

logger = logging.getLogger("intention_kernel.http._auth")


async def resolve(value: T | Awaitable[T]) -> T:
    """The result of a host hook that may be sync or async (``authenticate``, ``authorize``)."""
    if inspect.isawaitable(value):
        return await value
    return value


_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_PRINCIPAL = re.compile(r"[^\s\x00-\x1f\x7f]{1,256}")
_ROLE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def _roles(name: str, given: Iterable[str]) -> frozenset[str]:
    if isinstance(given, str):
        given = given.split(",")
    roles = frozenset(r.strip() for r in given if r.strip())
    bad = sorted(r for r in roles if not _ROLE.fullmatch(r))
    if bad:
        raise ConfigurationError(
            f"the roles of {name} must be lower-case words (a-z, 0-9, _ . -): {bad[:3]}",
            context={"setting": "tokens"},
        )
    return roles


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. ``id`` is recorded as the actor of the approvals it gives."""

    id: str
    roles: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _PRINCIPAL.fullmatch(self.id):
            raise ConfigurationError(
                "a principal id is 1 to 256 characters without spaces or control characters",
                context={"setting": "principal"},
            )


Authenticator = Callable[[Request], Principal | Awaitable[Principal | None] | None]
"""``(request) -> Principal | None`` (sync or async); ``None`` refuses the request (401)."""

Authorizer = Callable[[Principal, str, str], bool | Awaitable[bool]]
"""``(principal, thread_id, action) -> bool`` (sync or async); ``action`` is ``turn`` or
``read``. ``False`` refuses the request (403)."""


def allow_any(principal: Principal, thread_id: str, action: str) -> bool:
    """The default authorization: any authenticated principal may act on any thread."""
    return True


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of a token, the form ``BearerTokens`` and a tokens file keep."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


class BearerTokens:
    """Authenticates ``Authorization: Bearer <token>`` against configured token digests.

    ``BearerTokens({"alice": "sha256:<hex>"})`` takes digests as configuration holds them;
    ``BearerTokens.from_secrets({"alice": "s3cret"})`` hashes at once and keeps only digests;
    ``BearerTokens.from_file(path)`` reads lines ``principal sha256:<hex> [role,role]`` and
    reads the file again when it changes (a removed line or changed roles apply to the next
    request; a file that no longer reads refuses every token until it is fixed).
    ``roles`` gives a principal its ``Principal.roles`` (the inspector's ``viewer`` and
    ``operator``); a principal without roles authenticates as before.
    """

    __slots__ = ("_digests", "_source", "_stamp")

    def __init__(
        self, digests: Mapping[str, str], roles: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        entries: list[tuple[bytes, Principal]] = []
        seen: set[str] = set()
        roles = roles or {}
        unknown = sorted(set(roles) - set(digests))
        if unknown:
            raise ConfigurationError(
                f"roles given for principals without a token: {unknown[:3]}",
                context={"setting": "tokens"},
            )
        for name, digest in digests.items():
            principal = Principal(name, _roles(name, roles.get(name, ())))
            match = _DIGEST.fullmatch(digest.strip().lower()) if isinstance(digest, str) else None
            if match is None:
                raise ConfigurationError(
                    f"the token of {name} is not sha256:<64 hex digits>",
                    context={"setting": "tokens"},
                )
            if match.group(1) in seen:
                raise ConfigurationError(
                    f"the token of {name} is also another principal's",
                    context={"setting": "tokens"},
                )
            seen.add(match.group(1))
            entries.append((bytes.fromhex(match.group(1)), principal))
        if not entries:
            raise ConfigurationError("no bearer tokens configured", context={"setting": "tokens"})
        self._digests = tuple(entries)
        self._source: Path | None = None
        self._stamp: tuple[int, int, int] | None = None

    @classmethod
    def from_secrets(
        cls, secrets: Mapping[str, str], roles: Mapping[str, Iterable[str]] | None = None
    ) -> BearerTokens:
        """Tokens given in clear (tests, a secret store): hashed here, the clear text dropped."""
        short = [name for name, secret in secrets.items() if len(secret) < 8]
        if short:
            raise ConfigurationError(
                "a bearer token must be at least 8 characters",
                context={"setting": "tokens", "principals": sorted(short)},
            )
        return cls({name: hash_token(secret) for name, secret in secrets.items()}, roles)

    @classmethod
    def from_file(cls, path: str | Path) -> BearerTokens:
        """Lines ``principal sha256:<hex>`` with optional roles ``viewer`` or
        ``operator,viewer`` after; blank lines and ``#`` comments are skipped. The file is
        read again whenever it changes."""
        source = Path(path)
        stamp = _stamp(source)
        tokens = cls(*_parse(source))
        tokens._source = source
        tokens._stamp = stamp
        return tokens

    def _refresh(self) -> None:
        """Read the tokens file again if it changed since it was last read."""
        if self._source is None:
            return
        try:
            stamp = _stamp(self._source)
        except ConfigurationError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._digests = BearerTokens(*_parse(self._source))._digests
        except ConfigurationError as exc:
            logger.error("the tokens file no longer reads, every token is refused: %s", exc)
            self._digests = ()

    def __call__(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.verify(token)

    def verify(self, token: str) -> Principal | None:
        """The principal whose token this is (a pasted token at a login page, say)."""
        token = token.strip()
        if not token:
            return None
        return self.verify_digest(hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest())

    def verify_digest(self, digest: bytes) -> Principal | None:
        """The principal whose token has this SHA-256 digest now (a session checks its token
        again on every request without keeping the token)."""
        self._refresh()
        found: Principal | None = None
        for expected, principal in self._digests:  # every entry: no early exit to time
            if hmac.compare_digest(digest, expected):
                found = principal
        return found

    def __repr__(self) -> str:
        return f"BearerTokens({len(self._digests)} principal(s))"


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the tokens file: {type(exc).__name__}", context={"setting": "tokens"}
        ) from None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def _parse(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The digests and roles of a tokens file (``BearerTokens.from_file``)."""
    digests: dict[str, str] = {}
    roles: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"cannot read the tokens file: {type(exc).__name__}",
            context={"setting": "tokens"},
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        parts = content.split()
        if len(parts) not in (2, 3) or parts[0] in digests:
            raise ConfigurationError(
                f"line {number} of the tokens file is not 'principal sha256:<hex>"
                " [role,role]' (or names a principal twice)",
                context={"setting": "tokens", "line": number},
            )
        digests[parts[0]] = parts[1]
        if len(parts) == 3:
            roles[parts[0]] = parts[2]
    return digests, roles
