"""conv-gluon at the newest triton: it loads, and declines with the reason rather than fail in a launch.

triton 3.9 renamed the shared-memory descriptor's ``_reinterpret`` (the row-box kernels call it) and
compiles the other kernels with register spills (``python -m conv_gluon.aot`` there: 59 of 167 jobs). Until
the kernels are ported, :mod:`conv_gluon.toolchain` declines on such a release; this module holds it to that:
the package and its kernels import, the backend loads through its entry point, and a Hopper problem gets a
decline that names the missing piece. Its own tests (``plugins/conv-gluon/tests``) run at triton 3.6.
"""

from __future__ import annotations

import importlib

import conv_core
import pytest
import torch
from conv_core.candidate import Declined
from conv_core.problem import ConvProblem
from conv_gluon import candidates, toolchain

HOPPER_PROBLEM = ConvProblem("fwd", batch=2, in_channels=64, out_channels=64, input_size=(16, 16), filter_size=3,
                             stride=1, padding=1, dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90")


def test_backend_loads_through_its_entry_point():
    backend = conv_core.get_engine().registry.get("gluon")
    assert backend is not None and backend.ok, getattr(backend, "load_error", None)


@pytest.mark.parametrize("module", ["conv_gluon.kernels.compat", "conv_gluon.hooks"])
def test_modules_import(module):
    importlib.import_module(module)


def test_a_hopper_problem_is_declined_with_the_reason_or_offered():
    """Either this triton has every name the kernels use (then candidates come) or the decline names it."""
    issue = toolchain.gluon_issue()
    answer = candidates.candidates(HOPPER_PROBLEM, torch.device("cuda"))  # only the device's type is read
    if issue is None:
        assert any(not isinstance(item, Declined) for item in answer), answer
    else:
        assert "triton" in issue
        assert [item.reason for item in answer if isinstance(item, Declined)] == [issue], answer
