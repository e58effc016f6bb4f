"""The installed backend packages are found through their entry points and reported by ``conv-core backends``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from integration_support import CPU, ENTRY_POINTS, EXAMPLE, backend, small_problem

import conv_core
from conv_core import cli


def test_every_installed_backend_is_discovered_in_registry_order():
    backends = conv_core.get_engine().registry.backends()
    # aten is built in and first; entry points follow sorted by name.
    assert [(b.entry_point, b.source) for b in backends] == [("aten", "builtin"), *sorted(ENTRY_POINTS.items())]


def test_example_backend_loads_with_its_info():
    example = backend(EXAMPLE)
    assert example.ok and example.load_error is None and example.failures == []
    assert example.info.version == "0.1.0" and example.info.targets == ("cpu",)
    assert example in conv_core.get_engine().registry.active()


def test_loaded_backends_and_failed_ones():
    registry = conv_core.get_engine().registry
    assert {b.name for b in registry.active()} == {"aten", "example", "broken_hook", "broken_candidate", "broken_run"}
    failed = {b.name: b.load_error for b in registry.backends() if not b.ok}
    assert list(failed) == ["broken_import", "misspelled_hook"]


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    status = cli.main(list(argv))
    return status, capsys.readouterr().out


def test_backends_json_lists_every_backend(capsys):
    status, out = run_cli(capsys, "backends", "--json")
    assert status == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert set(rows) == {"aten", *ENTRY_POINTS}
    assert rows["example"]["status"] == "ok"
    assert rows["example"]["version"] == "0.1.0" and rows["example"]["targets"] == ["cpu"]
    assert rows["example"]["entry_point"] == "example" and rows["example"]["source"] == "conv_example.hooks"
    assert rows["broken_import"]["status"].startswith("load error: ImportError")
    assert "libconvbroken" in rows["broken_import"]["status"]


def test_backends_json_shows_hook_failures_after_use(capsys):
    conv_core.get_engine().ranking(small_problem(), CPU)  # asks every backend, so the broken ones fail
    status, out = run_cli(capsys, "backends", "--json")
    assert status == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert any("simulated bug in conv_core_candidates" in f for f in rows["broken_hook"]["failures"])
    assert any("conv_core_tuning_tables" in f for f in rows["broken_hook"]["failures"])
    assert any("estimate_us=-1.0" in f for f in rows["broken_candidate"]["failures"])
    assert rows["example"]["failures"] == [] and rows["aten"]["failures"] == []


def test_backends_table_names_the_broken_import(capsys):
    status, out = run_cli(capsys, "backends")
    assert status == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "ok" in lines["example"]
    assert "load error: ImportError" in lines["broken_import"]


def test_backends_table_names_the_misspelled_hook(capsys):
    status, out = run_cli(capsys, "backends")
    assert status == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "load error: PluginValidationError: unknown hook 'conv_core_candidate' (did you mean " \
           "'conv_core_candidates'?)" in lines["misspelled_hook"]
    assert "ok" in lines["example"]  # the other backends load as before


def conv_core_script() -> str:
    """The ``conv-core`` console script of the running interpreter's environment."""
    script = shutil.which("conv-core", path=str(Path(sys.executable).parent))
    assert script, f"no conv-core console script next to {sys.executable}; is conv-core installed here?"
    return script


def test_console_script_lists_backends(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_CORE_")}
    env["CONV_CORE_TUNING_DB"] = str(tmp_path / "tuning.json")
    done = subprocess.run([conv_core_script(), "backends", "--json"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["example"]["status"] == "ok"
    assert "ImportError" in rows["broken_import"]["status"]


@pytest.mark.parametrize("disabled", ["example", "broken_import,broken_run"])
def test_console_script_honours_disable_plugins(tmp_path, disabled):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_CORE_")}
    env.update(CONV_CORE_TUNING_DB=str(tmp_path / "tuning.json"), CONV_CORE_DISABLE_PLUGINS=disabled)
    done = subprocess.run([conv_core_script(), "backends", "--json"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    names = {row["name"] for row in json.loads(done.stdout)}
    assert names == {"aten", *ENTRY_POINTS} - set(disabled.split(","))
