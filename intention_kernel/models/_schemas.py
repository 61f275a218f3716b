"""JSON Schema dialects: what each provider accepts as a structured-output schema.

Why: providers accept different subsets of JSON Schema. OpenAI's strict mode needs every object
closed (``additionalProperties: false``) with every property required, and rejects some keywords;
Gemini ignores or rejects others; Anthropic takes a tool ``input_schema`` whose root is an object.
The kernel validates every answer against the original schema anyway, so a keyword a dialect
cannot carry (``minLength``, an unsupported ``format``) is dropped and noted in the
``description`` for the model; a structure it cannot express at all (an open object in strict
mode, ``not``, ``if``/``then``) is a *problem*: ``check_schema`` lists every one, so compile can
refuse the capability, and a gateway falls back to a non-strict request.

- ``to_dialect(dialect, schema)``: the schema to send (best effort, never raises).
- ``check_schema(dialect, schema)``: every problem, as readable lines (``[]``: expressible).
- ``strip_null_optionals(schema, value)``: undo "optional became nullable" on an answer, so a
  ``null`` the strict model had to send for an omitted property becomes an omission again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import JsonValue

__all__ = ["DIALECTS", "Dialect", "check_schema", "strip_null_optionals", "to_dialect"]

Dialect = Literal["openai", "anthropic", "gemini"]
"""``openai``: Chat Completions strict structured output (also OpenAI-compatible servers);
``anthropic``: a tool ``input_schema``; ``gemini``: Gemini's JSON Schema subset."""

DIALECTS: tuple[Dialect, ...] = get_args(Dialect)
"""Every dialect name ``to_dialect`` and ``check_schema`` accept."""

_STRUCTURAL = (
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
)
"""Keywords that change which values are valid in a way no dropped-keyword note can replace."""

_METADATA = (
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator",
    "contentEncoding",
    "contentMediaType",
)
"""Keywords that only describe: dropped without a note."""


@dataclass(frozen=True, slots=True)
class _Rules:
    keep: frozenset[str]
    """Keywords passed through as they are (all others are dropped, constraints with a note)."""
    formats: frozenset[str]
    """String formats the dialect understands; another format becomes a note."""
    strict: bool
    """Closed objects, every property required (optional ones made nullable), typed values."""
    const_as_enum: bool
    max_depth: int | None = None
    max_properties: int | None = None


