"""The few-channel forward kernels (kernels/few_channels.py): numerics, where they are offered, tiles, estimates.

Numerics run against conv_core's float64 reference, interpreted on the CPU (or compiled on a GPU: see
conftest.py), with configurations chosen by the tests so that the tiny problems still span several row
tiles, column tiles and reduction steps (few_channels_in), several pixel tiles and output-channel chunks
(few_channels_out), partial ones included.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_core.kit.tables import layer_key
from conv_rdna import candidates, configs, launch, registry
from conv_rdna.plans import few_channels as fc_plans
from conv_rdna.plans import common
from conv_core.kit.declines import interpreting
from conv_core.geometry import Geometry

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")
LAYOUTS = ("channels_first", "channels_last")
CUDA = torch.device("cuda")  # the candidates hook only reads the device type: no GPU needed

#: few_channels_in: 32 pixels x 16 channels x 16 (tap, channel) pairs per step.
IN_TILES = configs.TileConfig(32, 16, 16, 2, 4, 1)
#: few_channels_out: 64-pixel input tiles (8x8, or 1x64 in 1D) and 32 Z columns (3 channels of a 3x3 filter).
OUT_TILES = configs.TileConfig(64, 32, 16, 2, 4, 1)


def fwd(**fields) -> ConvProblem:
    base = dict(direction="fwd", batch=2, dilation=1, groups=1, stride=1, padding=0)
    return ConvProblem(**{**base, **fields})


def check(problem: ConvProblem, kernel: str, config: configs.TileConfig, seed: int = 0) -> common.Plan:
    """Run ``kernel`` on random operands into a NaN-poisoned ``out``; compare with the reference."""
    assert kernel in candidates.kernels_for(problem), f"{kernel} is not offered for {problem.key}"
    p = registry.make_plan(problem, kernel, config, configs.table(configs.INTERPRETER))
    operands = random_operands(problem, DEVICE, seed)
    out = problem.empty_result(DEVICE).fill_(math.nan)
    assert launch.run(problem, p, *operands, out=out) is out
    result = compare(problem, out, operands)
    assert result.ok, result.message
    return p


# ---- few input channels ---------------------------------------------------------------------------------

FEW_IN = {  # C_in 1..4, with stride 2, dilation 2, asymmetric padding and every activation between them
    1: dict(in_channels=1, out_channels=5, input_size=(9, 8), filter_size=3, stride=2, padding=((1, 0), (2, 1)),
            bias=True, activation="relu"),
    2: dict(in_channels=2, out_channels=20, input_size=(7, 8), filter_size=3, dilation=2, padding=2, bias=True,
            activation="gelu"),
    3: dict(in_channels=3, out_channels=17, input_size=(13, 11), filter_size=7, stride=2, padding=3, bias=True,
            activation="silu"),  # the RGB stem in miniature: K = 147 in 7 rows / 3 channels of 16-lane chunks
    4: dict(in_channels=4, out_channels=6, input_size=(8, 9), filter_size=3, stride=(1, 2), dilation=(2, 1),
            padding=((2, 1), (0, 1)), bias=True, activation="relu6"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("cin", sorted(FEW_IN))
def test_few_channels_in(cin, dtype, layout):
    p = check(fwd(dtype=dtype, layout=layout, **FEW_IN[cin]), "few_channels_in", IN_TILES)
    const = dict(p.launches[0].constexprs)
    assert const["CHANNELS_INNER"] == (layout == "channels_last")
    # k longer than two 16-lane chunks walks its leading digit: filter rows (NHWC) or channels (NCHW)
    long_k = const["C_G"] * const["R"] * const["S"] > 32
    assert const["OUTER"] == (1 if not long_k else const["R"] if layout == "channels_last" else const["C_G"])


def test_few_cin_outer_steps_of_the_stem():
    """The stem: 7 filter rows of 21 (s, c) lanes in NHWC, 3 channels of 49 taps in NCHW; 4 -> 512 3x3 (36
    lanes) at 32-lane chunks: one step."""
    g = Geometry.of(STEM)
    assert fc_plans.few_cin_outer_steps(g, "channels_last", 32) == 7
    assert fc_plans.few_cin_outer_steps(g, "channels_first", 32) == 3
    assert fc_plans.few_cin_outer_steps(Geometry.of(VAE_IN), "channels_first", 32) == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_few_channels_in_conv1d_groups_and_float32_result(layout):
    check(fwd(in_channels=6, out_channels=10, groups=2, input_size=(23,), filter_size=5, stride=2, dilation=2,
              padding=((4, 1),), bias=True, activation="gelu_tanh", dtype="float16", out_dtype="float32",
              layout=layout), "few_channels_in", IN_TILES)


# ---- few output channels --------------------------------------------------------------------------------

FEW_OUT = {
    1: dict(in_channels=20, out_channels=1, input_size=(13, 11), filter_size=3, stride=2, dilation=2,
            padding=((2, 1), (0, 2)), bias=True, activation="gelu_tanh"),  # 2 channel blocks, 9 tiles of 8x8
    3: dict(in_channels=24, out_channels=3, input_size=(11, 14), filter_size=3, padding=1, bias=True,
            activation="silu"),  # the image output in miniature: 27 of 32 Z columns
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("cout", sorted(FEW_OUT))
def test_few_channels_out(cout, dtype, layout):
    p = check(fwd(dtype=dtype, layout=layout, **FEW_OUT[cout]), "few_channels_out", OUT_TILES)
    assert p.launches[0].grid[0] > 2  # several pixel tiles per image


@pytest.mark.parametrize("layout", LAYOUTS)
def test_few_channels_out_chunks_groups_and_float32_result(layout):
    """5 output channels of a 3x3 filter in 32 columns: chunks of 3 and 2 channels (grid axis 2); 2 groups."""
    problem = fwd(in_channels=12, out_channels=10, groups=2, input_size=(9, 10), filter_size=3,
                  padding=((0, 1), (1, 1)),
                  bias=True, activation="relu6", dtype="float16", out_dtype="float32", layout=layout)
    p = check(problem, "few_channels_out", OUT_TILES)
    assert p.launches[0].grid[1:] == (2, 2)
    assert dict(p.launches[0].scalars)["K_CHUNK"] == 3 and dict(p.launches[0].constexprs)["K_PAD"] == 4


@pytest.mark.parametrize("layout", LAYOUTS)
def test_few_channels_out_conv1d_and_1x1(layout):
    check(fwd(in_channels=7, out_channels=2, input_size=(150,), filter_size=5, stride=3, padding=((1, 3),),
              activation="relu", dtype="float32", layout=layout), "few_channels_out", OUT_TILES)
    check(fwd(in_channels=9, out_channels=3, input_size=(9, 7), filter_size=1, stride=2, bias=True, activation="gelu",
              dtype="float16", layout=layout), "few_channels_out", OUT_TILES)


# ---- bfloat16, the tables' configurations -----------------------------------------------------------------


@pytest.mark.parametrize("kernel, fields", [("few_channels_in", FEW_IN[3]), ("few_channels_out", FEW_OUT[3])])
def test_bfloat16_under_the_interpreter(kernel, fields):
    """bf16 operands are upcast before tl.dot and rounded (not truncated) on store when interpreted."""
    assert interpreting() == (DEVICE == "cpu")
    tiles = IN_TILES if kernel.endswith("in") else OUT_TILES
    check(fwd(dtype="bfloat16", layout="channels_last", **fields), kernel, tiles)


@pytest.mark.parametrize("kernel, fields", [
    ("few_channels_in", dict(in_channels=3, out_channels=64, input_size=(20, 18), filter_size=7, stride=2, padding=3)),
    ("few_channels_out", dict(in_channels=40, out_channels=3, input_size=(18, 20), filter_size=3, padding=1)),
])
def test_with_the_tables_configuration(kernel, fields):
    problem = fwd(dtype="float16", layout="channels_last", bias=True, activation="silu", **fields)
    check(problem, kernel, configs.select(configs.table(configs.INTERPRETER), registry.REGISTRY.family_of(kernel),
                                          problem))


# ---- where they are offered --------------------------------------------------------------------------------

STEM = ConvProblem("fwd", 32, 3, 64, (224, 224), 7, 2, 3, 1, dtype="bfloat16", layout="channels_last", arch="sm_90")
IMAGE_OUT = ConvProblem("fwd", 1, 128, 3, (512, 512), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last",
                        arch="sm_90")
VAE_IN = ConvProblem("fwd", 1, 4, 512, (64, 64), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last", arch="sm_90")


@pytest.mark.parametrize("problem, few", [
    (STEM, ["few_channels_in"]),
    (IMAGE_OUT, ["few_channels_out"]),
    (VAE_IN, ["few_channels_in"]),
    (STEM.replace(out_channels=8), ["few_channels_in"]),  # 7x7 = 49 taps: more than 32 Z columns
    (IMAGE_OUT.replace(in_channels=3), ["few_channels_in", "few_channels_out"]),
    (IMAGE_OUT.replace(in_channels=16, out_channels=16), []),
    (IMAGE_OUT.replace(in_channels=16, out_channels=16, groups=2), ["few_channels_in", "few_channels_out"]),
    (IMAGE_OUT.replace(in_channels=18, out_channels=18, groups=2), []),  # 9 channels per group
    (IMAGE_OUT.replace(dilation=(8, 8), padding=8), []),  # a 17x17 window fits no 256-pixel tile
    (ConvProblem("fwd", 1, 128, 3, (512,), 17, 1, 8, 1), ["few_channels_out"]),  # 1D: a 1x256 tile
    # backward passes: the weight gradients under the forward's conditions; the data gradients of few output
    # channels at any stride (one launch per phase), of few input channels at stride 1
    (STEM.with_direction("bwd_weight"), ["few_channels_in_bwd_weight"]),
    (STEM.with_direction("bwd_data"), []),  # stride 2: the phased general kernel
    (IMAGE_OUT.with_direction("bwd_weight"), ["few_channels_out_bwd_weight"]),
    (IMAGE_OUT.with_direction("bwd_data"), ["few_channels_out_bwd_data"]),
    (IMAGE_OUT.replace(stride=2).with_direction("bwd_data"), ["few_channels_out_bwd_data"]),
    (VAE_IN.with_direction("bwd_weight"), ["few_channels_in_bwd_weight"]),
    (VAE_IN.with_direction("bwd_data"), ["few_channels_in_bwd_data"]),
    (VAE_IN.replace(stride=2).with_direction("bwd_data"), []),
    (STEM.replace(out_channels=8).with_direction("bwd_weight"), ["few_channels_in_bwd_weight"]),  # 49 taps
    (IMAGE_OUT.replace(in_channels=3).with_direction("bwd_weight"),
     ["few_channels_in_bwd_weight", "few_channels_out_bwd_weight"]),
    (IMAGE_OUT.replace(in_channels=3).with_direction("bwd_data"),
     ["few_channels_in_bwd_data", "few_channels_out_bwd_data"]),
    (IMAGE_OUT.replace(in_channels=16, out_channels=16).with_direction("bwd_weight"), []),
    (IMAGE_OUT.replace(in_channels=16, out_channels=16).with_direction("bwd_data"), []),
    (IMAGE_OUT.replace(in_channels=18, out_channels=18, groups=2).with_direction("bwd_weight"), []),
    (IMAGE_OUT.replace(dilation=(8, 8), padding=8).with_direction("bwd_data"), ["few_channels_out_bwd_data"]),
])
def test_offered_only_for_the_problems_they_serve(problem, few):
    kernels = candidates.kernels_for(problem)
    assert [k for k in kernels if k.startswith("few_channels")] == few
    assert kernels[0] in ("implicit_gemm", "bwd_data_phased", "bwd_weight_split")  # the general family stays


def test_image_output_tile():
    g = Geometry.of(IMAGE_OUT)
    assert fc_plans.few_cout_tile(g, 512) == (16, 32, 14, 30)  # 666 tiles, 82% of the slots are outputs
    assert fc_plans.few_cout_tile(g, 256) == (16, 16, 14, 14)
    conv1d = ConvProblem("fwd", 1, 128, 3, (1000,), 3, 1, 1, 1)
    assert fc_plans.few_cout_tile(Geometry.of(conv1d), 256) == (1, 256, 1, 254)
    stride2 = Geometry.of(IMAGE_OUT.replace(stride=2))
    assert fc_plans.few_cout_tile(stride2, 256)[2:] == (7, 7)


def test_every_few_channels_out_configuration_runs_what_it_is_offered():
    """The offer is decided on a 256-pixel tile and 32 Z columns: every table's configurations are at least that
    (the data gradient of few input channels runs the same kernel)."""
    for name in configs.table_names():
        for family in ("few_channels_out", "few_channels_in_bwd_data"):
            for config in configs.table(name).configs(family):
                assert config.block_m >= fc_plans.FEW_COUT_MIN_BLOCK_M, name
                assert config.block_n >= fc_plans.FEW_COUT_MIN_BLOCK_N, name


# ---- configurations and estimates on the H100 ---------------------------------------------------------------


def test_h100_configurations():
    tab = configs.table("sm_90")
    stem = configs.select(tab, "few_channels_in", STEM.replace(batch=31))  # a bucket, not the swept layer
    assert (stem.block_m, stem.block_n, stem.block_k) == (128, 64, 32)  # every output channel in one tile
    swept = tab.layers["few_channels_in"].get(layer_key(STEM))
    assert swept is not None and configs.select(tab, "few_channels_in", STEM) == swept
    image = configs.select(tab, "few_channels_out", IMAGE_OUT)
    assert (image.block_m, image.block_n) == (256, 32)
    p = registry.make_plan(IMAGE_OUT, "few_channels_out", image, tab)
    assert p.launches[0].grid == (37 * 37, 1, 1)  # 16x16 input tiles, 14x14 outputs each
    utilization, reads = fc_plans.few_cout_work(IMAGE_OUT, image)
    assert reads == 1 and 0.6 < utilization < 0.65  # 27/32 columns x 196/256 slots


@pytest.mark.parametrize("problem", [STEM, IMAGE_OUT, VAE_IN, STEM.replace(layout="channels_first"),
                                     IMAGE_OUT.replace(layout="channels_first")])
def test_few_channel_kernels_rank_first_on_the_h100(problem):
    ranked = sorted(candidates.candidates(problem, CUDA), key=lambda c: c.estimate_us)
    assert ranked[0].kernel.startswith("few_channels"), [(c.kernel_id, c.estimate_us) for c in ranked]
    assert {"deterministic", "cuda_graph_safe"} <= ranked[0].tags
