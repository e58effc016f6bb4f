"""Each kernel family against conv_core's float64 reference, on small odd shapes, interpreted.

The configurations here are chosen by the tests, not the tables: 16x16x16 tiles, so that these tiny
problems still span several row and column tiles and several channel blocks (partial ones included),
and forced split counts for the weight gradient (1: direct store; 3: two-stage workspace; atomics).
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_rdna import candidates, configs, launch, registry
from conv_rdna.plans import shuffle
from conv_core.kit.declines import interpreting

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")
SMALL = configs.TileConfig(16, 16, 16, 2, 4, 1)
LAYOUTS = ("channels_first", "channels_last")


def table(splits: int | None = None) -> configs.ArchTable:
    tab = configs.table(configs.INTERPRETER)
    if splits is None:
        return tab
    rule = configs.SplitRule(target_programs=10**9, max_split=splits, min_blocks_per_split=1)
    return dataclasses.replace(tab, split=rule, few_channels_split=rule)


def check(problem: ConvProblem, kernel: str, config: configs.TileConfig = SMALL, tab=None, seed: int = 0):
    """Run ``kernel`` on random operands into a NaN-poisoned ``out``; compare with the reference."""
    p = registry.make_plan(problem, kernel, config, tab or table())
    operands = random_operands(problem, DEVICE, seed)
    out = problem.empty_result(DEVICE).fill_(math.nan)
    assert launch.run(problem, p, *operands, out=out) is out
    result = compare(problem, out, operands)
    assert result.ok, result.message
    return p, operands, out


def fwd(**fields) -> ConvProblem:
    base = dict(direction="fwd", batch=2, dilation=1, groups=1, stride=1, padding=0)
    return ConvProblem(**{**base, **fields})


# ---- forward: implicit GEMM ---------------------------------------------------------------------------

FORWARD = {
    "c5k3-s2-asym-relu": dict(in_channels=5, out_channels=3, input_size=(7, 9), filter_size=3, stride=2,
                              padding=((1, 0), (2, 1)), bias=True, activation="relu"),
    "c3k20-d2-gelu": dict(in_channels=3, out_channels=20, input_size=(6, 7), filter_size=3, dilation=2, padding=2,
                          bias=True, activation="gelu"),
    "g2-c40-multiblock-silu-f32out": dict(in_channels=40, out_channels=6, groups=2, input_size=(5, 6), filter_size=3,
                                          padding=1, activation="silu", out_dtype="float32"),
    "conv1d-s2-d2-gelu_tanh": dict(in_channels=5, out_channels=4, input_size=(13,), filter_size=3, stride=2,
                                   dilation=2, padding=((2, 1),), bias=True, activation="gelu_tanh"),
    "f2x3-s1x2-relu6": dict(in_channels=3, out_channels=5, input_size=(6, 9), filter_size=(2, 3), stride=(1, 2),
                            padding=((0, 1), (1, 0)), bias=True, activation="relu6"),
    "filter-covers-input": dict(batch=3, in_channels=2, out_channels=3, input_size=(4, 5), filter_size=(4, 5)),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", FORWARD)
def test_implicit_gemm(name, dtype, layout):
    check(fwd(dtype=dtype, layout=layout, **FORWARD[name]), "implicit_gemm")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_implicit_gemm_bfloat16_under_the_interpreter(layout):
    """bf16 operands are upcast before tl.dot and rounded (not truncated) on store when interpreted."""
    assert interpreting() == (DEVICE == "cpu")
    check(fwd(dtype="bfloat16", layout=layout, **FORWARD["c5k3-s2-asym-relu"]), "implicit_gemm")


def test_implicit_gemm_with_the_tables_configuration():
    problem = fwd(dtype="float16", layout="channels_last", **FORWARD["g2-c40-multiblock-silu-f32out"])
    check(problem, "implicit_gemm", configs.select(table(), "implicit_gemm", problem))


# ---- 1x1 as a GEMM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size, pix_vec", [((5, 7), 1), ((3, 4), 4)])  # channels-first pixel vectors
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gemm1x1(direction, layout, size, pix_vec):
    problem = fwd(batch=3, in_channels=36, out_channels=10, groups=2, input_size=size, filter_size=1,
                  bias=direction == "fwd", activation="silu" if direction == "fwd" else None, dtype="float16",
                  layout=layout).with_direction(direction)
    p, _, _ = check(problem, "gemm1x1")
    assert dict(p.launches[0].constexprs)["PIX_VEC"] == (pix_vec if layout == "channels_first" else 1)


def test_gemm1x1_conv1d_float32():
    check(fwd(in_channels=20, out_channels=17, input_size=(11,), filter_size=1, dtype="float32",
              layout="channels_last", bias=True), "gemm1x1")


# ---- data gradient by stride phase ----------------------------------------------------------------------

BWD_DATA = {
    "c5k3-s2-odd-even": dict(in_channels=5, out_channels=3, input_size=(9, 8), filter_size=3, stride=2, padding=1),
    "g2-k36-s3-d2-asym": dict(in_channels=4, out_channels=36, groups=2, input_size=(10, 11), filter_size=3, stride=3,
                              dilation=2, padding=((2, 0), (1, 1))),
    "s2-d2-half-the-phases-empty": dict(in_channels=3, out_channels=5, input_size=(9, 10), filter_size=3, stride=2,
                                        dilation=2, padding=2),
    "1x1-s2-untouched-pixels": dict(in_channels=3, out_channels=4, input_size=(7, 8), filter_size=1, stride=2),
    "conv1d-s3": dict(in_channels=5, out_channels=6, input_size=(16,), filter_size=4, stride=3, padding=((2, 0),)),
    "filter-larger-than-stride-s1": dict(in_channels=20, out_channels=3, input_size=(6, 5), filter_size=(3, 2),
                                         padding=((1, 1), (0, 1))),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", BWD_DATA)
def test_bwd_data_phased(name, layout):
    problem = fwd(dtype="float16", layout=layout, **BWD_DATA[name]).with_direction("bwd_data")
    check(problem, "bwd_data_phased")


def test_bwd_data_phased_float32():
    problem = fwd(dtype="float32", layout="channels_first", **BWD_DATA["g2-k36-s3-d2-asym"])
    check(problem.with_direction("bwd_data"), "bwd_data_phased")


# ---- data gradient where the filter is the stride: one GEMM and a pixel shuffle ---------------------------

SHUFFLE = {  # BLOCK_N=16 columns over taps x channels: tiles span taps, partial ones too
    "k2s2-c5k20": dict(in_channels=5, out_channels=20, input_size=(6, 8), filter_size=2, stride=2),
    "k3x2-s3x2-padded-g2": dict(in_channels=6, out_channels=34, groups=2, input_size=(10, 7), filter_size=(3, 2),
                                stride=(3, 2), padding=((1, 2), (1, 0))),
    "k2s2-odd-rows-past-the-last-window": dict(in_channels=3, out_channels=4, input_size=(7, 9), filter_size=2,
                                               stride=2),
    "conv1d-k4s4": dict(in_channels=7, out_channels=9, input_size=(19,), filter_size=4, stride=4, padding=((1, 0),)),
    "conv3d-k2s2-odd-height": dict(in_channels=4, out_channels=6, input_size=(4, 5, 6), filter_size=2, stride=2),
    "conv3d-k2x1x1-s2x1x1": dict(in_channels=5, out_channels=3, input_size=(5, 3, 4), filter_size=(2, 1, 1),
                                 stride=(2, 1, 1), padding=((1, 0), (0, 0), (0, 0))),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", SHUFFLE)
def test_bwd_data_shuffle(name, layout):
    problem = fwd(dtype="float16", layout=layout, **SHUFFLE[name]).with_direction("bwd_data")
    p, _, _ = check(problem, "bwd_data_shuffle")
    assert (p.zero == "out") == (name in ("k2s2-odd-rows-past-the-last-window", "conv3d-k2s2-odd-height"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bwd_data_shuffle_other_dtypes(dtype):
    check(fwd(dtype=dtype, layout="channels_last", **SHUFFLE["k3x2-s3x2-padded-g2"]).with_direction("bwd_data"),
          "bwd_data_shuffle")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bias, activation", [(True, None), (True, "relu"), (True, "gelu"), (False, "silu")])
def test_bwd_data_shuffle_applies_a_transposed_convolutions_epilogue(bias, activation, layout):
    """The bias of each column's channel (two groups: the group's own bias) and the activation, in the store."""
    bare = fwd(dtype="float16", layout=layout, **SHUFFLE["k3x2-s3x2-padded-g2"]).with_direction("bwd_data")
    check(bare.replace(bias=bias, activation=activation), "bwd_data_shuffle")


def test_a_tile_with_an_epilogue_is_narrowed_to_fit():
    """Eight warps at most for a scattered channels-first store; with an activation besides, in either layout,
    fewer columns."""
    big = configs.TileConfig(128, 128, 32, 8, 4, 1)
    assert shuffle.fitted(big, "channels_first") == dataclasses.replace(big, num_warps=8)
    assert shuffle.fitted(big, "channels_last") is big
    for layout in LAYOUTS:
        assert shuffle.fitted(big, layout, True) == dataclasses.replace(big, num_warps=8, block_n=64)
    bare = fwd(dtype="float16", layout="channels_first", **SHUFFLE["k2s2-c5k20"]).with_direction("bwd_data")
    p, _, _ = check(bare.replace(bias=True, activation="gelu"), "bwd_data_shuffle", big)
    assert (p.config.block_n, p.config.num_warps) == (64, 8)


def test_only_the_shuffle_takes_an_epilogue_and_not_past_the_last_window():
    covered = fwd(dtype="float16", layout="channels_last", **SHUFFLE["k2s2-c5k20"]).with_direction("bwd_data")
    fused = covered.replace(bias=True, activation="relu")
    assert registry.REGISTRY["bwd_data_shuffle"].issue(fused) is None
    assert "epilogue" in registry.REGISTRY["bwd_data_phased"].issue(fused)
    plan = registry.make_plan(covered, "bwd_data_shuffle", SMALL, table())
    assert "transposed_epilogue" in candidates.tags(covered, plan, table(), torch.device("cpu"))
    past = fwd(dtype="float16", layout="channels_last",
               **SHUFFLE["k2s2-odd-rows-past-the-last-window"]).with_direction("bwd_data").replace(bias=True)
    assert "past the last window" in registry.REGISTRY["bwd_data_shuffle"].issue(past)


def test_bwd_data_shuffle_is_offered_only_where_the_filter_is_the_stride():
    entry = registry.REGISTRY["bwd_data_shuffle"]
    offered = fwd(dtype="float16", layout="channels_last", **SHUFFLE["k2s2-c5k20"]).with_direction("bwd_data")
    assert entry.issue(offered) is None
    for other in (dict(filter_size=3), dict(filter_size=1, stride=1), dict(dilation=2)):
        assert entry.issue(offered.replace(**other)) is not None, other


# ---- weight gradient: split reduction ---------------------------------------------------------------------

BWD_WEIGHT = {  # each has at least 3 BLOCK_K=16 blocks of output pixels, so that 3 splits all get work
    "c5k3-s2-asym": dict(batch=3, in_channels=5, out_channels=3, input_size=(9, 8), filter_size=3, stride=2,
                         padding=((1, 0), (0, 2))),
    "g2-k40-d2": dict(in_channels=6, out_channels=40, groups=2, input_size=(7, 7), filter_size=2, dilation=2,
                      padding=1),
    "conv1d": dict(batch=3, in_channels=3, out_channels=5, input_size=(30,), filter_size=5, stride=2,
                   padding=((1, 3),)),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("name", BWD_WEIGHT)
def test_bwd_weight_split(name, splits, layout):
    problem = fwd(dtype="float16", layout=layout, **BWD_WEIGHT[name]).with_direction("bwd_weight")
    p, operands, out = check(problem, "bwd_weight_split", tab=table(splits))
    assert p.split == splits
    assert p.workspace_elements == (0 if splits == 1 else splits * math.prod(problem.weight_shape))
    again = launch.run(problem, p, *operands)
    assert torch.equal(again, out), "the split reduction must be deterministic"


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", BWD_WEIGHT)
def test_bwd_weight_atomic(name, dtype):
    problem = fwd(dtype=dtype, layout="channels_last", **BWD_WEIGHT[name]).with_direction("bwd_weight")
    p, _, _ = check(problem, "bwd_weight_atomic", tab=table(3))
    assert p.split == 3 and p.zero == ("out" if dtype == "float32" else "workspace")


def test_bwd_weight_more_splits_than_blocks_are_dropped():
    """Splits are whole BLOCK_K ranges; a split count above the number of blocks leaves no empty split."""
    problem = fwd(batch=1, in_channels=2, out_channels=2, input_size=(4, 4), filter_size=3, padding=1,
                  dtype="float32", layout="channels_first").with_direction("bwd_weight")  # 16 pixels: one block
    p, _, _ = check(problem, "bwd_weight_split", tab=table(8))
    assert p.split == 1 and p.workspace_elements == 0


# ---- operands and results that are not dense in the problem's layout ---------------------------------------


def test_strided_out_and_operands_in_the_other_layout():
    problem = fwd(dtype="float32", layout="channels_last", **FORWARD["c5k3-s2-asym-relu"])
    p = registry.make_plan(problem, "implicit_gemm", SMALL, table())
    x, w, bias = random_operands(problem, DEVICE, 3)
    expected = launch.run(problem, p, x, w, bias)
    x_cf, w_cf = x.contiguous(), w.contiguous()  # channels-first copies of channels-last operands
    big = torch.full((problem.batch, problem.out_channels, 2 * problem.output_size[0], problem.output_size[1]),
                     math.nan, device=DEVICE)
    out = big[:, :, ::2]  # dense in no layout
    assert launch.run(problem, p, x_cf, w_cf, bias, out=out) is out
    assert torch.equal(out, expected)
    assert torch.isnan(big[:, :, 1::2]).all(), "only out's own elements may be written"
