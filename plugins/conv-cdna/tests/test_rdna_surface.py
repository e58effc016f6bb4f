"""conv-cdna uses conv-rdna through its public surface alone (:mod:`conv_rdna.api`), and that surface gives
what it promises: a change inside conv-rdna breaks conv-cdna only where the surface changes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import conv_rdna.api as api

HERE = Path(__file__).resolve().parents[1]


def _rdna_imports(path: Path) -> list[str]:
    """Each ``conv_rdna`` module ``path`` imports (``from conv_rdna import x`` names ``conv_rdna.x``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "conv_rdna"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "conv_rdna":
            found += ([f"conv_rdna.{alias.name}" for alias in node.names] if node.module == "conv_rdna"
                      else [node.module])
    return found


def test_conv_cdna_imports_nothing_of_conv_rdna_but_its_surface():
    imports = {str(path.relative_to(HERE)): _rdna_imports(path)
               for folder in ("src", "tests") for path in (HERE / folder).rglob("*.py")}
    assert {file: names for file, names in imports.items() if set(names) - {"conv_rdna.api"}} == {}
    assert any(imports.values())


def test_every_name_of_the_surface_resolves():
    assert [name for name in api.__all__ if getattr(api, name, None) is None] == []


def test_the_surface_loads_no_compiler_or_tooling_until_asked():
    script = ("import sys, conv_rdna.api; "
              "print(sorted(m for m in sys.modules if m in ('conv_rdna.aot', 'conv_rdna.sweep', 'conv_tools')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
