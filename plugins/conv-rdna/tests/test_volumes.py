"""3D convolutions (NCDHW and NDHWC, in place) through the kernels with a depth axis, against conv_core's float64
reference, interpreted: the implicit GEMM, ``gemm1x1``, the phased data gradient, the split weight gradient (both
stages and atomics) and the depthwise stencils, every direction, in float16, bfloat16 and float32.

Tiny odd geometries (the interpreter's time goes with programs x taps): stride 3 along the depth, dilation 2,
asymmetric padding, groups 2, a one-plane input with a one-tap filter depth, and one whose three depth taps
all but one fall in the padding. That a 2D launch compiles exactly as before is checked here through its
specialization (the depth arguments are compile-time 1s); the assembly itself was diffed when the depth axis
came in.
"""

from __future__ import annotations

import conv_core
import pytest
import torch
import torch.nn.functional as F
from conv_core.problem import ConvProblem
from conv_rdna import configs, launch, registry, specialization
from test_depthwise import check as check_depthwise
from test_kernels import DEVICE, LAYOUTS, check, table

#: Geometries of the general kernels; the first has 3 blocks of 16 output pixels (three splits all work).
GENERAL = {
    "s3x1x2-d2x1x1-asym-g2": dict(in_channels=4, out_channels=6, groups=2, input_size=(4, 5, 5),
                                  filter_size=(2, 3, 2), stride=(3, 1, 2), dilation=(2, 1, 1),
                                  padding=((1, 1), (1, 0), (0, 1))),
    "one-plane-t1-s2": dict(batch=3, in_channels=3, out_channels=5, input_size=(1, 7, 8), filter_size=(1, 3, 3),
                            stride=2, padding=1),
    "one-plane-t3-padded": dict(in_channels=5, out_channels=3, input_size=(1, 6, 7), filter_size=(3, 2, 2),
                                padding=((1, 1), (0, 1), (1, 0))),
}
#: Depthwise geometries: a multiplier and stride 2 (phases along the depth too), dilation 2 along the depth at
#: stride 1 (the sliding kernels), one plane.
DEPTHWISE = {
    "mult2-s2-asym": dict(c=3, multiplier=2, input_size=(5, 5, 4), filter_size=(3, 2, 3), stride=2,
                          padding=((1, 0), (0, 1), (1, 1))),
    "s1-d2x1x1-slide": dict(c=4, input_size=(4, 3, 9), filter_size=(2, 2, 3), dilation=(2, 1, 1),
                            padding=((1, 1), (1, 0), (1, 1))),
    "one-plane-t1": dict(c=4, input_size=(1, 5, 7), filter_size=(1, 3, 3), padding=((0, 0), (1, 1), (1, 0))),
}
DTYPES = ("float16", "bfloat16", "float32")


def cases(names) -> list[tuple[str, str, str]]:
    """``(geometry, dtype, layout)``: the first geometry in both layouts in float16 and in bfloat16 and float32
    (one layout each), the others in float16 in alternating layouts."""
    first, *others = names
    return ([(first, "float16", layout) for layout in LAYOUTS]
            + [(first, dtype, layout) for dtype, layout in zip(DTYPES[1:], LAYOUTS)]
            + [(name, "float16", LAYOUTS[i % 2]) for i, name in enumerate(others)])


def volume(direction: str, dtype: str, layout: str, **fields) -> ConvProblem:
    base = dict(batch=2, stride=1, padding=0, dilation=1, groups=1, dtype=dtype, layout=layout)
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def depthwise(direction: str, dtype: str, layout: str, c: int, multiplier: int = 1, **fields) -> ConvProblem:
    return volume(direction, dtype, layout, in_channels=c, out_channels=c * multiplier, groups=c, **fields)


@pytest.mark.parametrize("name, dtype, layout", cases(GENERAL))
def test_implicit_gemm(name, dtype, layout):
    check(volume("fwd", dtype, layout, bias=True, activation="silu", **GENERAL[name]), "implicit_gemm")


@pytest.mark.parametrize("name, dtype, layout", cases(GENERAL))
def test_bwd_data_phased(name, dtype, layout):
    check(volume("bwd_data", dtype, layout, **GENERAL[name]), "bwd_data_phased")


