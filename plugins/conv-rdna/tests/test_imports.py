"""The package's modules import each other in one direction: no module imports one that imports it back
(directly or through others), and no import of the package's own modules hides inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import conv_rdna

ROOT = Path(conv_rdna.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Each module's imports of the package's modules, and those made below the top level."""
    modules = {_module(path): path for path in ROOT.rglob("*.py")}
    graph, nested = {}, []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
                    if node.col_offset:
                        nested.append((name, target))
    return graph, nested


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_no_import_circle():
    graph, _ = _imports()
    circles = [(a, b) for a in graph for b in graph[a] if a in _reachable(graph, b)]
    assert circles == []


def test_no_function_level_imports_of_the_package():
    assert _imports()[1] == []
