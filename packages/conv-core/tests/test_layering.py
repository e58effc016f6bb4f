"""conv-core's modules import each other one way: no import circle at any level (a function-level import
included); the runtime never reaches the offline tooling (no runtime module imports a tooling module, and a
process that converts a model and trains it, every installed backend loaded, has no tooling module in
``sys.modules``). The tooling is headed for a package of its own (issue 32); until it moves, this keeps the
line between the two where it will be cut."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import conv_core
from conv_core.testing.imports import import_graph

ROOT = Path(conv_core.__file__).parent
#: The offline modules: benchmarks, suites, tables and tuning pipeline, sweeps, pages, the command line.
TOOLING = frozenset({
    "bench", "bench_cli", "bench_holdout", "bench_host", "bench_models", "bench_nets", "bench_page", "bench_record",
    "bench_runs", "chart", "cli", "cli_options", "machine", "model_attribution", "model_bench", "model_bench_ddp",
    "model_bench_modes", "progress", "suite_page", "suites", "sweep", "tables", "tables_cli", "tables_replay", "tune",
    "warmup",
})


def _tooling(module: str) -> bool:
    return module.split(".")[1] in TOOLING if module.count(".") else False


def test_no_import_circle():
    graph = import_graph(ROOT)
    assert "conv_core.routes" in graph.edges["conv_core.functional"]
    assert graph.circles() == []


def test_no_runtime_module_imports_the_tooling():
    graph = import_graph(ROOT)
    assert [(a, b) for a in sorted(graph.edges) if not _tooling(a) for b in sorted(graph.edges[a])
            if _tooling(b)] == []


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
    loaded = json.loads(out.splitlines()[-1])
    assert "conv_core.engine" in loaded and [m for m in loaded if _tooling(m)] == []
