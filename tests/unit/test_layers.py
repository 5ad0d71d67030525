"""The package's layers (docs/design.md): which parts of binlogsync may import which.

Engine adapters know their engine and nothing above them; the exactly-once core (apply/) knows
the adapters but not the agents, the hub or capture; seed and reconcile reach the hub only
through its commands (hubcommands.py) and the wire forms in transport/; and no modules import
each other round a circle (lazy imports count; imports only for type checking do not). Read
from the source text (every `from .x import` and `import binlogsync.x`, lazy ones included),
so a new import across a line fails here before it becomes a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "agents" / "binlogsync"

# part -> parts it must never import
FORBIDDEN = {
    "engines": {"apply", "client", "hub", "capture", "seed", "reconcile", "cli", "ops"},
    "apply": {"client", "hub", "capture", "seed", "reconcile", "cli", "ops"},
    "seed": {"hub", "capture", "apply", "client", "cli"},
    "reconcile": {"apply", "hub", "client", "seed", "cli"},
    "transport": {"hub", "client", "apply", "engines", "capture", "seed", "reconcile"},
    "capture": {"apply", "engines", "hub", "client", "seed", "reconcile"},
    "hub": {"apply", "engines", "capture", "client", "seed", "reconcile"},
    "model": {"apply", "engines", "hub", "client", "capture", "transport"},
    "codec": {"apply", "engines", "hub", "client", "capture", "transport"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """The top-level parts of binlogsync (and binlogsync_dev) that `path` imports."""
    rel = path.relative_to(PACKAGE)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel.parts[:-1])
            base = base[: len(base) - (node.level - 1)]
            names = [*base, *(node.module or "").split(".")]
            names = [n for n in names if n]
            if names:
                found.add(names[0])
            else:  # `from .. import mysql` at the package's top: each name is a part
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            head, _, rest = node.module.partition(".")
            if head == "binlogsync" and rest:
                found.add(rest.split(".")[0])
            elif head == "binlogsync_dev":
                found.add("binlogsync_dev")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                head, _, rest = alias.name.partition(".")
                if head == "binlogsync" and rest:
                    found.add(rest.split(".")[0])
                elif head == "binlogsync_dev":
                    found.add("binlogsync_dev")
    return found


def _crossings() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = _part(path)
        for imported in _imports(path) - {part}:
            if imported in FORBIDDEN.get(part, ()):
                out.append(f"{path.relative_to(PACKAGE)} imports {imported}")
            if imported == "binlogsync_dev" and path.relative_to(PACKAGE) != Path("ops/timing.py"):
                out.append(f"{path.relative_to(PACKAGE)} imports the dev harness")
    return out


def test_no_part_imports_across_its_layer() -> None:
    assert _crossings() == []


def test_the_check_reads_imports_at_every_depth() -> None:
    """The reader finds relative imports at every depth (a check that finds nothing proves
    nothing)."""
    engine = PACKAGE / "engines" / "mariadb" / "engine.py"
    assert "apply" not in _imports(engine)
    assert {"mysql", "config", "errors"} <= _imports(engine)
    core = PACKAGE / "apply" / "core.py"
    assert "engines" in _imports(core)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, lazy imports included, the ones only for
    type checking (`if TYPE_CHECKING:`) left out."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in typing_only:
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for candidate in [f"{target}.{a.name}" for a in node.names] + [target]:
                if candidate in modules and candidate != name:
                    graph[name].add(candidate)
                    break
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _cycles(_module_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = _module_graph()
    graph["binlogsync.model"].add("binlogsync.apply.core")  # core imports model
    assert any("binlogsync.model" in c for c in _cycles(graph))
