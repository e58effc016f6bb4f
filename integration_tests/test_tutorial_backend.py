"""The tutorial backend of docs/writing-a-backend.md, built from the page itself.

The page's labelled code blocks are written to a temporary folder and installed there with pip (so its
``pyproject.toml``, entry point and package data are what is tested), loaded into conv-core through that entry
point, and run under Triton's interpreter on tiny problems against the float64 reference; then the package's own
tests (the conformance kit, the README's kernel table) run as a reader would run them.

Needs triton (the tox ``integration`` environment installs ``conv-core[test,triton]``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
import tutorial_page
from integration_support import CPU, backend

import conv_core
import conv_core.engine
from conv_core import ConvProblem, cli, explain
from conv_core.engine import Engine
from conv_core.plugins import ENTRY_POINT_GROUP, Registry
from conv_core.reference import compare, random_operands
from conv_core.settings import Settings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-backend.md"
NAME = "tutorial"

#: What the page must hold: a whole package, its tests included.
PACKAGE_FILES = {
    "pyproject.toml", "README.md", "tests/conftest.py", "tests/test_conformance.py",
    *(f"src/conv_tutorial/{name}" for name in ("__init__.py", "hooks.py", "kernels.py", "configs.py",
                                               "data/configs.json", "plans.py", "registry.py", "candidates.py")),
}


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return tutorial_page.page_files(PAGE.read_text())


@pytest.fixture(scope="module")
def installed(files, tmp_path_factory) -> SimpleNamespace:
    """The page's package written out and pip-installed (no dependencies, no index) into a folder of its own."""
    if importlib.util.find_spec("triton") is None:
        pytest.fail("the tutorial backend needs triton: install conv-core[triton] in this environment (tox.ini's "
                    "integration env)", pytrace=False)
    root = tmp_path_factory.mktemp("tutorial")
    source, site = root / "conv-tutorial", root / "site"
    tutorial_page.write_files(files, source)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(source)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"pip could not install the page's package:\n{done.stdout}\n{done.stderr}"
    return SimpleNamespace(source=source, site=site)


@pytest.fixture(scope="module")
def tutorial(installed):
    """The installed package importable, its kernels interpreted, and its ``conv_core.backends`` entry points."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")  # before the kernels are imported: they are then interpreted
        patch.syspath_prepend(str(installed.site))
        (dist,) = metadata.distributions(path=[str(installed.site)])
        entry_points = list(dist.entry_points.select(group=ENTRY_POINT_GROUP))
        from conv_tutorial.registry import REGISTRY

        yield SimpleNamespace(entry_points=entry_points, registry=REGISTRY)
    for module in [m for m in sys.modules if m == "conv_tutorial" or m.startswith("conv_tutorial.")]:
        del sys.modules[module]


@pytest.fixture
def engine(tutorial, monkeypatch, tmp_path) -> Engine:
    """conv-core's engine with aten and the tutorial backend, loaded through the page's entry point."""
    settings = dataclasses.replace(Settings.from_env(), allow=None, block=frozenset(),
                                   tuning_db=tmp_path / "tuning.json")
    installed_engine = Engine(settings, Registry(settings, tutorial.entry_points))
    monkeypatch.setattr(conv_core.engine, "_engine", installed_engine)
    return installed_engine


def test_the_page_holds_the_whole_package(files):
    assert set(files) == PACKAGE_FILES


def test_the_entry_point_is_the_backends_name(tutorial):
    assert [(ep.name, ep.value) for ep in tutorial.entry_points] == [(NAME, "conv_tutorial.hooks")]


def test_conv_core_backends_shows_it_loaded(engine, capsys):
    assert cli.main(["backends", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"aten", NAME}
    assert rows[NAME]["status"] == "ok", rows[NAME]["status"]
    assert rows[NAME]["source"] == "conv_tutorial.hooks" and rows[NAME]["version"] == "0.1.0"
    assert [name for name, _ in engine.registry.tuning_tables() if name == NAME] == []  # it ships none yet
    assert backend(NAME).failures == []


FORWARD = [
    dict(dtype="float32", input_size=(9, 7), filter_size=(3, 3), stride=2, padding=((1, 0), (2, 1)), bias=True),
    dict(dtype="float16", out_dtype="float32", input_size=(6, 8), filter_size=(3, 1), dilation=2, padding=2),
    dict(dtype="bfloat16", in_channels=6, out_channels=9, groups=3, input_size=(5, 6), filter_size=(2, 2),
         bias=True),
    dict(dtype="float16", input_size=(13,), filter_size=(5,), stride=2, padding=2),
]


@pytest.mark.parametrize("fields", FORWARD, ids=lambda f: f"{f['dtype']}-{len(f['input_size'])}d")
def test_a_forward_convolution_through_it_matches_float64(engine, fields):
    """conv_core's public call on random channels-last operands, forced onto the tutorial backend."""
    fields = {"direction": "fwd", "batch": 2, "in_channels": 4, "out_channels": 5, "stride": 1, "padding": 0,
              "dilation": 1, "layout": "channels_last", **fields}
    problem = ConvProblem(**fields)
    x, w, bias = random_operands(problem, CPU, seed=3)
    conv = conv_core.conv2d if problem.ndim == 2 else conv_core.conv1d
    y = conv(x, w, bias, stride=problem.stride, padding=problem.padding, dilation=problem.dilation,
             groups=problem.groups, out_dtype=problem.out_dtype, backend=NAME)
    comparison = compare(problem, y, (x, w, bias))
    assert comparison.ok, comparison.message
    assert y.abs().max() > 0.1  # random operands: a result of zeros would be a kernel that wrote nothing
    assert backend(NAME).failures == []


