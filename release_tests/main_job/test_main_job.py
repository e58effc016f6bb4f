"""The README's main command, ``./run.sh``, works on a fresh clone, in the order its packages need.

tox's ``mainjob`` environment runs this module. The long test clones the checkout (``git clone``: what a new user
has; a copy of the tree where there is no git repository) and runs ``./run.sh`` there from its first line to its
verdict, on the CPU path CI has. The others check its parts on their own: the install order read from the
packages' dependencies, the verdict's words for a CPU run, a GPU run and a failed one, and the message a failed
step leaves.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def script(name: str):
    """A module of ``scripts/`` imported from its file (the folder is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install_order = script("install_order")
main_job_verdict = script("main_job_verdict")


def test_the_install_order_puts_each_package_after_those_it_needs():
    packages = install_order.local_packages(ROOT)
    order = install_order.install_order(packages)
    assert sorted(order) == sorted(packages) and order[0] == "conv-core"
    for name, (_, needs) in packages.items():
        assert all(order.index(need) < order.index(name) for need in needs & packages.keys()), name
    assert order.index("conv-rdna") < order.index("conv-cdna")  # the order that broke: conv-cdna is built on it


def test_the_install_order_does_not_follow_folder_names(tmp_path):
    for folder, name, needs in (("packages/core", "core", []), ("plugins/a-late", "Late_Plugin", ["z-base>=1"]),
                                ("plugins/z-base", "z.base", ["core"])):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\ndependencies = {json.dumps(needs)}\n')
    order = install_order.install_order(install_order.local_packages(tmp_path))
    assert order == ["core", "z-base", "late-plugin"]


def test_a_dependency_cycle_is_named():
    with pytest.raises(ValueError, match="a, b form a cycle"):
        install_order.install_order({"a": (Path("a"), {"b"}), "b": (Path("b"), {"a"}), "c": (Path("c"), set())})


def backends(failed: str | None = None) -> list[dict]:
    return [{"name": name, "status": "error" if name == failed else "ok"} for name in ("aten", "rdna")]


def layers(device: str, name: str) -> dict:
    return {"device": device, "device_name": name, "arch": "sm_90" if device == "cuda" else "cpu",
            "summary": {"problems": 2, "geomean_pick_speedup": 1.25, "errors": 0},
            "rows": [{"picked": "rdna:implicit_gemm:m128"}, {"picked": "aten:native:default"}]}


def model(device: str, eager: float, right: bool = True, spread: list[float] | None = None) -> dict:
    mode = {"mode": "eager", "skipped": None, "ratios": {"conv": eager},
            "within_tolerance": {"plain": True, "conv": right}}
    if spread:
        mode["ratio_spread"] = {"conv": spread}
    skipped = {"mode": "graph", "skipped": "needs CUDA", "ratios": {}, "within_tolerance": {}}
    return {"model": "tiny", "batch": 2, "config": {"dtype": "bfloat16", "layout": "channels_last"},
            "environment": {"devices": [{"device": device, "name": "x86_64", "cores": 2}]}, "modes": [mode, skipped]}


def test_a_cpu_verdict_says_the_slowdown_is_expected_and_where_the_gpu_figures_are():
    lines, status = main_job_verdict.verdict(backends(), layers("cpu", "cpu"), model("cpu", 0.74))
    text = "\n".join(lines)
    assert status == 0 and all(line.startswith("run.sh: ") for line in lines)
    assert "the CPU (x86_64, 2 cores; no GPU found)" in text and "backends aten, rdna" in text
    assert "eager: converted model at 0.74x plain PyTorch's speed; outputs within tolerance" in text
    assert "graph: skipped (needs CUDA)" in text and "expected on a CPU" in text
    assert main_job_verdict.GPU_FIGURES in text and main_job_verdict.USER_GUIDE in text
    assert lines[-1].startswith("run.sh: verdict: OK") and "on this CPU" in lines[-1]


def test_a_gpu_verdict_names_the_card_and_the_picks():
    lines, status = main_job_verdict.verdict(backends(), layers("cuda", "NVIDIA H200"), model("cuda", 1.12))
    text = "\n".join(lines)
    assert status == 0 and "ran on NVIDIA H200 (sm_90)" in text and "expected on a CPU" not in text
    assert "the ranking picked aten 1, rdna 1" in text and "geomean 1.25x" in text
    assert lines[-1].startswith("run.sh: verdict: OK") and "on this GPU" in lines[-1]
    assert "slower than plain" not in text
    slower, _ = main_job_verdict.verdict(backends(), layers("cuda", "NVIDIA H200"), model("cuda", 0.91))
    assert "the converted model ran slower than plain PyTorch here (eager)" in "\n".join(slower)


def test_a_verdict_gives_the_rounds_spread_where_the_record_has_it():
    record = model("cuda", 0.898, spread=[0.87, 0.93])
    lines, _ = main_job_verdict.verdict(backends(), layers("cuda", "NVIDIA H200"), record)
    assert "eager: converted model at 0.90x plain PyTorch's speed (rounds 0.87-0.93); outputs within tolerance" \
        in "\n".join(lines)
    assert "the converted model ran slower than plain PyTorch here (eager)" in "\n".join(lines)


@pytest.mark.parametrize("failed, right, why", [("rdna", True, "a backend failed to load"),
                                                (None, False, "a result was outside its tolerance")])
def test_a_failed_verdict_says_what_failed_and_exits_1(failed, right, why):
    lines, status = main_job_verdict.verdict(backends(failed), layers("cpu", "cpu"), model("cpu", 1.0, right))
    assert status == 1 and lines[-1].startswith(f"run.sh: verdict: FAILED: {why}") and "conv-core info" in lines[-1]


def fresh_clone(destination: Path) -> Path:
    """The checkout as a new user gets it: ``git clone`` (committed files only), or its files where it is no
    repository."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode == 0:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(destination)], check=True)
    else:
        shutil.copytree(ROOT, destination, ignore=shutil.ignore_patterns(".tox", ".venv", "*.egg-info", "__pycache__"))
    return destination


def run_sh(clone: Path, env: dict | None = None, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(["./run.sh"], cwd=clone, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_a_failed_step_says_what_failed_and_what_to_do(tmp_path):
    clone = tmp_path / "clone"  # the first step fails before run.sh reads anything beside itself
    clone.mkdir()
    shutil.copy(ROOT / "run.sh", clone)
    old_python = tmp_path / "bin" / "python3"
    old_python.parent.mkdir()
    old_python.write_text("#!/bin/sh\nexit 1\n")  # stands for a Python older than 3.10
    old_python.chmod(0o755)
    done = run_sh(clone, {"PATH": f"{old_python.parent}{os.pathsep}{os.environ['PATH']}"}, timeout=60)
    assert done.returncode != 0
    assert "run.sh: FAILED while checking python3 (3.10 or newer)" in done.stdout
    assert "run.sh: what to do: install Python 3.10 or newer" in done.stdout


def test_run_sh_on_a_fresh_clone_ends_with_its_verdict(tmp_path):
    clone = fresh_clone(tmp_path / "clone")
    done = run_sh(clone, {"CUDA_VISIBLE_DEVICES": ""})
    sys.stdout.write(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    installed = [line.removeprefix("run.sh: installing ") for line in lines if line.startswith("run.sh: installing ")]
    assert installed.index("conv-rdna") < installed.index("conv-cdna") and installed[0] == "conv-core"
    assert "run.sh: expected on a CPU" in done.stdout
    assert lines[-1].startswith("run.sh: verdict: OK: conv-core is installed")
