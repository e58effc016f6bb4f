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
