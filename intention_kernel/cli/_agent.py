"""Load ``module:attribute``: the deployed agent's compatibility rules, or the served agent.

The attribute may be a ``CompiledAgent`` (its declared compatible fingerprints and migrations
count), an ``AgentDefinition`` (only its own fingerprint is accepted, plus
``--compatible-with``), or a function of no arguments returning either. The operator's module
may fail to import or its factory may raise: that is ``INVALID_AGENT`` naming the exception,
not a traceback.

``serve`` needs an agent bound to the store it opened: there the attribute is a factory called
with that store (``load_served_agent``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterable
from pathlib import Path

from ..contracts.durability import DurabilityStore
from ..contracts.errors import KernelError
from ..kernel import AgentDefinition, Compatibility, CompiledAgent, compile_manifest
from ._common import CliError

__all__ = ["load_compatibility", "load_served_agent"]


_SETTING = {"setting": "--agent"}


def _failed(what: str, exc: BaseException) -> CliError:
    return CliError("INVALID_AGENT", f"{what} raised {type(exc).__name__}: {exc}", context=_SETTING)


def _resolve(spec: str) -> object:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CliError(
            "INVALID_AGENT", "--agent looks like package.module:attribute", context=_SETTING
        )
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like python -m: the project's own modules
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise CliError(
                "AGENT_NOT_FOUND", f"cannot import {module_name}: {exc}", context=_SETTING
            ) from None
        raise _failed(f"importing {module_name}", exc) from None
    except Exception as exc:  # the operator's module: anything may happen at import
        raise _failed(f"importing {module_name}", exc) from None
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(
                "AGENT_NOT_FOUND", f"{module_name} has no attribute {attribute}", context=_SETTING
            )
        target = getattr(target, part)
    return target


def load_compatibility(spec: str, compatible_with: Iterable[str] = ()) -> Compatibility:
    agent = _resolve(spec)
    if callable(agent) and not isinstance(agent, CompiledAgent | AgentDefinition | type):
        try:
            agent = agent()
        except KernelError:
            raise
        except Exception as exc:
            raise _failed(f"calling {spec}", exc) from None
    extra = frozenset(compatible_with)
    if isinstance(agent, CompiledAgent):
        declared = agent.compatibility
        return Compatibility(
            fingerprint=declared.fingerprint,
            compatible_with=declared.compatible_with | extra,
            migrations=declared.migrations,
        )
    if isinstance(agent, AgentDefinition):
        _, fingerprint = compile_manifest(agent)
        return Compatibility(fingerprint=fingerprint, compatible_with=extra)
    raise CliError(
        "INVALID_AGENT",
        f"{spec} is a {type(agent).__name__}, not a CompiledAgent or an AgentDefinition",
        context=_SETTING,
    )


async def load_served_agent(spec: str, store: DurabilityStore) -> CompiledAgent:
    """``factory(store)`` named by ``spec`` (sync or async), which must give a ``CompiledAgent``.

    A ``CompiledAgent`` itself is refused: it is bound to a store of its own, and the service
    must run turns on the store it reads and checks for readiness.
    """
    factory = _resolve(spec)
    if isinstance(factory, CompiledAgent | AgentDefinition) or not callable(factory):
        raise CliError(
            "INVALID_AGENT",
            f"{spec} must be a factory called with the opened store, returning a CompiledAgent"
            " (for example intention_kernel.examples.travel_desk:compile_desk)",
            context=_SETTING,
        )
    try:
        agent = factory(store)
        if inspect.isawaitable(agent):
            agent = await agent
    except KernelError:
        raise
    except Exception as exc:
        raise _failed(f"calling {spec}", exc) from None
    if not isinstance(agent, CompiledAgent):
        raise CliError(
            "INVALID_AGENT",
            f"{spec} returned a {type(agent).__name__}, not a CompiledAgent",
            context=_SETTING,
        )
    return agent
