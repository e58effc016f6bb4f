"""The channels-first kernels (kernels/channels_first.py) against the float64 reference, interpreted.

Geometries cover both addressings: ``FLAT`` (stride 1, rows kept: "same" 3x3, 1x1, asymmetric padding in
H, dilation) and per-pixel (stride 2, rows that shrink), with several pixel tiles per image (partial
ones included) and several images, groups, 1D, and the data gradient's flipped weight with negative
padding. 16x16x16 tiles, as in test_kernels.py. Filters of more than one tap run on the repacked weight
(``cf_plans.WEIGHT_FORMS``), which an in-place update of the weight must renew. Every geometry runs through
both reduction loops: the register prefetch and the plain loop left to the compiler's pipeliner
(``PIPELINED``).
"""

from __future__ import annotations

import math

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_core.weight_cache import DerivedWeightCache
from conv_rdna import candidates, configs, launch, registry
from conv_rdna.plans import common
from conv_rdna.plans import channels_first as cf_plans
from conv_core.geometry import Geometry
from test_kernels import DEVICE, SMALL, check, fwd, table

GEOMETRIES = {  # name -> (fields, FLAT)
    "same3x3-bias-gelu": (dict(batch=3, in_channels=20, out_channels=18, input_size=(5, 7), filter_size=3,
                               padding=1, bias=True, activation="gelu"), True),
    "1x1-relu": (dict(in_channels=17, out_channels=5, input_size=(6, 6), filter_size=1, bias=True,
                      activation="relu"), True),
    "1x1-partial-tiles": (dict(batch=3, in_channels=20, out_channels=6, input_size=(5, 8), filter_size=1), True),
    "valid-3x1": (dict(in_channels=6, out_channels=5, input_size=(7, 8), filter_size=(3, 1)), True),
    "asym-h-dil2-g2": (dict(in_channels=6, out_channels=36, groups=2, input_size=(7, 9), filter_size=3, dilation=2,
                            padding=((0, 3), (2, 2))), True),
    "s2-asym": (dict(in_channels=5, out_channels=3, input_size=(9, 8), filter_size=3, stride=2,
                     padding=((1, 0), (0, 2))), False),
    "s2-g2": (dict(in_channels=8, out_channels=6, groups=2, input_size=(8, 10), filter_size=3, stride=2, padding=1),
              False),
    "valid-rows-shrink": (dict(in_channels=3, out_channels=4, input_size=(6, 9), filter_size=(2, 3)), False),
    "1x1-s2-odd": (dict(batch=3, in_channels=12, out_channels=10, input_size=(7, 10), filter_size=1, stride=2), False),
    "conv1d": (dict(batch=3, in_channels=5, out_channels=6, input_size=(37,), filter_size=5, padding=2,
                    bias=True, activation="silu"), True),
}


#: Forward geometries whose every tap reads inside the image (``INSIDE``), and their ``PIX_VEC`` where it is
#: above 1: pixel counts 36 and 40 with channel and image strides their multiples.
INSIDE = {"1x1-relu": 4, "1x1-partial-tiles": 8, "valid-3x1": 8}


def problem(name: str, direction: str, dtype: str = "float16") -> ConvProblem:
    fields, _ = GEOMETRIES[name]
    if direction != "fwd":
        fields = {k: v for k, v in fields.items() if k not in ("bias", "activation")}
    return fwd(dtype=dtype, layout="channels_first", **fields).with_direction(direction)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", GEOMETRIES)
def test_forward(name, dtype):
    p, _, _ = check(problem(name, "fwd", dtype), "implicit_gemm_cf")
    constexprs = dict(p.launches[0].constexprs)
    assert constexprs["FLAT"] is GEOMETRIES[name][1]
    assert constexprs["INSIDE"] is (name in INSIDE)
    if name in INSIDE:
        assert constexprs["PIX_VEC"] == INSIDE[name]


@pytest.mark.parametrize("name", GEOMETRIES)
def test_data_gradient_runs_as_forward_convolutions_of_dy(name):
    """One launch per stride phase of ``dx`` that has taps, each writing its pixels, the others' zeroed
    before (a NaN left anywhere fails)."""
    prob = problem(name, "bwd_data")
    p, _, _ = check(prob, "bwd_data_cf")
    g = Geometry.of(prob)
    phases = min(g.stride[0], g.h) * min(g.stride[1], g.w)
    tapped = 1 if name == "1x1-s2-odd" else phases
    assert len(p.launches) == len(common.bwd_data_phases(g, leave_zeros=True)) == tapped
    assert p.zero == ("out" if tapped < phases else None) and common.bwd_data_zeros(g) is (tapped < phases)
    assert [dict(launch.constexprs)["DENSE_Y"] for launch in p.launches] == [g.stride == (1, 1)] * len(p.launches)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_repacked_weight_only_with_taps_and_never_stale(direction, monkeypatch):
    cache = DerivedWeightCache(max_entries=8)
    monkeypatch.setattr(launch, "PACKED_WEIGHTS", cache)
    kernel = registry.CHANNELS_FIRST_KERNELS[direction]
    one_tap = problem("1x1-relu", direction)
    assert registry.make_plan(one_tap, kernel, SMALL, table()).weight_form == ""
    prob = problem("asym-h-dil2-g2", direction)
    p, (a, w, *rest), out = check(prob, kernel)
    assert p.weight_form == cf_plans.WEIGHT_FORMS[direction == "bwd_data"] and cache.misses == 1
    assert torch.equal(launch.run(prob, p, a, w, *rest), out) and cache.hits == 1
    w.mul_(-0.5)  # in place: the version moves, the copy is made again
    assert compare(prob, launch.run(prob, p, a, w, *rest), (a, w, *rest)).ok and cache.misses == 2