def test_explain_names_its_candidate_and_its_declines(engine):
    problem = ConvProblem("fwd", 2, 8, 16, (10, 9), (3, 3), 1, 1, 1, dtype="float16", layout="channels_last")
    ranked = [row.kernel for row in explain(problem, device=CPU).rows]
    assert ranked[0] == "aten:native:default"  # interpreted, the tutorial loses on the CPU unless asked for
    assert [k for k in ranked if k.startswith(f"{NAME}:")] == [f"{NAME}:direct:m128n16k16w4s1"]
    assert explain(problem, device=CPU, backend=NAME).picked == f"{NAME}:direct:m128n16k16w4s1"
    declines = {
        "channels_first": "direct: takes channels_last tensors, not channels_first",
        "bwd_data": "direct: computes fwd, not bwd_data",
        "activation": "direct: fuses no activation (relu asked)",
    }
    variants = {"channels_first": problem.replace(layout="channels_first"),
                "bwd_data": problem.with_direction("bwd_data"), "activation": problem.replace(activation="relu")}
    for what, variant in variants.items():
        reasons = [d.reason for d in explain(variant, device=CPU).declines if d.backend == NAME]
        assert reasons == [declines[what]], what


def test_the_readme_table_is_the_registrys(files, tutorial):
    from conv_core.kit.registry import readme_table

    table = tutorial.registry.markdown_table()
    assert readme_table(files["README.md"]) == table
    assert [line.split("`")[1] for line in table.splitlines()[2:]] == list(tutorial.registry.names)


def test_every_architecture_of_its_data_reads(tutorial):
    from conv_tutorial import configs

    for arch in configs.DATA.json()["archs"]:
        table = configs.table(arch)
        assert set(table.families) == set(tutorial.registry.families()), arch


def test_its_own_tests_pass_as_the_page_shows_them(installed, tmp_path):
    """``python -m pytest tests`` in the package's folder, with the package installed: the conformance kit
    under the interpreter, and its README check."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONV_CORE_", "TRITON_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(installed.site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               CONV_CORE_PLUGINS=NAME, CONV_CORE_TUNING_DB=str(tmp_path / "tuning.json"), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"],
                          cwd=installed.source, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 50, done.stdout[-3000:]  # the kit's cases, not a suite of none
