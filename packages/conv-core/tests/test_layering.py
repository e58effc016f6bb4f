"""conv-core's modules import each other one way: no import circle at any level (a function-level import
included); conv-core never imports the offline tooling (``conv-tools``, a package of its own); and a process
that converts a model and trains it, every installed backend loaded, loads neither the tooling nor conv-core's
command line. The core stays thin: no module over :data:`MODULE_LINES` lines."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import conv_core
from conv_core.testing.imports import import_graph

ROOT = Path(conv_core.__file__).parent
#: conv-core's command line: run by ``conv-core``, never by a model's calls.
COMMAND_LINE = frozenset({"conv_core.cli", "conv_core.cli_options", "conv_core.machine", "conv_core.warmup"})
#: The longest a module of the core may grow.
MODULE_LINES = 400


def test_no_import_circle():
    graph = import_graph(ROOT)
    assert "conv_core.frontend.routes" in graph.edges["conv_core.functional"]
    assert graph.circles() == []


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_core_never_imports_the_tooling():
    importers = {str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
                 if any(name.split(".")[0] == "conv_tools" for name in _imported(path))}
    assert importers == set()


def test_a_converted_model_runs_without_loading_the_tooling_or_the_command_line():
    script = """
import json, sys, torch
import conv_core
model = conv_core.convert(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ConvTranspose2d(4, 2, 2, 2)))
model(torch.randn(1, 3, 8, 8)).sum().backward()
conv_core.explain(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3))
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("conv_core.", "conv_tools")))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out.splitlines()[-1])
    assert "conv_core.engine" in loaded
    assert [m for m in loaded if m.startswith("conv_tools") or m in COMMAND_LINE] == []


def test_no_module_of_the_core_is_long():
    lines = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")}
    assert {name: n for name, n in lines.items() if n > MODULE_LINES} == {}


#: The most lines the runtime may hold together: what a converted model's process can load (everything but the
#: command line and the conformance kit's ``testing/``), issue 32's bound on a thin core ("about 7,000"); raised
#: from 7,050 for the transposed convolution's fused epilogue (the registry's tag gate, the route's fused ranking),
#: then from 7,100 for cuDNN's fused operators (aten's convolution + bias + ReLU candidate, its route, and a residual
#: block's end fused with its add).
RUNTIME_LINES = 7_250


def test_the_runtime_core_is_thin():
    runtime = [path for path in ROOT.rglob("*.py") if path.relative_to(ROOT).parts[0] != "testing"
               and ".".join(("conv_core", *path.relative_to(ROOT).with_suffix("").parts)) not in COMMAND_LINE]
    assert sum(len(path.read_text().splitlines()) for path in runtime) <= RUNTIME_LINES
