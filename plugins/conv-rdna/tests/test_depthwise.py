"""The depthwise family (``groups == in_channels``): three kernels against conv_core's float64 reference.

Interpreted on the CPU (or compiled: see conftest.py). The configurations here are the tests' own: tiny
blocks (4x8 pixels sliding 4 columns per slot where the stride and dilation along W are 1, else 4x4;
4 channels, 4 taps, 8-pixel chunks; 8x8 pixels and 16 taps for the 7x7 filter) so that these small
problems span several pixel blocks, slots, channel blocks (partial ones included) and tap blocks, and
forced split counts for the weight gradient (1: direct store; 3: two-stage workspace).
Operands are dense in the problem's layout, read and written in place. Every geometry runs in every
direction in float16 (three in both layouts, the others alternating), some in float32 as well (2D and
1D, sliding or not); the epilogue cases cover bias, each activation and a float32 result; bfloat16 once
per direction.
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_rdna import candidates, configs, launch, registry
from conv_rdna.plans import depthwise as dw_plans
from conv_rdna.plans import common
from conv_core.kit import declines
from conv_core.kit.declines import interpreting
from conv_core.geometry import Geometry
from test_kernels import check as check_kernel

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")
LAYOUTS = ("channels_first", "channels_last")
PIXELS = configs.StencilConfig(block_h=4, block_w=8, block_c=4, block_t=1, slide=4, num_warps=4, num_stages=1)
TAPS = configs.StencilConfig(block_h=1, block_w=8, block_c=4, block_t=4, slide=1, num_warps=4, num_stages=1)
#: For the 7x7 filter (49 taps per pixel: the interpreter's time goes with programs x taps).
PIXELS_7X7 = dataclasses.replace(PIXELS, block_h=8, block_w=8)
TAPS_7X7 = dataclasses.replace(TAPS, block_w=16, block_t=16)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # the hook only reads the device type


def table(splits: int | None = None) -> configs.ArchTable:
    tab = configs.table(configs.INTERPRETER)
    if splits is None:
        return tab
    rule = configs.SplitRule(target_programs=10**9, max_split=splits, min_blocks_per_split=1)
    return dataclasses.replace(tab, depthwise_split=rule)


def check(problem: ConvProblem, config: configs.StencilConfig | None = None, tab=None, seed: int = 0):
    """Run the depthwise kernel of the problem's direction into a NaN-poisoned ``out``; compare."""
    kernel = registry.DEPTHWISE_KERNELS[problem.direction]
    if config is None:
        big = math.prod(problem.filter_size) > 25
        config = (PIXELS_7X7 if big else PIXELS) if problem.direction != "bwd_weight" else (TAPS_7X7 if big else TAPS)
    return check_kernel(problem, kernel, config, tab or table(), seed)


def depthwise(c: int = 6, multiplier: int = 1, **fields) -> ConvProblem:
    base = dict(direction="fwd", batch=2, in_channels=c, out_channels=c * multiplier, groups=c, stride=1,
                padding=0, dilation=1, input_size=(9, 7), filter_size=3)
    return ConvProblem(**{**base, **fields})


# Geometries of every direction. ConvNeXt (7x7, pad 3) and MobileNet (3x3, stride 1 and 2) shapes, odd
# sizes, stride 2 with asymmetric padding, dilation 2, a 1x5 filter, 1D, multiplier 2. The first four
# slide along W (stride and dilation 1 along W; the data gradient also needs stride 1 along H).
GEOMETRIES = {
    "3x3-s1": dict(padding=1),
    "1x5-s1-asym": dict(c=5, input_size=(5, 11), filter_size=(1, 5), padding=((0, 1), (3, 1))),
    "conv1d-s1-mult2": dict(c=3, multiplier=2, input_size=(19,), filter_size=3, padding=((2, 0),)),
    "3x3-s2-asym": dict(input_size=(9, 8), stride=2, padding=((1, 0), (0, 2))),
    "7x7-p3": dict(c=5, batch=1, input_size=(7, 9), filter_size=7, padding=3),
    "3x3-s2x1": dict(input_size=(7, 10), stride=(2, 1), padding=((0, 1), (1, 1))),  # slides forward only
    "3x3-d2": dict(dilation=2, padding=2),
    "1x5-s1x2": dict(filter_size=(1, 5), stride=(1, 2), padding=((0, 0), (2, 1))),
    "conv1d-s2": dict(input_size=(17,), filter_size=5, stride=2, padding=((2, 1),)),
    "mult2-s2": dict(c=3, multiplier=2, stride=2, padding=1),
}


