"""What a kernel is launched with: the one place that turns a problem into kernel arguments.

:func:`make_plan` maps ``(problem, candidate kernel, configuration, arch table)`` to a :class:`Plan`: the
way the input tile is brought (``a_mode``), the tile grid, the scalar and constexpr arguments of
``kernels.fwd.conv_fwd``, the register limit, the weight matrix (a free view of the channels-last weight
or a zero-padded copy) and the TMA descriptors to build. The data gradient is a list of such plans, one per
stride phase (:func:`make_bwd_data_plan`); the weight gradient has its own kernel and
:class:`WeightGradPlan` (:func:`make_bwd_weight_plan`: units, split, workspace, the second stage). Plans need
no tensors and import no Gluon: the operands ``Candidate.run`` receives are dense channels-last, so every
stride follows from the problem. The same plan drives the launch (:mod:`conv_gluon.launch`) and the compile
checks (:mod:`conv_gluon.aot`), so the compile checks compile exactly what runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from conv_core.arch import spec
from conv_core.problem import ConvProblem, element_size

from . import tiling
from .configs import ArchTable, TileConfig
from .kernels.codes import A_MODES, ACTIVATIONS
from .tiling import Geometry, TileGrid

#: Candidate kernels (the ``kernel`` part of the id) -> the configuration family they take. The data gradient
#: runs the forward kernel (one launch per stride phase), so it takes the forward tables.
KERNELS = {"fwd_gather": "fwd_gather", "fwd_box": "fwd_box", "fwd_rows_box": "fwd_rows_box",
           "bwd_data_gather": "fwd_gather", "bwd_data_box": "fwd_box", "bwd_data_rows_box": "fwd_rows_box",
           "bwd_weight_gather": "bwd_weight_gather", "bwd_weight_box": "bwd_weight_box",
           "bwd_weight_rows_box": "bwd_weight_rows_box"}

#: The candidate kernels of each direction: the gathering one first, then those reading TMA boxes.
DIRECTION_KERNELS = {"fwd": ("fwd_gather", "fwd_box", "fwd_rows_box"),
                     "bwd_data": ("bwd_data_gather", "bwd_data_box", "bwd_data_rows_box"),
                     "bwd_weight": ("bwd_weight_gather", "bwd_weight_box", "bwd_weight_rows_box")}

#: The kernels whose k-steps take a whole filter column, its taps sharing one input box: the forward (a tall
#: box read as three views a row of taps apart), the data gradient at stride 1 (the forward's kernel on
#: ``dy``) and the weight gradient (units of a column). Filters of exactly ``ROWS`` rows.
ROWS_KERNELS, ROWS = ("fwd_rows_box", "bwd_data_rows_box", "bwd_weight_rows_box"), 3

#: Largest element count of any tensor the kernels index with 32-bit offsets.
INT32_ELEMENTS = 2**31 - 1

#: Alignment (bytes) TMA needs of a tensor's base and of every stride but the last.
TMA_ALIGN = 16


@dataclass(frozen=True)
class TensorMap:
    """A TMA descriptor to build at run time: the global tensor's shape and strides (elements) and the
    box (block) each copy moves."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block: tuple[int, ...]


@dataclass(frozen=True)
class WeightMatrix:
    """The weight as the kernel reads it: ``[rows, taps * c_pad]``, row = output channel, columns tap-major
    then channel; each tap's ``cin`` channels padded with zeros to ``c_pad`` (a whole number of
    ``BLOCK_K`` blocks). With ``c_pad == cin`` it is a free view of the dense channels-last weight."""

    rows: int
    taps: int
    cin: int
    c_pad: int

    @property
    def cols(self) -> int:
        return self.taps * self.c_pad

    @property
    def packed(self) -> bool:
        return self.c_pad != self.cin

    @property
    def numel(self) -> int:
        return self.rows * self.cols


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


# ---- support ------------------------------------------------------------------------------------------


