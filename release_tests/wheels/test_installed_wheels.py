"""The built wheels, installed (not editable) in a fresh environment, work from outside the source tree.

tox's ``wheels`` environment builds conv-core, conv-tools, conv-rdna, conv-gluon and conv-cdna with ``pip wheel``,
installs the five wheels with their declared dependencies (pinned by constraints.txt), and runs this module from its
temporary directory with ``TRITON_INTERPRET=1``. What an editable install hides shows up here: a data file
the package-data globs miss, a module left out of the package, a dependency the metadata does not declare.
``CONV_SOURCE_ROOT`` names the repository, only to list the data files the installed packages must carry.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import conv_core

#: triton 3.6's interpreter converts 1-element arrays to Python ints (numpy >= 1.25 warns once per use).
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")

SOURCE_ROOT = Path(os.environ.get("CONV_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
#: import name -> its source directory in the repository.
PACKAGES = {
    "conv_core": SOURCE_ROOT / "packages/conv-core/src/conv_core",
    "conv_tools": SOURCE_ROOT / "packages/conv-tools/src/conv_tools",
    "conv_rdna": SOURCE_ROOT / "plugins/conv-rdna/src/conv_rdna",
    "conv_gluon": SOURCE_ROOT / "plugins/conv-gluon/src/conv_gluon",
    "conv_cdna": SOURCE_ROOT / "plugins/conv-cdna/src/conv_cdna",
}


def installed_dir(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__).resolve().parent


@pytest.mark.parametrize("name", PACKAGES)
def test_imported_from_site_packages(name):
    """Not the source tree: the wheel's copy (an editable install would point into the repository)."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert installed_dir(name).is_relative_to(site), installed_dir(name)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_data_file_is_shipped(name):
    """Each JSON file under the source package's data/ (tables, swept layers, suites) is in the wheel."""
    source = PACKAGES[name] / "data"
    wanted = sorted(p.relative_to(source) for p in source.rglob("*.json"))
    assert wanted, f"no data files under {source}"
    missing = [str(p) for p in wanted if not (installed_dir(name) / "data" / p).is_file()]
    assert missing == []


def test_the_tooling_adds_its_subcommands():
    """``conv-core bench`` comes from the conv-tools wheel (entry point ``conv_core.commands``) and reads its suites."""
    out = subprocess.run(["conv-core", "bench", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--suite" in out and "--model" in out


def test_cli_lists_every_plugin_loaded():
    """``conv-core backends``: rdna, gluon and cdna found through their entry points, each with status ok."""
    out = subprocess.run(["conv-core", "backends"], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    for name in ("aten", "rdna", "gluon", "cdna"):
        assert name in rows, out
        assert "ok" in rows[name], out


def test_rdna_conv2d_matches_float64_reference():
    """A tiny forward through conv-rdna under Triton's interpreter (``backend="rdna"`` raises rather than fall
    back to aten), against float64."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 5, 7, 7, generator=gen), torch.randn(6, 5, 3, 3, generator=gen), torch.randn(6)
    y = conv_core.conv2d(x, w, b, padding=1, backend="rdna")
    ref = torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=1)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)


def test_gluon_imports_and_declines_the_cpu():
    """conv-gluon's kernels import (conv_gluon.kernels.compat binds the Gluon names of this triton); on the
    CPU it declines with a reason (its kernels run on Hopper only; the source tree's tests replay them)."""
    import conv_gluon.kernels.compat  # noqa: F401

    declines = conv_core.explain(torch.randn(1, 4, 6, 6), torch.randn(8, 4, 3, 3), padding=1).declines
    assert any(d.backend == "gluon" and d.reason for d in declines), declines


def test_cdna_declines_a_gpu_that_is_not_an_instinct_one():
    """conv-cdna is discovered and, asked about a GPU other than gfx90a/gfx942/gfx950, declines naming those."""
    from conv_cdna.candidates import candidates
    from conv_core.problem import ConvProblem

    problem = ConvProblem(direction="fwd", batch=1, in_channels=4, out_channels=8, input_size=(6, 6),
                          filter_size=(3, 3), stride=1, padding=1, dilation=1, dtype="bfloat16", arch="sm_90")
    (declined,) = candidates(problem, torch.device("cuda"))
    assert "gfx90a, gfx942, gfx950" in declined.reason and "sm_90" in declined.reason


def test_cdna_conv2d_matches_float64_reference():
    """A tiny float16 forward through conv-cdna under the interpreter (gfx942's tiles), against float64."""
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 5, 7, 7, generator=gen).half(), torch.randn(6, 5, 3, 3, generator=gen).half()
    y = conv_core.conv2d(x, w, padding=1, backend="cdna")
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2)


def test_conformance_check_on_a_tiny_case():
    """``conv-core check``: the conformance kit on conv-rdna, float32, one layout, one random problem."""
    done = subprocess.run(["conv-core", "check", "--backend", "rdna", "--device", "cpu", "--dtypes", "fp32",
                           "--layouts", "nhwc", "--directions", "fwd", "--random", "1"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_the_source_tree_is_not_on_the_path():
    """The checks above import the installed packages: no package's source directory is on sys.path."""
    sources = {str(path.parent.resolve()) for path in PACKAGES.values()}
    assert sources.isdisjoint(str(Path(entry).resolve()) for entry in sys.path if entry), sys.path
