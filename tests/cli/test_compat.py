"""check-compat as a deployment gate: 0 when every checkpoint loads, 1 when any is refused."""

from __future__ import annotations

import asyncio

import pytest

from intention_kernel.kernel._compile import compile_manifest

from . import agents
from .conftest import Seeded
from .support import cli, cli_json, commit_turn

FP = compile_manifest(agents.current)[1]


@pytest.fixture
def store(empty: Seeded) -> str:
    async def seed() -> None:
        opened = await empty.open()
        try:
            for n in range(3):
                await commit_turn(opened, f"thread-{n}", "turn-1", fingerprint=FP)
        finally:
            await opened.close()

    asyncio.run(seed())
    return empty.store


def test_gate_passes_for_the_deployed_agent(store: str) -> None:
    for spec in ("tests.cli.agents:current", "tests.cli.agents:factory"):
        data = cli_json("check-compat", "--agent", spec, "--store", store)
        assert data["ok"] and data["checkpoints"] == 3
        assert data["fingerprints"] == {FP: 3} and data["schema_versions"] == {"1": 3}
    human = cli("check-compat", "--agent", "tests.cli.agents:current", "--store", store)
    assert human.exit_code == 0 and "ok: every stored checkpoint loads" in human.stdout


def test_gate_fails_for_a_changed_agent(store: str) -> None:
    spec = ["check-compat", "--agent", "tests.cli.agents:changed", "--store", store]
    data = cli_json(*spec, code=1)
    assert not data["ok"]
    assert sorted(r["thread_id"] for r in data["refused"]) == ["thread-0", "thread-1", "thread-2"]
    assert data["refused"][0]["fingerprint"] == FP
    human = cli(*spec)
    assert human.exit_code == 1 and "REFUSED: 3 thread(s)" in human.stdout
    declared = cli_json(*spec, "--compatible-with", FP)
    assert declared["ok"]


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        ("tests.cli.agents", "INVALID_AGENT"),
        ("tests.cli.nowhere:agent", "AGENT_NOT_FOUND"),
        ("tests.cli.agents:missing", "AGENT_NOT_FOUND"),
        ("tests.cli.agents:not_an_agent", "INVALID_AGENT"),
    ],
)
def test_bad_agent_spec(store: str, agent: str, code: str) -> None:
    result = cli("check-compat", "--agent", agent, "--store", store)
    assert result.exit_code == 2 and f"[{code}]" in result.stderr
