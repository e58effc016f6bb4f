"""The few-channel backward passes (kernels/few_channels_bwd.py and the forward few-channel kernels on ``dy``):
numerics, split counts, where they are offered, configurations and estimates.

Numerics run against conv_core's float64 reference, interpreted on the CPU (or compiled on a GPU: see
conftest.py), with configurations chosen by the tests so that the tiny problems still span several row
and column tiles and several reduction steps, and with forced split counts (1: direct store; 2 and 3:
the two-stage workspace, the last range ragged). With ``CONV_RDNA_TEST_DEVICE=cuda`` the layers the kernels
were written for also run at their real sizes, in bfloat16, with the GPU table's configurations.
"""

from __future__ import annotations

import math

import pytest
import torch
from conv_core.arch import device_arch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_rdna import candidates, configs, launch, registry
from conv_rdna.plans import few_channels as fc_plans
from conv_rdna.plans import common
from conv_rdna.plans import col2im as col2im_plans
from conv_core.kit.declines import interpreting
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.geometry import Geometry
from test_few_channels import IMAGE_OUT, STEM, VAE_IN
from test_kernels import DEVICE, LAYOUTS, fwd, table
from test_kernels import check as check_kernel

CUDA = torch.device("cuda")  # the candidates hook only reads the device type: no GPU needed
#: 16x16x16 tiles: several row and column tiles and pixel blocks on the tiny problems.
SMALL = configs.TileConfig(16, 16, 16, 2, 4, 1)
#: few_channels_in_bwd_data runs few_channels_out's kernel: 64-pixel input tiles and 32 Z columns.
COUT_TILES = configs.TileConfig(64, 32, 16, 2, 4, 1)
#: few_channels_out_bwd_data runs few_channels_in's kernel: 32 pixels x 16 channels x 16 (tap, channel) pairs.
CIN_TILES = configs.TileConfig(32, 16, 16, 2, 4, 1)


def check(problem: ConvProblem, kernel: str, config: configs.TileConfig, splits: int | None = None):
    """``kernel`` (which must be offered) against the reference, into a NaN-poisoned ``out``."""
    assert kernel in candidates.kernels_for(problem), f"{kernel} is not offered for {problem.key}"
    return check_kernel(problem, kernel, config, tab=table(splits))


def bwd(direction: str, dtype: str = "float16", layout: str = "channels_last", **fields) -> ConvProblem:
    return fwd(dtype=dtype, layout=layout, **fields).with_direction(direction)


# ---- weight gradient, few input channels: (tap, channel) columns -------------------------------------------

