"""The package's own imports form no cycle, and none is deferred into a function to dodge one:
each module imports what it needs at its top, and the graph of those imports is a DAG (the
module map in docs/develop.md follows it)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "packread"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name ``from ... import`` names, for a relative import in ``module``."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> list[str]:
    """The package modules an import statement imports."""
    out: list[str] = []
    if isinstance(node, ast.Import):
        out = [a.name for a in node.names if a.name.split(".")[0] == "packread"]
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(module, path.name == "__init__.py", node)
        if base.split(".")[0] != "packread":
            return []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in known:
                out.append(sub)
            elif not (PACKAGE / f"{alias.name}.pyi").exists():  # not the compiled extension
                out.append(base)
    return [t for t in out if t in known]


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """Each module's top-level imports of package modules, and every package import made
    inside a function or method."""
    known = _modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    deferred: list[str] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for stmt in tree.body:
            if _type_checking(stmt):
                continue  # never executed: no cycle at import time
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    graph[module].update(_targets(module, path, node, known))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and _targets(
                        module, path, node, known
                    ):
                        deferred.append(f"{module}.{fn.name} (line {node.lineno})")
    return graph, deferred


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself),
    by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_imports_form_no_cycle():
    graph, _ = _graph()
    assert _cycles(graph) == []


#: Imports deferred on purpose, not to dodge a cycle: the command line loads a subcommand's
#: module when that subcommand runs (``packread --help`` stays fast), and the benchmark's
#: DataLoader passes need torch, an optional extra.
ON_DEMAND = {
    "packread.cli._inspect",
    "packread.cli._convert",
    "packread.cli._bench",
    "packread.cli._headspace",
    "packread.cli.bench._loader_runs",
    "packread.cli.bench.headspace_bench",
}


def test_no_package_import_is_deferred_into_a_function():
    _, deferred = _graph()
    assert [d for d in deferred if d.split(" ")[0] not in ON_DEMAND] == []


def test_the_checks_see_a_cycle_and_a_deferred_import(tmp_path):
    """The walk itself: a made-up cycle is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
