"""Schema dialects: what each provider can express, and what is converted on the way."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, JsonValue

from intention_kernel.examples.travel_desk import build_agent
from intention_kernel.kernel._pipeline.state import Composition, Interpretation
from intention_kernel.models import DIALECTS, check_schema, strip_null_optionals, to_dialect

CAPABILITY_SCHEMAS = [c.input_schema.model_json_schema() for c in build_agent().capabilities]


class Stay(BaseModel):
    city: str = Field(min_length=1, description="where")
    nights: int = 1
    note: str | None = None
    tags: list[str] = Field(default_factory=list, max_length=3)


class Trip(BaseModel):
    stays: list[Stay]
    main: Stay | None = None
    kind: str = Field(default="leisure", json_schema_extra={"format": "uri"})


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("schema", [*CAPABILITY_SCHEMAS, Composition.model_json_schema()])
def test_the_travel_desk_and_compose_schemas_fit_every_dialect(
    dialect: Any, schema: dict[str, JsonValue]
) -> None:
    assert check_schema(dialect, schema) == []


def test_strict_openai_closes_objects_and_requires_every_property() -> None:
    converted: Any = to_dialect("openai", Trip.model_json_schema())
    stay = converted["$defs"]["Stay"]
    assert stay["additionalProperties"] is False
    assert stay["required"] == ["city", "nights", "note", "tags"]
    # Optional ones become nullable; one that already was keeps its single null branch.
    assert stay["properties"]["nights"]["anyOf"][-1] == {"type": "null"}
    assert stay["properties"]["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    # Keywords strict mode refuses are dropped and told to the model in the description.
    assert stay["properties"]["city"] == {
        "description": "where (minLength: 1)",
        "title": "City",
        "type": "string",
    }
    assert "maxItems" in stay["properties"]["tags"]["anyOf"][0]
    assert "default" not in str(converted)
    # A reference with siblings moves into anyOf (strict mode refuses siblings of $ref).
    assert converted["properties"]["main"]["anyOf"][0] == {"$ref": "#/$defs/Stay"}
    assert converted["properties"]["kind"]["anyOf"][0]["description"] == "(format: uri)"
    assert check_schema("openai", Trip.model_json_schema()) == []


def test_the_original_schema_is_left_as_it_was() -> None:
    schema = Trip.model_json_schema()
    before = repr(schema)
    to_dialect("openai", schema)
    to_dialect("gemini", schema)
    assert repr(schema) == before


def test_every_problem_is_listed_with_where_it_is() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "anything": {},
            "odd": {"not": {"type": "string"}},
            "both": {"allOf": [{"type": "object"}, {"required": ["a"]}]},
            "list": {"type": "array"},
        },
    }
    assert check_schema("openai", schema) == [
        "/properties/extra: an open object (free-form keys) cannot be expressed",
        "/properties/anything: a value of any type cannot be expressed in strict mode",
        "/properties/odd: 'not' cannot be expressed",
        "/properties/both: 'allOf' of several schemas cannot be expressed",
        "/properties/list: an array whose items have no type cannot be expressed",
    ]
    assert check_schema("gemini", schema) == [
        "/properties/odd: 'not' cannot be expressed",
        "/properties/both: 'allOf' of several schemas cannot be expressed",
    ]
    assert check_schema("anthropic", schema) == []


def test_the_interpretation_schema_is_open_where_capability_inputs_go() -> None:
    problems = check_schema("openai", Interpretation.model_json_schema())
    assert (
        "/$defs/Intention/properties/input: an open object (free-form keys) cannot be "
        "expressed" in problems
    )
    assert check_schema("anthropic", Interpretation.model_json_schema()) == []
    assert check_schema("gemini", Interpretation.model_json_schema()) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_root_must_be_an_object(dialect: Any) -> None:
    assert check_schema(dialect, {"type": "array", "items": {"type": "string"}}) == [
        "$: the root must be an object schema (not a union or a scalar)"
    ]
    assert check_schema(dialect, {"anyOf": [{"type": "object", "properties": {}}]})


def test_gemini_keywords() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "title": "T",
        "properties": {
            "kind": {"const": "stay", "title": "Kind"},
            "price": {"type": "number", "exclusiveMinimum": 0},
            "when": {"type": "string", "format": "date"},
            "site": {"type": "string", "format": "uri"},
            "one": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    assert to_dialect("gemini", schema) == {
        "type": "object",
        "properties": {
            "kind": {"enum": ["stay"], "type": "string"},
            "price": {"type": "number", "description": "(exclusiveMinimum: 0)"},
            "when": {"type": "string", "format": "date"},
            "site": {"type": "string", "description": "(format: uri)"},
            "one": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }


def test_anthropic_keeps_the_schema_and_makes_the_root_an_object() -> None:
    schema = Trip.model_json_schema()
    assert to_dialect("anthropic", schema) == schema
    assert to_dialect("anthropic", {"properties": {}}) == {"properties": {}, "type": "object"}


def test_an_unknown_dialect_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown schema dialect"):
        check_schema("cobol", {})  # type: ignore[arg-type]


def test_nulls_for_omitted_optionals_are_dropped_and_valid_nulls_kept() -> None:
    schema = Trip.model_json_schema()
    answer: JsonValue = {
        "stays": [{"city": "Lisbon", "nights": None, "note": None, "tags": None}],
        "main": None,
        "kind": None,
    }
    assert strip_null_optionals(schema, answer) == {
        "stays": [{"city": "Lisbon", "note": None}],
        "main": None,
    }
    trip = Trip.model_validate(strip_null_optionals(schema, answer))
    assert (trip.stays[0].nights, trip.kind) == (1, "leisure")


def test_dropping_nulls_follows_unions_and_leaves_other_values_alone() -> None:
    schema = Interpretation.model_json_schema()
    answer: JsonValue = {
        "intentions": [{"capability": "x", "input": {"free": None}}],
        "answer": {"option": "yes", "interaction_id": None},
        "reply": None,
    }
    assert strip_null_optionals(schema, answer) == answer
    assert strip_null_optionals(schema, {"intentions": None}) == {}
    assert strip_null_optionals(schema, "not an object") == "not an object"
