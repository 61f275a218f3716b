"""Import rules between layers, read from the source with ``ast`` (nothing is imported).

Each rule names the packages it covers and the modules they must not import. Add a row to
``RULES`` to hold another boundary.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def private_durability(module: str) -> bool:
    """``intention_kernel.durability._x`` or ``intention_kernel.durability.<pkg>._x``."""
    parts = module.split(".")
    return parts[:2] == ["intention_kernel", "durability"] and any(
        part.startswith("_") for part in parts[2:]
    )


def driver(*names: str) -> Callable[[str], bool]:
    """A database or broker driver, by its top-level package name."""
    return lambda module: module.split(".")[0] in names


@dataclass(frozen=True)
class Rule:
    why: str
    packages: tuple[str, ...]
    """Directories under the repository root whose modules the rule covers."""
    forbids: Callable[[str], bool]


OPERATOR_CODE = ("intention_kernel/cli", "intention_kernel/relay")

RULES = [
    Rule(
        "the command line and the relay open stores through durability.factory and the adapters'"
        " public names, never their private modules",
        OPERATOR_CODE,
        private_durability,
    ),
    Rule(
        "the command line and the relay never talk to a database driver themselves",
        OPERATOR_CODE,
        driver("asyncpg", "sqlite3"),
    ),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> Iterator[str]:
    """Absolute names of the modules ``source`` imports; ``from a import b`` yields ``a`` and
    ``a.b`` (``b`` may be a submodule)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def violations(rule: Rule) -> list[str]:
    found = []
    for directory in rule.packages:
        for path in sorted((ROOT / directory).rglob("*.py")):
            name = module_name(path)
            source = path.read_text(encoding="utf-8")
            for imported in imports_of(source, name, is_package=path.name == "__init__.py"):
                if rule.forbids(imported):
                    found.append(f"{path.relative_to(ROOT)} imports {imported}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.why[:60])
def test_layer_rule(rule: Rule) -> None:
    assert not violations(rule), rule.why


def test_the_rules_see_relative_and_nested_imports() -> None:
    source = (
        "from ..durability.postgres import _schema\n"
        "from ..durability.factory import open_durability\n"
        "from .. import durability\n"
        "def f():\n"
        "    import asyncpg\n"
    )
    found = set(imports_of(source, "intention_kernel.cli.maintenance"))
    assert "intention_kernel.durability.postgres._schema" in found
    assert "intention_kernel.durability.factory" in found
    assert "intention_kernel.durability" in found
    assert "asyncpg" in found
    assert [m for m in found if private_durability(m)] == [
        "intention_kernel.durability.postgres._schema"
    ]
    package = set(imports_of("from ._common import run", "intention_kernel.cli", is_package=True))
    assert "intention_kernel.cli._common" in package
