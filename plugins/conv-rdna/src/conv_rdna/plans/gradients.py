"""Plans of the general data and weight gradients: ``bwd_data_phased`` (kernels/bwd_data.py: every stride phase
of ``dx`` in one launch) and ``bwd_weight_split`` / ``bwd_weight_atomic`` (kernels/bwd_weight.py: one tap per
tile, the pixels split into ranges summed in order, or by float32 atomics)."""

from __future__ import annotations

import math

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig, split_count
from ..kernels.bwd_data import conv_bwd_data_phased
from ..kernels.bwd_weight import conv_bwd_weight_partial
from .common import (Plan, cdiv, conv_scalars, depth_scalars, divisors, named, pixel_ranges, reduce_launch,
                     row_vector, strides_ncdhw, tap_steps, tile_constexprs, tiled_launch, weight_scalars)


def bwd_data_phased(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    sdy = strides_ncdhw(problem.output_shape, problem.layout)
    sdx = strides_ncdhw(problem.input_shape, problem.layout)
    d_ph, h_ph, w_ph = cdiv(g.d, g.stride_d), cdiv(g.h, g.stride[0]), cdiv(g.w, g.stride[1])
    scalars = {**conv_scalars(g), **depth_scalars(g), **tap_steps(g), "D_PH": d_ph, "H_PH": h_ph, "W_PH": w_ph,
               **named("sdy", sdy), **weight_scalars(problem), **named("sdx", sdx)}
    grid = (cdiv(g.batch * d_ph * h_ph * w_ph, config.block_m) * cdiv(g.cin, config.block_n),
            g.groups * g.stride_d * g.stride[0] * g.stride[1])
    pointers = dict(dy_ptr="a", w_ptr="b", dx_ptr="out")
    constexprs = {**tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, w_ph, g.w)}
    return Plan(kernel, config, 1, (tiled_launch(conv_bwd_data_phased, grid, pointers, scalars, constexprs, config),))


def bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    atomic = kernel == "bwd_weight_atomic"
    numel = math.prod(problem.weight_shape)
    per_split, split = pixel_ranges(g.pixels, config.block_k,
                                    split_count(tab, problem, config, INT32_ELEMENTS))

    # Where the partial kernel writes, and what follows it.
    float32_result = problem.result_dtype == "float32"
    if atomic:
        target, workspace, zero = ("out", 0, "out") if float32_result else ("workspace", numel, "workspace")
    else:
        target, workspace, zero = ("out", 0, None) if split == 1 else ("workspace", split * numel, None)
    sx = strides_ncdhw(problem.input_shape, problem.layout)
    sdy = strides_ncdhw(problem.output_shape, problem.layout)
    so = strides_ncdhw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**conv_scalars(g), **depth_scalars(g), "PIX_PER_SPLIT": per_split, **divisors(P=g.p, Q=g.q),
               **named("sx", sx), **named("sdy", sdy),
               "so_split": numel if (target == "workspace" and not atomic) else 0,
               **dict(zip(("so_k", "so_c", "so_t", "so_r", "so_s"), so))}
    grid = (cdiv(g.cout, config.block_m) * cdiv(g.cin, config.block_n) * g.taps, g.groups, split)
    constexprs = {"ATOMIC": atomic, "CHANNELS_LAST": problem.layout == "channels_last", **tile_constexprs(config),
                  "ROW_VEC": row_vector(problem.layout, g.q)}
    launches = [tiled_launch(conv_bwd_weight_partial, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars,
                        constexprs, config)]
    if target == "workspace":  # sum the partials in split order (atomics: one buffer), cast to the result
        launches.append(reduce_launch(numel, 1 if atomic else split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace, zero)


