"""``scripted_model()``: a deterministic stand-in for the language model of the travel desk.

Why scripted: the demo and the tests must run without network, API key or server, and give
the same transcript every time. It reads the user's words with a few keyword rules and uses the
facts the kernel shows it (``context.facts``) the way a model would: "book it" books the current
quote. Answers (``yes``/``no``) are read as the answer to the active interaction.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import JsonValue

from ...contracts.gateway import ModelRequest
from ...testing._gateway import ScriptedModelGateway
from ._agent import DESK_ANSWERS, HOTELS

__all__ = ["compose", "interpret", "scripted_model"]

_YES = {"yes", "yes please", "ok", "okay", "confirm", "go ahead", "sure"}
_NO = {"no", "no thanks", "cancel", "stop", "don't"}


def _fact(request: ModelRequest, ref: str) -> dict[str, Any] | None:
    context = request.input.get("context")
    facts = context.get("facts") if isinstance(context, dict) else None
    for fact in facts if isinstance(facts, list) else []:
        if isinstance(fact, dict) and fact.get("type") == ref and isinstance(fact["value"], dict):
            return fact["value"]
    return None


def interpret(request: ModelRequest) -> JsonValue:
    text = str(request.input.get("text", "")).strip().lower()
    words = text.rstrip(".!?")
    intentions: list[JsonValue] = []
    answer: JsonValue = None
    if words in _YES or words.startswith("yes,"):
        answer = {"option": "yes"}
    elif words in _NO:
        answer = {"option": "no"}
    for city in HOTELS:
        if city in text and ("hotel" in text or "stay" in text or "find" in text):
            nights = re.search(r"(\d+)\s+night", text)
            n = int(nights.group(1)) if nights else 1
            intentions.append({"capability": "hotels.search", "input": {"city": city, "nights": n}})
    offers = _fact(request, "offers@1")
    if ("how much" in text or "quote" in text) and offers is not None:
        for hotel in offers.get("hotels", []):
            if str(hotel["hotel"]).lower() in text or str(hotel["id"]) in text:
                intentions.append({"capability": "hotels.quote", "input": {"hotel": hotel["id"]}})
    if "book" in text:
        current = _fact(request, "quote@1")
        if current is not None:
            intentions.append(
                {"capability": "hotels.book", "input": {"quote_id": current["quote_id"]}}
            )
    for topic in DESK_ANSWERS:
        if topic in text:
            intentions.append({"capability": "desk.faq", "input": {"topic": topic}})
    return {"intentions": intentions, "answer": answer, "reply": None}


def compose(request: ModelRequest) -> JsonValue:
    """Word the answer from the steps' canonical text and cite their evidence."""
    outcomes = request.input.get("outcomes")
    texts: list[str] = []
    cited: list[JsonValue] = []
    for outcome in outcomes if isinstance(outcomes, list) else []:
        if not isinstance(outcome, dict):
            continue
        if outcome.get("text"):
            texts.append(str(outcome["text"]))
        elif outcome.get("reason"):
            texts.append(f"I could not do that: {outcome['reason']}")
        if outcome.get("evidence_id"):
            cited.append(str(outcome["evidence_id"]))
    if not texts:
        texts.append("I can do that." if request.input.get("interaction") else "How can I help?")
    return {"text": " ".join(texts), "citations": cited}


def scripted_model() -> ScriptedModelGateway:
    return ScriptedModelGateway({"interpret": interpret, "repair": interpret, "compose": compose})
