"""conv-core's modules import each other one way: no import circle at any level (a function-level import
included); the runtime never reaches the offline tooling (no runtime module imports a tooling module, and a
process that converts a model and trains it, every installed backend loaded, has no tooling module in
``sys.modules``). The tooling is headed for a package of its own (issue 32); until it moves, this keeps the
line between the two where it will be cut."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import conv_core

ROOT = Path(conv_core.__file__).parent
#: The offline modules: benchmarks, suites, tables and tuning pipeline, sweeps, pages, the command line.
TOOLING = frozenset({
    "bench", "bench_cli", "bench_holdout", "bench_host", "bench_models", "bench_nets", "bench_page", "bench_record",
    "bench_runs", "chart", "cli", "cli_options", "machine", "model_attribution", "model_bench", "model_bench_ddp",
    "model_bench_modes", "progress", "suite_page", "suites", "sweep", "tables", "tables_cli", "tables_replay", "tune",
    "warmup",
})


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """The package's modules ``path`` imports, relative to the package (``kit.tables``), at any level."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1] if package else []
                base = ".".join(anchor + ([node.module] if node.module else []))
            elif (node.module or "").startswith("conv_core"):
                base = node.module.removeprefix("conv_core").lstrip(".")
            else:
                continue
            found.update([base, *(f"{base}.{alias.name}".lstrip(".") for alias in node.names)])
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("conv_core.") for alias in node.names
                         if alias.name.startswith("conv_core."))
    return found


def _graph() -> dict[str, set[str]]:
    """Each module -> the package's modules it imports (a name imported from a module counts as that module)."""
    modules = {_module(path): path for path in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = _imported(path, name)
        graph[name] = {t for t in targets if t in modules and t not in (name, "")}
        graph[name] |= {t.rpartition(".")[0] for t in targets if t.rpartition(".")[0] in modules} - {name, ""}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_no_import_circle():
    graph = _graph()
    assert "engine" in graph and "routes" in graph["functional"]
    assert sorted((a, b) for a in graph for b in graph[a] if a in _reachable(graph, b)) == []


def test_no_runtime_module_imports_the_tooling():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        name = _module(path)
        if name.split(".")[0] in TOOLING:
            continue
        offenders += [f"{name} imports {target}" for target in sorted(_imported(path, name))
                      if target.split(".")[0] in TOOLING]
    assert offenders == []


def test_every_tooling_module_exists():
    """The list above names real modules (a renamed one would make the test above pass by forgetting it)."""
    assert {m for m in TOOLING if not (ROOT / f"{m}.py").is_file()} == set()


def test_a_converted_model_runs_without_loading_the_tooling():
    script = """
import json, sys, torch
import conv_core
model = conv_core.convert(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ConvTranspose2d(4, 2, 2, 2)))
model(torch.randn(1, 3, 8, 8)).sum().backward()
conv_core.explain(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("conv_core."))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    loaded = {m.removeprefix("conv_core.") for m in json.loads(out.splitlines()[-1])}
    assert "engine" in loaded and loaded & TOOLING == set()
