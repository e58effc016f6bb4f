"""The 3x3 path (``conv3x3``): where it is offered, and its numerics against the float64 reference.

Interpreted on small odd shapes with 16x16x16 tiles, so that each problem spans several pixel and channel
tiles and a partial channel block (the nine taps of one block run before the next). Every direction the
kernel takes (forward at any stride, the data gradient at stride 1), both layouts, the epilogue's options.
"""

from __future__ import annotations

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_rdna import candidates
from conv_rdna.plans import implicit_gemm as ig_plans
from test_kernels import LAYOUTS
from test_kernels import check as check_kernel


def conv(direction="fwd", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=20, out_channels=18, input_size=(7, 9), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="float16")
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def check(problem: ConvProblem, seed: int = 0):
    """``conv3x3`` with 16x16x16 tiles into a NaN-poisoned result, compared with the reference."""
    check_kernel(problem, "conv3x3", seed=seed)


FORWARD = {
    "same-bias-relu": dict(bias=True, activation="relu"),
    "s2-asym-gelu": dict(stride=2, padding=((1, 0), (0, 1)), bias=True, activation="gelu"),
    "d2-s2x1-silu-f32out": dict(dilation=2, stride=(2, 1), padding=2, activation="silu", out_dtype="float32"),
    "g2-no-padding": dict(groups=2, padding=0, in_channels=40, out_channels=6),
    "window-covers-input": dict(input_size=(3, 3), padding=0, bias=True, activation="gelu_tanh"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", FORWARD)
def test_forward(name, dtype, layout):
    check(conv(**FORWARD[name], dtype=dtype, layout=layout))


BWD_DATA = {
    "same": dict(),
    "wide-padding": dict(padding=2),  # the flipped filter's padding dil*(R-1) - pad is negative
    "d2-asym-g2": dict(dilation=2, padding=((2, 1), (0, 2)), groups=2, in_channels=6, out_channels=36),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", BWD_DATA)
def test_data_gradient(name, layout):
    check(conv("bwd_data", **BWD_DATA[name], layout=layout))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_bfloat16_under_the_interpreter(direction):
    check(conv(direction, dtype="bfloat16", layout="channels_last"), seed=3)


@pytest.mark.parametrize("p, offered", [
    (conv(), True),
    (conv(stride=2), True),
    (conv("bwd_data"), True),
    (conv("bwd_data", stride=2), False),  # four stride phases of 1-4 taps: not a 3x3 convolution
    (conv("bwd_weight"), False),
    (conv(filter_size=(3, 1), padding=0), False),
    (conv(input_size=(30,), filter_size=3), False),  # 1D: three taps along W only
    (conv(filter_size=5, padding=2), False),
])
def test_offered_for_3x3_filters_only(p, offered, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU candidates, also in a CUDA run of this file
    assert ig_plans.three_by_three(p) == offered
    kernels = [c.kernel for c in candidates.candidates(p.replace(arch="cpu"), torch.device("cpu"))]
    assert ("conv3x3" in kernels) == offered, kernels
