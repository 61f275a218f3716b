"""What the role suites' harnesses share: opening stores over one test's storage (a second
``open()`` models a restart), closing them all, and running an ``async`` test body.

Why here: the outbox and inbox suites run the same way and differ only in what they test.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["StoreHarness", "harness_test"]


class _Closable(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=_Closable)
H = TypeVar("H")


class StoreHarness(ABC, Generic[S]):
    """Opens stores over one test's storage; calling ``open()`` again models a restart."""

    def __init__(self) -> None:
        self._opened: list[S] = []

    async def open(self) -> S:
        store = await self._open()
        self._opened.append(store)
        return store

    async def close_all(self) -> None:
        while self._opened:
            await self._opened.pop().close()
        await self._cleanup()

    @abstractmethod
    async def _open(self) -> S:
        """A new store instance over this test's storage."""

    async def _cleanup(self) -> None:
        """Drop this test's storage (optional)."""


def harness_test(
    fixture: str,
) -> Callable[[Callable[[Any, H], Coroutine[Any, Any, None]]], Callable[[Any, H], None]]:
    """A decorator: run the ``async`` test body in a fresh event loop with the harness pytest
    passes as ``fixture``, and close what it opened."""

    def decorate(fn: Callable[[Any, H], Coroutine[Any, Any, None]]) -> Callable[[Any, H], None]:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            harness = kwargs[fixture] if fixture in kwargs else args[0]

            async def main() -> None:
                try:
                    await fn(self, harness)
                finally:
                    await harness.close_all()

            asyncio.run(main())

        del wrapper.__wrapped__  # pytest reads the signature below, with the fixture's name
        wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter(fixture, inspect.Parameter.POSITIONAL_OR_KEYWORD),
            ]
        )
        return wrapper

    return decorate
