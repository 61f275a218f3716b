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
    """Directories (or modules) under the repository root whose modules the rule covers."""
    forbids: Callable[[str], bool]


def within(*prefixes: str) -> Callable[[str], bool]:
    """A module of the package outside ``prefixes`` (the layers a layer may import)."""
    allowed = tuple(f"intention_kernel.{p}" for p in prefixes)

    def forbids(module: str) -> bool:
        if module != "intention_kernel" and not module.startswith("intention_kernel."):
            return False
        return not any(module == a or module.startswith(a + ".") for a in allowed)

    return forbids


def private_of(adapter: str) -> Callable[[str], bool]:
    """A private module of one adapter subpackage (``durability.sqlite._connection``)."""
    prefix = f"intention_kernel.durability.{adapter}."
    return lambda module: module.startswith(prefix) and module[len(prefix) :].startswith("_")


def outside(adapter: str) -> tuple[str, ...]:
    """Every directory of the package except the adapter's own."""
    own = f"intention_kernel/durability/{adapter}"
    tops = sorted((ROOT / "intention_kernel").iterdir())
    found = [
        str(p.relative_to(ROOT))
        for p in tops
        if p.name not in ("durability", "__pycache__") and (p.is_dir() or p.suffix == ".py")
    ]
    found += [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "intention_kernel/durability").iterdir())
        if p.is_dir() and p.name != "__pycache__" and str(p.relative_to(ROOT)) != own
    ]
    return tuple(found)


OPERATOR_CODE = ("intention_kernel/cli", "intention_kernel/relay")
DRIVERS = driver("asyncpg", "nats", "redis", "httpx")

