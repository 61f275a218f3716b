"""What the model is told about capabilities, and the answer schemas built from them.

Why a branched interpretation schema: with one branch per capability (``capability`` fixed to
its id, ``input`` its input schema) a provider's structured output holds the model to each
capability's input schema, and a strict provider (OpenAI) can enforce the whole answer, where a
free-form ``input`` could only be checked after the fact. It is built per set of capabilities:
once the catalog passes ``KernelLimits.select_above``, a turn sends only the capabilities a
first ``select`` request chose (bounded prompts), so its schema names only those.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import JsonValue

from ._capability import Capability

__all__ = ["Catalog", "catalog_entry", "encoded", "interpretation_schema", "selection_schema"]

_CACHED = 256
"""Interpretation schemas and entry lists kept per agent (one per set of chosen capabilities)."""


def encoded(value: JsonValue) -> bytes:
    """Compact JSON in the kernel's key order, as a request is measured and hashed (a value
    ``json`` cannot write, such as an integer past Python's digit limit that a repair request
    repeats, is measured as a marker)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except (ValueError, TypeError, RecursionError):
        return b"<not encodable>"


_ANSWER: dict[str, JsonValue] = {
    "type": "object",
    "description": "The user's answer to the pending interaction.",
    "properties": {
        "option": {"type": "string", "description": "one of the interaction's options"},
        "interaction_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["option"],
}


def catalog_entry(cap: Capability) -> dict[str, JsonValue]:
    """What the interpreting model is told about one capability."""
    return {
        "id": cap.id,
        "version": cap.version,
        "description": cap.description,
        "effect": str(cap.effect),
        "input_schema": cap.input_schema.model_json_schema(),
        "output_schema": cap.output_schema.model_json_schema(),
        "requires": list(cap.requires),
        "provides": list(cap.provides),
        "guidance": cap.guidance.to_json(),
    }


def _moved(node: Any, prefix: str, root: str) -> Any:
    """``node`` with its local ``$ref``s pointing at the renamed definitions."""
    if isinstance(node, dict):
        out = {k: _moved(v, prefix, root) for k, v in node.items()}
        ref = node.get("$ref")
        if ref == "#":
            out["$ref"] = f"#/$defs/{root}"
        elif isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = f"#/$defs/{prefix}{ref[len('#/$defs/') :]}"
        return out
    if isinstance(node, list):
        return [_moved(v, prefix, root) for v in node]
    return node


def interpretation_schema(caps: Sequence[Capability]) -> dict[str, JsonValue]:
    """The interpretation answer for these capabilities: each intention is one of them, with
    an input of its schema (definitions renamed per capability so they cannot collide)."""
    defs: dict[str, JsonValue] = {"Answer": _ANSWER}
    branches: list[JsonValue] = []
    for n, cap in enumerate(caps):
        schema = copy.deepcopy(cap.input_schema.model_json_schema())
        inner = schema.pop("$defs", {})
        root, prefix = f"c{n}", f"c{n}_"
        defs[root] = _moved(schema, prefix, root)
        for name, sub in inner.items():
            defs[prefix + name] = _moved(sub, prefix, root)
        branches.append(
            {
                "type": "object",
                "properties": {
                    "capability": {"type": "string", "const": cap.id},
                    "input": {"$ref": f"#/$defs/{root}"},
                },
                "required": ["capability", "input"],
                "additionalProperties": False,
            }
        )
    intentions: dict[str, JsonValue] = {
        "type": "array",
        "description": "What the user wants done: one capability call each.",
    }
    if len(branches) == 1:
        intentions["items"] = branches[0]
    elif branches:
        intentions["items"] = {"anyOf": branches}
    else:
        intentions["items"] = {
            "type": "object",
            "properties": {"capability": {"type": "string"}},
            "required": ["capability"],
            "additionalProperties": False,
        }
        intentions["maxItems"] = 0
    return {
        "type": "object",
        "title": "Interpretation",
        "properties": {
            "intentions": intentions,
            "answer": {
                "anyOf": [{"$ref": "#/$defs/Answer"}, {"type": "null"}],
                "description": "Set when the message answers the pending interaction.",
            },
            "reply": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "A short reply when no capability is needed.",
            },
            "more": {
                "type": "boolean",
                "description": (
                    "True when what else to do depends on the results of these intentions: "
                    "you are shown their results and may plan more."
                ),
            },
        },
        "required": ["intentions"],
        "$defs": defs,
    }


def selection_schema(at_most: int) -> dict[str, JsonValue]:
    """The ``select`` answer: ids of the capabilities the message may need."""
    return {
        "type": "object",
        "title": "Selection",
        "properties": {
            "capabilities": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": at_most,
                "description": (
                    f"The ids (the keys of `capabilities`) of at most {at_most} capabilities "
                    "the user's message may need, most likely first; empty when none fits."
                ),
            }
        },
        "required": ["capabilities"],
    }


class Catalog:
    """An agent's capabilities as the model sees them: full entries, short summaries for the
    selection step, and interpretation schemas per chosen set (cached)."""

    __slots__ = ("_caps", "_encoded", "_entries", "_lists", "_schemas", "ids", "summaries")

    def __init__(self, caps: Iterable[Capability]) -> None:
        self._caps = {c.id: c for c in caps}
        self.ids = tuple(self._caps)
        self._entries = {c.id: catalog_entry(c) for c in self._caps.values()}
        self.summaries: dict[str, JsonValue] = {c.id: c.description for c in self._caps.values()}
        """Capability id to description: all the ``select`` request shows of each."""
        self._lists: dict[tuple[str, ...], list[JsonValue]] = {}
        self._schemas: dict[tuple[str, ...], dict[str, JsonValue]] = {}
        self._encoded: dict[int, tuple[object, bytes]] = {}
        self.remember(self.summaries)

    def ordered(self, ids: Iterable[str]) -> tuple[str, ...]:
        """The known ids among ``ids``, in catalog order."""
        wanted = set(ids)
        return tuple(i for i in self.ids if i in wanted)

    def entries(self, ids: tuple[str, ...]) -> list[JsonValue]:
        """The full entries of these capabilities (the same list object for the same ids)."""
        found = self._lists.get(ids)
        if found is None:
            if len(self._lists) >= _CACHED:
                self._lists.clear()
            found = self._lists[ids] = [self._entries[i] for i in ids]
            self.remember(found)
        return found

    def schema(self, ids: tuple[str, ...]) -> dict[str, JsonValue]:
        """The interpretation schema for these capabilities (cached)."""
        found = self._schemas.get(ids)
        if found is None:
            if len(self._schemas) >= _CACHED:
                self._schemas.clear()
            found = self._schemas[ids] = interpretation_schema([self._caps[i] for i in ids])
            self.remember(found)
        return found

    def remember(self, value: JsonValue) -> None:
        """Keep the encoding of a value the kernel sends unchanged turn after turn (entries,
        schemas), so measuring a request does not encode it again. Never mutate it after."""
        if len(self._encoded) >= 4 * _CACHED:
            self._encoded.clear()
        self._encoded[id(value)] = (value, encoded(value))

    def encoded(self, value: JsonValue) -> bytes:
        """``encoded(value)``, from the remembered encodings when it is one of those objects."""
        hit = self._encoded.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        return encoded(value)
