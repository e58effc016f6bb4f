"""3D (NDHWC) through the gathering kernels and the TMA boxes of every direction, checked on the CPU:
each direction's plan replayed by the emulator (``emulator.py``: the kernels' depth decode, depth taps and per-axis
bounds; the boxes' input planes, a plane outside the volume read as zeros) against conv-core's float64 reference
and tolerance model.

Small odd shapes: stride 2 and 3, dilation 2, asymmetric padding, an input of depth 1 (the depth taps read
padding), a filter of depth 1, odd channel counts (the register gather), groups; bfloat16 and float16.
"""

from __future__ import annotations

import dataclasses

import pytest
from conv_core.problem import ConvProblem, torch_dtype
from conv_core.reference import compare, random_operands
from conv_gluon import configs
from conv_gluon import plans as plan
from conv_gluon.registry import REGISTRY, gathering

import emulator

TAB = configs.table("sm_90")

SHAPES = {
    "s2-asym-gelu": dict(batch=2, in_channels=8, out_channels=12, input_size=(5, 7, 6), filter_size=3,
                         stride=(2, 1, 2), padding=((1, 0), (0, 2), (1, 1)), bias=True, activation="gelu"),
    "dil2-c3": dict(batch=1, in_channels=3, out_channels=10, input_size=(7, 5, 6), filter_size=(3, 2, 3),
                    dilation=(2, 1, 1), padding=((2, 1), (1, 0), (1, 1))),
    "depth1": dict(batch=2, in_channels=16, out_channels=16, input_size=(1, 6, 5), filter_size=3, padding=1,
                   dtype="float16", bias=True),
    "filter-depth1-s3": dict(batch=1, in_channels=16, out_channels=24, input_size=(7, 6, 6), filter_size=(1, 3, 3),
                             stride=3, padding=(0, 1, 1)),
    "s3-dil2-groups2": dict(batch=1, in_channels=16, out_channels=12, groups=2, input_size=(8, 5, 5), filter_size=3,
                            stride=(3, 1, 2), dilation=(2, 1, 1), padding=((2, 0), (1, 1), (0, 1))),
}

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


def make(name: str, direction: str, shapes: dict = SHAPES) -> ConvProblem:
    """Shape ``name`` of ``shapes`` in ``direction`` (a gradient without the forward's epilogue)."""
    fields = {"stride": 1, "padding": 0, "dilation": 1, "dtype": "bfloat16", "layout": "channels_last",
              "arch": "sm_90", **shapes[name]}
    problem = ConvProblem("fwd", **fields)
    if direction == "fwd":
        return problem
    return problem.replace(bias=False, activation=None, out_dtype=problem.dtype).with_direction(direction)


def make_plan(problem: ConvProblem, **overrides):
    entry = gathering(problem.direction)
    config = configs.select(TAB, entry.family, problem)
    if problem.direction == "bwd_weight":
        return plan.make_bwd_weight_plan(problem, entry.name, config, TAB, **overrides)
    return entry.plan(problem, entry, config, TAB)


def replay(problem: ConvProblem, p, operands):
    """What the kernels would produce for ``p`` on ``operands``."""
    if problem.direction == "fwd":
        return emulator.run(p, *operands, problem.output_shape, torch_dtype(problem.result_dtype))
    if problem.direction == "bwd_data":
        return emulator.run_bwd_data(p, problem, *operands)
    return emulator.run_bwd_weight(p, problem, *operands)


CASES = [(name, direction) for name in SHAPES for direction in DIRECTIONS]


