"""Plans (:mod:`conv_gluon.plans`): kernel arguments, descriptors, the weight matrix, input modes, support
checks and the compile-time specialization, from problems alone."""

from __future__ import annotations

import pytest
from conv_core.problem import ConvProblem
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, launch, plans as plan, specialization
from conv_gluon.kernels.codes import A_MODES, ACTIVATIONS

TAB = configs.table("sm_90")


def problem(**fields) -> ConvProblem:
    base = dict(batch=2, in_channels=64, out_channels=96, input_size=(12, 10), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90")
    return ConvProblem("fwd", **{**base, **fields})


def make(p: ConvProblem, kernel: str) -> plan.Plan:
    return plan.make_plan(p, kernel, configs.select(TAB, REGISTRY.family_of(kernel), p), TAB)


def test_scalars_are_dense_nhwc_geometry():
    p = problem(batch=3, in_channels=32, out_channels=48, groups=2, input_size=(11, 9), filter_size=(3, 5),
                stride=(2, 1), padding=((1, 0), (2, 2)), dilation=(1, 2))
    s = dict(make(p, "fwd_gather").scalars)
    (oh, ow) = p.output_size
    assert (s["M"], s["P"], s["Q"], s["H"], s["W"]) == (3 * oh * ow, oh, ow, 11, 9)
    assert (s["C_G"], s["K_G"], s["S"], s["TAPS"]) == (16, 24, 5, 15)
    assert (s["STRIDE_H"], s["STRIDE_W"], s["PAD_H"], s["PAD_W"], s["DIL_H"], s["DIL_W"]) == (2, 1, 1, 2, 1, 2)
    assert (s["sx_n"], s["sx_h"], s["sx_w"]) == (11 * 9 * 32, 9 * 32, 32)
    assert (s["sy_n"], s["sy_h"], s["sy_w"], s["Y_START"], s["Y_CHANNELS"]) == (oh * ow, ow, 1, 0, 48)  # pixels
    assert s["NUM_TILES"] == s["TILES_M"] * s["TILES_N"] * 2


def test_3d_scalars_are_dense_ndhwc_geometry():
    """3D: the plane's scalars as in 2D, the depth beside them; pixel rows ``(n, z, p, q)``, taps ``(t, r, s)``."""
    p = problem(batch=2, in_channels=16, out_channels=24, input_size=(7, 11, 9), filter_size=(2, 3, 5),
                stride=(3, 2, 1), padding=((2, 0), (1, 0), (2, 2)), dilation=(2, 1, 2))
    fp = make(p, "fwd_gather")
    s, c = dict(fp.scalars), dict(fp.constexprs)
    (od, oh, ow) = p.output_size
    assert (s["M"], s["Z"], s["P"], s["Q"], s["D"], s["H"], s["W"]) == (2 * od * oh * ow, od, oh, ow, 7, 11, 9)
    assert (s["T"], s["S"], s["TAPS"], s["STRIDE_D"], s["DIL_D"], c["PAD_D"]) == (2, 5, 15, 3, 2, 2)
    assert (s["sx_n"], s["sx_d"], s["sx_h"], s["sx_w"]) == (7 * 11 * 9 * 16, 11 * 9 * 16, 9 * 16, 16)
    assert (s["sy_n"], s["sy_d"], s["sy_h"], s["sy_w"]) == (od * oh * ow, oh * ow, ow, 1)
    assert fp.weight.taps == 30
    wg = plan.make_bwd_weight_plan(p.with_direction("bwd_weight"), "bwd_weight_gather",
                                   configs.select(TAB, "bwd_weight_gather", p.with_direction("bwd_weight")), TAB)
    w = dict(wg.scalars)
    assert (w["J"], w["T"], w["TAPS"], w["OUT_ROW"]) == (2 * od * oh * ow, 2, 15, 30 * w["OUT_TAP"])
    assert wg.grid.taps == 30 and wg.partial_numel == 24 * 30 * wg.c_pad


def test_below_3d_the_depth_arguments_are_jit_constants():
    """The depth axis of a 2D launch is 1s (compiled in as constants) and a constexpr padding of 0: the 2D
    kernels compile to what they did before 3D (the plane strides ``sx_d``, ``sy_d`` are not specialised)."""
    from conv_gluon import descriptors
    from conv_gluon.kernels.fwd import conv_fwd

    p = make(problem(), "fwd_gather")
    _, constexprs, _ = specialization.plan_specialization(p, conv_fwd, launch.role_dtypes(problem(), p),
                                                          descriptors.signature)
    assert all(constexprs[name] == 1 for name in ("Z", "D", "T", "STRIDE_D", "DIL_D"))
    assert constexprs["PAD_D"] == 0 and "sx_d" not in constexprs and "sy_d" not in constexprs


def test_constexprs():
    c = dict(make(problem(bias=True, activation="silu"), "fwd_gather").constexprs)
    config = configs.select(TAB, "fwd_gather", problem())
    assert (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["STAGES"]) == (config.block_m, config.block_n,
                                                                        config.block_k, config.stages)
    assert c["A_MODE"] == A_MODES["cp_async"] and c["VEC"] == 8 and c["EVEN_C"]
    assert c["HAS_BIAS"] and c["ACTIVATION"] == ACTIVATIONS["silu"]
    assert (c["PRODUCER_WARPS"], c["PRODUCER_REGS"]) == (TAB.producers["cp_async"].warps,
                                                          TAB.producers["cp_async"].regs)


@pytest.mark.parametrize("cin, mode, vec", [(64, "cp_async", 8), (6, "cp_async", 2), (12, "cp_async", 4),
                                            (3, "registers", 1), (33, "registers", 1)])
def test_input_mode_follows_the_channels(cin, mode, vec):
    p = make(problem(in_channels=cin), "fwd_gather")
    assert p.a_mode == mode and dict(p.constexprs)["VEC"] == vec


def test_box_plan_descriptors():
    p = make(problem(in_channels=40, input_size=(20, 33)), "fwd_box")
    c = dict(p.constexprs)
    assert p.a_mode == "tma_box" and c["A_MODE"] == A_MODES["tma_box"]
    assert p.x_map.shape == (2, 20, 33, 40) and p.x_map.strides == (20 * 33 * 40, 33 * 40, 40, 1)
    assert p.x_map.block == (1, c["BOX_H"], c["BOX_W"], c["BLOCK_K"])
    assert c["BOX_H"] * c["BOX_W"] == c["BLOCK_M"]
    s = dict(p.scalars)
    assert s["TILES_IMG"] == -(-20 // c["BOX_H"]) * s["TILES_Q"] and s["TILES_M"] == 2 * s["TILES_IMG"]
    for tmap in (p.x_map, p.w_map):  # TMA: 16-byte strides, contiguous last dimension, boxes within limits
        assert tmap.strides[-1] == 1 and all(st * 2 % 16 == 0 for st in tmap.strides[:-1])
        assert all(b <= 256 for b in tmap.block) and tmap.block[-1] * 2 >= 16


def test_weight_matrix_view_or_padded():
    even = make(problem(in_channels=64), "fwd_gather")
    assert not even.weight.packed and even.workspace_bytes == 0
    assert even.w_map.shape == (96, 9 * 64) and even.w_map.block == (even.config.block_n, even.config.block_k)
    odd = make(problem(in_channels=40), "fwd_gather")
    assert odd.weight.packed and odd.weight.c_pad == 64 and odd.w_map.shape == (96, 9 * 64)
    assert odd.workspace_bytes == 96 * 9 * 64 * 2


@pytest.mark.parametrize("fields, words", [
    (dict(stride=2), "stride"),
    (dict(in_channels=36), "multiple of 16 bytes"),
    (dict(in_channels=48, groups=2), "next group's channels"),
])
def test_box_issue(fields, words):
    p = problem(**fields)
    assert words in plan.box_issue(p, configs.select(TAB, "fwd_box", p))
    with pytest.raises(ValueError, match="fwd_box cannot run"):
        make(p, "fwd_box")


def test_unknown_kernel():
    with pytest.raises(ValueError, match="unknown fwd kernel"):
        plan.make_plan(problem(), "bwd_weight_split", configs.select(TAB, "fwd_gather", problem()), TAB)


def test_registers_and_warps():
    narrow = make(problem(out_channels=64), "fwd_gather")
    wide = make(problem(out_channels=512), "fwd_box")
    assert narrow.num_warps == 4 and narrow.maxnreg == 248
    assert wide.num_warps == 8 and wide.config.block_n == 256 and wide.maxnreg == 168


def test_aot_specialization_mirrors_the_jit():
    from conv_gluon.kernels.fwd import conv_fwd

    p = make(problem(stride=1, dilation=1, padding=2, filter_size=5), "fwd_box")
    signature, consts, attrs = specialization.plan_specialization(p, conv_fwd, launch.role_dtypes(problem()),
                                                                  lambda tmap, dtype: f"desc{tmap.block}")
    names = conv_fwd.arg_names
    assert signature["x"] == f"desc{p.x_map.block}" and signature["w_desc"] == f"desc{p.w_map.block}"
    assert signature["y_ptr"] == "*bf16" and attrs[(names.index("y_ptr"),)] == [["tt.divisibility", 16]]
    assert consts["STRIDE_H"] == 1 and signature["STRIDE_H"] == "constexpr"  # 1 becomes a constant
    assert signature["PAD_H"] == "i32" and (names.index("PAD_H"),) not in attrs
    assert (names.index("Y_CHANNELS"),) in attrs and (names.index("sx_w"),) in attrs  # 96 and 64 channels
    # the shape's arguments stay plain integers, even divisible by 16 (12 * 10 * 64) or equal to 1 (one tile row)
    assert signature["sx_n"] == "i32" and (names.index("sx_n"),) not in attrs and "sx_n" not in consts
    assert consts["num_warps"] == p.num_warps and consts["BLOCK_M"] == p.config.block_m
    assert set(signature) == set(names)


def test_int32_issue():
    assert plan.int32_issue(problem()) is None
    assert "the input has" in plan.int32_issue(problem(batch=2048, in_channels=1024, input_size=(32, 32)))


def test_epilogue_staging_follows_the_output():
    assert not dict(make(problem(out_channels=96), "fwd_gather").constexprs)["STAGE_OUT"]
    odd = make(problem(out_channels=36), "fwd_gather")  # RetinaNet's box regression: 36 channels
    assert dict(odd.constexprs)["STAGE_OUT"] and odd.staging_bytes > 0
    wide = make(problem(out_channels=819), "fwd_box")  # RetinaNet's class logits: a 256 x 128 tile, odd channels
    assert wide.config.block_m * wide.config.block_n == 256 * 128 and dict(wide.constexprs)["STAGE_OUT"]
    assert wide.stages == dict(wide.constexprs)["STAGES"] <= wide.config.stages
    f32 = make(problem(out_channels=819, out_dtype="float32"), "fwd_box")
    assert not dict(f32.constexprs)["STAGE_OUT"] and f32.stages == f32.config.stages


def test_wide_tiles_take_their_own_box_widths():
    narrow_image = problem(in_channels=64, out_channels=512, input_size=(12, 6))
    p = make(narrow_image, "fwd_box")
    assert p.config.block_n == 256 and p.x_map.block[2] in TAB.box_widths_for(256) and p.x_map.block[2] >= 16
    small = make(problem(in_channels=64, out_channels=64, input_size=(12, 6)), "fwd_box")
    assert small.x_map.block[1:3] == (16, 8)


def test_data_gradient_plan():
    p = problem(in_channels=40, out_channels=72, stride=2, input_size=(13, 12)).with_direction("bwd_data")
    dplan = plan.make_bwd_data_plan(p, "bwd_data_gather", configs.select(TAB, "fwd_gather", p), TAB)
    assert len(dplan.phases) == 4 and not dplan.zero_phases
    h, w, c = 13, 12, 40
    for phase in dplan.phases:
        s = dict(phase.plan.scalars)
        assert (s["H"], s["W"], s["C_G"], s["K_G"]) == (7, 6, 72, 40)  # dy in, dx's channels out
        assert (s["STRIDE_H"], s["STRIDE_W"]) == (1, 1)
        assert (s["sy_n"], s["sy_h"], s["sy_w"], s["Y_CHANNELS"]) == (h * w, 2 * w, 2, c)  # strides in pixels
        assert s["TAPS"] == len(phase.taps_h) * len(phase.taps_w)
        assert phase.plan.weight.rows == c and phase.plan.weight.c_pad % phase.plan.config.block_k == 0
        assert phase.plan.kernel == "bwd_data_gather"
    assert sorted(dict(ph.plan.scalars)["Y_START"] for ph in dplan.phases) == [0, 1, w, w + 1]
    assert sum(len(ph.taps_h) * len(ph.taps_w) for ph in dplan.phases) == 9  # each tap once
    assert dplan.workspace_bytes == sum(ph.plan.weight.numel for ph in dplan.phases) * 2
    with pytest.raises(ValueError, match="unknown bwd_data kernel"):
        plan.make_bwd_data_plan(p, "fwd_gather", configs.select(TAB, "fwd_gather", p), TAB)


# ---- the weight gradient ---------------------------------------------------------------------------------------


def wgrad(p: ConvProblem, kernel: str, **kw) -> plan.WeightGradPlan:
    return plan.make_bwd_weight_plan(p, kernel, configs.select(TAB, REGISTRY.family_of(kernel), p), TAB, **kw)


def test_weight_gradient_scalars_and_descriptors():
    p = problem(batch=3, in_channels=32, out_channels=48, groups=2, input_size=(11, 9), filter_size=(3, 5),
                stride=(2, 1), padding=((1, 0), (2, 2)), dilation=(1, 2)).with_direction("bwd_weight")
    wp = wgrad(p, "bwd_weight_gather")
    s, c = dict(wp.scalars), dict(wp.constexprs)
    (oh, ow) = p.output_size
    assert (s["J"], s["P"], s["Q"], s["H"], s["W"]) == (3 * oh * ow, oh, ow, 11, 9)
    assert (s["C_G"], s["K_G"], s["S"], s["TAPS"], s["GROUPS"]) == (16, 24, 5, 15, 2)
    assert (s["STRIDE_H"], s["STRIDE_W"], s["PAD_H"], s["PAD_W"], s["DIL_H"], s["DIL_W"]) == (2, 1, 1, 2, 1, 2)
    assert (s["sx_n"], s["sx_h"], s["sx_w"]) == (11 * 9 * 32, 9 * 32, 32)
    bm, bn, bk = wp.config.block_m, wp.config.block_n, wp.config.block_k
    assert (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]) == (bm, bn, bk) and c["X_MODE"] == A_MODES["cp_async"]
    assert s["STEPS"] == -(-3 * oh * ow // bk) and s["NUM_UNITS"] == wp.grid.num_units
    assert s["NUM_UNITS"] == s["TILES_M"] * s["TILES_N"] * 2 * 15 * wp.splits
    assert wp.dy_map == plan.TensorMap((3 * oh * ow, 48), (48, 1), (bk, bm)) and wp.x_map is None
    assert (c["PRODUCER_WARPS"], c["PRODUCER_REGS"]) == (4, TAB.weight_grad.producers["cp_async"].regs)


def test_weight_gradient_writes_dw_or_padded_partials():
    """One split: the units store dW itself (rows of TAPS x C_G); several: float32 slices whose taps are padded
    to 16 channels (vector stores), SPLIT_STRIDE apart."""
    p = problem(in_channels=40, out_channels=24).with_direction("bwd_weight")
    whole = wgrad(p, "bwd_weight_gather")
    s = dict(whole.scalars)
    assert whole.splits == 1 and (s["OUT_TAP"], s["OUT_ROW"]) == (40, 9 * 40) and whole.workspace_bytes == 0
    # 16-bit dW of 40 channels (80-byte tap rows): stored by TMA, [1, K, taps, C_G] clipped at C_G and K
    assert dict(whole.constexprs)["TMA_STORE"] and not dict(whole.constexprs)["STAGE_OUT"]
    bm, bn = whole.config.block_m, whole.config.block_n
    assert whole.out_map == plan.TensorMap((1, 24, 9, 40), (24 * 9 * 40, 9 * 40, 40, 1), (1, bm, 1, bn))
    odd = wgrad(problem(in_channels=36, out_channels=24).with_direction("bwd_weight"), "bwd_weight_gather")
    assert dict(odd.constexprs)["STAGE_OUT"] and odd.out_map is None  # 72-byte tap rows: staged, no TMA
    grouped = wgrad(problem(in_channels=48, out_channels=48, groups=2).with_direction("bwd_weight"),
                    "bwd_weight_gather")
    assert grouped.out_map is None  # 24 output channels per group: a tile would reach into the next group
    split = wgrad(p, "bwd_weight_gather", split_steps=1)
    s = dict(split.scalars)
    assert split.splits == s["STEPS"] > 1 and split.c_pad == 48
    assert (s["OUT_TAP"], s["OUT_ROW"], s["SPLIT_STRIDE"]) == (48, 9 * 48, 24 * 9 * 48)
    assert not dict(split.constexprs)["STAGE_OUT"] and split.workspace_bytes == split.splits * 24 * 9 * 48 * 4
    assert split.out_map == plan.TensorMap((split.splits, 24, 9, 48), (24 * 9 * 48, 9 * 48, 48, 1), (1, bm, 1, bn))
    assert split.sum_scalars == dict(NUMEL=24 * 40 * 9, C_G=40, C_PAD=48, SPLITS=split.splits,
                                     SPLIT_STRIDE=24 * 9 * 48)
    assert split.reduce.programs == -(-24 * 40 * 9 // TAB.weight_grad.reduce_block)


def test_weight_gradient_boxes():
    p = problem(in_channels=40, out_channels=36, input_size=(20, 33)).with_direction("bwd_weight")
    wp = wgrad(p, "bwd_weight_box")
    c, s = dict(wp.constexprs), dict(wp.scalars)
    bh, bw = c["BOX_H"], c["BOX_W"]
    assert wp.x_mode == "tma_box" and bh * bw == wp.config.block_k
    assert wp.dy_channels == 40 and wp.dy_map.shape == (2, 20, 33, 40)  # 36 channels padded to 16-byte rows
    assert wp.dy_map.block == (1, bh, bw, wp.config.block_m)
    assert wp.x_map.shape == (2, 20, 33, 40) and wp.x_map.block == (1, bh, bw, wp.config.block_n)
    assert s["TILES_IMG"] == -(-20 // bh) * s["TILES_Q"] and s["STEPS"] == 2 * s["TILES_IMG"]
    for tmap in (wp.dy_map, wp.x_map):
        assert tmap.strides[-1] == 1 and all(st * 2 % 16 == 0 for st in tmap.strides[:-1])
        assert all(b <= 256 for b in tmap.block)
    assert wp.dy_copy_bytes == 2 * 20 * 33 * 40 * 2
    with pytest.raises(ValueError, match="bwd_weight_box cannot run"):
        wgrad(problem(stride=2).with_direction("bwd_weight"), "bwd_weight_box")
    with pytest.raises(ValueError, match="unknown bwd_weight kernel"):
        plan.make_bwd_weight_plan(p, "fwd_gather", configs.select(TAB, "fwd_gather", p), TAB)


def test_weight_gradient_split_follows_the_table():
    """Splits fill the SMs where the (group, tap, tile) units are few, stay within the workspace bound, and
    vanish where there are units enough or too few k-steps."""
    big = problem(batch=2, in_channels=256, out_channels=256, input_size=(100, 100)).with_direction("bwd_weight")
    wp = wgrad(big, "bwd_weight_gather")
    assert wp.grid.base_units == 36 and wp.splits > 1 and wp.grid.num_units >= 100
    assert wp.partial_bytes <= TAB.weight_grad.max_workspace_bytes
    assert wp.grid.split_steps >= TAB.weight_grad.min_split_steps
    many = problem(batch=1, in_channels=512, out_channels=2048, input_size=(32, 32)).with_direction("bwd_weight")
    assert wgrad(many, "bwd_weight_gather").splits == 1  # 2304 units: waves enough
    tiny = problem(batch=1, input_size=(8, 8)).with_direction("bwd_weight")
    assert wgrad(tiny, "bwd_weight_gather").splits == 1  # one k-step
    config = configs.select(TAB, "bwd_weight_gather", big)
    for numel, splits in ((1 << 20, 64), (1 << 24, 4), (1 << 27, 1)):  # partials of 4, 64, 512 MiB: 256 MiB bound
        costs = plan.split_costs(config, TAB, "bwd_weight_gather", numel)
        assert costs.max_splits == min(TAB.weight_grad.max_splits, splits)


def test_weight_gradient_specialization():
    from conv_gluon.kernels.bwd_weight import conv_bwd_weight, sum_splits

    p = problem(batch=32, input_size=(28, 28)).with_direction("bwd_weight")
    wp = wgrad(p, "bwd_weight_box")
    assert wp.split
    dtypes = launch.role_dtypes(p, wp)
    assert dtypes == {"dy_desc": "bfloat16", "x": "bfloat16", "out_ptr": "float32", "out_desc": "float32"}
    signature, consts, attrs = specialization.plan_specialization(wp, conv_bwd_weight, dtypes,
                                                                  lambda tmap, dtype: f"desc{tmap.block}")
    names = conv_bwd_weight.arg_names
    assert signature["dy_desc"] == f"desc{wp.dy_map.block}" and signature["x"] == f"desc{wp.x_map.block}"
    assert signature["out_desc"] == f"desc{wp.out_map.block}" and consts["TMA_STORE"] is True
    assert signature["out_ptr"] == "*fp32" and (names.index("out_ptr"),) in attrs
    assert consts["STRIDE_H"] == 1 and consts["GROUPS"] == 1 and set(signature) == set(names)
    sig, consts, _ = specialization.sum_specialization(wp, sum_splits)
    assert sig["ws_ptr"] == "*fp32" and sig["out_ptr"] == "*bf16" and consts["BLOCK"] == wp.reduce.block
    assert launch.role_dtypes(p) == {"dy_desc": "bfloat16", "x": "bfloat16", "out_ptr": "bfloat16",
                                   "out_desc": "bfloat16"}


def test_weight_gradient_int32_issue():
    # dy: 55e6 pixels x 36 channels fits; padded to 40 channels it does not
    p = problem(batch=896, in_channels=8, out_channels=36, input_size=(256, 240)).with_direction("bwd_weight")
    assert "the padded output gradient has" in plan.int32_issue(p)
    assert plan.int32_issue(problem().with_direction("bwd_weight")) is None
