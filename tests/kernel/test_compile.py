"""Compile: every problem listed at once; a fingerprint stable across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic import BaseModel

from intention_kernel.contracts import AgentCompilationError, ErrorCode
from intention_kernel.contracts.codec import canonical_json
from intention_kernel.kernel import (
    Completed,
    ConfirmationMode,
    EffectKind,
    Kernel,
    define_agent,
    define_capability,
)
from intention_kernel.kernel._manifest import build_manifest
from intention_kernel.testing import MemoryDurability, ScriptedModelGateway

from .support import FaqAnswer, FaqQuery, support_agent


async def _noop(context: Any, query: Any) -> Completed:
    return Completed(output={"answer": "-"})


def _cap(**overrides: Any) -> Any:
    spec: dict[str, Any] = {
        "id": "faq.search",
        "version": "1.0.0",
        "description": "Answer a policy question.",
        "input": FaqQuery,
        "output": FaqAnswer,
        "execute": _noop,
    }
    spec.update(overrides)
    return define_capability(**spec)


def _kernel() -> Kernel:
    return Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())


def test_every_problem_is_listed_at_once() -> None:
    class NotAModel:
        pass

    agent = define_agent(
        id="broken",
        version="one",
        description=" ",
        capabilities=[
            _cap(),
            _cap(),  # duplicate id
            _cap(id="pay.charge", effect="write", confirmation="none"),
            _cap(id="ship.track", requires=["order@1"]),  # nobody provides it
            _cap(id="bad.version", version="1.0"),
            _cap(id="bad.description", description=""),
            _cap(id="bad.facts", provides=["Order"], invalidates=["x@0"]),
            _cap(id="Bad Id"),
            _cap(id="bad.schema", input=NotAModel),
            _cap(id="bad.read", confirmation="required"),
            _cap(id="bad.effect", effect="delete"),
        ],
    )
    with pytest.raises(AgentCompilationError) as info:
        _kernel().compile(agent)
    error = info.value
    assert error.code == ErrorCode.AGENT_COMPILATION_FAILED
    codes = [(p["code"], p["where"]) for p in error.context["problems"]]
    expected = {
        ("invalid_version", "agent"),
        ("empty_description", "agent"),
        ("duplicate_capability", "capability 'faq.search'"),
        ("write_without_confirmation", "capability 'pay.charge'"),
        ("unprovided_fact", "capability 'ship.track'"),
        ("invalid_version", "capability 'bad.version'"),
        ("empty_description", "capability 'bad.description'"),
        ("invalid_fact_ref", "capability 'bad.facts'"),
        ("invalid_capability_id", "capability 'Bad Id'"),
        ("invalid_schema", "capability 'bad.schema'"),
        ("confirmation_without_write", "capability 'bad.read'"),
        ("invalid_effect", "capability 'bad.effect'"),
    }
    assert expected <= set(codes)
    assert sum(1 for c, w in codes if w == "capability 'bad.facts'") == 2
    assert str(len(codes)) in error.message


def test_write_with_required_or_capability_confirmation_compiles() -> None:
    agent = support_agent(
        [
            _cap(id="pay.charge", effect="write", confirmation="required"),
            _cap(id="pay.refund", effect="write", confirmation="capability"),
        ]
    )
    assert _kernel().compile(agent).fingerprint.startswith("ik1-")


def test_not_an_agent_is_refused() -> None:
    with pytest.raises(AgentCompilationError):
        _kernel().compile("agent")  # type: ignore[arg-type]


def test_fingerprint_ignores_wording_but_not_contracts() -> None:
    kernel = _kernel()
    base = kernel.compile(support_agent()).fingerprint
    assert kernel.compile(support_agent()).fingerprint == base
    reworded = support_agent(description="Another description.", instructions="Be brief.")
    assert kernel.compile(reworded).fingerprint == base
    assert kernel.compile(support_agent(version="1.0.1")).fingerprint != base
    assert kernel.compile(support_agent([_cap(id="extra.cap")])).fingerprint != base

    class FaqQuery2(BaseModel):
        topic: str
        language: str = "en"

    changed = support_agent([_cap(id="extra.cap", input=FaqQuery2)])
    assert (
        kernel.compile(changed).fingerprint
        != kernel.compile(support_agent([_cap(id="extra.cap")])).fingerprint
    )
    order = list(reversed(support_agent().capabilities))
    assert kernel.compile(support_agent(capabilities=order)).fingerprint == base


def test_effect_and_confirmation_spelled_either_way_give_one_fingerprint() -> None:
    as_text = _cap(id="pay.charge", effect="write", confirmation="required")
    as_members = _cap(
        id="pay.charge", effect=EffectKind.WRITE, confirmation=ConfirmationMode.REQUIRED
    )
    assert as_text.effect is EffectKind.WRITE
    assert as_text.confirmation is ConfirmationMode.REQUIRED
    kernel = _kernel()
    fingerprints = {kernel.compile(support_agent([c])).fingerprint for c in (as_text, as_members)}
    assert len(fingerprints) == 1
    manifest = canonical_json(build_manifest(support_agent([as_members])))
    assert '"confirmation":"required","effect":"write","id":"pay.charge"' in manifest


_PROGRAM = textwrap.dedent(
    """
    from intention_kernel.kernel import Kernel
    from intention_kernel.testing import MemoryDurability, ScriptedModelGateway
    from tests.kernel.support import support_agent
    kernel = Kernel(durability=MemoryDurability(), model=ScriptedModelGateway())
    print(kernel.compile(support_agent()).fingerprint)
    """
)


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_fingerprint_is_the_same_in_another_process(hash_seed: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": root}
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=root,
    )
    assert out.stdout.strip() == _kernel().compile(support_agent()).fingerprint


def test_request_fingerprint_equals_the_codec_fingerprint() -> None:
    from intention_kernel.contracts.codec import fingerprint
    from intention_kernel.kernel import request_fingerprint

    cases: list[tuple[str, dict[str, Any] | None]] = [
        ("hi", None),
        ("é ü", {"b": [1, 2.5], "a": {"z": None}}),
    ]
    for text, selection in cases:
        expected = fingerprint({"text": text, "selection": selection})
        assert request_fingerprint(text, selection) == expected


def test_the_message_names_every_problem() -> None:
    """What a person reads (a log line, the CLI's error) says where, what and which code."""
    agent = support_agent(
        [_cap(id="bad.description", description=""), _cap(id="bad.version", version="1.0")]
    )
    with pytest.raises(AgentCompilationError) as info:
        _kernel().compile(agent)
    message = info.value.message
    assert message.startswith("the agent definition has 2 problem(s): ")
    assert "capability 'bad.description': description must be non-blank text" in message
    assert "(empty_description)" in message
    assert "capability 'bad.version': version must be semantic (e.g. 1.0.0)" in message
    assert "(invalid_version)" in message
    assert str(info.value).startswith("[AGENT_COMPILATION_FAILED] the agent definition has 2")


async def test_with_durability_commits_to_the_other_store() -> None:
    first, second = MemoryDurability(), MemoryDurability()
    compiled = Kernel(durability=first, model=ScriptedModelGateway()).compile(support_agent())
    moved = compiled.with_durability(second)
    assert moved.durability is second and compiled.durability is first
    keyed = Kernel(durability=first, model=ScriptedModelGateway()).compile(
        support_agent(), provider_key=lambda receipt: f"ns:{receipt.id}"
    )
    assert keyed.with_durability(second).provider_key is keyed.provider_key  # the served key
    assert moved.fingerprint == compiled.fingerprint
    assert moved.compatibility == compiled.compatibility
    gateway = ScriptedModelGateway(
        {"interpret": {"intentions": []}, "compose": {"text": "Hello.", "citations": []}}
    )
    moved = Kernel(durability=first, model=gateway).compile(support_agent()).with_durability(second)
    await moved.run(thread_id="t1", turn_id="turn-1", text="hello")
    assert await second.load_checkpoint("t1") is not None
    assert await first.load_checkpoint("t1") is None
