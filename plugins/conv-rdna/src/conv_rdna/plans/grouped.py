"""Plans of the grouped kernels (kernels/grouped.py): tiles of ``GROUPS_PER_TILE`` groups of 2 to 64 channels.

The table's configuration is the tile: ``BLOCK_N`` columns (produced channels) and ``BLOCK_K`` reduction lanes
(reduced channels) for the forward and the data gradient, ``BLOCK_M`` output x ``BLOCK_N`` input channels for the
weight gradient. A tile takes as many whole groups as both widths hold (:func:`groups_per_tile`); a group wider than
the tile is not run (the tables' buckets bound the channels per group, so that this never happens to a problem
the registry offers)."""

from __future__ import annotations

import math

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig
from ..kernels.grouped import conv_bwd_weight_grouped_partial, conv_fwd_grouped
from .common import (Plan, bwd_data_phases, bwd_data_zeros, cdiv, conv_scalars, divisors, epilogue,
                     flipped_weight, forward_weight, named, phase_output, pixel_ranges, reduce_launch, row_vector,
                     strides_nchw, tile_constexprs, tiled_launch)

#: Channels per group the kernels take, in and out (fewer: depthwise or one channel; more: the general kernels).
MIN_CHANNELS, MAX_CHANNELS = 2, 64


def groups_per_tile(groups: int, produced: int, reduced: int, width: int, depth: int) -> int:
    """Whole groups of ``produced`` and ``reduced`` channels a tile ``width`` columns wide and ``depth`` lanes
    deep holds (at most the layer's ``groups``); ValueError where one group does not fit."""
    if produced > width or reduced > depth:
        raise ValueError(f"a group of {produced} x {reduced} channels does not fit a {width} x {depth} tile")
    return min(width // produced, depth // reduced, groups)


def forward_launch(problem: ConvProblem, config: TileConfig, g: Geometry, weight: dict, output: dict):
    """``conv_fwd_grouped`` over geometry ``g`` (the problem's forward convolution, or a stride phase of its data
    gradient on ``dy``) with the weight's and the result's scalar arguments ``weight`` and ``output``."""
    per_tile = groups_per_tile(g.groups, g.cout, g.cin, config.block_n, config.block_k)
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**conv_scalars(g), "GROUPS": g.groups, **named("sx", sx), **weight, **output}
    grid = (cdiv(g.batch * g.p * g.q, config.block_m), cdiv(g.groups, per_tile))
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**epilogue(problem), **tile_constexprs(config), "GROUPS_PER_TILE": per_tile,
                  "GROUP_M": config.group_m, "ROW_VEC": row_vector(problem.layout, g.q)}
    return tiled_launch(conv_fwd_grouped, grid, pointers, scalars, constexprs, config)


def grouped(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The forward convolution, or the data gradient: one forward launch on ``dy`` per stride phase of ``dx`` that
    has taps, with the weight transposed and flipped by strides (``dx`` zeroed first where a phase has none)."""
    g = Geometry.of(problem)
    if problem.direction == "fwd":
        launch = forward_launch(problem, config, g, forward_weight(problem), phase_output(problem))
        return Plan(kernel, config, 1, (launch,))
    phases = bwd_data_phases(g, leave_zeros=True)
    assert phases, "the data gradient has no stride phases to run as forward convolutions"
    launches = tuple(forward_launch(problem, config, phase.geometry(g), flipped_weight(problem, phase),
                                    phase_output(problem, phase.first, g.stride)) for phase in phases)
    return Plan(kernel, config, 1, launches, zero="out" if bwd_data_zeros(g) else None)


def grouped_bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``[G_T * K_G, G_T * C_G]`` tiles of one tap, the batch's pixels split by the table's ``split`` rule into ranges
    written to a float32 workspace and summed in order (one range: straight into ``dw``)."""
    g = Geometry.of(problem)
    per_tile = groups_per_tile(g.groups, g.cout, g.cin, config.block_m, config.block_n)
    tiles = g.r * g.s * cdiv(g.groups, per_tile)
    numel = math.prod(problem.weight_shape)
    pixels = g.batch * g.p * g.q
    splits = tab.split.count(tiles, cdiv(pixels, config.block_k), INT32_ELEMENTS // numel, 65535)
    per_split, split = pixel_ranges(pixels, config.block_k, splits)
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    sx = strides_nchw(problem.input_shape, problem.layout)
    sdy = strides_nchw(problem.output_shape, problem.layout)
    so = strides_nchw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**conv_scalars(g), "GROUPS": g.groups, "PIX_PER_SPLIT": per_split, **divisors(P=g.p, Q=g.q),
               **named("sx", sx), **named("sdy", sdy), "so_split": numel if target == "workspace" else 0,
               **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    constexprs = {"CHANNELS_LAST": problem.layout == "channels_last", **tile_constexprs(config),
                  "GROUPS_PER_TILE": per_tile, "ROW_VEC": row_vector(problem.layout, g.q)}
    launches = [tiled_launch(conv_bwd_weight_grouped_partial, (tiles, split),
                             dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs, config)]
    if target == "workspace":  # sum the partials in split order, cast to the result
        launches.append(reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)