def int32_issue(problem: ConvProblem, config: TileConfig | None = None) -> str | None:
    """Why 32-bit offsets cannot address the problem's tensors (the padded weight matrix, or the weight
    gradient's padded output gradient, included), or None. (The weight gradient's float32 partials are bounded
    by the table's ``max_workspace_mb``, within 32-bit offsets.)"""
    shapes = [("input", math.prod(problem.input_shape)), ("weight", math.prod(problem.weight_shape)),
              ("output", math.prod(problem.output_shape))]
    if problem.direction == "bwd_weight":
        shapes.append(("padded output gradient", Geometry.of(problem).pixels * dy_channels(problem)))
    elif config is not None and problem.ndim in (1, 2):
        shapes.append(("padded weight", weight_matrix(problem, config).numel))
    for what, numel in shapes:
        if numel > INT32_ELEMENTS:
            return (f"the {what} has {numel} elements; the kernels use 32-bit offsets (at most {INT32_ELEMENTS} "
                    "elements per tensor)")
    return None


def box_issue(problem: ConvProblem, config: TileConfig) -> str | None:
    """Why the input cannot come as TMA boxes (``fwd_box``, ``bwd_data_box``), or None."""
    g = Geometry.of(problem)
    if problem.direction == "bwd_data":  # every phase is a stride-1 convolution of dy (output channels)
        return _box_issue(Geometry(g.batch, g.groups, g.cout, g.cin, g.p, g.q, g.h, g.w, g.r, g.s, (1, 1), g.pad,
                                   g.dil), problem.out_channels, problem.dtype, config, "output gradient")
    # the weight gradient's channels are its GEMM's M and N, not its reduction: a box may read into the next
    # group's channels (they only feed tile rows and columns the epilogue drops), but must start on 16 bytes
    if problem.direction == "bwd_weight" and g.groups > 1 and g.cin * element_size(problem.dtype) % TMA_ALIGN:
        return (f"groups={g.groups} with {g.cin} input channels per group: a group's box would start inside a "
                f"{TMA_ALIGN}-byte run, which TMA cannot")
    return _box_issue(g, problem.in_channels, problem.dtype, config, "input",
                      whole_blocks=problem.direction == "fwd")


#: The narrowest box row of ``bwd_weight_rows_box``: its MMAs go one box row at a time (the wgmma K is 16).
ROWS_MIN_WIDTH = 16


def rows_box(g: Geometry, block_k: int, widths: tuple[int, ...]) -> tuple[int, int]:
    """The ``BOX_H x BOX_W`` box of ``bwd_weight_rows_box``: two of them stacked hold the three taps' x rows
    (``BOX_H >= 2 DIL_H``), and every box row is a whole ``wgmma`` K (``tiling.box_shape`` raises otherwise)."""
    return tiling.box_shape(g.p, g.q, block_k, widths, min_rows=(ROWS - 1) * g.dil[0], min_width=ROWS_MIN_WIDTH)


def rows_halo(g: Geometry) -> int:
    """Rows of ``fwd_rows_box``'s second box, below the tile's: the last tap's ``(ROWS - 1) DIL_H`` more,
    rounded up to a power of two (a TMA box's shape, as Gluon allocates it)."""
    reach = (ROWS - 1) * g.dil[0]
    return 1 << (reach - 1).bit_length()


