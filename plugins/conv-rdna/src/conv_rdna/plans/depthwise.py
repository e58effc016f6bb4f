"""Plans of the depthwise stencils (kernels/depthwise.py: ``groups == in_channels``, any multiplier).

The table's blocks are fitted to the problem, never grown: a pixel block keeps its pixel count but takes the
image's shape (8x16 on a 7x7 map becomes 8x8, on a 1D row 1x128; SLIDE x narrower where the kernel cannot
slide along W), and channel / tap / pixel blocks shrink to the next power of two of what there is. The kernel
id names the table's configuration.
"""

from __future__ import annotations

import dataclasses
import math

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS, interpreting
from conv_core.problem import ConvProblem

from ..configs import ArchTable, depthwise_split_count
from ..kernels.depthwise import conv_dw_bwd_data, conv_dw_bwd_weight, conv_dw_fwd
from .common import (Plan, cdiv, depth_scalars, epilogue, named, pow2_at_least, reduce_launch, strides_ncdhw,
                     tap_steps, tiled_launch)


def fit_pixel_block(block_h: int, block_w: int, rows: int, cols: int) -> tuple[int, int]:
    """``(BLOCK_H, BLOCK_W)`` of at most ``block_h * block_w`` pixels for a ``rows x cols`` image."""
    pixels = block_h * block_w
    bw = min(block_w, pow2_at_least(cols))
    bh = min(pixels // bw, pow2_at_least(rows))
    return bh, min(pixels // bh, pow2_at_least(cols))


def _depthwise_scalars(problem: ConvProblem, g: Geometry) -> dict:
    return dict(BATCH=g.batch, C=problem.in_channels, H=g.h, W=g.w, K=problem.out_channels, P=g.p, Q=g.q, R=g.r,
                S=g.s, MULT=g.cout, STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                DIL_H=g.dil[0], DIL_W=g.dil[1], **depth_scalars(g))


def _depthwise_weight_strides(problem: ConvProblem) -> dict:
    swk, _, swt, swr, sws = strides_ncdhw(problem.weight_shape, problem.layout)  # one input channel per filter
    return dict(swk=swk, swt=swt, swr=swr, sws=sws)


def pixel_alignment(*strides: tuple[int, ...]) -> int:
    """Largest power of two, at most 16, dividing every pixel stride (batch, depth, height, width) given."""
    g = math.gcd(16, *(s for ss in strides for s in (ss[0], *ss[2:])))
    return g & -g


def _stencil_constexprs(bh: int, bw: int, bc: int, slide: int, align: int) -> dict:
    return dict(BLOCK_H=bh, BLOCK_W=bw, BLOCK_C=bc, SLIDE=slide, ALIGN=align, INTERPRET=interpreting())


def depthwise_pixel_block(problem: ConvProblem, config, rows: int, cols: int) -> tuple[int, int, int]:
    """``(BLOCK_H, BLOCK_W, SLIDE)`` of a forward or data-gradient plan on a ``rows x cols`` pixel grid.

    The configuration's SLIDE where the kernel can slide along W (stride and dilation 1 along W; for the
    data gradient stride 1 along H too: one phase). Where it cannot, the block is half as wide, so that a
    thread holds half the accumulators of the sliding kernel (the SLIDE tiles it keeps in flight would
    otherwise all become accumulators). The block is then fitted to the grid (:func:`fit_pixel_block`).
    """
    g = Geometry.of(problem)
    along_w = g.stride[1] == 1 and g.dil[1] == 1 and (problem.direction == "fwd"
                                                       or (g.stride[0] == 1 and g.stride_d == 1))
    slide = config.slide if along_w else 1
    bh, bw = fit_pixel_block(config.block_h, config.block_w // (2 if slide < config.slide else 1), rows, cols)
    return bh, bw, slide if bw >= slide else 1


def depthwise_fwd(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c = problem.in_channels
    bh, bw, slide = depthwise_pixel_block(problem, config, g.p, g.q)
    bc = min(config.block_c, pow2_at_least(c))
    sx, sy = strides_ncdhw(problem.input_shape, problem.layout), strides_ncdhw(problem.output_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), **named("sx", sx), **_depthwise_weight_strides(problem),
               **named("sy", sy)}
    del scalars["S"]  # a constexpr here: the taps along W are unrolled
    grid = (cdiv(c, bc) * g.cout * cdiv(g.p, bh) * cdiv(g.q, bw) * g.od * g.batch,)  # g.cout: the multiplier
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {"S": g.s, **epilogue(problem), **_stencil_constexprs(bh, bw, bc, slide, pixel_alignment(sx, sy))}
    return Plan(kernel, config, 1, (tiled_launch(conv_dw_fwd, grid, pointers, scalars, constexprs, config),))


def depthwise_bwd_data(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c = problem.in_channels
    # every phase gets the grid of the largest one
    d_ph, h_ph, w_ph = cdiv(g.d, g.stride_d), cdiv(g.h, g.stride[0]), cdiv(g.w, g.stride[1])
    bh, bw, slide = depthwise_pixel_block(problem, config, h_ph, w_ph)
    bc = min(config.block_c, pow2_at_least(c))
    sdy, sdx = strides_ncdhw(problem.output_shape, problem.layout), strides_ncdhw(problem.input_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), **tap_steps(g), "D_PH": d_ph, "H_PH": h_ph, "W_PH": w_ph,
               **named("sdy", sdy), **_depthwise_weight_strides(problem), **named("sdx", sdx)}
    del scalars["S"]  # a constexpr here: the taps along W are unrolled
    grid = (cdiv(c, bc) * cdiv(h_ph, bh) * cdiv(w_ph, bw) * g.batch * d_ph * g.stride_d * g.stride[0] * g.stride[1],)
    pointers = dict(dy_ptr="a", w_ptr="b", dx_ptr="out")
    constexprs = {"S": g.s, **_stencil_constexprs(bh, bw, bc, slide, pixel_alignment(sdy, sdx))}
    return Plan(kernel, config, 1, (tiled_launch(conv_dw_bwd_data, grid, pointers, scalars, constexprs, config),))


def depthwise_bwd_weight(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c, taps = problem.in_channels, g.taps
    fitted = dataclasses.replace(config, block_t=min(config.block_t, pow2_at_least(taps)),
                                 block_c=min(config.block_c, pow2_at_least(c)),
                                 block_w=min(config.block_w, pow2_at_least(g.q)))  # chunks within a row
    split = depthwise_split_count(tab, problem, fitted, INT32_ELEMENTS)
    rows = g.batch * g.od * g.p  # the splits are ranges of output rows (n, od, p)
    per_split = cdiv(rows, split)
    split = cdiv(rows, per_split)  # no empty ranges
    numel = math.prod(problem.weight_shape)
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    so_k, _, so_t, so_r, so_s = strides_ncdhw(problem.weight_shape, problem.layout)  # workspace: laid out like dw
    sx, sdy = strides_ncdhw(problem.input_shape, problem.layout), strides_ncdhw(problem.output_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), "ROWS_PER_SPLIT": per_split, **named("sx", sx), **named("sdy", sdy),
               "so_split": numel if workspace else 0, "so_k": so_k, "so_t": so_t, "so_r": so_r, "so_s": so_s}
    grid = (cdiv(taps, fitted.block_t) * cdiv(c, fitted.block_c) * g.cout * split,)
    constexprs = dict(BLOCK_T=fitted.block_t, BLOCK_W=fitted.block_w, BLOCK_C=fitted.block_c,
                      ALIGN=pixel_alignment(sx, sdy), INTERPRET=interpreting())
    launches = [tiled_launch(conv_dw_bwd_weight, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs,
                        config)]
    if workspace:  # sum the partials in split order, cast to the result
        launches.append(reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)
