"""A tool's result as what a capability returns: bounded text, structured content, artifacts.

Why bounded here: a write's result is the ledger's value, stored before the turn goes on, and
every result is committed with the turn and shown to the composing model. So a result is cut to
what one answer may hold before anything keeps it: text and embedded text resources become
``text``, ``structuredContent`` stays ``structured``, images, audio and binary resources become
``artifacts`` for the host (never shown to a model). A result past a limit is kept only as the
reason it was refused (``refused``): the caller fails the step, and for a write the ledger
still records that the server applied it.
"""

from __future__ import annotations

import base64
import json
import unicodedata

import mcp_types as types
from pydantic import JsonValue

__all__ = ["MAX_BINARY_BYTES", "MAX_STRUCTURED_BYTES", "MAX_TEXT_CHARS", "error_text", "stored"]

MAX_TEXT_CHARS = 32 * 1024
"""Characters of text one result may carry (its text blocks and text resources together)."""
MAX_STRUCTURED_BYTES = 256 * 1024
"""Bytes of ``structuredContent`` (compact JSON) one result may carry."""
MAX_BINARY_BYTES = 512 * 1024
"""Decoded bytes of images, audio and binary resources one result may carry, together."""
MAX_ERROR_CHARS = 500
"""Characters of a server's error text shown to the model."""
_MAX_BLOCKS = 256


def _clean(text: str) -> str:
    """Text the store accepts: no NUL, no lone surrogate, no other control but newline/tab."""
    return "".join(
        c
        for c in text
        if c in "\n\t" or (unicodedata.category(c) not in ("Cc", "Cs") and c not in "\u2028\u2029")
    )


def _binary(
    kind: str, mime: str | None, data: str, uri: str | None
) -> tuple[dict[str, JsonValue], int]:
    try:
        size = len(base64.b64decode(data, validate=True))
    except ValueError:
        size = -1
    item: dict[str, JsonValue] = {"type": kind, "mime_type": _clean(mime or "")[:200]}
    item["bytes"] = size
    if uri is not None:
        item["uri"] = _clean(uri)[:2000]
    item["data"] = data if size >= 0 else ""
    return item, max(size, 0)


def stored(result: types.CallToolResult) -> dict[str, JsonValue]:
    """The result as stored and returned: ``{is_error, text, structured, artifacts}``, or
    ``{is_error, refused}`` naming the limit it broke (no payload is kept then)."""
    texts: list[str] = []
    artifacts: list[JsonValue] = []
    binary = 0
    for block in result.content[: _MAX_BLOCKS + 1]:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            item, size = _binary(block.type, block.mime_type, block.data, None)
            artifacts.append(item)
            binary += size
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                texts.append(f"[{res.uri}]\n{res.text}")
            else:
                item, size = _binary("resource", res.mime_type, res.blob, res.uri)
                artifacts.append(item)
                binary += size
        elif isinstance(block, types.ResourceLink):
            texts.append(f"[resource: {block.uri}]")
    text = _clean("\n".join(texts))
    refused = None
    if len(result.content) > _MAX_BLOCKS:
        refused = f"more than {_MAX_BLOCKS} content blocks"
    elif len(text) > MAX_TEXT_CHARS:
        refused = f"{len(text)} characters of text, more than {MAX_TEXT_CHARS}"
    elif binary > MAX_BINARY_BYTES:
        refused = f"{binary} bytes of binary content, more than {MAX_BINARY_BYTES}"
    structured: JsonValue = None
    if refused is None and result.structured_content is not None:
        try:
            raw = json.dumps(result.structured_content, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            refused = "structured content that is not JSON"
        else:
            if len(raw.encode()) > MAX_STRUCTURED_BYTES:
                refused = f"structured content over {MAX_STRUCTURED_BYTES} bytes"
            else:
                structured = json.loads(raw)
    is_error = bool(result.is_error)
    if refused is not None:
        return {"is_error": is_error, "refused": refused}
    return {"is_error": is_error, "text": text, "structured": structured, "artifacts": artifacts}


def error_text(value: dict[str, JsonValue]) -> str:
    """The server's error text as the model is shown it: cleaned, one paragraph, bounded."""
    text = value.get("text")
    if not isinstance(text, str) or not text.strip():
        return "the tool reported an error without a message"
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 1] + "…"
