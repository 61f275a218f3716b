"""The agent manifest and its fingerprint.

Why a manifest: a stored checkpoint was produced under one contract (capability ids, versions,
schemas, facts, effect and confirmation modes). The fingerprint is the SHA-256 of the manifest's
canonical JSON (sorted keys, no whitespace), so it is the same in every process and Python
version for the same definition, and any contract change yields a new one. Descriptions,
guidance, the consent question's presentation (``consent_fields``, ``consent_summary``) and the
``execute`` functions are deliberately left out: rewording a description is not a contract
change, and function objects have no stable identity.

The per-task models (``define_agent(models=...)``) are part of it, by name (``model_label``), and
only when given: a thread continued by another model is a change the host must declare, while an
agent without per-task models keeps the fingerprint it had before they existed.
"""

from __future__ import annotations

from typing import Any

from ..contracts.codec import fingerprint
from ._agent import AgentDefinition
from ._capability import Capability
from ._routing import model_label

__all__ = ["MANIFEST_VERSION", "build_manifest", "manifest_fingerprint"]

MANIFEST_VERSION = 1


def _capability_entry(cap: Capability) -> dict[str, Any]:
    return {
        "id": cap.id,
        "version": cap.version,
        "effect": cap.effect,
        "confirmation": cap.confirmation,
        "requires": sorted(cap.requires),
        "provides": sorted(cap.provides),
        "invalidates": sorted(cap.invalidates),
        "input_schema": cap.input_schema.model_json_schema(),
        "output_schema": cap.output_schema.model_json_schema(),
    }


def build_manifest(agent: AgentDefinition) -> dict[str, Any]:
    """The contract of a (valid) agent as plain JSON."""
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "agent": {"id": agent.id, "version": agent.version},
        "capabilities": sorted(
            (_capability_entry(c) for c in agent.capabilities), key=lambda e: str(e["id"])
        ),
    }
    if agent.models:
        manifest["models"] = {task: model_label(choice) for task, choice in agent.models}
    return manifest


def manifest_fingerprint(manifest: dict[str, Any]) -> str:
    """``ik1-`` + the SHA-256 of the manifest's canonical JSON (same in every process)."""
    return "ik1-" + fingerprint(manifest)
