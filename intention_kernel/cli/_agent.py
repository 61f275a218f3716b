"""Load ``module:attribute``: the agent ``check-compat``, ``thread diagnose``, ``serve`` and
``worker`` use.

One attribute works for every command: an ``AgentDefinition``, a ``CompiledAgent``, or a
factory (sync or async) returning either, called with the opened store when it takes one
argument (``compile_desk(store)``) and with none otherwise. The operator's module may fail to
import or its factory may raise: that is ``INVALID_AGENT`` naming the exception, not a
traceback; an invalid definition is ``AgentCompilationError`` naming each problem.

``check-compat`` reads the agent's compatibility rules: a ``CompiledAgent``'s declared
fingerprints and migrations, a definition's own fingerprint only (plus ``--compatible-with``).
``serve`` runs turns on the store it opened and reads (``worker`` too, the submitted ones): a
``CompiledAgent`` is served on that store (``with_durability``), a definition is compiled on it
(its own model strings, no ports).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from ..contracts.durability import DurabilityStore
from ..contracts.errors import KernelError
from ..kernel import AgentDefinition, Compatibility, CompiledAgent, Kernel, compile_manifest
from ._common import CliError

__all__ = ["load_agent", "load_compatibility", "load_served_agent"]


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


def _takes_store(factory: Callable[..., object]) -> bool:
    """Whether ``factory`` wants the opened store: it has a positional parameter without a
    default (``compile_desk(store)``); a function of no arguments gets none."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): call it bare
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional and p.default is p.empty for p in parameters)


async def load_agent(spec: str, store: DurabilityStore) -> CompiledAgent | AgentDefinition:
    """The agent ``spec`` names: a definition, a compiled agent, or what a factory returns
    (called with ``store`` when it takes an argument, awaited when async)."""
    agent = _resolve(spec)
    if callable(agent) and not isinstance(agent, CompiledAgent | AgentDefinition | type):
        factory = agent
        try:
            agent = factory(store) if _takes_store(factory) else factory()
            if inspect.isawaitable(agent):
                agent = await agent
        except KernelError:
            raise
        except Exception as exc:
            raise _failed(f"calling {spec}", exc) from None
    if isinstance(agent, CompiledAgent | AgentDefinition):
        return agent
    raise CliError(
        "INVALID_AGENT",
        f"{spec} is a {type(agent).__name__}, not an AgentDefinition, a CompiledAgent or a"
        " factory returning one (for example intention_kernel.examples.travel_desk:compile_desk)",
        context=_SETTING,
    )


async def load_compatibility(
    spec: str, store: DurabilityStore, compatible_with: Iterable[str] = ()
) -> Compatibility:
    """The stored checkpoints the agent ``spec`` names would accept."""
    agent = await load_agent(spec, store)
    extra = frozenset(compatible_with)
    if isinstance(agent, CompiledAgent):
        declared = agent.compatibility
        return Compatibility(
            fingerprint=declared.fingerprint,
            compatible_with=declared.compatible_with | extra,
            migrations=declared.migrations,
        )
    _, fingerprint = compile_manifest(agent)
    return Compatibility(fingerprint=fingerprint, compatible_with=extra)


async def load_served_agent(spec: str, store: DurabilityStore) -> CompiledAgent:
    """The agent ``spec`` names, committing its turns to ``store`` (the one ``serve`` opened
    and reads threads from)."""
    agent = await load_agent(spec, store)
    if isinstance(agent, AgentDefinition):
        return Kernel(durability=store).compile(agent)
    return agent if agent.durability is store else agent.with_durability(store)
