"""Roles in the tokens file, the inspector's role rule, and signed session cookies."""

from __future__ import annotations

from pathlib import Path

import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.http import BearerTokens, Principal, hash_token
from intention_kernel.http.inspector import OPERATOR, VIEWER, inspector_role
from intention_kernel.http.inspector._session import SessionCodec, SessionStore

SECRET = "a-session-secret-of-at-least-32-bytes"


def test_the_tokens_file_carries_roles_and_old_lines_still_work(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(
        f"alice {hash_token('alice-token-1')} operator,viewer\n"
        f"bob {hash_token('bob-token-22')}  # no roles: as before\n"
        f"carol {hash_token('carol-token-3')} viewer\n"
    )
    tokens = BearerTokens.from_file(path)
    alice = tokens.verify("alice-token-1")
    assert alice == Principal("alice", frozenset({"operator", "viewer"}))
    assert tokens.verify("bob-token-22") == Principal("bob")
    assert tokens.verify(" carol-token-3 ") == Principal("carol", frozenset({"viewer"}))
    assert tokens.verify("nobody-token") is None
    assert tokens.verify("") is None
    for bad in ("alice sha256:" + "0" * 64 + " Operator", "alice sha256:" + "0" * 64 + " a b"):
        path.write_text(bad + "\n")
        with pytest.raises(ConfigurationError):
            BearerTokens.from_file(path)
    with pytest.raises(ConfigurationError, match="without a token"):
        BearerTokens.from_secrets({"alice": "alice-token-1"}, {"bob": ["viewer"]})


def test_roles_of_the_inspector() -> None:
    assert inspector_role(Principal("a")) == VIEWER  # no role: read only
    assert inspector_role(Principal("a", frozenset({"viewer"}))) == VIEWER
    assert inspector_role(Principal("a", frozenset({"operator"}))) == OPERATOR
    assert inspector_role(Principal("a", frozenset({"viewer", "operator"}))) == OPERATOR
    assert inspector_role(Principal("a", frozenset({"api"}))) is None  # other roles: no entry


async def test_sessions_live_on_the_server_and_end_at_once() -> None:
    sessions = SessionStore(lifetime=60)
    who = {"alice": Principal("alice", frozenset({"operator"}))}

    async def recheck() -> Principal | None:
        return who.get("alice")

    sid, session = sessions.start(who["alice"], recheck)
    assert len(sid) >= 43 and len(session.csrf) >= 43 and sid != session.csrf
    assert await sessions.get(sid) == session and session.operator
    assert await sessions.get(sid + "x") is None and await sessions.get(None) is None
    who["alice"] = Principal("alice", frozenset({"viewer"}))  # a role change: at once
    changed = await sessions.get(sid)
    assert changed is not None and not changed.operator and changed.csrf == session.csrf
    sessions.end(sid)  # logout
    assert await sessions.get(sid) is None and len(sessions) == 0
    sid, _ = sessions.start(who["alice"], recheck)
    del who["alice"]  # the token removed
    assert await sessions.get(sid) is None and len(sessions) == 0
    who["alice"] = Principal("alice", frozenset({"api"}))  # no inspector role any more
    sid, _ = sessions.start(Principal("alice"), recheck)
    assert await sessions.get(sid) is None
    expired = SessionStore(lifetime=60)
    expired.lifetime = -1  # started already past its expiry
    old, _ = expired.start(Principal("alice"), recheck)
    assert await expired.get(old) is None
    full = SessionStore(lifetime=60, limit=2)
    first, _ = full.start(Principal("a"), recheck)
    for _ in range(3):
        full.start(Principal("a"), recheck)
    assert len(full) == 2 and await full.get(first) is None


def test_login_cookies_are_signed_and_expire() -> None:
    codec = SessionCodec(SECRET, lifetime=60)
    token, cookie = codec.prelogin()
    assert codec.check_prelogin(cookie, token)
    assert not codec.check_prelogin(cookie, token + "x")
    assert not codec.check_prelogin(None, token)
    body, mac = cookie.split(".")
    assert not codec.check_prelogin(
        body + "." + mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB"), token
    )
    assert not SessionCodec(SECRET + "-other").check_prelogin(cookie, token)
    with pytest.raises(ConfigurationError):
        SessionCodec("short")


def test_a_tokens_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(
        f"alice {hash_token('alice-token-1')} operator\nbob {hash_token('bob-token-22')} viewer\n"
    )
    tokens = BearerTokens.from_file(path)
    assert tokens.verify("bob-token-22") == Principal("bob", frozenset({"viewer"}))
    path.write_text(f"alice {hash_token('alice-token-1')} viewer\n")
    assert tokens.verify("bob-token-22") is None  # removed: at once
    assert tokens.verify("alice-token-1") == Principal("alice", frozenset({"viewer"}))
    path.write_text("alice not-a-digest\n")  # a broken edit refuses every token
    assert tokens.verify("alice-token-1") is None
    path.write_text(f"alice {hash_token('alice-token-1')} operator\n")
    assert tokens.verify("alice-token-1") == Principal("alice", frozenset({"operator"}))
