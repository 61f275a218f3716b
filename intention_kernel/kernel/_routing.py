"""Per-task models: which gateway answers each of the kernel's model tasks.

Why per task: reading the user's words into capability calls needs a capable model, while
wording the answer may use a cheaper or faster one. ``define_agent(models={...})`` maps a task
(``interpret``, ``repair``, ``select``, ``compose``) or ``default`` to a ``ModelGateway`` or a
model string (``"openai:gpt-4.1-mini"``, resolved by ``intention_kernel.models.resolve_model``).
A task without its own entry uses, in order: for ``repair`` and ``select`` the ``interpret``
entry, then ``default``, then the kernel's ``model``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

from ..contracts.gateway import ModelGateway

__all__ = [
    "MODEL_KEYS",
    "TASKS",
    "ModelChoice",
    "ModelRoute",
    "is_gateway",
    "model_label",
    "provider_of",
    "routes_for",
]

TASKS = ("interpret", "repair", "select", "compose")
"""The kernel's model tasks."""
MODEL_KEYS = ("default", *TASKS)
"""The keys ``define_agent(models=...)`` accepts."""

ModelChoice = ModelGateway | str
"""A model as a definition names it: a gateway, or a model string (``provider:model``)."""


def is_gateway(value: object) -> TypeGuard[ModelGateway]:
    return callable(getattr(value, "complete", None))


def provider_of(gateway: object) -> str | None:
    """The provider a gateway says it reaches (its ``provider`` attribute), if it says."""
    provider = getattr(gateway, "provider", None)
    return provider if isinstance(provider, str) else None


def model_label(choice: object) -> str:
    """A stable name for a model choice (in the fingerprint and in events): a model string as
    written, ``provider:model`` for a gateway that names both, else the gateway's class."""
    if isinstance(choice, str):
        return choice
    model = getattr(choice, "model", None)
    name = model if isinstance(model, str) else getattr(model, "model_name", None)
    provider = provider_of(choice)
    if isinstance(name, str):
        return f"{provider}:{name}" if provider else name
    return type(choice).__qualname__


def _fallbacks(task: str) -> tuple[str, ...]:
    if task in ("repair", "select"):
        return (task, "interpret", "default")
    return (task, "default")


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """The gateway that answers one task, and what the kernel tells it and records."""

    gateway: ModelGateway
    model: str | None
    """Sent as ``ModelRequest.model`` (``None``: the gateway's default model)."""
    label: str
    """The model's name in events (``model_label``)."""


def routes_for(
    models: Mapping[str, object],
    kernel_model: ModelGateway | None,
    agent_model: str | None,
    resolve: Callable[[str], ModelGateway],
) -> dict[str, ModelRoute | None]:
    """The route of every task (``None``: no model for it). Entries that are neither a model
    string nor a gateway are skipped here; compile reports them."""
    routes: dict[str, ModelRoute | None] = {}
    for task in TASKS:
        key = next((k for k in _fallbacks(task) if _usable(models.get(k))), None)
        if key is not None:
            choice = models[key]
            if isinstance(choice, str):
                routes[task] = ModelRoute(resolve(choice), choice, choice)
            elif is_gateway(choice):
                routes[task] = ModelRoute(choice, None, model_label(choice))
        elif kernel_model is not None:
            label = agent_model or model_label(kernel_model)
            routes[task] = ModelRoute(kernel_model, agent_model, label)
        else:
            routes[task] = None
    return routes


def _usable(choice: object) -> bool:
    """A model string that names a provider, or a gateway (anything else is a compile
    problem, not something to resolve)."""
    if isinstance(choice, str):
        prefix, sep, name = choice.partition(":")
        return bool(sep and prefix.strip() and name.strip())
    return is_gateway(choice)