def rows_issue(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> str | None:
    """Why a kernel of a filter column (``ROWS_KERNELS``) cannot run ``problem`` with ``config`` (beyond
    :func:`box_issue`), or None."""
    g = Geometry.of(problem)
    if g.r != ROWS:
        return f"a filter of {g.r} rows: a filter column's taps are {ROWS} rows"
    if kernel.startswith("bwd_data") and g.stride[0] != 1:
        return f"stride {g.stride[0]} along the height: each phase of the data gradient has fewer than {ROWS} rows"
    if not kernel.startswith("bwd_weight"):
        if rows_halo(g) > tiling.TMA_BOX_LIMIT:
            return f"dilation {g.dil[0]}: the box below the tile would have more than {tiling.TMA_BOX_LIMIT} rows"
        return None
    try:
        rows_box(g, config.block_k, tab.box_widths)
    except ValueError:
        return (f"dilation {g.dil[0]}: no box of {config.block_k} pixels has {(ROWS - 1) * g.dil[0]} rows of at "
                f"least {ROWS_MIN_WIDTH}")
    return None


def kernel_issue(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> str | None:
    """Why candidate kernel ``kernel`` cannot run ``problem`` with ``config`` (a box kernel: boxes must carry
    the input; a kernel of a filter column: a filter of 3 rows and a box for it), or None."""
    issue = box_issue(problem, config) if kernel.endswith("_box") else None
    if issue is None and kernel in ROWS_KERNELS:
        issue = rows_issue(problem, kernel, config, tab)
    return issue


def _box_issue(g: Geometry, channels: int, dtype: str, config: TileConfig, what: str,
               whole_blocks: bool = True) -> str | None:
    if g.stride != (1, 1):
        return f"stride {g.stride}: a box of output pixels maps to a box of input pixels at stride 1 only"
    if channels * element_size(dtype) % TMA_ALIGN:
        return (f"{channels} {what} channels: a pixel's channels must span a multiple of {TMA_ALIGN} bytes for "
                "TMA (8 channels of a 16-bit dtype)")
    if whole_blocks and g.groups > 1 and g.cin % config.block_k:
        return (f"groups={g.groups} with {g.cin} {what} channels per group, not a multiple of "
                f"BLOCK_K={config.block_k}: a box would read the next group's channels")
    return None


# ---- geometry -> arguments ----------------------------------------------------------------------------


def weight_matrix(problem: ConvProblem, config: TileConfig) -> WeightMatrix:
    """The forward kernel's weight matrix for ``problem`` (the data gradient: all its phases' together)."""
    g = Geometry.of(problem)
    if problem.direction == "bwd_data":
        return WeightMatrix(problem.in_channels, g.taps, g.cout,
                            tiling.channel_blocks(g.cout, config.block_k) * config.block_k)
    return WeightMatrix(problem.out_channels, g.taps, g.cin,
                        tiling.channel_blocks(g.cin, config.block_k) * config.block_k)


def a_mode_of(kernel: str, reduction_channels: int, dtype: str) -> str:
    """How ``kernel`` brings the input tile: TMA boxes, or a gather by ``cp.async`` where the channels per
    group (``reduction_channels``) make copies of at least 4 bytes, else through registers."""
    if kernel.endswith("_box"):
        return "tma_box"
    vec = tiling.vector_width(reduction_channels)
    return "cp_async" if vec * element_size(dtype) >= 4 else "registers"


def dense_nhwc_strides(batch: int, h: int, w: int, c: int) -> tuple[int, int, int]:
    """(image, row, pixel) strides of a dense channels-last tensor (channels contiguous)."""
    return h * w * c, w * c, c


def dense_pixel_strides(h: int, w: int) -> tuple[int, int, int]:
    """(image, row, column) strides, in pixels, of a dense channels-last image of ``h x w`` pixels."""
    return h * w, w, 1


def check_kernel(problem: ConvProblem, direction: str, kernel: str, config: TileConfig, tab: ArchTable) -> None:
    """Raise ``ValueError`` unless ``kernel`` is one of ``direction``'s and can run ``problem`` with ``config``
    (:func:`kernel_issue` finds nothing)."""
    if kernel not in DIRECTION_KERNELS[direction]:
        raise ValueError(f"unknown {direction} kernel {kernel!r}; known: {DIRECTION_KERNELS[direction]}")
    issue = kernel_issue(problem, kernel, config, tab)
    if issue:
        raise ValueError(f"{kernel} cannot run {problem.key}: {issue}")


def make_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The forward launch of candidate kernel ``kernel`` (``fwd_gather`` or ``fwd_box``) with ``config``."""
    check_kernel(problem, "fwd", kernel, config, tab)
    g = Geometry.of(problem)
    return geometry_plan(kernel, g, config, tab, dtype=problem.dtype, in_channels=problem.in_channels,
                         out_channels=problem.out_channels, bias=problem.bias, activation=problem.activation,
                         sy=dense_pixel_strides(g.p, g.q), weight=weight_matrix(problem, config),
                         out_dtype=problem.out_dtype)


def geometry_plan(kernel: str, g: Geometry, config: TileConfig, tab: ArchTable, *, dtype: str, in_channels: int,
                  out_channels: int, bias: bool, activation: str | None, sy: tuple[int, int, int],
                  weight: WeightMatrix, y_start: int = 0, out_dtype: str | None = None) -> Plan:
    """The launch of the forward kernel on geometry ``g`` (a problem's, or a data-gradient phase's): the
    input dense channels-last with ``in_channels`` channels, the output channels-last with ``out_channels``
    channels, its ``(image, p, q)`` strides ``sy`` counted in pixels, from its pixel ``y_start``."""
    a_mode = a_mode_of(kernel, g.cin, dtype)
    producer = tab.producers[a_mode]
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    out_size = element_size(out_dtype or dtype)
    rows = ROWS if kernel == "fwd_rows_box" else 1
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
    sx = dense_nhwc_strides(g.batch, g.h, g.w, in_channels)
    scalars = dict(M=g.pixels, P=g.p, Q=g.q, H=g.h, W=g.w, C_G=g.cin, K_G=g.cout, S=g.s, TAPS=g.taps, NCB=ncb,
                   STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                   DIL_H=g.dil[0], DIL_W=g.dil[1], sx_n=sx[0], sx_h=sx[1], sx_w=sx[2], sy_n=sy[0], sy_h=sy[1],
                   sy_w=sy[2], Y_START=y_start, Y_CHANNELS=out_channels, TILES_M=tiles.tiles_m, TILES_N=tiles.tiles_n,
                   NUM_TILES=tiles.num_tiles, TILES_Q=tiles.tiles_q, TILES_IMG=tiles.tiles_img)
    constexprs = dict(A_MODE=A_MODES[a_mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                      GROUP_M=config.group_m, BOX_H=box[0], BOX_W=box[1], VEC=tiling.vector_width(g.cin),
                      EVEN_C=g.cin % bk == 0, HAS_BIAS=bias, ACTIVATION=ACTIVATIONS[activation or ""],
                      STAGE_OUT=stage_out, ROWS=rows, ROW_DIL=g.dil[0] if rows > 1 else 0, HALO_H=halo_rows,
                      A_STAGES=boxes, TMA_STORE=tma_store,
                      PRODUCER_WARPS=producer.warps, PRODUCER_REGS=producer.regs)
    w_map = TensorMap((weight.rows, weight.cols), (weight.cols, 1), (bn, bk))
    x_map = x_hi_map = None
    if a_mode == "tma_box":
        x_map = TensorMap((g.batch, g.h, g.w, in_channels), (*sx, 1), (1, box[0], box[1], bk))
    if rows > 1:
        x_hi_map = dataclasses.replace(x_map, block=(1, halo_rows, box[1], bk))
    y_map = None
    if tma_store:
        y_map = TensorMap((g.batch, g.p, g.q, out_channels), (*dense_nhwc_strides(g.batch, g.p, g.q, out_channels), 1),
                          (1, box[0], box[1], bn))
    regs = tiling.maxnreg(config.num_warps, producer.warps, tab.registers_per_sm, tab.max_registers_per_thread)
    return Plan(kernel, a_mode, config, tiles, tuple(scalars.items()), tuple(constexprs.items()), config.num_warps,
                regs, weight, w_map, x_map, dtype, stages, staging, rows, halo, x_hi_map, boxes, y_map)


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


# ---- the data gradient: one forward launch per stride phase ------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One stride phase of the data gradient: the forward launch that computes it (its output starts at
    ``dx``'s pixel ``Y_START``) and its filter taps (rows and columns, in the launch's order)."""

    plan: Plan
    taps_h: tuple[int, ...]
    taps_w: tuple[int, ...]


@dataclass(frozen=True)
class DataGradPlan:
    """The data gradient as forward launches: one per stride phase with taps; the phases without taps (a
    1x1 filter at stride 2: three of four) are zeros."""

    kernel: str
    config: TileConfig
    phases: tuple[Phase, ...]
    zero_phases: tuple[tuple[int, int], ...]
    dtype: str

    @property
    def config_name(self) -> str:
        return self.config.name

    @property
    def workspace_bytes(self) -> int:
        """The phases' transposed, flipped, zero-padded weight copies (cached per weight)."""
        return sum(ph.plan.weight.numel for ph in self.phases) * element_size(self.dtype)


def make_bwd_data_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> DataGradPlan:
    """The data gradient of ``problem`` with ``bwd_data_gather``, ``bwd_data_box`` or ``bwd_data_rows_box`` (stride
    1 along the height: its one row phase keeps the filter's 3 rows for ``fwd_rows_box``) and ``config``.

    Phase ``(ph, pw)`` computes ``dx[:, :, ph::stride_h, pw::stride_w]`` as a stride-1 forward convolution of
    ``dy`` (:func:`tiling.phase_geometry`) with the weight transposed (input and output channels swapped per
    group) and restricted to the phase's taps in the phase's order; its output strides step over the other
    phases' pixels. Nothing is masked away: each phase multiplies exactly its taps.
    """
    check_kernel(problem, "bwd_data", kernel, config, tab)
    g = Geometry.of(problem)
    c_total, k_total = problem.in_channels, problem.out_channels
    k_pad = tiling.channel_blocks(g.cout, config.block_k) * config.block_k
    dx_n, dx_h, dx_w = dense_pixel_strides(g.h, g.w)
    phases, zeros = [], []
    for ph, pw in tiling.data_gradient_phases(g):
        if not ph.taps or not pw.taps:
            zeros.append((ph.phase, pw.phase))
            continue
        pg = tiling.phase_geometry(g, ph, pw)
        weight = WeightMatrix(c_total, pg.taps, g.cout, k_pad)
        p = geometry_plan(kernel.replace("bwd_data", "fwd"), pg, config, tab, dtype=problem.dtype,
                          in_channels=k_total, out_channels=c_total, bias=False, activation=None,
                          sy=(dx_n, g.stride[0] * dx_h, g.stride[1] * dx_w), weight=weight,
                          y_start=ph.phase * dx_h + pw.phase * dx_w)
        p = dataclasses.replace(p, kernel=kernel)
        phases.append(Phase(p, ph.taps, pw.taps))
    return DataGradPlan(kernel, config, tuple(phases), tuple(zeros), problem.dtype)


# ---- the weight gradient: units of (split, group, tap, tile), partials summed by a second stage ----------------


def dy_group_channels(problem: ConvProblem) -> int:
    """Where each group's output channels start in ``dy`` as the weight-gradient kernel reads it: every
    ``K_G`` channels in place, or every ``K_G`` rounded up to 16 bytes in a padded copy. A TMA box must start
    on a 16-byte boundary (an unaligned start coordinate is an illegal instruction, seen on the H100 with 3
    channels per group), so a group whose channels are not whole 16-byte runs gets its own padded run."""
    k_g = problem.out_channels // problem.groups
    align = TMA_ALIGN // element_size(problem.dtype)
    return k_g if k_g % align == 0 else -(-k_g // align) * align


def dy_channels(problem: ConvProblem) -> int:
    """The row length of ``dy`` as the weight-gradient kernel reads it (a ``[J, K]`` matrix): ``K``, or the
    groups' padded runs (a padded copy, :func:`dy_group_channels`; RetinaNet's 36 channels become 40)."""
    return problem.groups * dy_group_channels(problem)


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
    rows = ROWS if kernel in ROWS_KERNELS else 1
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
    unit_taps = g.taps // rows
    if split_steps is None:
        split_steps = tiling.choose_split_steps(tiles_m * tiles_n * g.groups * unit_taps, steps,
                                                split_costs(config, tab, kernel, partial_numel, rows))
    grid = tiling.WeightGradGrid(tiles_m, tiles_n, g.groups, unit_taps, steps, split_steps, tiles_q, tiles_img)
    out_size = element_size(problem.result_dtype) if grid.splits == 1 else 4
    out_tap = g.cin if grid.splits == 1 else c_pad  # dW itself, or a padded partial
    tma_store = weight_tma_store_issue(g, out_tap, out_size, bm) is None
    stage_out = not tma_store and not tiling.direct_store(g.cin, (g.taps * out_tap,), 0, out_size)
    staging = tiling.epilogue_bytes(bm, bn, out_size, tma_store, stage_out)
    stages = tiling.fitting_stages(bm, bn, bk, config.stages, element_size(problem.dtype), staging,
                                   spec(tab.name).shared_memory_bytes, halo)
    k_pad = dy_channels(problem)
    sx = dense_nhwc_strides(g.batch, g.h, g.w, problem.in_channels)
    scalars = dict(J=g.pixels, P=g.p, Q=g.q, H=g.h, W=g.w, C_G=g.cin, K_G=g.cout, S=g.s, TAPS=unit_taps,
                   GROUPS=g.groups, DY_GROUP=dy_group_channels(problem), STRIDE_H=g.stride[0], STRIDE_W=g.stride[1],
                   PAD_H=g.pad[0], PAD_W=g.pad[1], DIL_H=g.dil[0], DIL_W=g.dil[1], sx_n=sx[0], sx_h=sx[1], sx_w=sx[2],
                   OUT_ROW=g.taps * out_tap,
                   OUT_TAP=out_tap, SPLIT_STRIDE=partial_numel, TILES_M=tiles_m, TILES_N=tiles_n,
                   NUM_UNITS=grid.num_units, STEPS=steps, SPLIT_STEPS=split_steps, TILES_Q=tiles_q,
                   TILES_IMG=tiles_img)
    constexprs = dict(X_MODE=A_MODES[x_mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                      GROUP_M=config.group_m, BOX_H=box[0] if box else 1, BOX_W=box[1] if box else 1,
                      VEC=tiling.vector_width(g.cin), EVEN_C=g.cin % bn == 0, STAGE_OUT=stage_out, ROWS=rows,
                      ROW_DIL=g.dil[0] if rows > 1 else 0, TMA_STORE=tma_store,
                      PRODUCER_WARPS=producer.warps, PRODUCER_REGS=producer.regs)
    if box:
        dy_map = TensorMap((g.batch, g.p, g.q, k_pad), (*dense_nhwc_strides(g.batch, g.p, g.q, k_pad), 1),
                           (1, box[0], box[1], bm))
        x_map = TensorMap((g.batch, g.h, g.w, problem.in_channels), (*sx, 1), (1, box[0], box[1], bn))
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
                          rows, halo, out_map)


def weight_tma_store_issue(g: Geometry, out_tap: int, out_size: int, block_m: int) -> str | None:
    """Why the weight gradient's epilogue cannot store its tiles by TMA, or None: the copy clips at the
    result's edges only, so a tile must not reach into the next group's output channels; a tap's row of
    ``out_tap`` elements (``dW``'s channels, or a partial's padded ones) must be whole 16-byte runs."""
    if g.groups > 1 and g.cout % block_m:
        return f"{g.cout} output channels per group: a tile would store into the next group's"
    if out_tap * out_size % TMA_ALIGN:
        return f"{out_tap} channels of {out_size} bytes: a tap's row is not whole 16-byte runs"
    return None
