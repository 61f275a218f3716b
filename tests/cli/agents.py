"""Agents for the check-compat gate: the deployed definition and a changed one."""

from __future__ import annotations

from typing import Any

from tests.kernel.support import support_agent

current = support_agent()
changed = support_agent(version="2.0.0")


def factory() -> Any:
    return support_agent()


not_an_agent = 42


def failing_factory() -> Any:
    raise RuntimeError("the agent factory needs a database")
