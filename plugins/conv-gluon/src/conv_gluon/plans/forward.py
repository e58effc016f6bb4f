"""The forward kernel's launch (``kernels.fwd.conv_fwd``): a problem's, or one stride phase of a data gradient's."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from conv_core.arch import spec
from conv_core.geometry import Geometry
from conv_core.kit.launch import Launch, make_launch
from conv_core.problem import ConvProblem, element_size

from .. import tiling
from ..configs import ArchTable, TileConfig
from ..kernels.codes import A_MODES, ACTIVATIONS
from ..tiling import TileGrid
from .common import (TMA_ALIGN, TensorMap, WeightMatrix, a_mode_of, check_kernel, dense_nhwc_strides,
                     dense_pixel_strides, rows_halo, rows_of, weight_matrix)

#: The forward kernel's tensor parameters, in the order its launch site keys them, and the role each takes: the
#: input (``x``, and ``x_hi`` for the tall box's second view), the weight matrix, the bias, the result (its
#: pointer and, where the epilogue stores by TMA, its descriptor).
POINTERS = {"x": "a", "x_hi": "a", "w_desc": "weight", "bias_ptr": "bias", "y_ptr": "out", "y_desc": "out"}


@dataclass(frozen=True)
class Plan:
    """Everything one candidate's ``run`` does, decided from the problem alone."""

    kernel: str
    a_mode: str
    config: TileConfig
    tiles: TileGrid
    scalars: tuple[tuple[str, int], ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    maxnreg: int
    weight: WeightMatrix
    w_map: TensorMap
    #: the input's descriptor (``tma_box``), or None (the input is gathered through a pointer)
    x_map: TensorMap | None
    dtype: str
    #: the ring's depth: the configuration's, or less where the epilogue's staging must fit beside it
    stages: int
    #: shared memory bound of the epilogue's staging (0: stores straight from registers)
    staging_bytes: int
    #: the launch's geometry: the problem's, or a data-gradient phase's (a stride-1 convolution of ``dy``); 3D: its
    #: depth fields too
    geometry: Geometry
    #: filter rows per k-step: 1, or ``ROWS`` (``fwd_rows_box``: the taps of a filter column share a tall box)
    rows: int = 1
    #: pixels of the tall box below the tile's (``fwd_rows_box``), loaded through ``x_hi_map``
    halo: int = 0
    x_hi_map: TensorMap | None = None
    #: ``fwd_rows_box``: the input ring's tall boxes (its weight ring has ``stages``)
    boxes: int = 0
    #: the output's descriptor where the epilogue stores by TMA (``fwd_rows_box``, :func:`tma_store_issue`)
    y_map: TensorMap | None = None

    @property
    def config_name(self) -> str:
        return self.config.name

    @property
    def workspace_bytes(self) -> int:
        """Memory beyond the result: the zero-padded weight copy, when there is one (cached per weight)."""
        return self.weight.numel * element_size(self.dtype) if self.weight.packed else 0

    @property
    def tensor_maps(self) -> dict[str, TensorMap]:
        """The kernel's descriptor arguments: name -> what to build (``x_hi`` is ``x`` again but for
        ``fwd_rows_box``; without ``y_desc`` the kernel gets ``y_ptr`` again in its place)."""
        maps = {"w_desc": self.w_map}
        if self.x_map is not None:
            maps.update(x=self.x_map, x_hi=self.x_hi_map or self.x_map)
        if self.y_map is not None:
            maps["y_desc"] = self.y_map
        return maps

    @property
    def shared_bound(self) -> int:
        """Upper bound of the kernel's shared memory (what the compile checks hold it to)."""
        c = self.config
        return tiling.shared_bytes(c.block_m, c.block_n, c.block_k, self.stages, element_size(self.dtype),
                                   self.staging_bytes, self.halo, self.boxes)

    @property
    def launch(self) -> Launch:
        """The launch of ``conv_fwd`` (imports Gluon): one program per tile, its pointers by role
        (:data:`POINTERS`), its descriptors' maps; a run puts it on its device's persistent grid."""
        from ..kernels.fwd import conv_fwd

        return make_launch(conv_fwd, (self.tiles.num_tiles,), POINTERS, dict(self.scalars), dict(self.constexprs),
                           self.num_warps, None, maxnreg=self.maxnreg, descriptors=self.tensor_maps)


def make_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The forward launch of candidate kernel ``kernel`` (``fwd_gather``, ``fwd_box``, ``fwd_rows_box``) with
    ``config``."""
    check_kernel(problem, "fwd", kernel, config, tab)
    g = Geometry.of(problem)
    sy = dense_pixel_strides(g.p, g.q)
    return geometry_plan(kernel, g, config, tab, dtype=problem.dtype, in_channels=problem.in_channels,
                         out_channels=problem.out_channels, bias=problem.bias, activation=problem.activation,
                         sy=(g.od * sy[0], *sy[1:]), weight=weight_matrix(problem, config),
                         out_dtype=problem.out_dtype, sy_d=sy[0])


def geometry_plan(kernel: str, g: Geometry, config: TileConfig, tab: ArchTable, *, dtype: str, in_channels: int,
                  out_channels: int, bias: bool, activation: str | None, sy: tuple[int, int, int],
                  weight: WeightMatrix, y_start: int = 0, out_dtype: str | None = None, sy_d: int = 0) -> Plan:
    """The launch of the forward kernel on geometry ``g`` (a problem's, or a data-gradient phase's): the
    input dense channels-last with ``in_channels`` channels, the output channels-last with ``out_channels``
    channels, its ``(image, p, q)`` strides ``sy`` counted in pixels, from its pixel ``y_start``; 3D: ``g``'s depth
    fields, and ``sy_d`` the output's plane stride in pixels (``sy[0]`` steps over whole volumes). The kernel
    walks ``g.t`` depth taps of ``TAPS = r s`` each."""
    a_mode = a_mode_of(kernel, g.cin, dtype)
    producer = tab.producers[a_mode]
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    out_size = element_size(out_dtype or dtype)
    rows = rows_of(kernel)
    tma_store = rows > 1 and tma_store_issue(g, out_channels, sy, y_start, out_size, bn) is None
    # every output pixel starts a multiple of out_channels elements in (the kernel's Y_CHANNELS)
    stage_out = not tma_store and not tiling.direct_store(g.cout, (out_channels,), 0, out_size)
    staging = tiling.epilogue_bytes(bm, bn, out_size, tma_store, stage_out)
    halo_rows = rows_halo(g) if rows > 1 else 0
    if a_mode == "tma_box":
        box = tiling.box_shape(g.p, g.q, bm, tab.box_widths_for(bn), halo=halo_rows)
        tiles = tiling.box_grid(g, box, bn)
    else:
        box = (1, 1)
        tiles = tiling.gather_grid(g, bm, bn)
    halo = halo_rows * box[1]
    limit = spec(tab.name).shared_memory_bytes
    if rows > 1:
        stages, boxes = tiling.fitting_tall_stages(bm, bn, bk, config.stages, element_size(dtype), staging, limit,
                                                   halo, rows)
    else:
        stages, boxes = tiling.fitting_stages(bm, bn, bk, config.stages, element_size(dtype), staging, limit), 0
    ncb = tiling.channel_blocks(g.cin, bk)
    sx = dense_nhwc_strides(g.batch, g.h, g.w, in_channels)  # (a plane, row, pixel)
    scalars = dict(M=g.pixels, Z=g.od, P=g.p, Q=g.q, D=g.d, H=g.h, W=g.w, C_G=g.cin, K_G=g.cout, T=g.t, S=g.s,
                   TAPS=g.r * g.s, NCB=ncb, STRIDE_D=g.stride_d, STRIDE_H=g.stride[0], STRIDE_W=g.stride[1],
                   PAD_H=g.pad[0], PAD_W=g.pad[1], DIL_D=g.dil_d, DIL_H=g.dil[0], DIL_W=g.dil[1],
                   sx_n=g.d * sx[0], sx_d=sx[0], sx_h=sx[1], sx_w=sx[2], sy_n=sy[0], sy_d=sy_d, sy_h=sy[1],
                   sy_w=sy[2], Y_START=y_start, Y_CHANNELS=out_channels, TILES_M=tiles.tiles_m, TILES_N=tiles.tiles_n,
                   NUM_TILES=tiles.num_tiles, TILES_Q=tiles.tiles_q, TILES_IMG=tiles.tiles_img)
    constexprs = dict(PAD_D=g.pad_d, A_MODE=A_MODES[a_mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                      GROUP_M=config.group_m, BOX_H=box[0], BOX_W=box[1], VEC=tiling.vector_width(g.cin),
                      EVEN_C=g.cin % bk == 0, HAS_BIAS=bias, ACTIVATION=ACTIVATIONS[activation or ""],
                      STAGE_OUT=stage_out, ROWS=rows, ROW_DIL=g.dil[0] if rows > 1 else 0, HALO_H=halo_rows,
                      A_STAGES=boxes, TMA_STORE=tma_store,
                      PRODUCER_WARPS=producer.warps, PRODUCER_REGS=producer.regs)
    w_map = TensorMap((weight.rows, weight.cols), (weight.cols, 1), (bn, bk))
    x_map = x_hi_map = None
    if a_mode == "tma_box":  # 3D: the batch's N x D input planes (kernels/fwd.py, _input_plane)
        x_map = TensorMap((g.batch * g.d, g.h, g.w, in_channels), (*sx, 1), (1, box[0], box[1], bk))
    if rows > 1:
        x_hi_map = dataclasses.replace(x_map, block=(1, halo_rows, box[1], bk))
    y_map = None
    if tma_store:
        y_map = TensorMap((g.batch, g.p, g.q, out_channels), (*dense_nhwc_strides(g.batch, g.p, g.q, out_channels), 1),
                          (1, box[0], box[1], bn))
    regs = tiling.maxnreg(config.num_warps, producer.warps, tab.registers_per_sm, tab.max_registers_per_thread)
    return Plan(kernel, a_mode, config, tiles, tuple(scalars.items()), tuple(constexprs.items()), config.num_warps,
                regs, weight, w_map, x_map, dtype, stages, staging, g, rows, halo, x_hi_map, boxes, y_map)


def tma_store_issue(g: Geometry, out_channels: int, sy: tuple[int, int, int], y_start: int, out_size: int,
                    block_n: int) -> str | None:
    """Why the epilogue cannot store its box tile by TMA, or None: the tile is staged whole in shared memory, so
    16-bit outputs only; TMA clips at the tensor's edges only, so a tile must not reach into the next group's
    channels; the output dense channels-last from a 16-byte aligned start, its pixels whole 16-byte runs."""
    if out_size != 2:
        return f"{8 * out_size}-bit output: a whole tile of it does not fit beside the rings"
    if g.groups > 1 and g.cout % block_n:
        return f"{g.cout} output channels per group: a tile would store into the next group's"
    if y_start or sy != dense_pixel_strides(g.p, g.q) or out_channels * out_size % TMA_ALIGN:
        return "the output is not dense channels-last with 16-byte pixels"
    return None
