"""The rooms of ``strom/`` import downward only: no import circle anywhere (imports made
for the type checker and inside functions count too), and the packages that reach
Strom over the wire never import a node's internals."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import strom

ROOT = Path(strom.__file__).parent
INTERNALS = ("broker", "storage", "cluster", "coordinator", "replication", "raft")
OVER_THE_WIRE = ("spark", "services", "connect", "ksql")


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every ``strom`` name ``module`` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in _imported(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # a package's own modules may be named from its __init__ without a circle
            if target and target != name and not name.startswith(target + "."):
                edges[name].add(target)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]


def test_no_import_circle_in_strom() -> None:
    edges = _graph()
    assert len(edges) > 250  # the walk saw the whole package
    assert _circles(edges) == []


def _room(module: str) -> str:
    """``strom.broker.server`` -> ``broker``; ``strom`` itself -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def test_wire_packages_do_not_import_node_internals() -> None:
    edges = _graph()
    crossing = sorted(
        (name, target)
        for name, targets in edges.items()
        if _room(name) in OVER_THE_WIRE
        for target in targets
        if _room(target) in INTERNALS
    )
    assert crossing == []
