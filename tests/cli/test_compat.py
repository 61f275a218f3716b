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


def test_every_form_of_agent_passes_the_gate(store: str) -> None:
    """A definition, a compiled agent, a factory of no arguments and a factory of the opened
    store (what ``serve`` needs), sync or async: one ``module:attribute`` for every command."""
    for spec in (
        "tests.cli.agents:current",
        "tests.cli.agents:factory",
        "tests.cli.agents:store_factory",
        "tests.cli.agents:async_store_factory",
        "intention_kernel.examples.travel_desk:compile_desk",
    ):
        result = cli("check-compat", "--agent", spec, "--store", store, "--json")
        if spec.startswith("intention_kernel"):  # another agent: every checkpoint refused
            assert result.exit_code == 1, (spec, result.stderr)
            continue
        assert result.exit_code == 0, (spec, result.stderr)
        diagnosed = cli("thread", "diagnose", "thread-0", "--agent", spec, "--store", store)
        assert diagnosed.exit_code == 0, (spec, diagnosed.stdout, diagnosed.stderr)


@pytest.mark.parametrize("spec", ["tests.cli.agents:invalid", "tests.cli.agents:invalid_factory"])
def test_an_invalid_definition_names_each_problem_and_exits_5(store: str, spec: str) -> None:
    result = cli("check-compat", "--agent", spec, "--store", store)
    assert result.exit_code == 5, result.stderr
    assert "[AGENT_COMPILATION_FAILED] the agent definition has 2 problem(s):" in result.stderr
    assert "capability 'bad.description': description must be non-blank text" in result.stderr
    assert "(empty_description)" in result.stderr and "(invalid_version)" in result.stderr
    assert "capability 'bad.version'" in result.stderr and "Traceback" not in result.stderr
    data = cli_json("check-compat", "--agent", spec, "--store", store, code=5)
    problems = data["error"]["context"]["problems"]
    assert {p["code"] for p in problems} == {"empty_description", "invalid_version"}