#: Geometries checked in both layouts in every direction; the others alternate layouts between
#: geometries and directions, so that each meets both layouts.
BOTH_LAYOUTS = ("3x3-s1", "3x3-s2-asym", "7x7-p3")


def cases(direction: int, float32: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``(geometry, dtype, layout)``: every geometry in float16; ``float32`` ones also in float32."""
    found = []
    for i, name in enumerate(GEOMETRIES):
        layouts = LAYOUTS if name in BOTH_LAYOUTS else (LAYOUTS[(i + direction) % 2],)
        found += [(name, "float16", layout) for layout in layouts]
        found += [(name, "float32", layout) for layout in layouts if name in float32]
    return found


@pytest.mark.parametrize("name, dtype, layout", cases(0, ("3x3-s1", "conv1d-s2")))
def test_forward(name, dtype, layout):
    check(depthwise(dtype=dtype, layout=layout, **GEOMETRIES[name]))


@pytest.mark.parametrize("name, dtype, layout", cases(1, ("conv1d-s1-mult2", "3x3-s2-asym")))
def test_backward_data(name, dtype, layout):
    check(depthwise(dtype=dtype, layout=layout, **GEOMETRIES[name]).with_direction("bwd_data"))


@pytest.mark.parametrize("name, dtype, layout", cases(0, ("3x3-s2-asym", "1x5-s1-asym")))
def test_backward_weight(name, dtype, layout):
    check(depthwise(dtype=dtype, layout=layout, **GEOMETRIES[name]).with_direction("bwd_weight"), tab=table(3))


# ---- the forward epilogue --------------------------------------------------------------------------------

EPILOGUES = {  # bias and each activation of conv_core.activations, on different geometries and layouts
    "bias": (dict(bias=True), "3x3-s2-asym", "channels_last"),
    "relu": (dict(bias=True, activation="relu"), "3x3-s1", "channels_first"),
    "relu6": (dict(activation="relu6"), "conv1d-s1-mult2", "channels_last"),
    "gelu": (dict(bias=True, activation="gelu"), "7x7-p3", "channels_last"),
    "gelu_tanh": (dict(bias=True, activation="gelu_tanh"), "conv1d-s2", "channels_first"),
    "silu": (dict(bias=True, activation="silu"), "3x3-s2x1", "channels_last"),
    "silu-f32out": (dict(bias=True, activation="silu", out_dtype="float32"), "1x5-s1x2", "channels_first"),
}


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_without_sliding(layout, direction):
    """SLIDE = 1 on geometries that could slide: the plain per-tap path (and the data gradient's phase
    path at stride 1)."""
    plain = dataclasses.replace(PIXELS, slide=1)
    name = "3x3-s1" if direction == "fwd" else "1x5-s1-asym"
    problem = depthwise(dtype="float16", layout=layout, **GEOMETRIES[name]).with_direction(direction)
    p, _, _ = check(problem, plain)
    assert dict(p.launches[0].constexprs)["SLIDE"] == 1


def test_sliding_is_planned_where_it_applies():
    for name, fields in GEOMETRIES.items():
        forward = depthwise(**fields)
        for problem in (forward, forward.with_direction("bwd_data")):
            kernel = registry.DEPTHWISE_KERNELS[problem.direction]
            const = dict(registry.make_plan(problem, kernel, PIXELS, table()).launches[0].constexprs)
            g = Geometry.of(problem)
            slides = g.stride[1] == 1 and g.dil[1] == 1 and (problem.direction == "fwd" or g.stride[0] == 1)
            assert const["SLIDE"] == (4 if slides else 1), (name, problem.direction)
            # a block that cannot slide is half as wide (its slots would otherwise hold 4 accumulators)
            assert const["BLOCK_H"] * const["BLOCK_W"] <= 32 if slides else 16


@pytest.mark.parametrize("name", EPILOGUES)
def test_forward_epilogue(name):
    epilogue, geometry, layout = EPILOGUES[name]
    check(depthwise(dtype="float16", layout=layout, **GEOMETRIES[geometry], **epilogue))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_bfloat16_under_the_interpreter(direction):
    """No dot here: only the store needs the interpreter workaround (bf16 rounded, not truncated)."""
    assert interpreting() == (DEVICE == "cpu")
    problem = depthwise(dtype="bfloat16", layout="channels_last", **GEOMETRIES["3x3-s2-asym"])
    if direction == "fwd":
        problem = problem.replace(bias=True, activation="gelu")
    check(problem.with_direction(direction), tab=table(3))


# ---- data gradient: stride phases --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fields", [
    dict(input_size=(10, 11), stride=3, dilation=2, padding=((2, 0), (1, 1))),  # 9 phases, uneven
    dict(batch=1, input_size=(9, 10), stride=2, dilation=2, padding=2),  # half the phases get no tap
    dict(input_size=(7, 8), filter_size=1, stride=2),  # 1x1 stride 2: pixels no output reads
    dict(c=4, multiplier=3, input_size=(8, 8), filter_size=(3, 2), stride=(2, 1), padding=((1, 1), (0, 1))),
], ids=["s3-d2-asym", "s2-d2-empty-phases", "1x1-s2", "mult3-s2x1"])
def test_backward_data_phases(fields, layout):
    check(depthwise(dtype="float16", layout=layout, **fields).with_direction("bwd_data"))


# ---- weight gradient: split reduction ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("splits", [1, 3])
def test_backward_weight_splits(splits, layout):
    geometry = {**GEOMETRIES["7x7-p3"], "batch": 2}  # 126 pixels: 8 chunks of 16
    problem = depthwise(dtype="float16", layout=layout, **geometry).with_direction("bwd_weight")
    p, operands, out = check(problem, tab=table(splits))
    assert p.split == splits and p.config_name.endswith(f"x{splits}")
    assert p.workspace_elements == (0 if splits == 1 else splits * math.prod(problem.weight_shape))
    assert len(p.launches) == (1 if splits == 1 else 2)
    again = launch.run(problem, p, *operands)
    assert torch.equal(again, out), "the split reduction must be deterministic"


def test_backward_weight_float32_result_with_splits():
    problem = depthwise(dtype="float32", layout="channels_last", **GEOMETRIES["mult2-s2"]).with_direction("bwd_weight")
    p, _, _ = check(problem, tab=table(3))
    assert p.split == 3


def test_the_tables_configurations():
    """The interpreter table's own (large) blocks, fitted to the problem, in every direction."""
    problem = depthwise(c=20, batch=1, dtype="float16", layout="channels_last", input_size=(9, 10), filter_size=5,
                        padding=2, bias=True, activation="silu")
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        q = problem.with_direction(direction)
        check(q, configs.select(table(), registry.DEPTHWISE_KERNELS[direction], q))


def test_strided_out_and_operands_in_the_other_layout():
    problem = depthwise(dtype="float32", layout="channels_last", **GEOMETRIES["3x3-s2-asym"], bias=True)
    p = registry.make_plan(problem, "depthwise_fwd", PIXELS, table())
    x, w, bias = random_operands(problem, DEVICE, 3)
    expected = launch.run(problem, p, x, w, bias)
    big = torch.full((problem.batch, problem.out_channels, 2 * problem.output_size[0], problem.output_size[1]),
                     math.nan, device=DEVICE)
    out = big[:, :, ::2]  # dense in no layout
    assert launch.run(problem, p, x.contiguous(), w.contiguous(), bias, out=out) is out
    assert torch.equal(out, expected)
    assert torch.isnan(big[:, :, 1::2]).all(), "only out's own elements may be written"


# ---- offered, declined, planned ------------------------------------------------------------------------------


def hook_problem(direction="fwd", arch="cpu", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=8, out_channels=8, groups=8, input_size=(10, 10), filter_size=3, stride=1,
                padding=1, dilation=1, dtype="float16", arch=arch)
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_only_the_depthwise_kernel_is_offered_for_depthwise_problems(direction, monkeypatch):
    monkeypatch.setattr(declines, "interpreting", lambda: True)  # CPU candidates, also in the CUDA run of this file
    for p in (hook_problem(direction), hook_problem(direction, out_channels=16, stride=2),
              hook_problem(direction, input_size=(30,), filter_size=7, padding=3)):
        (candidate,) = candidates.candidates(p, CPU)
        assert isinstance(candidate, Candidate) and candidate.kernel == registry.DEPTHWISE_KERNELS[direction]
        assert "deterministic" in candidate.tags and "atomics" not in candidate.tags
        assert ("needs_workspace" in candidate.tags) == (candidate.workspace_bytes > 0)


def test_single_input_channel_gets_the_general_kernels_too(monkeypatch):
    monkeypatch.setattr(declines, "interpreting", lambda: True)  # CPU candidates, also in the CUDA run of this file
    p = hook_problem(in_channels=1, out_channels=4, groups=1)
    kernels = [c.kernel for c in candidates.candidates(p, CPU)]
    assert "implicit_gemm" in kernels and kernels[-1] == "depthwise_fwd"


def test_why_the_depthwise_kernels_do_not_apply():
    assert registry.depthwise_issue(hook_problem()) is None
    assert "groups=4 != in_channels=8" in registry.depthwise_issue(hook_problem(groups=4))
    assert registry.depthwise_issue(hook_problem(input_size=(5, 5, 5))) is None  # 3D too
    grouped = hook_problem(groups=4)
    assert "depthwise_fwd" not in candidates.kernels_for(grouped)


def test_general_kernels_would_be_far_slower_by_their_own_estimate():
    """Why the general families are not offered for depthwise layers: ConvNeXt's 7x7 on sm_90."""
    layer = hook_problem(arch="sm_90", batch=32, in_channels=96, out_channels=96, groups=96, input_size=(56, 56),
                         filter_size=7, padding=3, dtype="bfloat16", layout="channels_last")
    tab = configs.table("sm_90")
    (dw,) = candidates.candidates(layer, CUDA)
    general = registry.make_plan(layer, "implicit_gemm", configs.select(tab, "implicit_gemm", layer), tab)
    assert candidates.estimate(layer, general, tab, False) > 10 * dw.estimate_us
    from conv_core.estimate import roofline_us

    assert dw.estimate_us > roofline_us(layer)[1]  # never faster than moving its bytes
    assert {"cuda_graph_safe", "deterministic"} <= dw.tags


def test_tables_pick_layout_specific_tiles():
    tab = configs.table("sm_90")
    last = hook_problem(arch="sm_90", in_channels=96, out_channels=96, groups=96, input_size=(56, 56),
                        layout="channels_last")
    first = last.replace(layout="channels_first")
    wide, tall = configs.select(tab, "depthwise_fwd", last), configs.select(tab, "depthwise_fwd", first)
    assert wide.block_c > tall.block_c and tall.block_w > wide.block_w
    seven = last.replace(filter_size=(7, 7), padding=((3, 3), (3, 3))).with_direction("bwd_weight")
    three = last.with_direction("bwd_weight")
    assert configs.select(tab, "depthwise_bwd_weight", seven).block_t == 64
    assert configs.select(tab, "depthwise_bwd_weight", three).block_t == 16
    for name in configs.table_names():
        for kernel in registry.DEPTHWISE_KERNELS.values():
            assert 0 < configs.table(name).efficiency[kernel]["channels_first"] <= 1
        assert configs.table(name).depthwise_split is not None


@pytest.mark.parametrize("block, image, fitted", [
    ((8, 16), (56, 56), (8, 16)), ((8, 16), (7, 7), (8, 8)), ((8, 16), (1, 300), (1, 128)),
    ((4, 32), (14, 14), (8, 16)), ((4, 32), (3, 100), (4, 32)), ((8, 8), (1, 1), (1, 1)),
])
def test_pixel_blocks_take_the_image_shape(block, image, fitted):
    assert dw_plans.fit_pixel_block(*block, *image) == fitted


def test_pixel_alignment_hint():
    """NHWC rows of 72 channels are 8-element aligned (Triton alone would only see 'not divisible by 16')."""
    nhwc = common.strides_nchw((2, 72, 9, 9), "channels_last")
    assert dw_plans.pixel_alignment(nhwc) == 8
    assert dw_plans.pixel_alignment(common.strides_nchw((2, 64, 9, 9), "channels_last")) == 16
    assert dw_plans.pixel_alignment(common.strides_nchw((2, 72, 9, 9), "channels_first")) == 1
    assert dw_plans.pixel_alignment(common.strides_nchw((2, 24, 30), "channels_last")) == 8  # 1D: height stride 0
