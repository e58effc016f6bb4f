"""Plan of ``bwd_data_shuffle`` (kernels/shuffle.py): the data gradient of a layer whose filter equals its stride
(the transposed convolution of a UNet up-convolution) as one GEMM over ``dy``'s pixels, ``N`` = taps x channels,
stored through a pixel shuffle, with a transposed convolution's bias and activation where the problem has them."""

from __future__ import annotations

import dataclasses

from conv_core.geometry import Geometry
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig
from ..kernels.shuffle import conv_shuffle_bwd_data
from .common import (Plan, cdiv, depth_scalars, epilogue, named, row_vector, strides_ncdhw, tile_constexprs,
                     tiled_launch, weight_scalars)


KERNEL = "bwd_data_shuffle"


def gemm_view(g: Geometry) -> dict[str, int]:
    """The kernel's GEMM (as :func:`conv_rdna.configs.gemm_view` gives a family's): rows ``dy``'s pixels, columns
    taps x channels, the reduction ``dy``'s channels."""
    return {"m": g.batch * g.od * g.p * g.q, "n": g.taps * g.cin, "red": g.cout}


def filter_is_stride(problem: ConvProblem) -> bool:
    """Whether every tap of ``dx`` comes from one ``dy`` pixel: filter size = stride on every axis (not all 1),
    undilated."""
    return (tuple(problem.filter_size) == tuple(problem.stride) and any(s > 1 for s in problem.stride)
            and all(d == 1 for d in problem.dilation))


def uncovered(g: Geometry) -> bool:
    """Whether some element of ``dx`` lies past the last window on some axis (no tap writes it)."""
    return g.d > g.od * g.t - g.pad_d or g.h > g.p * g.r - g.pad[0] or g.w > g.q * g.s - g.pad[1]


#: Most tile elements per warp of a channels-first shuffle, and of a shuffle with a transposed convolution's
#: epilogue in either layout: a channels-first tile's stores scatter element by element, each with an address of
#: its own (a 128 x 64 tile on 4 warps spilled on gfx1201, 256 VGPRs), and an activation needs registers of its own
#: (128 x 128 tiles on 8 warps with gelu spilled on gfx1100 and gfx1201). Such tiles get more warps, then fewer
#: columns.
ELEMENTS_PER_WARP = 1024


def fitted(config: TileConfig, layout: str, fused: bool = False) -> TileConfig:
    """``config`` within :data:`ELEMENTS_PER_WARP` where that applies (channels-first, or ``fused`` with an
    epilogue): up to 8 warps, then, with an epilogue, narrower."""
    if layout != "channels_first" and not fused:
        return config
    warps, block_n = config.num_warps, config.block_n
    while config.block_m * block_n > ELEMENTS_PER_WARP * warps and warps < 8:
        warps *= 2
    while fused and config.block_m * block_n > ELEMENTS_PER_WARP * warps and block_n > 16:
        block_n //= 2
    if (warps, block_n) == (config.num_warps, config.block_n):
        return config
    return dataclasses.replace(config, num_warps=warps, block_n=block_n)


def shuffle_bwd_data(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    config = fitted(config, problem.layout, problem.transposed_epilogue)
    depth = depth_scalars(g)
    scalars = dict(BATCH=g.batch, OD=g.od, P=g.p, Q=g.q, K_G=g.cout, C_G=g.cin, D=g.d, H=g.h, W=g.w,
                   PAD_D1=depth["PAD_D1"], PAD_H=g.pad[0], PAD_W=g.pad[1],
                   **named("sdy", strides_ncdhw(problem.output_shape, problem.layout)), **weight_scalars(problem),
                   **named("sdx", strides_ncdhw(problem.input_shape, problem.layout)))
    view = gemm_view(g)
    grid = (cdiv(view["m"], config.block_m) * cdiv(view["n"], config.block_n), g.groups)
    pointers = dict(dy_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", dx_ptr="out")
    constexprs = {"TD": g.t, "R": g.r, "S": g.s, **epilogue(problem), **tile_constexprs(config),
                  "GROUP_M": config.group_m, "ROW_VEC": row_vector(problem.layout, g.q)}
    launch = tiled_launch(conv_shuffle_bwd_data, grid, pointers, scalars, constexprs, config)
    return Plan(kernel, config, 1, (launch,), zero="out" if uncovered(g) else None)