FEW_IN = {
    "stem-mini": dict(in_channels=3, out_channels=17, input_size=(13, 11), filter_size=7, stride=2, padding=3),
    "dil2-asym": dict(batch=3, in_channels=2, out_channels=20, input_size=(9, 8), filter_size=3, dilation=2,
                      padding=((2, 1), (0, 3))),
    "s-1x2-f2x3": dict(in_channels=4, out_channels=6, input_size=(8, 11), filter_size=(2, 3), stride=(1, 2),
                       padding=((1, 0), (1, 1))),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", FEW_IN)
def test_weight_gradient_few_input_channels(name, dtype, layout):
    p, _, _ = check(bwd("bwd_weight", dtype, layout, **FEW_IN[name]), "few_channels_in_bwd_weight", SMALL, splits=3)
    assert p.split == 3
    assert dict(p.launches[0].constexprs)["CHANNELS_INNER"] == (layout == "channels_last")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_weight_gradient_few_input_channels_groups_and_1d(layout):
    problem = bwd("bwd_weight", "float16", layout, in_channels=6, out_channels=10, groups=2, input_size=(23,),
                  filter_size=5, stride=2, dilation=2, padding=((4, 1),))
    p, _, _ = check(problem, "few_channels_in_bwd_weight", SMALL, splits=2)
    assert p.launches[0].grid[1:] == (2, 2)


# ---- weight gradient, few output channels: (channel, tap) rows, input pixels reduced --------------------------

FEW_OUT = {
    "image-mini": dict(in_channels=24, out_channels=3, input_size=(11, 14), filter_size=3, padding=1),
    "s2-d2-asym": dict(in_channels=20, out_channels=1, input_size=(13, 11), filter_size=3, stride=2, dilation=2,
                       padding=((2, 1), (0, 2))),
    "s-2x3-5ch": dict(batch=3, in_channels=7, out_channels=5, input_size=(9, 10), filter_size=(3, 2), stride=(2, 3),
                      padding=((1, 1), (0, 1))),  # 30 rows: two row tiles of 16
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", FEW_OUT)
def test_weight_gradient_few_output_channels(name, dtype, layout):
    p, _, _ = check(bwd("bwd_weight", dtype, layout, **FEW_OUT[name]), "few_channels_out_bwd_weight", SMALL, splits=3)
    assert p.split == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_weight_gradient_few_output_channels_groups_and_1d(layout):
    problem = bwd("bwd_weight", "float16", layout, in_channels=12, out_channels=10, groups=2, input_size=(40,),
                  filter_size=5, stride=3, padding=((1, 3),))
    p, _, _ = check(problem, "few_channels_out_bwd_weight", SMALL, splits=2)
    assert p.launches[0].grid == (2 * 1, 2, 2)  # 25 (channel, tap) rows in 2 tiles, 6 channels in 1; groups; splits


@pytest.mark.parametrize("kernel, fields", [("few_channels_in_bwd_weight", FEW_IN["dil2-asym"]),
                                            ("few_channels_out_bwd_weight", FEW_OUT["image-mini"])])
@pytest.mark.parametrize("splits", [1, 2, 3])
def test_weight_gradient_splits_are_deterministic(kernel, fields, splits):
    """Ranges of whole 16-pixel blocks (the last one ragged), one float32 workspace slice each, summed in order."""
    problem = bwd("bwd_weight", "float32", **fields)
    p, operands, out = check(problem, kernel, SMALL, splits=splits)
    g = Geometry.of(problem)
    pixels = g.batch * (g.h * g.w if "out" in kernel else g.p * g.q)
    per_split = dict(p.launches[0].scalars)["PIX_PER_SPLIT"]
    assert p.split == splits and pixels % per_split != 0 and per_split % SMALL.block_k == 0
    assert p.workspace_elements == (0 if splits == 1 else splits * math.prod(problem.weight_shape))
    assert len(p.launches) == (1 if splits == 1 else 2)
    assert torch.equal(launch.run(problem, p, *operands), out), "the split reduction must be deterministic"


# ---- data gradients: the forward kernels on dy, a launch per stride phase ------------------------------------------

DATA_FEW_OUT = {  # few output channels: conv_fwd_few_cin on dy
    "image-mini": dict(in_channels=24, out_channels=3, input_size=(11, 14), filter_size=3, padding=1),
    "dil2-asym": dict(in_channels=20, out_channels=2, input_size=(9, 10), filter_size=3, dilation=2,
                      padding=((1, 2), (3, 0))),
    "pad-beyond-reach": dict(in_channels=5, out_channels=4, input_size=(5, 6), filter_size=(1, 2),
                             padding=((2, 1), (1, 3))),  # dil*(R-1) - pad < 0: negative padding on dy
    "s2-odd": dict(in_channels=12, out_channels=3, input_size=(11, 10), filter_size=3, stride=2, padding=1),
    "s-2x3-asym": dict(batch=3, in_channels=9, out_channels=2, input_size=(10, 14), filter_size=(4, 5),
                       stride=(2, 3), padding=((0, 3), (2, 1))),
}
DATA_FEW_IN = {  # few input channels: conv_fwd_few_cout on dy
    "conv_in-mini": dict(in_channels=4, out_channels=20, input_size=(9, 10), filter_size=3, padding=1),
    "dil2-asym": dict(in_channels=3, out_channels=12, input_size=(11, 10), filter_size=3, dilation=2,
                      padding=((1, 0), (2, 1))),
    "pad-beyond-reach": dict(in_channels=2, out_channels=9, input_size=(10, 13), filter_size=(2, 1),
                             padding=((2, 2), (1, 0))),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", DATA_FEW_OUT)
def test_data_gradient_few_output_channels(name, dtype, layout):
    problem = bwd("bwd_data", dtype, layout, **DATA_FEW_OUT[name])
    p, _, _ = check(problem, "few_channels_out_bwd_data", CIN_TILES)
    assert {launch.kernel.__name__ for launch in p.launches} == {"conv_fwd_few_cin"}
    assert len(p.launches) == math.prod(problem.stride)  # one per stride phase
    assert dict(p.launches[0].scalars)["sws"] < 0  # the flip is a negative stride, not a copy


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", DATA_FEW_IN)
def test_data_gradient_few_input_channels(name, dtype, layout):
    problem = bwd("bwd_data", dtype, layout, **DATA_FEW_IN[name])
    p, _, _ = check(problem, "few_channels_in_bwd_data", COUT_TILES)
    assert [launch.kernel.__name__ for launch in p.launches] == ["conv_fwd_few_cout"]
    assert p.launches[0].grid[0] > 2  # several pixel tiles per image


def test_stride_phases_of_the_stem():
    """7x7 at stride 2, padding 3: phase (a, b) of dx takes the taps of parity ``(a + 3) mod 2``, 4 or 3 per
    axis, flipped; it writes every second pixel from (a, b); every pixel of dx belongs to exactly one phase."""
    problem = STEM.with_direction("bwd_data")
    g = Geometry.of(problem)
    phases = common.bwd_data_phases(g)
    assert [(ph.first, (ph.rows.taps[-1], ph.cols.taps[-1]), (ph.geometry(g).r, ph.geometry(g).s))
            for ph in phases] == [
        ((0, 0), (1, 1), (3, 3)), ((0, 1), (1, 0), (3, 4)), ((1, 0), (0, 1), (4, 3)), ((1, 1), (0, 0), (4, 4))]
    assert all(ph.rows.tap_step == ph.cols.tap_step == 2 for ph in phases)  # every second tap, descending
    assert sum(ph.geometry(g).p * ph.geometry(g).q for ph in phases) == 224 * 224
    runs = fc_plans.forward_runs(problem)
    syh, syw = 224 * 3, 3  # channels-last dx
    assert [run.output["Y_OFF"] for run in runs] == [0, syw, syh, syh + syw]
    assert {(run.output["syh"], run.output["syw"]) for run in runs} == {(2 * syh, 2 * syw)}


def test_strided_data_gradient_with_an_empty_phase():
    """One input row at stride 2: the phases of odd rows have no pixels and no launch."""
    problem = bwd("bwd_data", "float32", "channels_first", in_channels=8, out_channels=3, input_size=(1, 9),
                  filter_size=(1, 3), stride=2, padding=((0, 0), (1, 1)))
    p, _, _ = check(problem, "few_channels_out_bwd_data", CIN_TILES)
    assert len(p.launches) == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_data_gradients_groups_and_1d(layout):
    """Two groups, so that the transposed weight's group offset (not ``g * K_G`` rows) is exercised."""
    few_out = bwd("bwd_data", "float16", layout, in_channels=10, out_channels=6, groups=2, input_size=(29,),
                  filter_size=5, dilation=2, padding=((3, 5),))
    check(few_out, "few_channels_out_bwd_data", CIN_TILES)
    few_in = bwd("bwd_data", "float16", layout, in_channels=6, out_channels=10, groups=2, input_size=(7, 9),
                 filter_size=3, padding=((0, 2), (1, 1)))
    p, _, _ = check(few_in, "few_channels_in_bwd_data", COUT_TILES)
    assert p.launches[0].grid[1] == 2 and dict(p.launches[0].scalars)["W_EXTRA"] != 0


# ---- data gradient of few input channels as a GEMM and a gather (kernels/col2im.py) ----------------------------------

COL2IM = {**DATA_FEW_IN,
          "stem-mini": FEW_IN["stem-mini"], "s-1x2-f2x3": FEW_IN["s-1x2-f2x3"],
          "s-2x3-asym": dict(batch=3, in_channels=2, out_channels=9, input_size=(10, 14), filter_size=(4, 5),
                             stride=(2, 3), padding=((0, 3), (2, 1))),
          "dil2-s2": dict(in_channels=3, out_channels=5, input_size=(11, 12), filter_size=3, stride=2, dilation=2,
                          padding=2)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", COL2IM)
def test_col2im_data_gradient(name, dtype, layout):
    problem = bwd("bwd_data", dtype, layout, **COL2IM[name])
    p, _, _ = check(problem, "col2im_bwd_data", SMALL)
    assert [launch.kernel.__name__ for launch in p.launches] == ["conv_gemm1x1", "conv_col2im"]
    g = Geometry.of(problem)
    assert p.workspace_elements == g.batch * g.p * g.q * problem.in_channels * g.r * g.s  # Z of the whole batch


@pytest.mark.parametrize("layout", LAYOUTS)
def test_col2im_groups_1d_and_chunks_of_images(layout, monkeypatch):
    """Two groups (Z's columns per group), a 1D layer, and a workspace cap of one image's Z: a GEMM and a
    gather per image, each on its own images (``A_OFF``, ``N0``), the workspace reused."""
    grouped = bwd("bwd_data", "float16", layout, in_channels=6, out_channels=10, groups=2, input_size=(7, 9),
                  filter_size=3, stride=2, padding=((0, 2), (1, 1)))
    p, _, _ = check(grouped, "col2im_bwd_data", SMALL)
    assert p.launches[1].grid[1] == 2
    check(bwd("bwd_data", "float16", layout, in_channels=3, out_channels=8, input_size=(29,), filter_size=5,
              stride=2, padding=((3, 1),)), "col2im_bwd_data", SMALL)
    problem = bwd("bwd_data", "float16", layout, batch=3, **COL2IM["stem-mini"])
    g = Geometry.of(problem)
    one_image = g.p * g.q * problem.in_channels * g.r * g.s
    monkeypatch.setattr(col2im_plans, "COL2IM_WORKSPACE_BYTES", 4 * one_image)
    p, _, _ = check(problem, "col2im_bwd_data", SMALL)
    assert len(p.launches) == 6 and p.workspace_elements == one_image and p.workspace_fills == 3
    assert [dict(launch.scalars)["N0"] for launch in p.launches[1::2]] == [0, 1, 2]


# ---- bfloat16, the tables' configurations ------------------------------------------------------------------------

BF16 = [("few_channels_in_bwd_weight", "bwd_weight", FEW_IN["stem-mini"], SMALL),
        ("few_channels_out_bwd_weight", "bwd_weight", FEW_OUT["image-mini"], SMALL),
        ("few_channels_out_bwd_data", "bwd_data", DATA_FEW_OUT["image-mini"], CIN_TILES),
        ("few_channels_in_bwd_data", "bwd_data", DATA_FEW_IN["conv_in-mini"], COUT_TILES),
        ("col2im_bwd_data", "bwd_data", FEW_IN["stem-mini"], SMALL)]


@pytest.mark.parametrize("kernel, direction, fields, tiles", BF16)
def test_bfloat16_under_the_interpreter(kernel, direction, fields, tiles):
    """bf16 operands are upcast before tl.dot and rounded (not truncated) on store when interpreted."""
    assert interpreting() == (DEVICE == "cpu")
    check(bwd(direction, "bfloat16", **fields), kernel, tiles, splits=2)


@pytest.mark.parametrize("kernel, direction, fields, tiles", BF16)
def test_with_the_tables_configuration(kernel, direction, fields, tiles):
    problem = bwd(direction, "float16", "channels_first", **fields)
    check(problem, kernel, configs.select(configs.table(configs.INTERPRETER), registry.REGISTRY.family_of(kernel),
                                          problem))


# ---- where they are offered ---------------------------------------------------------------------------------------


def test_strided_data_gradients_run_per_phase():
    """At stride 2 the data gradient of few output channels runs one launch per phase; where a phase cannot be
    a forward convolution (dilated and strided, or a stride past the filter: a phase with no tap) only the
    phased general kernel is offered. That of few input channels runs at stride 1 only (its shift-and-add bounds
    it on the stem's phases: see fc_plans.few_channels_kernels); at any stride they have ``col2im_bwd_data``,
    which also fills the pixels no tap reaches (a stride past the filter) with zeros."""
    strided = IMAGE_OUT.replace(stride=2).with_direction("bwd_data")
    for layout in LAYOUTS:
        assert "few_channels_out_bwd_data" in candidates.kernels_for(strided.replace(layout=layout))
    assert candidates.kernels_for(strided.replace(dilation=2)) == ("bwd_data_phased",)
    past_the_filter = bwd("bwd_data", in_channels=8, out_channels=3, input_size=(9, 9), filter_size=2, stride=3)
    assert candidates.kernels_for(past_the_filter) == ("bwd_data_phased", "col2im_bwd_data")
    check(past_the_filter, "col2im_bwd_data", SMALL)
    for base in (VAE_IN, STEM):
        assert candidates.kernels_for(base.replace(stride=2).with_direction("bwd_data")) == ("bwd_data_phased",
                                                                                             "col2im_bwd_data")


def test_weight_gradient_split_rule():
    """The few-channel weight gradients have few tiles (every tap in one): the table's ``few_channels_split``
    gives them many more splits than the general rule allows, within its bounds."""
    tab = configs.table("sm_90")
    for problem, kernel in ((STEM, "few_channels_in_bwd_weight"), (IMAGE_OUT, "few_channels_out_bwd_weight")):
        problem = problem.with_direction("bwd_weight")
        config = configs.select(tab, kernel, problem)
        splits = configs.split_count(tab, problem, config, INT32_ELEMENTS, family=kernel)
        assert tab.split.max_split < splits <= tab.few_channels_split.max_split
        view = configs.gemm_view(problem, kernel)
        tiles = math.ceil(view["m"] / config.block_m) * math.ceil(view["n"] / config.block_n)
        assert splits == math.ceil(tab.few_channels_split.target_programs / tiles)


# ---- configurations and estimates on the H100 ---------------------------------------------------------------------

BACKWARD = [(STEM, "bwd_weight", "few_channels_in_bwd_weight"),
            (IMAGE_OUT, "bwd_weight", "few_channels_out_bwd_weight"),
            (IMAGE_OUT, "bwd_data", "few_channels_out_bwd_data"),
            (VAE_IN, "bwd_weight", "few_channels_in_bwd_weight"),
            (VAE_IN, "bwd_data", "few_channels_in_bwd_data")]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("base, direction, kernel", BACKWARD)
def test_few_channel_backward_kernels_rank_first_on_the_h100(base, direction, kernel, layout):
    problem = base.replace(layout=layout).with_direction(direction)
    ranked = sorted(candidates.candidates(problem, CUDA), key=lambda c: c.estimate_us)
    assert ranked[0].kernel == kernel, [(c.kernel_id, c.estimate_us) for c in ranked]
    measured = configs.table("sm_90").is_measured(kernel)  # swept on the H100: no longer experimental
    assert {"deterministic", "cuda_graph_safe"} <= ranked[0].tags
    assert ("experimental" in ranked[0].tags) is not measured


def test_h100_configurations():
    tab = configs.table("sm_90")
    stem = configs.select(tab, "few_channels_in_bwd_weight", STEM.with_direction("bwd_weight"))
    assert (stem.block_m, stem.block_n) == (64, 64)  # the 64 output channels x 3 tiles of the 147 columns
    image = configs.select(tab, "few_channels_out_bwd_weight", IMAGE_OUT.with_direction("bwd_weight"))
    assert (image.block_m, image.block_n) == (64, 128)  # 27 rows (wgmma wants 64), every input channel
    p = registry.make_plan(IMAGE_OUT.with_direction("bwd_weight"), "few_channels_out_bwd_weight", image, tab)
    assert p.launches[0].grid[:2] == (1, 1) and p.split > 32


# ---- the layers the kernels were written for, at their real sizes (GPU only) -------------------------------------

@pytest.mark.skipif(DEVICE != "cuda", reason="real sizes run compiled on a GPU (CONV_RDNA_TEST_DEVICE=cuda)")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("base, direction, kernel", BACKWARD + [(STEM, "bwd_data", "col2im_bwd_data"),
                                                                (VAE_IN, "bwd_data", "col2im_bwd_data")])
def test_real_layers_on_the_gpu(base, direction, kernel, layout):
    """The ResNet-50 stem (batch 32, 224x224), the SD-VAE's conv_out 128 -> 3 (512x512) and conv_in 4 -> 512
    (64x64), bf16, both layouts, with the configuration the GPU's table gives, against the float64 reference."""
    device = torch.device(DEVICE)
    problem = base.replace(layout=layout, arch=device_arch(device)).with_direction(direction)
    (cand,) = [c for c in candidates.candidates(problem, device) if c.kernel == kernel]
    operands = random_operands(problem, device, 0)
    result = compare(problem, cand.run(*operands), operands, candidate=cand)
    assert result.ok, result.message