RULES = [
    Rule(
        "contracts are pure data and protocols: they import no other layer",
        ("intention_kernel/contracts",),
        within("contracts"),
    ),
    Rule(
        "the durability layer knows nothing of agents, the command line or the relay",
        ("intention_kernel/durability",),
        within("contracts", "durability", "_crashpoints"),
    ),
    Rule(
        "the kernel reaches storage only through the contracts' protocols (and of the model"
        " layer uses only its schema rules and model-string resolver)",
        ("intention_kernel/kernel",),
        within("contracts", "kernel", "models._schemas", "models._resolve", "telemetry"),
    ),
    Rule(
        "the relay delivers through the contracts' OutboxSource, not a store's code",
        ("intention_kernel/relay",),
        within("contracts", "relay", "_crashpoints", "telemetry"),
    ),
    Rule(
        "ingress submits through the agent's submit: it knows the contracts, not the kernel,"
        " a store or the relay",
        ("intention_kernel/ingress",),
        within("contracts", "ingress"),
    ),
    Rule(
        "telemetry sits below the kernel and the relay: it knows only the contracts",
        ("intention_kernel/telemetry",),
        within("contracts", "telemetry", "__version__"),
    ),
    Rule(
        "only intention_kernel/telemetry/_otel.py imports opentelemetry (an optional extra)",
        tuple(
            str(path.relative_to(ROOT))
            for path in sorted((ROOT / "intention_kernel").rglob("*.py"))
            if path != ROOT / "intention_kernel" / "telemetry" / "_otel.py"
        ),
        driver("opentelemetry"),
    ),
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
    *(
        Rule(
            f"nothing outside the {adapter} adapter imports its private modules",
            outside(adapter),
            private_of(adapter),
        )
        for adapter in ("memory", "sqlite", "postgres")
    ),
    Rule(
        "only the PostgreSQL adapter imports asyncpg (drivers are optional extras)",
        outside("postgres"),
        driver("asyncpg"),
    ),
    Rule(
        "the kernel and the contracts import no driver",
        ("intention_kernel/kernel", "intention_kernel/contracts"),
        lambda m: DRIVERS(m) or m.split(".")[0] == "sqlite3",
    ),
    Rule(
        "only intention_kernel/http imports starlette or uvicorn (the http extra)",
        tuple(
            str(path.relative_to(ROOT))
            for path in sorted((ROOT / "intention_kernel").rglob("*.py"))
            if "http" not in path.relative_to(ROOT / "intention_kernel").parts[:1]
        ),
        driver("starlette", "uvicorn"),
    ),
    Rule(
        "the HTTP service runs agents through the kernel and reads through the contracts: it"
        " opens no store and knows no adapter, the command line or the relay (of telemetry it"
        " continues a caller's trace)",
        ("intention_kernel/http",),
        within("contracts", "kernel", "http", "operations", "telemetry", "__version__"),
    ),
    Rule(
        "operator logic (diagnosis, the deploy check) reads through the contracts and the"
        " kernel's compatibility rules; of durability it uses only the factory's redaction",
        ("intention_kernel/operations",),
        within("contracts", "kernel", "operations", "durability.factory"),
    ),
    Rule(
        "operator logic serves the command line and the web inspector, never the reverse",
        ("intention_kernel/operations",),
        lambda m: m.startswith(("intention_kernel.cli", "intention_kernel.http")),
    ),
    Rule(
        "the kernel, the contracts and durability sit below operator logic",
        (
            "intention_kernel/kernel",
            "intention_kernel/contracts",
            "intention_kernel/durability",
        ),
        lambda m: (
            m == "intention_kernel.operations" or m.startswith("intention_kernel.operations.")
        ),
    ),
    Rule(
        "only intention_kernel/http imports jinja2 (the http extra)",
        tuple(
            str(path.relative_to(ROOT))
            for path in sorted((ROOT / "intention_kernel").rglob("*.py"))
            if "http" not in path.relative_to(ROOT / "intention_kernel").parts[:1]
        ),
        driver("jinja2"),
    ),
    Rule(
        "the kernel, the contracts, durability and telemetry never import the HTTP service",
        (
            "intention_kernel/kernel",
            "intention_kernel/contracts",
            "intention_kernel/durability",
            "intention_kernel/telemetry",
        ),
        lambda m: m == "intention_kernel.http" or m.startswith("intention_kernel.http."),
    ),
    Rule(
        "model gateways use the contracts, never the kernel, durability or the command line",
        ("intention_kernel/models",),
        within("contracts", "models"),
    ),
    *(
        Rule(
            f"only intention_kernel/models/{gateway}.py imports {sdks[0]} (an optional extra)",
            tuple(
                str(path.relative_to(ROOT))
                for path in sorted((ROOT / "intention_kernel").rglob("*.py"))
                if path != ROOT / "intention_kernel" / "models" / f"{gateway}.py"
            ),
            driver(*sdks),
        )
        for gateway, sdks in (
            ("_openai", ("openai",)),
            ("_anthropic", ("anthropic",)),
            ("_pydantic_ai", ("pydantic_ai", "google")),
        )
    ),
    Rule(
        "only intention_kernel/mcp and its example import the MCP SDK (the mcp extra)",
        tuple(
            str(path.relative_to(ROOT))
            for path in sorted((ROOT / "intention_kernel").rglob("*.py"))
            if path.relative_to(ROOT / "intention_kernel").parts[:1] != ("mcp",)
            and path.relative_to(ROOT / "intention_kernel").parts[:2] != ("examples", "mcp_notes")
        ),
        driver("mcp", "mcp_types", "jsonschema", "referencing"),
    ),
    Rule(
        "MCP tools are capabilities: intention_kernel/mcp builds on the kernel and the contracts",
        ("intention_kernel/mcp",),
        within("contracts", "kernel", "mcp"),
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
        base = ROOT / directory
        for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
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
    found = set(imports_of(source, "intention_kernel.cli._maintenance"))
    assert "intention_kernel.durability.postgres._schema" in found
    assert "intention_kernel.durability.factory" in found
    assert "intention_kernel.durability" in found
    assert "asyncpg" in found
    assert [m for m in found if private_durability(m)] == [
        "intention_kernel.durability.postgres._schema"
    ]
    package = set(imports_of("from ._common import run", "intention_kernel.cli", is_package=True))
    assert "intention_kernel.cli._common" in package


def _package_modules(*, skip: tuple[str, ...] = ()) -> Iterator[tuple[Path, str]]:
    """Every module of the package (path, dotted name), except under the ``skip`` directories."""
    for path in sorted((ROOT / "intention_kernel").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if any(relative.is_relative_to(directory) for directory in skip):
            continue
        yield path, module_name(path)


def _imports_in(path: Path, name: str) -> set[str]:
    source = path.read_text(encoding="utf-8")
    return set(imports_of(source, name, is_package=path.name == "__init__.py"))


def _is_testing(module: str) -> bool:
    return module == "intention_kernel.testing" or module.startswith("intention_kernel.testing.")


def _is_crashpoints(module: str) -> bool:
    """The crash-point module, public or private, wherever it lives in the package."""
    parts = module.split(".")
    return parts[0] == "intention_kernel" and any(
        part in ("crashpoints", "_crashpoints") for part in parts[1:]
    )


TESTING_USERS = ("intention_kernel/examples",)
"""Code outside ``testing/`` allowed to import it: the shipped example scripts its model with
``ScriptedModelGateway`` (it is a runnable demo, not a component a host builds on)."""

CRASH_POINT_SITES = {
    "intention_kernel.durability._scope",
    "intention_kernel.durability.memory._adapter",
    "intention_kernel.durability.sqlite._turns",
    "intention_kernel.durability.postgres._turns",
    "intention_kernel.relay._relay",
}
"""The production modules that call ``crash_point`` (the turn scope's commit and effect steps,
each backend's turn storage, the relay's delivery); ``testing/`` arms them. A new site is a
deliberate change."""


def test_production_code_never_imports_the_testing_package() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {imported}"
        for path, name in _package_modules(skip=("intention_kernel/testing", *TESTING_USERS))
        for imported in sorted(_imports_in(path, name))
        if _is_testing(imported)
    ]
    assert not found, (
        "production code must not depend on intention_kernel.testing (test machinery a host"
        " installs only to test); move what it needs into the production layer: " + "; ".join(found)
    )


def test_crash_points_are_imported_only_by_their_sites_and_by_testing() -> None:
    importers = {
        name
        for path, name in _package_modules(skip=("intention_kernel/testing",))
        if not _is_crashpoints(name) and any(map(_is_crashpoints, _imports_in(path, name)))
    }
    unexpected = sorted(importers - CRASH_POINT_SITES)
    assert not unexpected, (
        f"{unexpected} import the crash points; only {sorted(CRASH_POINT_SITES)} and testing/"
        " may (a crash point in new production code is added to CRASH_POINT_SITES deliberately)"
    )
    gone = sorted(CRASH_POINT_SITES - importers)
    assert not gone, f"{gone} no longer call a crash point: drop them from CRASH_POINT_SITES"


KERNEL_CLIENTS = ("intention_kernel/http", "intention_kernel/cli", "intention_kernel/operations")


def test_http_cli_and_operations_import_the_kernel_package_not_its_files() -> None:
    exports = _kernel_exports()
    found = sorted(
        {
            f"{path.relative_to(ROOT)} imports intention_kernel.kernel.{first}"
            for directory in KERNEL_CLIENTS
            for path in sorted((ROOT / directory).rglob("*.py"))
            for imported in _imports_in(path, module_name(path))
            if imported.startswith("intention_kernel.kernel.")
            and (first := imported.removeprefix("intention_kernel.kernel.").split(".")[0])
            not in exports
        }
    )
    assert not found, (
        "HTTP, the command line and operator logic use the kernel through"
        " intention_kernel.kernel (its __all__), so a kernel file can move without breaking"
        " them: " + "; ".join(found)
    )


def _kernel_exports() -> set[str]:
    tree = ast.parse((ROOT / "intention_kernel/kernel/__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def test_the_new_rules_catch_what_they_name() -> None:
    assert _is_testing("intention_kernel.testing._gateway")
    assert not _is_testing("intention_kernel.testing_helpers")
    assert _is_crashpoints("intention_kernel._crashpoints")
    assert _is_crashpoints("intention_kernel.durability._crashpoints.crash_point")
    assert not _is_crashpoints("intention_kernel.relay._relay")
    found = set(imports_of("from .._crashpoints import crash_point", "intention_kernel.relay.x"))
    assert any(map(_is_crashpoints, found))


# ---------------------------------------------------------------- no import cycles


def import_graph(*, runtime: bool) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from a import b`` is ``a.b`` when that
    is a module, else ``a``; a name that is not a module is its nearest module. ``runtime``
    leaves out what ``if TYPE_CHECKING`` blocks import."""
    paths = {module_name(p): p for p in sorted((ROOT / "intention_kernel").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped: set[int] = set()
        if runtime:
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    skipped |= {id(inner) for child in node.body for inner in ast.walk(child)}
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                source = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in paths else source)
        resolved = set()
        for target in targets:
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name:
                resolved.add(target)
        graph[name] = resolved
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("runtime", [False, True], ids=["with-type-imports", "runtime"])
def test_the_package_has_no_import_cycle(runtime: bool) -> None:
    """A cycle makes import order matter and hides which module is the lower one; type-only
    imports count too, so the layering reads the same for a type checker."""
    found = cycles(import_graph(runtime=runtime))
    assert sorted(sorted(c) for c in found) == []


def test_the_cycle_finder_sees_a_cycle_and_only_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}
    assert cycles({"a": {"b"}, "b": set()}) == set()
