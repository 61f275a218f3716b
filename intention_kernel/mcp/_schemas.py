"""A tool's JSON Schema as a capability's input (and output) model, and its name as an id.

Why a model per schema rather than a schema field on capabilities: the kernel asks an input
model for two things, its JSON Schema (shown to the model, checked against the providers'
dialects at compile, part of the fingerprint) and validation (before planning, again before a
confirmed write runs). A ``BaseModel`` subclass whose ``model_json_schema`` is the tool's schema
verbatim and whose validation is the JSON Schema's own (``jsonschema``, which the SDK brings)
answers both without a change to the kernel. The validated arguments are kept as given.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

from jsonschema import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaMode
from referencing import Registry

__all__ = ["MAX_SCHEMA_BYTES", "SchemaModel", "capability_name", "schema_model"]

MAX_SCHEMA_BYTES = 64 * 1024
"""Largest tool schema (as compact JSON) accepted: every schema is in every interpret prompt."""
MAX_SCHEMA_DEPTH = 24
_MAX_ERRORS = 5
_NAME = re.compile(r"^[A-Za-z0-9_\-.]{1,128}$")
"""The tool names the MCP specification allows."""


class SchemaModel(BaseModel):
    """A JSON object validated by a JSON Schema, kept exactly as given (no coercion)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    json_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    validator: ClassVar[Validator | None] = None

    @model_validator(mode="before")
    @classmethod
    def _validate(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        if cls.validator is not None:
            errors = sorted(cls.validator.iter_errors(data), key=lambda e: list(e.path))
            if errors:
                shown = "; ".join(
                    f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message}"[:200]
                    for e in errors[:_MAX_ERRORS]
                )
                raise ValueError(shown)
        return data

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = None,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = GenerateJsonSchema,
        mode: JsonSchemaMode = "validation",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The tool's own schema (a copy): what the model is shown and the dialects checked."""
        return copy.deepcopy(cls.json_schema)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_SCHEMA_DEPTH:
            return level
        if isinstance(node, dict):
            stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, level + 1) for v in node)
    return deepest


def _refs(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _normalized(schema: dict[str, Any]) -> dict[str, Any]:
    """Draft-07 ``definitions`` as ``$defs`` (the kernel renames ``$defs`` per capability in
    the interpret prompt); ``$schema`` and ``$id`` dropped (they name no constraint)."""
    text = json.dumps(schema)
    if "definitions" in schema and "$defs" not in schema:
        text = text.replace('"#/definitions/', '"#/$defs/')
        schema = json.loads(text)
        schema["$defs"] = schema.pop("definitions")
    else:
        schema = json.loads(text)
    schema.pop("$schema", None)
    schema.pop("$id", None)
    return schema


def schema_problem(schema: object, *, input: bool) -> str | None:
    """Why ``schema`` cannot be a capability's schema, or ``None``."""
    if not isinstance(schema, dict):
        return "its schema is not a JSON object"
    try:
        size = len(json.dumps(schema, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError):
        return "its schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its schema is {size} bytes, more than {MAX_SCHEMA_BYTES}"
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"its schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"
    if input and schema.get("type") != "object":
        return "its input schema is not of type object"
    if any(not ref.startswith("#") for ref in _refs(schema)):
        return "its schema refers to another document ($ref)"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"its schema is invalid: {exc.message[:200]}"
    return None


def schema_model(name: str, schema: dict[str, Any]) -> type[SchemaModel]:
    """A ``SchemaModel`` for a schema ``schema_problem`` accepted."""
    normalized = _normalized(schema)
    validator = validator_for(normalized)(normalized, registry=Registry())
    namespace = {"__module__": __name__, "json_schema": normalized, "validator": validator}
    return type(name, (SchemaModel,), namespace)


def capability_name(tool: str) -> str | None:
    """The capability id segment for a tool name (``sendEmail`` -> ``sendemail``,
    ``files.read`` -> ``files_read``), or ``None`` for a name MCP does not allow."""
    if not isinstance(tool, str) or not _NAME.match(tool):
        return None
    mapped = re.sub(r"[^a-z0-9_\-]", "_", tool.lower())
    return mapped if mapped[0].isalpha() else f"t_{mapped}"
