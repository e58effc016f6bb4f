"""Backends that misbehave on purpose, and a process-wide engine that loads only them: for tests of the core and
of packages built on it (conv-tools), never for a user's process.

:class:`Plugin` offers one candidate whose ``run`` decides how it fails (:func:`zeros_run`: fast and wrong;
:func:`raising_run`: raises); :class:`NoInfo` never loads. :func:`isolate` gives a test a private tuning
database and a fresh engine, :func:`use_backends` makes that engine load exactly the plugins given (and aten),
:func:`prove_faster` writes the measured times the ranking wants before a plugin runs instead of aten. A test
folder's ``conftest.py`` imports :func:`one_cpu_thread` and :func:`private_first_use_store` to use them.
"""

from __future__ import annotations

import functools

import pytest
import torch

from .. import engine as engine_module
from ..candidate import BackendInfo, Candidate, Declined
from ..engine import Engine
from ..hookspec import hookimpl
from ..plugins import Registry
from ..problem import ConvProblem
from ..settings import Settings

CPU = torch.device("cpu")
TINY = ConvProblem("fwd", 2, 4, 8, (6, 6), (3, 3), 1, 1, 1, dtype="float32", layout="channels_last")


class Plugin:
    """A backend with one candidate; ``run`` and the estimate decide how it misbehaves."""

    def __init__(self, name, run, estimate_us=1e-3, declines=None, tags=()):
        self.name, self.run, self.estimate_us, self.declines = name, run, estimate_us, declines
        self.tags = frozenset(tags)

    @hookimpl
    def conv_core_backend_info(self):
        return BackendInfo(self.name, "1.0", ("cpu",), "test backend")

    @hookimpl
    def conv_core_candidates(self, problem, device):
        if self.declines:
            return [Declined(self.name, self.declines)]
        run = functools.partial(self.run, problem)
        return [Candidate(self.name, "k", "c", run, estimate_us=self.estimate_us, tags=self.tags)]


def zeros_run(problem, *operands, out=None):
    """Fast and wrong: the estimate ranks it first until tune proves it broken."""
    return (problem.empty_result(operands[0].device) if out is None else out).zero_()


def raising_run(problem, *operands, out=None):
    raise RuntimeError("kernel exploded")


class NoInfo:
    """A backend whose info hook raises: it never loads."""

    @hookimpl
    def conv_core_backend_info(self):
        raise ImportError("needs libfoo.so")


class EntryPointOf:
    """What the registry needs of an entry point, for an object already in memory."""

    def __init__(self, name, plugin):
        self.name, self.value, self.plugin = name, f"tests:{name}", plugin

    def load(self):
        return self.plugin


def wrong_backend():
    return Plugin("wrong", zeros_run)


def raising_backend():
    return Plugin("raising", raising_run)


def isolate(tmp_path, monkeypatch):
    """A private tuning database and a fresh process-wide engine (monkeypatch restores the old one)."""
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(tmp_path / "tuning.json"))
    for name in ("CONV_CORE_BACKEND", "CONV_CORE_BENCHMARK", "CONV_CORE_PLUGINS", "CONV_CORE_DISABLE_PLUGINS",
                 "CONV_CORE_NONDETERMINISTIC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(engine_module, "_engine", None)


def use_backends(monkeypatch, **plugins) -> Engine:
    """Make the process-wide engine load exactly these plugins (by entry-point name), plus aten."""
    settings = Settings.from_env()
    engine = Engine(settings, Registry(settings, [EntryPointOf(n, p) for n, p in plugins.items()]))
    monkeypatch.setattr(engine_module, "_engine", engine)
    return engine


def prove_faster(engine, problems, kernel_ids, aten_us=1000.0, us=1.0) -> None:
    """Tuning-database entries measuring each of ``kernel_ids`` at ``us`` and aten at ``aten_us`` on each
    problem (on the CPU): the evidence the ranking asks for before a plugin runs instead of aten."""
    from ..tuning import Entry, merge_entries, read_entries, write_entries

    versions = engine.versions()
    entries = []
    for problem in problems:
        entries.append(Entry("cpu", "cpu", problem.key, "aten:native:default", versions["aten"], aten_us))
        entries += [Entry("cpu", "cpu", problem.key, k, versions[k.split(":")[0]], us) for k in kernel_ids]
    db = engine.settings.tuning_db
    write_entries(db, merge_entries(read_entries(db), entries))
    engine.reset()


# ---- fixtures a package's conftest.py imports to use (autouse) ------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def one_cpu_thread():
    """Tiny problems: one thread avoids OpenMP synchronisation, which is very slow on a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def private_first_use_store(tmp_path_factory, monkeypatch):
    """Benchmark-mode tests keep their first-use timings in a folder of their own, never in ~/.cache (and never
    read another test's)."""
    monkeypatch.setenv("CONV_CORE_FIRST_USE_DIR", str(tmp_path_factory.mktemp("first-use")))
