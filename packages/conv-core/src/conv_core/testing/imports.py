"""A package's import graph, read from its source: what keeps a package's layers pointing one way.

conv-core's and the plugins' tests assert on it (no import circle, no function-level import of the package's own
modules, no runtime module reaching the tooling). The source is parsed, never imported, so an import hidden in a
function, or behind ``TYPE_CHECKING``, counts like any other.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ImportGraph:
    """``edges``: module -> the package's modules it imports (full dotted names); ``nested``: the (module, target)
    pairs imported below a module's top level."""

    edges: dict[str, set[str]] = field(default_factory=dict)
    nested: list[tuple[str, str]] = field(default_factory=list)

    def reachable(self, start: str) -> set[str]:
        """Every module ``start`` imports, directly or through others."""
        seen, todo = set(), [start]
        while todo:
            for target in self.edges[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        return seen

    def circles(self) -> list[tuple[str, str]]:
        """The imports ``a -> b`` where ``b`` leads back to ``a``: every edge of every import circle."""
        return sorted((a, b) for a in self.edges for b in self.edges[a] if a in self.reachable(b))


def module_name(root: Path, path: Path) -> str:
    """The dotted name of the module at ``path`` in the package at ``root``."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> ImportGraph:
    """The import graph of the package whose folder is ``root`` (a name imported from a module counts as that
    module; one imported from the package itself, as the module of that name if there is one)."""
    modules = {module_name(root, path): path for path in root.rglob("*.py")}
    graph = ImportGraph()
    for name, path in modules.items():
        graph.edges[name] = set()
        for node, targets in _imports(path, name):
            for target in (t for t in targets if t in modules and t != name and t != root.name):
                graph.edges[name].add(target)
                if node.col_offset:
                    graph.nested.append((name, target))
    return graph


def _imports(path: Path, name: str):
    """``(node, candidate targets)`` of each import statement in the module ``name`` at ``path``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            yield node, [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
