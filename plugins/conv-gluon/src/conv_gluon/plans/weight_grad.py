"""The weight gradient: units of (split, group, tap, tile) over ``kernels.bwd_weight.conv_bwd_weight``, their
float32 partials summed by a second stage (``sum_splits``) when the reduction is split."""

from __future__ import annotations

import math
from dataclasses import dataclass

from conv_core.arch import spec
from conv_core.geometry import Geometry
from conv_core.kit.launch import Launch, make_launch
from conv_core.problem import ConvProblem, element_size

from .. import tiling
from ..configs import ArchTable, TileConfig
from ..kernels.codes import A_MODES
from .common import (TMA_ALIGN, TensorMap, a_mode_of, check_kernel, dense_nhwc_strides, dy_channels,
                     dy_group_channels, rows_box, rows_of)

#: The units' tensor parameters, in the order their launch site keys them, and the role each takes: ``dy`` (as
#: read: in place or a padded copy), the input, and where the units write (``dW``, or the float32 partials).
POINTERS = {"dy_desc": "dy", "x": "a", "out_ptr": "target", "out_desc": "target"}

#: The second stage's: the float32 partials in, ``dW`` out.
SUM_POINTERS = {"ws_ptr": "target", "out_ptr": "out"}


@dataclass(frozen=True)
class SumLaunch:
    """The second stage (``kernels/bwd_weight.sum_splits``): ``programs`` programs of ``block`` elements."""

    block: int
    num_warps: int
    programs: int


