"""Planted bugs: test-only store subclasses that break one promise on purpose.

A fault test is only worth its run time if it fails on the bug it targets. These mixins plant
such a bug into any store (``class Broken(PrepareAfterCall, SQLiteDurability)``), so a test can
show that it catches it. They never ship in a production class.
"""

from __future__ import annotations

from typing import Any

from ..contracts.receipts import EffectAuthority, EffectExecution, EffectIdentity
from ..durability.engine import DurabilityEngine, TurnScopeImpl

__all__ = ["PrepareAfterCall"]


class PrepareAfterCall(DurabilityEngine[Any]):
    """Calls the provider *before* ``prepared`` is recorded: a crash in between leaves no
    receipt, so a retry calls the provider again (the bug rule 4 forbids)."""

    async def _execute_effect(
        self, scope: TurnScopeImpl[Any], identity: EffectIdentity, operation: Any
    ) -> EffectExecution:
        await operation(EffectAuthority(identity.idempotency_key, "planted"))

        async def already_called(authority: EffectAuthority) -> None:
            return None

        return await super()._execute_effect(scope, identity, already_called)
