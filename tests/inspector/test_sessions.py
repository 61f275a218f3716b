"""Roles in the tokens file, the inspector's role rule, and signed session cookies."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.http import BearerTokens, Principal, hash_token
from intention_kernel.http.inspector import OPERATOR, VIEWER, inspector_role
from intention_kernel.http.inspector.session import SessionCodec

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


def test_session_cookies_are_signed_and_expire() -> None:
    codec = SessionCodec(SECRET, lifetime=60)
    value, session = codec.issue(Principal("alice", frozenset({"operator"})))
    read = codec.read(value)
    assert read == session and read.operator and len(read.csrf) >= 32
    body, mac = value.split(".")
    assert codec.read(body + "." + mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB")) is None
    assert codec.read(body[:-1] + "x." + mac) is None
    assert SessionCodec(SECRET + "-other").read(value) is None
    assert codec.read(None) is None and codec.read("garbage") is None
    expired = SessionCodec(SECRET, lifetime=60)
    expired.lifetime = -1  # issued already past its expiry
    old, _ = expired.issue(Principal("alice"))
    assert codec.read(old) is None
    token, cookie = codec.prelogin()
    assert codec.check_prelogin(cookie, token)
    assert not codec.check_prelogin(cookie, token + "x")
    assert not codec.check_prelogin(None, token)
    assert not codec.check_prelogin(value, session.csrf)  # a session is not a login cookie
    with pytest.raises(ConfigurationError):
        SessionCodec("short")
    assert time.time() < session.expires
