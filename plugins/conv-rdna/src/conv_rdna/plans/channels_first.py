"""Plans of the channels-first kernels (kernels/channels_first.py): pixel tiles of one image loading along W;
the forward, the data gradient (the same kernel on ``dy`` with the flipped weight, a launch per stride phase)
and the weight gradient."""

from __future__ import annotations

import math

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.kit.launch import Launch
from conv_core.kit.phases import Phase
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig, split_count
from ..kernels.channels_first import conv_bwd_weight_cf, conv_fwd_cf
from .common import (COMPILER_DIVISIBILITY, Plan, bwd_data_phases, bwd_data_zeros, cdiv, conv_scalars, divisors,
                     epilogue, flipped_weight, forward_weight, named, phase_output, pixel_ranges, pixel_vector,
                     reduce_launch, row_vector, strides_nchw, tile_constexprs, tiled_launch)


def flat_pixels(g: Geometry) -> bool:
    """Whether output pixel ``p*Q + q`` reads input pixel ``p*W + q`` plus a per-tap constant (stride 1 and
    rows of equal length): the channels-first kernels' ``FLAT`` addressing."""
    return g.stride == (1, 1) and g.q == g.w


def inside_pixels(g: Geometry) -> bool:
    """Whether every tap of every output pixel reads inside the image (no padding on either side), with
    :func:`flat_pixels` addressing: the channels-first kernels' ``INSIDE``, which drops the tap bounds."""
    reach_h, reach_w = g.p + g.dil[0] * (g.r - 1), g.q + g.dil[1] * (g.s - 1)
    return flat_pixels(g) and g.pad == (0, 0) and reach_h <= g.h and reach_w <= g.w


def pipelined_pixels(tab: ArchTable, g: Geometry, every_tap: bool) -> bool:
    """Whether a channels-first kernel runs its plain reduction loop, which the compiler pipelines with
    asynchronous copies, rather than its register prefetch: on architectures that have the copies (the
    table's ``channels_first_async_copies``), where its pixel loads are aligned vectors the compiler can see
    by itself (an image's pixel count a multiple of :data:`COMPILER_DIVISIBILITY`: the pipeliner drops the
    kernels' ``PIX_VEC`` hints, and a load it cannot copy falls back to single elements), at ``every_tap``
    (the weight gradient's ``dy``, whose pixels are the tile's own) or else where no tap shifts them
    (:func:`inside_pixels`: the forward's input). Where only the forward's weight tile could be copied, the
    prefetch loop is the faster (H100: docs/benchmarks/2026-11-21-h100-rdna-11.md)."""
    aligned = every_tap or inside_pixels(g)
    return tab.channels_first_async_copies and aligned and (g.p * g.q) % COMPILER_DIVISIBILITY == 0


#: Repacked weights (:attr:`Plan.weight_form`): ``[R, S, reduced channels per group, produced channels]``,
#: the produced channels contiguous. ``"taps_outer"`` is the forward's (reduced: input channels); for the
#: data gradient as a forward convolution of ``dy``, ``"taps_outer_flipped"`` transposes the channels and
#: flips the taps.
WEIGHT_FORMS = ("taps_outer", "taps_outer_flipped")


def packed_weight(problem: ConvProblem, phase: Phase | None = None) -> dict:
    """The weight as ``conv_fwd_cf`` reads a :data:`WEIGHT_FORMS` copy of it: the forward's, or (``phase``)
    the flipped copy for that stride phase of the data gradient (:func:`~.common.bwd_data_phases`). The phase's
    tap ``t`` is the weight's ``taps[0] - tap_step*t`` (:func:`~.common.flipped_weight`), which in the copy, whose
    taps run backwards, is ``R-1-taps[0] + tap_step*t``: an offset and positive strides."""
    g = Geometry.of(problem)
    produced, reduced = (g.cin, g.cout) if phase else (g.cout, g.cin)
    sws = reduced * produced * g.groups
    weight = dict(W_OFF=0, swg=produced, swo=1, swi=produced * g.groups, swr=g.s * sws, sws=sws)
    if phase is None:
        return weight
    rows, cols = phase.rows, phase.cols
    first = (g.r - 1 - rows.taps[0]) * weight["swr"] + (g.s - 1 - cols.taps[0]) * sws
    return {**weight, "W_OFF": first, "swr": rows.tap_step * weight["swr"], "sws": cols.tap_step * sws}