def test_data_gradient_with_more_padding_than_the_filter_reaches():
    """pad > dil*(R-1): the equivalent forward convolution has negative padding."""
    p = fwd(dtype="float32", layout="channels_first", in_channels=3, out_channels=4, input_size=(5, 6),
            filter_size=(1, 2), padding=((2, 1), (1, 3))).with_direction("bwd_data")
    g = Geometry.of(p)
    assert common.bwd_data_phases(g)[0].geometry(g).pad == (-2, 0)
    check(p, "bwd_data_cf")


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("name", GEOMETRIES)
def test_weight_gradient(name, splits):
    prob = problem(name, "bwd_weight")
    p, operands, out = check(prob, "bwd_weight_cf", tab=table(splits))
    blocks = prob.batch * math.ceil(math.prod(prob.output_size) / SMALL.block_k)
    per_split = math.ceil(blocks / min(splits, blocks))  # equal ranges of whole blocks: maybe fewer splits
    assert p.split == math.ceil(blocks / per_split)
    again = launch.run(prob, p, *operands)
    assert torch.equal(again, out), "the split reduction must be deterministic"


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("name", GEOMETRIES)
def test_pipelined_loop(name, direction, monkeypatch):
    """The plain loop computes what the prefetch loop does: every geometry forced through it."""
    monkeypatch.setattr(cf_plans, "pipelined_pixels", lambda tab, g, every_tap: True)
    p, _, _ = check(problem(name, direction), registry.CHANNELS_FIRST_KERNELS[direction], tab=table(3))
    assert dict(p.launches[0].constexprs)["PIPELINED"]


def test_pipelined_where_the_architecture_copies_and_the_compiler_sees_aligned_pixels():
    def geometry(size, taps):
        return Geometry.of(fwd(layout="channels_first", in_channels=8, out_channels=8, input_size=(size, size),
                                    filter_size=taps, padding=taps // 2))

    hopper, rdna = configs.table("sm_90"), configs.table("gfx1100")
    assert cf_plans.pipelined_pixels(hopper, geometry(56, 1), every_tap=False)  # 3136 pixels: 16 x 196
    assert not cf_plans.pipelined_pixels(hopper, geometry(14, 1), every_tap=True)  # 196: the compiler sees 4, not 16
    assert not cf_plans.pipelined_pixels(rdna, geometry(56, 1), every_tap=True)  # no asynchronous copies
    assert cf_plans.pipelined_pixels(hopper, geometry(56, 3), every_tap=True)
    assert not cf_plans.pipelined_pixels(hopper, geometry(56, 3), every_tap=False)  # shifted taps: the input is not


def test_weight_gradient_float32():
    check(problem("asym-h-dil2-g2", "bwd_weight", "float32"), "bwd_weight_cf", tab=table(2))


def test_offered_for_channels_first_only_and_data_gradients_with_phases():
    def kernels(p):
        return candidates.kernels_for(p)

    assert "implicit_gemm_cf" in kernels(problem("s2-asym", "fwd"))
    assert "bwd_weight_cf" in kernels(problem("s2-asym", "bwd_weight"))
    assert "bwd_data_cf" in kernels(problem("s2-asym", "bwd_data"))
    assert "bwd_data_cf" in kernels(problem("same3x3-bias-gelu", "bwd_data"))
    assert "bwd_data_cf" in kernels(problem("1x1-s2-odd", "bwd_data"))  # phases without taps: zeroed
    lone_pixel = fwd(layout="channels_first", in_channels=4, out_channels=4, input_size=(1, 6), filter_size=1,
                     stride=2, padding=((1, 1), (0, 0)))  # the one row of dx sits in a phase without taps
    assert "bwd_data_cf" not in kernels(lone_pixel.with_direction("bwd_data"))
    last = problem("same3x3-bias-gelu", "fwd").replace(layout="channels_last")
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        assert not set(kernels(last.with_direction(direction))) & set(registry.CHANNELS_FIRST_KERNELS.values())


def test_the_tables_configuration_runs():
    prob = problem("same3x3-bias-gelu", "fwd")
    cands = {c.kernel: c for c in candidates.candidates(prob, torch.device(DEVICE))}
    operands = random_operands(prob, DEVICE, 0)
    assert compare(prob, cands["implicit_gemm_cf"].run(*operands), operands).ok
