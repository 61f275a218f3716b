"""The operator command line, ``intention-kernel`` (needs the ``cli`` extra: typer + rich).

One module per command group; each is a thin shell over ``DurabilityStore`` and
``StoreInspector``. Exit codes: 0 ok, 1 findings (blocked, incompatible, refused), 2 usage or
input error, 3 store error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_HINT = "the intention-kernel command needs its extra: pip install 'intention-kernel[cli]'"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (used by the console script)."""
    try:
        import rich  # noqa: F401
        import typer  # noqa: F401
    except ImportError:
        print(f"error: {_HINT}", file=sys.stderr)
        return 2
    from ._app import run

    return run(list(sys.argv[1:] if argv is None else argv))