@dataclass(frozen=True)
class WeightGradPlan:
    """Everything a weight-gradient candidate's ``run`` does: one launch of ``conv_bwd_weight`` and, when the
    reduction is split, one of ``sum_splits`` over the float32 partials."""

    kernel: str
    #: how the producer brings the x tile: ``cp_async``, ``registers`` or ``tma_box``
    x_mode: str
    config: TileConfig
    grid: tiling.WeightGradGrid
    scalars: tuple[tuple[str, int], ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    maxnreg: int
    dy_map: TensorMap
    x_map: TensorMap | None
    #: dy's row length as read (``dy_channels``): a padded copy when it differs from the output channels
    dy_channels: int
    out_channels: int
    pixels: int
    dtype: str
    result_dtype: str
    stages: int
    staging_bytes: int
    #: elements of dW
    numel: int
    #: elements of one float32 partial: dW with each tap's channels padded to ``c_pad``
    partial_numel: int
    c_pad: int
    reduce: SumLaunch
    #: the problem's geometry
    geometry: Geometry
    #: filter rows per unit: 1, or ``ROWS`` (``bwd_weight_rows_box``: units of a filter column)
    rows: int = 1
    #: pixels a ring stage holds beyond the dy and x tiles (units of a filter column: the second x box's)
    halo: int = 0
    #: the result's descriptor (``[splits, K, taps, OUT_TAP]``) where the epilogue stores by TMA
    out_map: TensorMap | None = None

    @property
    def a_mode(self) -> str:
        """The input's mode under the forward's name (what the compile checks read)."""
        return self.x_mode

    @property
    def config_name(self) -> str:
        return self.config.name

    @property
    def splits(self) -> int:
        return self.grid.splits

    @property
    def split(self) -> bool:
        """Whether the units write float32 partials (summed by the second stage) rather than ``dW`` itself."""
        return self.grid.splits > 1

    @property
    def partial_bytes(self) -> int:
        return self.splits * self.partial_numel * 4 if self.split else 0

    @property
    def dy_copy_bytes(self) -> int:
        if self.dy_channels == self.out_channels:
            return 0
        return self.pixels * self.dy_channels * element_size(self.dtype)

    @property
    def workspace_bytes(self) -> int:
        """Memory beyond the result, allocated per run: the float32 partials (split) and ``dy``'s padded copy."""
        return self.partial_bytes + self.dy_copy_bytes

    @property
    def tensor_maps(self) -> dict[str, TensorMap]:
        """The kernel's descriptor arguments (without ``out_desc`` the kernel gets ``out_ptr`` in its place)."""
        maps = {"dy_desc": self.dy_map, **({"x": self.x_map} if self.x_map is not None else {})}
        if self.out_map is not None:
            maps["out_desc"] = self.out_map
        return maps

    @property
    def shared_bound(self) -> int:
        """Upper bound of the kernel's shared memory (what the compile checks hold it to)."""
        c = self.config
        return tiling.shared_bytes(c.block_m, c.block_n, c.block_k, self.stages, element_size(self.dtype),
                                   self.staging_bytes, self.halo)

    @property
    def in_flight(self) -> int:
        """The ``wgmma`` groups the consumer leaves in flight while releasing the previous stage: one, or a
        filter column's step (three taps, one group per box row each)."""
        return 1 if self.rows == 1 else self.rows * dict(self.constexprs)["BOX_H"]

    @property
    def sum_scalars(self) -> dict[str, int]:
        """The integer arguments of the second stage (``kernels/bwd_weight.sum_splits``)."""
        return dict(NUMEL=self.numel, C_G=dict(self.scalars)["C_G"], C_PAD=self.c_pad, SPLITS=self.splits,
                    SPLIT_STRIDE=self.partial_numel)

    @property
    def launch(self) -> Launch:
        """The units' launch of ``conv_bwd_weight`` (imports Gluon): one program per unit, its pointers by role
        (:data:`POINTERS`), its descriptors' maps; a run puts it on its device's persistent grid."""
        from ..kernels.bwd_weight import conv_bwd_weight

        return make_launch(conv_bwd_weight, (self.grid.num_units,), POINTERS, dict(self.scalars),
                           dict(self.constexprs), self.num_warps, None, maxnreg=self.maxnreg,
                           descriptors=self.tensor_maps)

    @property
    def sum_launch(self) -> Launch | None:
        """The second stage's launch (``sum_splits``), when the reduction is split."""
        if not self.split:
            return None
        from ..kernels.bwd_weight import sum_splits

        return make_launch(sum_splits, (self.reduce.programs,), SUM_POINTERS, self.sum_scalars,
                           {"BLOCK": self.reduce.block}, self.reduce.num_warps, None)


#: The workspace pads each tap's channels to a multiple of this: 64-byte float32 rows, vector stores.
PARTIAL_CHANNEL_ALIGN = 16


def split_costs(config: TileConfig, tab: ArchTable, kernel: str, numel: int, rows: int = 1) -> tiling.SplitCosts:
    """The split's trade-offs (:class:`tiling.SplitCosts`) in k-step times of one program: a k-step is
    ``rows x 2 BLOCK_M BLOCK_N BLOCK_K`` flops at the kernel's share of one SM's matrix rate; a partial is
    ``numel`` float32 (the padded ``dW``) written and read back at its share of the copy rate; the workspace
    bound caps the splits."""
    arch, eff, limits = spec(tab.name), tab.efficiency[kernel], tab.weight_grad
    step_us = rows * 2 * config.block_m * config.block_n * config.block_k / (
        arch.matmul_tflops * 1e6 * eff["compute"] / tab.num_sms)
    partial_us = 2 * numel * 4 / (arch.copy_tbps * 1e6 * eff["memory"])
    max_splits = max(1, min(limits.max_splits, limits.max_workspace_bytes // (4 * numel)))
    return tiling.SplitCosts(tab.num_sms, limits.unit_overhead_steps, partial_us / step_us, arch.launch_us / step_us,
                             max_splits, limits.min_split_steps)


def make_bwd_weight_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable,
                         split_steps: int | None = None) -> WeightGradPlan:
    """The weight gradient of ``problem`` with ``bwd_weight_gather``, ``bwd_weight_box`` or
    ``bwd_weight_rows_box`` (units of a filter column: ``ROWS`` taps share each step's ``dy`` box and two
    stacked ``x`` boxes) and ``config``; ``split_steps`` (k-steps per split) overrides the table's choice (tests)."""
    check_kernel(problem, "bwd_weight", kernel, config, tab)
    g = Geometry.of(problem)
    x_mode = a_mode_of(kernel, g.cin, problem.dtype)
    producer = tab.weight_grad.producers[x_mode]
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    rows = rows_of(kernel)
    if rows > 1:
        box = rows_box(g, bk, tab.box_widths)
    else:
        box = tiling.box_shape(g.p, g.q, bk, tab.box_widths) if x_mode == "tma_box" else None
    steps, tiles_q, tiles_img = tiling.weight_grad_steps(g, bk, box)
    halo = bk if rows > 1 else 0  # a filter column's unit: a second x box per stage
    numel = math.prod(problem.weight_shape)
    c_pad = tiling.cdiv(g.cin, PARTIAL_CHANNEL_ALIGN) * PARTIAL_CHANNEL_ALIGN
    partial_numel = problem.out_channels * g.taps * c_pad
    tiles_m, tiles_n = tiling.cdiv(g.cout, bm), tiling.cdiv(g.cin, bn)
    unit_taps = g.r * g.s // rows  # per depth tap
    if split_steps is None:
        split_steps = tiling.choose_split_steps(tiles_m * tiles_n * g.groups * g.t * unit_taps, steps,
                                                split_costs(config, tab, kernel, partial_numel, rows))
    grid = tiling.WeightGradGrid(tiles_m, tiles_n, g.groups, g.t * unit_taps, steps, split_steps, tiles_q,
                                 tiles_img)
    out_size = element_size(problem.result_dtype) if grid.splits == 1 else 4
    out_tap = g.cin if grid.splits == 1 else c_pad  # dW itself, or a padded partial
    tma_store = weight_tma_store_issue(g, out_tap, out_size, bm) is None
    stage_out = not tma_store and not tiling.direct_store(g.cin, (g.taps * out_tap,), 0, out_size)
    staging = tiling.epilogue_bytes(bm, bn, out_size, tma_store, stage_out)
    stages = tiling.fitting_stages(bm, bn, bk, config.stages, element_size(problem.dtype), staging,
                                   spec(tab.name).shared_memory_bytes, halo)
    k_pad = dy_channels(problem)
    sx = dense_nhwc_strides(g.batch, g.h, g.w, problem.in_channels)  # (a plane, row, pixel)
    scalars = dict(J=g.pixels, Z=g.od, P=g.p, Q=g.q, D=g.d, H=g.h, W=g.w, C_G=g.cin, K_G=g.cout, T=g.t, S=g.s,
                   TAPS=unit_taps, GROUPS=g.groups, DY_GROUP=dy_group_channels(problem), STRIDE_D=g.stride_d,
                   STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1], DIL_D=g.dil_d,
                   DIL_H=g.dil[0], DIL_W=g.dil[1], sx_n=g.d * sx[0], sx_d=sx[0], sx_h=sx[1], sx_w=sx[2],
                   OUT_ROW=g.taps * out_tap,
                   OUT_TAP=out_tap, SPLIT_STRIDE=partial_numel, TILES_M=tiles_m, TILES_N=tiles_n,
                   NUM_UNITS=grid.num_units, STEPS=steps, SPLIT_STEPS=split_steps, TILES_Q=tiles_q,
                   TILES_IMG=tiles_img)
    constexprs = dict(PAD_D=g.pad_d, X_MODE=A_MODES[x_mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                      GROUP_M=config.group_m, BOX_H=box[0] if box else 1, BOX_W=box[1] if box else 1,
                      VEC=tiling.vector_width(g.cin), EVEN_C=g.cin % bn == 0, STAGE_OUT=stage_out, ROWS=rows,
                      ROW_DIL=g.dil[0] if rows > 1 else 0, TMA_STORE=tma_store,
                      PRODUCER_WARPS=producer.warps, PRODUCER_REGS=producer.regs)
    if box:  # 3D: dy's N x Z output planes and x's N x D input planes (kernels/bwd_weight.py, _box_producer)
        dy_map = TensorMap((g.batch * g.od, g.p, g.q, k_pad), (*dense_nhwc_strides(g.batch, g.p, g.q, k_pad), 1),
                           (1, box[0], box[1], bm))
        x_map = TensorMap((g.batch * g.d, g.h, g.w, problem.in_channels), (*sx, 1), (1, box[0], box[1], bn))
    else:
        dy_map, x_map = TensorMap((g.pixels, k_pad), (k_pad, 1), (bk, bm)), None
    limit = tiling.maxnreg(config.num_warps, producer.warps, tab.registers_per_sm, tab.max_registers_per_thread)
    wg = tab.weight_grad
    reduce = SumLaunch(wg.reduce_block, wg.reduce_warps, tiling.cdiv(numel, wg.reduce_block))
    out_map = None
    if tma_store:
        row = g.taps * out_tap
        out_map = TensorMap((grid.splits, problem.out_channels, g.taps, out_tap),
                            (problem.out_channels * row, row, out_tap, 1), (1, bm, 1, bn))
    return WeightGradPlan(kernel, x_mode, config, grid, tuple(scalars.items()), tuple(constexprs.items()),
                          config.num_warps, limit, dy_map, x_map, k_pad, problem.out_channels, g.pixels,
                          problem.dtype, problem.result_dtype, stages, staging, numel, partial_numel, c_pad, reduce,
                          g, rows, halo, out_map)


def weight_tma_store_issue(g: Geometry, out_tap: int, out_size: int, block_m: int) -> str | None:
    """Why the weight gradient's epilogue cannot store its tiles by TMA, or None: the copy clips at the
    result's edges only, so a tile must not reach into the next group's output channels; a tap's row of
    ``out_tap`` elements (``dW``'s channels, or a partial's padded ones) must be whole 16-byte runs."""
    if g.groups > 1 and g.cout % block_m:
        return f"{g.cout} output channels per group: a tile would store into the next group's"
    if out_tap * out_size % TMA_ALIGN:
        return f"{out_tap} channels of {out_size} bytes: a tap's row is not whole 16-byte runs"
    return None