_COMMON = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "description",
        "title",
        "$ref",
        "$defs",
        "definitions",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "format",
    }
)
_RULES: dict[str, _Rules] = {
    "openai": _Rules(
        keep=_COMMON | {"const", "pattern", "multipleOf", "exclusiveMinimum", "exclusiveMaximum"},
        formats=frozenset(
            {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
        ),
        strict=True,
        const_as_enum=False,
        max_depth=10,
        max_properties=5000,
    ),
    "gemini": _Rules(
        keep=(_COMMON - {"title"}) | {"prefixItems", "propertyOrdering"},
        formats=frozenset({"date-time", "date", "time"}),
        strict=False,
        const_as_enum=True,
    ),
}
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number"}
_TYPED = ("type", "$ref", "anyOf", "enum", "const")
"""Keywords that give a converted node a type (strict mode refuses a node without one)."""
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions")


class _Walk:
    """One conversion: the converted copy and the problems found on the way."""

    def __init__(self, rules: _Rules, root: dict[str, Any]) -> None:
        self.rules = rules
        self.root = root
        self.problems: list[str] = []

    def problem(self, path: str, text: str) -> None:
        self.problems.append(f"{path or '$'}: {text}")

    def node(self, node: Any, path: str, depth: int) -> Any:
        if node is True:
            node = {}
        if node is False:
            self.problem(path, "a schema that accepts nothing cannot be expressed")
            return node
        if not isinstance(node, dict):
            self.problem(path, "not a schema object")
            return node
        out: dict[str, Any] = {}
        notes: list[str] = []
        several = node.get("allOf")
        structural = any(k in _STRUCTURAL for k in node) or (
            isinstance(several, list) and len(several) > 1
        )
        for key, value in node.items():
            if key in _STRUCTURAL:
                self.problem(path, f"'{key}' cannot be expressed")
            elif key in _METADATA:
                continue
            elif key == "oneOf":  # exactly one of: the kernel's own check tells them apart
                out["anyOf"] = [
                    self.node(v, f"{path}/oneOf/{i}", depth) for i, v in enumerate(value)
                ]
            elif key == "allOf":
                if isinstance(value, list) and len(value) == 1:
                    merged = self.node(value[0], f"{path}/allOf/0", depth)
                    if isinstance(merged, dict):
                        out.update({k: v for k, v in merged.items() if k not in out})
                else:
                    self.problem(path, "'allOf' of several schemas cannot be expressed")
            elif key == "const" and self.rules.const_as_enum:
                out["enum"] = [value]
                if "type" not in node and type(value) in _JSON_TYPES:
                    out["type"] = _JSON_TYPES[type(value)]
            elif key == "format" and value not in self.rules.formats:
                notes.append(f"format: {value}")
            elif key not in self.rules.keep:
                if key != "title":  # a title only names: dropped where not accepted
                    notes.append(f"{key}: {value}")
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                inner = depth + 1 if key == "properties" else 0
                out[key] = {k: self.node(v, f"{path}/{key}/{k}", inner) for k, v in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self.node(v, f"{path}/{key}/{i}", depth) for i, v in enumerate(value)]
            elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
                out[key] = self.node(value, f"{path}/{key}", depth)
            else:
                out[key] = value
        if notes:
            described = str(out.get("description", "")).strip()
            extra = "; ".join(notes)
            out["description"] = f"{described} ({extra})" if described else f"({extra})"
        if "$ref" in out and len(out) > 1 and self.rules.strict:
            # Strict mode refuses siblings next to "$ref" but takes them next to "anyOf".
            out["anyOf"] = [{"$ref": out.pop("$ref")}]
        if self.rules.strict and not any(k in out for k in _TYPED) and not structural:
            self.problem(path, "a value of any type cannot be expressed in strict mode")
        if out.get("type") == "object" or "properties" in out:
            self.object(out, node, path, depth)
        if out.get("type") == "array" and self.rules.strict:
            items = out.get("items")
            if not isinstance(items, dict) or not items:
                self.problem(path, "an array whose items have no type cannot be expressed")
        return out

    def object(self, out: dict[str, Any], original: dict[str, Any], path: str, depth: int) -> None:
        if not self.rules.strict:
            return
        if original.get("additionalProperties") not in (None, False) or (
            "properties" not in original
        ):
            # Left open: a gateway sends such a schema without strict mode.
            self.problem(path, "an open object (free-form keys) cannot be expressed")
            return
        if self.rules.max_depth is not None and depth > self.rules.max_depth:
            self.problem(path, f"objects nested deeper than {self.rules.max_depth} levels")
        properties: dict[str, Any] = out.setdefault("properties", {})
        required = set(original.get("required", []))
        for name in list(properties):
            if name not in required and not _nullable(properties[name], self.root):
                properties[name] = _with_null(properties[name])
        out["required"] = list(properties)
        out["additionalProperties"] = False


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    """Follow a local ``$ref`` (``#``, ``#/$defs/X``, ``#/definitions/X``) once or more."""
    seen: set[str] = set()
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if ref in seen or not ref.startswith("#"):
            return node
        seen.add(ref)
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            target = (
                target.get(part.replace("~1", "/").replace("~0", "~"))
                if isinstance(target, dict)
                else None
            )
        if target is None:
            return node
        node = target
    return node


def _nullable(node: Any, root: dict[str, Any]) -> bool:
    node = _resolve(node, root)
    if node is True or node == {}:
        return True
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "enum" in node and None in node["enum"]:
        return True
    return any(_nullable(v, root) for v in node.get("anyOf", []) + node.get("oneOf", []))


def _with_null(node: Any) -> Any:
    if isinstance(node, dict) and isinstance(node.get("anyOf"), list):
        return {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
    return {"anyOf": [node, {"type": "null"}]}


def _object_nodes(node: Any, depth: int = 0) -> Iterator[tuple[dict[str, Any], int]]:
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            yield node, depth
        for key, value in node.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                inner = depth + 1 if key == "properties" else 0
                for child in value.values():
                    yield from _object_nodes(child, inner)
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                for child in value:
                    yield from _object_nodes(child, depth)
            elif key in ("items", "additionalProperties"):
                yield from _object_nodes(value, depth)


def _convert(dialect: str, schema: dict[str, JsonValue]) -> tuple[dict[str, JsonValue], list[str]]:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown schema dialect {dialect!r}; one of {', '.join(DIALECTS)}")
    if not isinstance(schema, dict):
        return schema, ["$: the schema must be a JSON object"]
    root: dict[str, Any] = copy.deepcopy(schema)
    problems: list[str] = []
    resolved = _resolve(root, root)
    if "$ref" in root and isinstance(resolved, dict):
        # A root that is a reference (a recursive model): inline it, keep the definitions.
        root = {**copy.deepcopy(resolved), **{k: v for k, v in root.items() if k != "$ref"}}
    if (
        not isinstance(resolved, dict)
        or resolved.get("type", "object") != "object"
        or ("anyOf" in resolved or "oneOf" in resolved)
    ):
        problems.append("$: the root must be an object schema (not a union or a scalar)")
    if dialect == "anthropic":
        root.setdefault("type", "object")
        return root, problems
    walk = _Walk(_RULES[dialect], root)
    converted = walk.node(root, "", 0)
    problems.extend(walk.problems)
    rules = _RULES[dialect]
    if rules.max_properties is not None:
        total = sum(len(node["properties"]) for node, _ in _object_nodes(converted))
        if total > rules.max_properties:
            problems.append(f"$: {total} properties in all, more than {rules.max_properties}")
    return converted, list(dict.fromkeys(problems))


def to_dialect(dialect: Dialect, schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """The schema to send to a provider of ``dialect``: a converted copy (best effort).

    Dropped constraints are noted in ``description``; optional properties become required and
    nullable in the ``openai`` dialect (``strip_null_optionals`` undoes that on the answer).
    """
    return _convert(dialect, schema)[0]


def check_schema(dialect: Dialect, schema: dict[str, JsonValue]) -> list[str]:
    """Every problem that keeps ``dialect`` from expressing ``schema`` (``[]``: none).

    Each line is ``<JSON pointer>: <what cannot be expressed>``; compile lists them all when it
    refuses a capability for a provider.
    """
    return _convert(dialect, schema)[1]


def strip_null_optionals(schema: dict[str, JsonValue], value: JsonValue) -> JsonValue:
    """``value`` without the ``null`` properties ``schema`` (the original) allows to be omitted
    but not to be ``null``: a strict-mode model must send every property, so it sends ``null``
    for one it means to leave out, and the kernel's defaults should then apply."""
    return _strip(schema, value, schema, 0)


def _strip(node: Any, value: JsonValue, root: dict[str, Any], depth: int) -> JsonValue:
    node = _resolve(node, root)
    if depth > 64 or not isinstance(node, dict):
        return value
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            branch = _branch_for(branches, value, root)
            return value if branch is None else _strip(branch, value, root, depth + 1)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _strip(all_of[0], value, root, depth + 1)
    if isinstance(value, dict) and isinstance(node.get("properties"), dict):
        properties = node["properties"]
        required = set(node.get("required", []))
        extra = node.get("additionalProperties")
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if key in properties:
                if item is None and key not in required and not _nullable(properties[key], root):
                    continue
                out[key] = _strip(properties[key], item, root, depth + 1)
            else:
                out[key] = _strip(extra, item, root, depth + 1) if isinstance(extra, dict) else item
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_strip(node["items"], item, root, depth + 1) for item in value]
    return value


def _branch_for(branches: list[Any], value: JsonValue, root: dict[str, Any]) -> Any:
    """The first union branch whose type fits ``value``'s (objects: one naming all its keys)."""
    for branch in branches:
        resolved = _resolve(branch, root)
        if not isinstance(resolved, dict):
            continue
        if isinstance(value, dict) and isinstance(resolved.get("properties"), dict):
            if set(value) <= set(resolved["properties"]):
                return branch
        elif isinstance(value, list) and resolved.get("type") == "array":
            return branch
    return None
