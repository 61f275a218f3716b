"""One call to the model gateway, with the kernel's checks on what comes back."""

from __future__ import annotations

from pydantic import JsonValue

from ...contracts.errors import ErrorCode, KernelError, ModelGatewayError
from ...contracts.gateway import ModelRequest, ModelResponse
from .state import TurnState

__all__ = ["ask"]


async def ask(
    state: TurnState,
    task: str,
    system: str,
    payload: dict[str, JsonValue],
    schema: dict[str, JsonValue],
) -> JsonValue:
    """Send one request; a gateway that answers something other than a ``ModelResponse`` is
    treated as a provider failure (retryable, nothing committed)."""
    # Built by the kernel from JSON-safe parts, so validation would only cost time.
    request = ModelRequest.model_construct(
        task=task,
        model=state.runtime.definition.model,
        system=system,
        input=payload,
        output_schema=schema,
    )
    try:
        response = await state.runtime.gateway.complete(request)
    except KernelError:
        raise
    except Exception as exc:
        # A provider's own exception type must not leak out of the kernel untyped.
        raise ModelGatewayError(context={"task": task, "cause": type(exc).__name__}) from exc
    if not isinstance(response, ModelResponse):
        raise ModelGatewayError(
            "the model gateway returned something other than a ModelResponse",
            code=ErrorCode.MODEL_OUTPUT_INVALID,
            context={"task": task},
        )
    return response.output
