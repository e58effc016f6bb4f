"""The package's modules import each other in one direction: no module imports one that imports it back
(directly or through others), and no import of the package's own modules hides inside a function."""

from __future__ import annotations

from pathlib import Path

import conv_rdna
from conv_core.testing.imports import import_graph

ROOT = Path(conv_rdna.__file__).parent


def test_no_import_circle():
    graph = import_graph(ROOT)
    assert {"conv_rdna.launch", "conv_rdna.registry"} <= graph.edges["conv_rdna.candidates"]  # the graph is read
    assert graph.circles() == []


def test_no_function_level_imports_of_the_package():
    assert import_graph(ROOT).nested == []