@pytest.mark.parametrize("name, direction", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_3d_plan_computes_the_convolution(name, direction):
    problem = make(name, direction)
    assert REGISTRY.applicable(problem)[0].name == gathering(direction).name
    p = make_plan(problem)
    operands = random_operands(problem, "cpu", seed=3)
    result = compare(problem, replay(problem, p, operands), operands)
    assert result.ok, f"{p.kernel} ({p.config_name}): {result.message}"


def test_3d_weight_gradient_split_in_ragged_ranges():
    """Forced splits, the last one shorter: each split's depth taps over its range of pixels, summed in order."""
    problem = ConvProblem("fwd", batch=2, in_channels=16, out_channels=24, input_size=(4, 9, 10), filter_size=3,
                          stride=1, padding=(1, 1, 0), dilation=1, dtype="bfloat16", layout="channels_last",
                          arch="sm_90").with_direction("bwd_weight")
    p = make_plan(problem, split_steps=4)
    assert p.splits == 2 and p.grid.steps % 4  # 720 pixels: k-steps 4 + 2
    operands = random_operands(problem, "cpu", seed=4)
    result = compare(problem, replay(problem, p, operands), operands)
    assert result.ok, result.message


def test_3d_data_gradient_has_a_phase_per_depth_phase_and_zeroes_the_tapless_ones():
    """Stride 3 along a depth-1 filter: two of three depth phases have no tap (zeros); the plane's stride 3 x 3
    leaves nine plane phases per depth phase."""
    p = make_plan(make("filter-depth1-s3", "bwd_data"))
    assert len(p.phases) == 9 and len(p.zero_phases) == 18
    assert {first[0] for first in p.zero_phases} == {1, 2}
    assert all(ph.taps_d == (0,) for ph in p.phases)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_3d_emulator_catches_a_wrong_depth_argument(direction):
    """A plan whose input plane stride is one pixel off must fail the comparison: the depth checks have teeth."""
    problem = make("s2-asym-gelu", direction)
    good = make_plan(problem)
    launch = good.phases[0].plan if direction == "bwd_data" else good
    scalars = dict(launch.scalars)
    scalars["sx_d"] -= problem.in_channels if direction != "bwd_data" else problem.out_channels
    bad_launch = dataclasses.replace(launch, scalars=tuple(scalars.items()))
    if direction == "bwd_data":
        bad = dataclasses.replace(good, phases=(dataclasses.replace(good.phases[0], plan=bad_launch),
                                                *good.phases[1:]))
    else:
        bad = bad_launch
    operands = random_operands(problem, "cpu", seed=3)
    assert not compare(problem, replay(problem, bad, operands), operands).ok


#: The boxes in 3D, every direction (stride 1 in the plane, channels a multiple of 8): depth stride (the data
#: gradient's depth phases), padding (front and back) and dilation; an input of depth 1; a filter of depth 1;
#: groups of whole channel blocks; float16 with a float32 output; images whose planes leave box slots past the edge.
BOX_SHAPES = {
    "box-sd2-pad": dict(batch=2, in_channels=16, out_channels=24, input_size=(6, 7, 9), filter_size=3,
                        stride=(2, 1, 1), padding=((2, 1), (1, 1), (0, 2)), bias=True, activation="relu"),
    "box-dil2-depth": dict(batch=1, in_channels=32, out_channels=16, input_size=(7, 5, 6), filter_size=(3, 3, 1),
                           dilation=(2, 1, 1), padding=((2, 2), (1, 1), (0, 0))),
    "box-depth1": dict(batch=3, in_channels=16, out_channels=8, input_size=(1, 6, 5), filter_size=3, padding=1,
                       dtype="float16", out_dtype="float32", bias=True, activation="gelu"),
    "box-filter-depth1": dict(batch=1, in_channels=24, out_channels=40, input_size=(4, 9, 9), filter_size=(1, 3, 3),
                              stride=(3, 1, 1), padding=(0, 1, 1)),
    "box-groups": dict(batch=2, in_channels=128, out_channels=64, groups=2, input_size=(3, 5, 7), filter_size=3,
                       padding=(1, 1, 1), dtype="float16"),
}


def box_plan(name: str, direction: str = "fwd"):
    problem = make(name, direction, BOX_SHAPES)
    entry = REGISTRY[f"{direction}_box"]
    assert entry.issue(problem) is None, entry.issue(problem)
    return problem, entry.plan(problem, entry, configs.select(TAB, entry.family, problem), TAB)


BOX_CASES = [(name, direction) for name in BOX_SHAPES for direction in DIRECTIONS]


@pytest.mark.parametrize("name, direction", BOX_CASES, ids=[f"{n}-{d}" for n, d in BOX_CASES])
def test_3d_boxes_compute_the_convolution(name, direction):
    """``fwd_box``, ``bwd_data_box`` (every phase a stride-1 convolution of ``dy``, its depth phase's planes of
    ``dx`` out) and ``bwd_weight_box`` (steps: boxes of one output plane) in 3D."""
    problem, p = box_plan(name, direction)
    for launch in [ph.plan for ph in p.phases] if direction == "bwd_data" else [p]:
        g, s = launch.geometry, dict(launch.scalars)
        assert launch.x_map.shape[0] == g.batch * g.d  # the batch's input planes
        boxes = s["STEPS"] if direction == "bwd_weight" else s["TILES_M"]
        assert boxes == g.batch * g.od * s["TILES_IMG"]  # per output plane
    operands = random_operands(problem, "cpu", seed=5)
    result = compare(problem, replay(problem, p, operands), operands)
    assert result.ok, f"{p.kernel} ({p.config_name}): {result.message}"


def test_3d_weight_gradient_boxes_split_in_ragged_ranges():
    """Forced splits over the boxes of every output plane, the last one shorter, summed in order."""
    problem, whole = box_plan("box-sd2-pad", "bwd_weight")
    p = plan.make_bwd_weight_plan(problem, "bwd_weight_box", whole.config, TAB, split_steps=5)
    assert p.splits > 1 and p.grid.steps % 5
    operands = random_operands(problem, "cpu", seed=6)
    result = compare(problem, replay(problem, p, operands), operands)
    assert result.ok, result.message


def test_3d_forward_boxes_catch_a_wrong_plane():
    """Boxes read in the wrong input plane (one depth step off) must fail the comparison."""
    problem, good = box_plan("box-sd2-pad")
    constexprs = dict(good.constexprs)
    constexprs["PAD_D"] = constexprs["PAD_D"] - 1
    bad = dataclasses.replace(good, constexprs=tuple(constexprs.items()))
    operands = random_operands(problem, "cpu", seed=5)
    assert not compare(problem, replay(problem, bad, operands), operands).ok
