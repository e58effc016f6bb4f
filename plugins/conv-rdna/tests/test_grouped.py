"""The grouped kernels (several groups of 2 to 64 channels a tile, the weight block-diagonal) against conv_core's
float64 reference, interpreted, and where the registry offers them.

Each layer runs in the three directions with 16-row (and for the weight gradient 16-pixel) tiles, so that these
tiny problems span several pixel tiles and steps, and with tiles of groups whose last is partial; the weight
gradient is split in 3 (the float32 workspace and the ordered sum) but once, where it writes ``dw`` directly.
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_rdna import configs, estimates, launch, registry

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
LAYOUTS = ("channels_first", "channels_last")

#: (fields, dtype): channels per group 2, 4, 8 -> 4 (unequal), 16, 32 and 3 -> 5 (1D); each dtype in each direction.
LAYERS = {
    "c2-g5": (dict(in_channels=10, out_channels=10, groups=5, input_size=(5, 7), filter_size=3, padding=1),
              "float16"),
    "c4-g6-s2-asym": (dict(in_channels=24, out_channels=24, groups=6, input_size=(7, 9), filter_size=3, stride=2,
                           padding=((1, 0), (2, 1))), "bfloat16"),
    "c8k4-d2": (dict(in_channels=24, out_channels=12, groups=3, input_size=(6, 7), filter_size=3, dilation=2,
                     padding=2), "float32"),
    "c16-f1x3": (dict(in_channels=32, out_channels=32, groups=2, input_size=(4, 6), filter_size=(1, 3),
                      padding=((0, 0), (1, 1))), "float16"),
    "c32": (dict(in_channels=64, out_channels=64, groups=2, input_size=(3, 5), filter_size=3, padding=1), "bfloat16"),
    "conv1d-c3k5-s2": (dict(in_channels=9, out_channels=15, groups=3, input_size=(13,), filter_size=3, stride=2,
                            padding=((2, 1),)), "float32"),
    "c4-1x1-s2": (dict(in_channels=8, out_channels=8, groups=2, input_size=(5, 5), filter_size=1, stride=2),
                  "float16"),  # the data gradient's tap-less phases: dx zeroed first
}


def problem_of(name: str, direction: str, layout: str, **extra) -> ConvProblem:
    fields, dtype = LAYERS[name]
    base = dict(direction="fwd", batch=2, stride=1, dilation=1, padding=0, dtype=dtype, layout=layout)
    return ConvProblem(**{**base, **fields, **extra}).with_direction(direction)


def tile(problem: ConvProblem) -> configs.TileConfig:
    """16 rows (pixels) or 16-pixel steps, and the narrowest tile that holds a group (at least 16 wide)."""
    width = max(16, 1 << (max(problem.in_channels, problem.out_channels) // problem.groups - 1).bit_length())
    if problem.direction == "bwd_weight":
        return configs.TileConfig(width, width, 16, 2, 4, 1)
    return configs.TileConfig(16, width, width, 2, 4, 1)


def table(splits: int) -> configs.ArchTable:
    tab = configs.table(configs.INTERPRETER)
    return dataclasses.replace(tab, split=configs.SplitRule(10**9, splits, 1))


def check(problem: ConvProblem, splits: int = 3):
    """Run the grouped kernel of the problem's direction into a NaN-poisoned ``out``; compare with the reference."""
    kernel = "grouped_bwd_weight" if problem.direction == "bwd_weight" else "grouped"
    p = registry.make_plan(problem, kernel, tile(problem), table(splits))
    operands = random_operands(problem, DEVICE, 0)
    out = problem.empty_result(DEVICE).fill_(math.nan)
    assert launch.run(problem, p, *operands, out=out) is out
    result = compare(problem, out, operands)
    assert result.ok, result.message
    return p, operands, out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", LAYERS)
def test_grouped(name, direction, layout):
    check(problem_of(name, direction, layout))


