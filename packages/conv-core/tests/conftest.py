"""Shared fixtures of conv-core's tests."""

import pytest
import torch


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