def _cf_forward_launch(problem: ConvProblem, config: TileConfig, tab: ArchTable, g: Geometry, weight: dict,
                       first=(0, 0), step=(1, 1)) -> Launch:
    """``conv_fwd_cf`` over geometry ``g`` (operand ``a`` -> the result): the problem's forward convolution, or
    a stride phase of its data gradient on ``dy``, writing every ``step``-th pixel of the result from ``first``."""
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    output = phase_output(problem, first, step)
    scalars = {**conv_scalars(g), "PQ": g.p * g.q, **named("sx", sx), **weight, **output}
    grid = (g.batch * cdiv(g.p * g.q, config.block_m) * cdiv(g.cout, config.block_n), g.groups)
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {"FLAT": flat_pixels(g), "INSIDE": inside_pixels(g),
                  "PIX_VEC": pixel_vector(g.p * g.q, sx[0], sx[1], output["syn"], output["syc"]),
                  "DENSE_Y": step == (1, 1), "PIPELINED": pipelined_pixels(tab, g, every_tap=False),
                  **epilogue(problem), **tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.p * g.q)}
    return tiled_launch(conv_fwd_cf, grid, pointers, scalars, constexprs, config)


def implicit_gemm_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """With more than one tap a step's weight tile, read from the weight as it is, would be a gather: its
    reduced channels lie ``R*S`` elements apart and its produced ones further, a 32-byte sector for each
    element. Those plans read a repacked copy (:data:`WEIGHT_FORMS`; cached per weight version), whose
    tile rows are contiguous runs of produced channels."""
    g = Geometry.of(problem)
    packed = g.r * g.s > 1
    weight = packed_weight(problem) if packed else forward_weight(problem)
    return Plan(kernel, config, 1, (_cf_forward_launch(problem, config, tab, g, weight),),
                weight_form=WEIGHT_FORMS[0] if packed else "")


def bwd_data_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """One ``conv_fwd_cf`` launch per stride phase of ``dx`` that has taps (:func:`bwd_data_phases`: offered where
    it has some), on the flipped copy of the weight where it has several taps (as :func:`implicit_gemm_cf`).
    Where some phases have none (:func:`bwd_data_zeros`), ``dx`` is zeroed first: one fill at the copy rate,
    where a launch per such phase would write every stride-th element, a fraction of each memory sector."""
    g = Geometry.of(problem)
    phases = bwd_data_phases(g, leave_zeros=True)
    assert phases, "the data gradient has no stride phases to run as forward convolutions"
    packed = g.r * g.s > 1
    launches = tuple(_cf_forward_launch(problem, config, tab, phase.geometry(g),
                                        packed_weight(problem, phase) if packed else flipped_weight(problem, phase),
                                        phase.first, g.stride) for phase in phases)
    return Plan(kernel, config, 1, launches, zero="out" if bwd_data_zeros(g) else None,
                weight_form=WEIGHT_FORMS[1] if packed else "")


def bwd_weight_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    numel = math.prod(problem.weight_shape)
    blocks = g.batch * cdiv(g.p * g.q, config.block_k)  # pixel blocks never straddle two images
    per_split, split = pixel_ranges(blocks, 1, split_count(tab, problem, config, INT32_ELEMENTS))
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    sdyn, sdyc, _, sdyw = strides_nchw(problem.output_shape, problem.layout)
    so = strides_nchw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**conv_scalars(g), "BLOCKS_PER_SPLIT": per_split, "PQ": g.p * g.q, **divisors(Q=g.q),
               **named("sx", strides_nchw(problem.input_shape, problem.layout)),
               "sdyn": sdyn, "sdyc": sdyc, "sdyw": sdyw, "so_split": numel if workspace else 0,
               **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    grid = (cdiv(g.cout, config.block_m) * cdiv(g.cin, config.block_n) * g.r * g.s, g.groups, split)
    pix_vec = pixel_vector(g.p * g.q, *(scalars[name] for name in ("sxn", "sxc", "sdyn", "sdyc")))
    constexprs = {"FLAT": flat_pixels(g), "INSIDE": inside_pixels(g), "PIX_VEC": pix_vec,
                  "PIPELINED": pipelined_pixels(tab, g, every_tap=True), **tile_constexprs(config),
                  "ROW_VEC": row_vector(problem.layout, g.p * g.q)}
    launches = [tiled_launch(conv_bwd_weight_cf, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs,
                        config)]
    if workspace:
        launches.append(reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)