def test_tiles_hold_whole_groups_and_the_last_may_be_partial():
    p, _, _ = check(problem_of("c2-g5", "fwd", "channels_last"))
    assert dict(p.launches[0].constexprs)["GROUPS_PER_TILE"] == 5  # 8 fit a 16-wide tile: the layer has 5
    p, _, _ = check(problem_of("c4-g6-s2-asym", "fwd", "channels_last"))
    assert dict(p.launches[0].constexprs)["GROUPS_PER_TILE"] == 4 and p.launches[0].grid[1] == 2


def test_forward_epilogue():
    check(problem_of("c4-g6-s2-asym", "fwd", "channels_last", bias=True, activation="gelu", out_dtype="float32"))


def test_weight_gradient_split_is_deterministic_and_one_split_writes_dw():
    problem = problem_of("c2-g5", "bwd_weight", "channels_last")
    p, operands, out = check(problem)
    assert p.split == 3 and p.workspace_elements == 3 * math.prod(problem.weight_shape)
    assert torch.equal(launch.run(problem, p, *operands), out)
    p, _, _ = check(problem, splits=1)
    assert p.split == 1 and p.workspace_elements == 0


def test_with_the_tables_configuration():
    problem = problem_of("c4-g6-s2-asym", "fwd", "channels_last")
    tab = configs.table(configs.INTERPRETER)
    p = registry.make_plan(problem, "grouped", configs.select(tab, "grouped", problem), tab)
    operands = random_operands(problem, DEVICE, 1)
    result = compare(problem, launch.run(problem, p, *operands), operands)
    assert result.ok, result.message


def grouped(direction="fwd", **fields) -> ConvProblem:
    base = dict(direction="fwd", batch=8, in_channels=128, out_channels=128, groups=32, input_size=(28, 28),
                filter_size=3, stride=1, dilation=1, padding=1, dtype="bfloat16", layout="channels_last")
    return ConvProblem(**{**base, **fields}).with_direction(direction)


@pytest.mark.parametrize("p, reason", [
    (grouped(groups=1), "several groups"),
    (grouped(groups=128), "several groups"),  # depthwise
    (grouped(in_channels=32 * 65, out_channels=32 * 65), "2 to 64"),
    (grouped(out_channels=32), "2 to 64"),  # one output channel per group
    (grouped("bwd_data", stride=2, dilation=2), "dilated strided"),
    (grouped(input_size=(6, 6, 6)), "3D"),
])
def test_registry_declines_with_a_reason(p, reason):
    assert reason in registry.REGISTRY["grouped"].issue(p)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("per_group", [2, 4, 8, 16, 32, 64])
def test_registry_offers_the_kernel_of_each_direction(direction, per_group):
    p = grouped(direction, in_channels=32 * per_group, out_channels=32 * per_group)
    kernel = "grouped_bwd_weight" if direction == "bwd_weight" else "grouped"
    assert kernel in [e.name for e in registry.REGISTRY.applicable(p)]


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_estimates_rank_the_grouped_kernel_first_on_resnext_4_channels_a_group(direction):
    """ResNeXt-50 32x4d's first 3x3 layer on the H100's table: the block diagonal's work counted, the grouped
    kernel's estimate beats the general kernel's one-group tiles."""
    p = grouped(direction, arch="sm_90", batch=32, input_size=(56, 56))
    tab = configs.table("sm_90")
    times = {}
    for entry in registry.REGISTRY.applicable(p):
        plan = registry.make_plan(p, entry.name, configs.select(tab, entry.family, p), tab)
        times[entry.name] = entry.estimate(p, plan, tab)
    assert min(times, key=times.get).startswith("grouped"), times
    plan = registry.make_plan(p, "grouped_bwd_weight" if direction == "bwd_weight" else "grouped",
                              tile(p), tab)
    assert 0 < estimates.grouped_utilization(p, plan) <= 1
