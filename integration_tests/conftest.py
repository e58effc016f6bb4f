"""Shared setup of the integration tests.

These tests exercise conv-core as a user gets it: real distributions,
installed with pip, found through their ``conv_core.backends`` entry points.
So the packages under ``integration_tests/packages/`` must be installed in the
running environment (tox's ``integration`` env does it; by hand, see
``integration_tests/README.md``). A missing one is a setup error that stops
the session with its name and the command to fix it, never a skip: a skipped
isolation test would look like a passing one.

The tests describe conv-core's behaviour with no ``CONV_CORE_*`` variable set
but one, so those of the calling shell are removed for the session (tests that
need one set it themselves), and the tuning database never is the developer's
own. The one: ``CONV_CORE_TRUST_ESTIMATES=1``. By default an estimate never
displaces aten (only measured times do, by a margin), and the example backend
has measured times for one problem only; these tests exist to drive the plugin
path on every problem, so they let its estimates rank
(``test_settings_env.py`` checks the default).
"""

from __future__ import annotations

import os
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

# The tutorial backend's Triton kernels run under the interpreter on this CPU-only machine. Triton reads
# TRITON_INTERPRET when it is first imported (its standard library's own @jit functions are made then), and
# torch.compile imports it in an earlier test: so it is set here, before any test can import triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

HERE = Path(__file__).resolve().parent

#: Distribution name -> the directory (relative to the repository root) that provides it.
REQUIRED_DISTRIBUTIONS = {
    "conv-core": "packages/conv-core",
    "conv-example": "integration_tests/packages/conv-example",
    "conv-broken-import": "integration_tests/packages/conv-broken-import",
    "conv-broken-hook": "integration_tests/packages/conv-broken-hook",
    "conv-broken-candidate": "integration_tests/packages/conv-broken-candidate",
    "conv-broken-run": "integration_tests/packages/conv-broken-run",
    "conv-misspelled-hook": "integration_tests/packages/conv-misspelled-hook",
}


def missing_distributions() -> list[str]:
    """Required distributions that are not installed, in a stable order."""
    missing = []
    for name in REQUIRED_DISTRIBUTIONS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def pytest_configure(config: pytest.Config) -> None:
    missing = missing_distributions()
    if missing:
        paths = " ".join(f"-e {REQUIRED_DISTRIBUTIONS[name]}" for name in missing)
        raise pytest.UsageError(
            f"integration tests need these packages installed: {', '.join(missing)}. "
            f"From the repository root run: python -m pip install {paths}"
        )
    # ConformanceSuite asks the backend for its candidates while tests are being
    # collected, before any fixture runs: scrub the caller's settings here already.
    clean_environment(os.environ.__setitem__, os.environ.__delitem__,
                      Path(tempfile.gettempdir()) / f"conv-core-integration-{os.getpid()}" / "tuning.json")


def clean_environment(setenv, delenv, tuning_db: Path) -> None:
    """Remove every CONV_CORE_* variable, point the tuning database at ``tuning_db`` and the first-use store beside
    it (never the user's cache), trust estimates."""
    for name in [n for n in os.environ if n.startswith("CONV_CORE_")]:
        delenv(name)
    setenv("CONV_CORE_TUNING_DB", str(tuning_db))
    setenv("CONV_CORE_FIRST_USE_DIR", str(tuning_db.parent / "first-use"))
    setenv("CONV_CORE_TRUST_ESTIMATES", "1")


@pytest.fixture(autouse=True)
def fresh_conv_core(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Each test starts from a new engine, with no CONV_CORE_* setting from the caller's shell.

    The tuning database points into the test's temporary directory, so a
    developer's own ``~/.cache/conv-core/tuning.json`` cannot change a ranking.
    """
    import torch

    import conv_core

    clean_environment(monkeypatch.setenv, monkeypatch.delenv, tmp_path / "tuning.json")
    torch.manual_seed(0)  # tests that draw with torch.randn see the same numbers every run
    conv_core.reset()
    yield
    conv_core.reset()