@pytest.mark.parametrize("name, dtype, layout", cases(GENERAL))
def test_bwd_weight_split(name, dtype, layout):
    splits = 3 if name == "s3x1x2-d2x1x1-asym-g2" else 1
    problem = volume("bwd_weight", dtype, layout, **GENERAL[name])
    p, operands, out = check(problem, "bwd_weight_split", tab=table(splits))
    assert p.split == splits
    assert torch.equal(launch.run(problem, p, *operands), out), "the split reduction must be deterministic"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bwd_weight_atomic(layout):
    problem = volume("bwd_weight", "float16", layout, **GENERAL["s3x1x2-d2x1x1-asym-g2"])
    p, _, _ = check(problem, "bwd_weight_atomic", tab=table(3))
    assert p.split == 3


@pytest.mark.parametrize("dtype, layout", [("float16", LAYOUTS[0]), ("float16", LAYOUTS[1]),
                                           ("bfloat16", LAYOUTS[0]), ("float32", LAYOUTS[1])])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gemm1x1_merges_depth_height_and_width(direction, dtype, layout):
    problem = volume(direction, dtype, layout, batch=3, in_channels=20, out_channels=6, groups=2,
                     input_size=(3, 4, 5), filter_size=1, bias=direction == "fwd")
    p, _, _ = check(problem, "gemm1x1")
    assert dict(p.launches[0].scalars)["HW"] == 60


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("name, dtype, layout", cases(DEPTHWISE))
def test_depthwise(name, dtype, layout, direction):
    check_depthwise(depthwise(direction, dtype, layout, **DEPTHWISE[name]))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_every_direction_is_offered_for_training(direction, monkeypatch):
    """A 3D layer, general or depthwise, gets candidates in each direction a training step runs."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for problem in (volume(direction, "bfloat16", "channels_last", **GENERAL["s3x1x2-d2x1x1-asym-g2"]),
                    depthwise(direction, "float16", "channels_first", **DEPTHWISE["mult2-s2-asym"])):
        assert registry.REGISTRY.applicable(problem), problem


#: The kernels with a depth argument (``gemm1x1`` merges the depth into its pixels), by direction.
DEPTH_KERNELS = {"implicit_gemm": "fwd", "bwd_data_phased": "bwd_data", "bwd_weight_split": "bwd_weight",
                 "depthwise_fwd": "fwd", "depthwise_bwd_data": "bwd_data", "depthwise_bwd_weight": "bwd_weight"}


@pytest.mark.parametrize("kernel", DEPTH_KERNELS)
def test_2d_launches_compile_the_depth_in_as_constants(kernel):
    """Below 3D every depth size, stride and dilation (and the front padding plus one) is 1, which Triton's JIT
    compiles in, so the depth arithmetic folds away; a 3D launch passes them as arguments."""
    depth = ("D", "OD", "TD", "STRIDE_D", "PAD_D1", "DIL_D")
    groups = 4 if kernel.startswith("depthwise") else 1
    for size, constant in (((6, 7), True), ((5, 6, 7), False)):
        problem = volume(DEPTH_KERNELS[kernel], "float16", "channels_last", in_channels=4, out_channels=4,
                         groups=groups, input_size=size, filter_size=3, stride=2, padding=1, dilation=2)
        config = configs.select(table(), registry.REGISTRY.family_of(kernel), problem)
        launch_ = registry.make_plan(problem, kernel, config, table()).launches[0]
        signature, _, _ = specialization.of_launch(launch_, specialization.role_dtypes(problem))
        assert all((signature[name] == "constexpr") == constant for name in depth if name in signature), signature
        assert sum(name in signature for name in depth) >= 5


@pytest.mark.parametrize("direction, family", [("fwd", "implicit_gemm"), ("bwd_data", "bwd_data"),
                                               ("bwd_weight", "bwd_weight"), ("fwd", "depthwise_fwd")])
def test_tables_see_a_volume_as_its_gemm(direction, family):
    """A 3D layer takes the bucket of the 2D layer with the same GEMM (pixels x channels x channels per tap):
    4 x 8 x 8 output pixels an image are 16 x 16 ones."""
    groups = 64 if family.startswith("depthwise") else 1
    fields = dict(batch=8, in_channels=64, out_channels=64, groups=groups, padding=1, arch="sm_90")
    tab = configs.table("sm_90")
    clip = volume(direction, "bfloat16", "channels_last", input_size=(4, 8, 8), filter_size=3, **fields)
    image = volume(direction, "bfloat16", "channels_last", input_size=(16, 16), filter_size=3, **fields)
    assert configs.gemm_view(clip, family)["m"] == configs.gemm_view(image, family)["m"]
    assert configs.select(tab, family, clip) == configs.select(tab, family, image)


@pytest.mark.parametrize("kernel", ["implicit_gemm", "bwd_data_phased", "bwd_weight_split", "depthwise_fwd"])
def test_estimates_count_the_depth(kernel):
    """The estimates see every plane and depth tap: a clip of 4 planes of 16 x 16 pixels with a one-plane filter
    costs what the 32 x 32 image costs (the same pixels, taps and bytes), a three-plane filter about three times
    the matrix work (a depthwise stencil, bound by memory, barely more than the one-plane filter)."""
    dw = kernel.startswith("depthwise")
    tab = configs.table("sm_90")

    def us(size: tuple[int, ...], filter_size: tuple[int, ...]) -> float:
        padding = tuple((k // 2, k // 2) for k in filter_size)
        problem = volume(DEPTH_KERNELS[kernel], "bfloat16", "channels_last", batch=8, in_channels=256,
                         out_channels=256, groups=256 if dw else 1, input_size=size, filter_size=filter_size,
                         padding=padding, arch="sm_90")
        config = configs.select(tab, registry.REGISTRY.family_of(kernel), problem)
        return registry.REGISTRY[kernel].estimate(problem, registry.make_plan(problem, kernel, config, tab), tab)

    one_plane = us((4, 16, 16), (1, 3, 3))
    if not dw:  # the stencil's pixel blocks are fitted to the plane: another shape, another utilization
        assert one_plane == pytest.approx(us((32, 32), (3, 3)), rel=0.02)
    assert us((4, 16, 16), (3, 3, 3)) > (1.0 if dw else 2.0) * one_plane


def test_a_3d_block_trains_through_the_public_api(monkeypatch):
    """A video block (a strided 3x3x3 convolution, a depthwise one, a pointwise one; NDHWC) runs forward and
    backward through ``conv_core.conv3d`` on the rdna backend, every direction on rdna's kernels, with the
    input's and every weight's gradient as float64 autograd gives them."""
    ran, run = [], launch.PlanRun.__call__

    def spy(self, *args, **kwargs):
        ran.append((self.problem.direction, self.problem.groups))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(launch.PlanRun, "__call__", spy)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 6, dtype=torch.float64)
    weights = [torch.randn(8, 3, 3, 3, 3, dtype=torch.float64) / 9, torch.randn(8, 1, 3, 3, 3, dtype=torch.float64) / 5,
               torch.randn(4, 8, 1, 1, 1, dtype=torch.float64) / 3]
    layers = [dict(stride=(2, 1, 2), padding=1), dict(padding=1, groups=8), dict()]
    dy = torch.randn(2, 4, 3, 6, 3, dtype=torch.float64)

    def gradients(conv, dtype):
        def leaf(t):
            return t.to(DEVICE, dtype).clone(memory_format=torch.channels_last_3d).requires_grad_()

        xs, ws = leaf(x), [leaf(w) for w in weights]
        y = xs
        for w, layer in zip(ws, layers):
            y = conv(y, w, **layer)
        y.backward(dy.to(DEVICE, dtype))
        return [t.grad.double().cpu() for t in (xs, *ws)]

    expected = gradients(F.conv3d, torch.float64)
    got = gradients(lambda y, w, **layer: conv_core.conv3d(y, w, backend="rdna", **layer), torch.float32)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 * e.abs().max().item())
    assert {(d, g) for d in ("fwd", "bwd_data", "bwd_weight") for g in (1, 8)} <= set(ran)
