"""Who may do what: unauthenticated requests are refused by default, an authorization hook
decides per thread, and the principal is recorded as the actor of the approvals it gives."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from starlette.requests import Request

from intention_kernel.contracts.errors import ConfigurationError
from intention_kernel.http import BearerTokens, Principal, create_app

from .support import TOKENS, Desk, Live, app_for, is_problem, serve, to_confirmation


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer nope-nope-nope", "Basic YWxpY2U6eA==", "Bearer", f"bearer{TOKENS['alice']}"],
)
async def test_unauthenticated_requests_are_refused(
    live: Live, desk: Desk, authorization: str | None
) -> None:
    headers = {"Idempotency-Key": "turn-1"}
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = await live.post("t-1", None, {"text": "hi"}, who=None, headers=headers)
    is_problem(answer, 401, "UNAUTHENTICATED")
    assert answer.headers["www-authenticate"].startswith("Bearer")
    for path in ("/v1/threads/t-1", "/v1/threads/t-1/turns"):
        read = await live.client.get(path, headers=headers)
        is_problem(read, 401, "UNAUTHENTICATED")
    assert desk.model.count() == 0


async def test_the_authorization_hook_decides_per_thread(desk: Desk) -> None:
    asked: list[tuple[str, str, str]] = []

    async def authorize(principal: Principal, thread_id: str, action: str) -> bool:
        asked.append((principal.id, thread_id, action))
        return thread_id.startswith(principal.id + "-")

    async with serve(app_for(desk, authorize=authorize)) as live:
        assert (await live.post("alice-1", "turn-1", {"text": "hi"})).status_code == 200
        is_problem(
            await live.post("alice-1", "turn-2", {"text": "hi"}, who="bob"), 403, "FORBIDDEN"
        )
        bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
        is_problem(await live.client.get("/v1/threads/alice-1", headers=bob), 403, "FORBIDDEN")
        is_problem(
            await live.client.get("/v1/threads/alice-1/turns", headers=bob), 403, "FORBIDDEN"
        )
    assert ("alice", "alice-1", "turn") in asked
    assert ("bob", "alice-1", "read") in asked
    assert desk.model.count("interpret") == 1


async def test_the_principal_is_the_actor_of_an_approval(live: Live, desk: Desk) -> None:
    interaction = await to_confirmation(live, "t-1")
    press = {"text": "", "selection": {"interaction_id": interaction["id"], "option": "yes"}}
    answer = await live.post("t-1", "turn-yes", press, who="bob")
    assert answer.status_code == 200 and "Booked" in answer.json()["response"]["text"]
    events = await desk.store.read_outbox(thread_id="t-1", turn_id="turn-yes")
    accepted = [e.event for e in events if e.event.type == "confirmation.accepted"]
    assert [e.data["actor"] for e in accepted] == ["bob"]


async def test_a_host_callable_authenticates(desk: Desk) -> None:
    async def authenticate(request: Request) -> Principal | None:
        user = request.headers.get("x-user")
        return Principal(user, frozenset({"agent"})) if user == "carol" else None

    async with serve(app_for(desk, authenticate=authenticate)) as live:
        ok = await live.post("t-1", "turn-1", {"text": "hi"}, who=None, headers={"X-User": "carol"})
        assert ok.status_code == 200
        refused = await live.post("t-1", "turn-2", {"text": "hi"}, who=None)
        is_problem(refused, 401, "UNAUTHENTICATED")


async def test_without_authentication_the_app_is_not_built(desk: Desk) -> None:
    with pytest.raises(ConfigurationError, match="authenticate"):
        create_app(desk.agent)
    async with serve(create_app(desk.agent, allow_anonymous=True)) as live:
        answer = await live.post("t-1", "turn-1", {"text": "hi"}, who=None)
        assert answer.status_code == 200


def test_bearer_tokens_keep_only_digests(tmp_path: Path) -> None:
    tokens = BearerTokens.from_secrets(TOKENS)
    kept = repr(tokens) + repr(tokens._digests)
    assert not any(secret in kept for secret in TOKENS.values())
    digest = hashlib.sha256(TOKENS["alice"].encode()).hexdigest()
    assert (bytes.fromhex(digest), Principal("alice")) in tokens._digests
    assert len(BearerTokens({"alice": f"sha256:{digest}"})._digests) == 1
    path = tmp_path / "tokens"
    path.write_text(f"# who and digest\nalice sha256:{digest}\n\n")
    assert (
        BearerTokens.from_file(path)._digests
        == BearerTokens({"alice": f"sha256:{digest}"})._digests
    )
    for bad in ({"alice": "s3cret"}, {"alice": "sha256:abc"}, {}, {"a b": f"sha256:{digest}"}):
        with pytest.raises(ConfigurationError):
            BearerTokens(bad)
    with pytest.raises(ConfigurationError):
        BearerTokens.from_secrets({"alice": "short"})
    with pytest.raises(ConfigurationError):
        BearerTokens({"alice": f"sha256:{digest}", "bob": f"sha256:{digest}"})
    path.write_text("alice\n")
    with pytest.raises(ConfigurationError, match="line 1"):
        BearerTokens.from_file(path)
