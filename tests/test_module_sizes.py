"""Modules stay small enough to review: one concept per module, split by job when one grows.

The measure is the one of ``sizes.py`` (lines of the file), over the whole package.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "intention_kernel"
LARGE = 400
"""A module over this many lines is large: a few may be (a cohesive contract or facade)."""
MOST_LARGE = 5
TOO_LARGE = 600
"""No module may be over this many lines: split it by job."""


def _module_sizes() -> dict[str, int]:
    return {
        str(path.relative_to(ROOT.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(ROOT.rglob("*.py"))
    }


def test_no_module_is_too_large_and_few_are_large() -> None:
    sizes = _module_sizes()
    assert len(sizes) > 100  # the walk saw the package
    too_large = {path: n for path, n in sizes.items() if n > TOO_LARGE}
    assert not too_large, f"split these by job (over {TOO_LARGE} lines): {too_large}"
    large = {path: n for path, n in sizes.items() if n > LARGE}
    assert len(large) <= MOST_LARGE, (
        f"{len(large)} modules over {LARGE} lines (at most {MOST_LARGE}): {sorted(large.items())}"
    )
