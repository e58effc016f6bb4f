"""What a kernel is launched with: the one place that turns a problem into kernel arguments.

:func:`make_plan` maps ``(problem, candidate kernel, configuration, arch table)`` to a :class:`Plan`: the
way the input tile is brought (``a_mode``), the tile grid, the scalar and constexpr arguments of
``kernels.fwd.conv_fwd``, the register limit, the weight matrix (a free view of the channels-last weight
or a zero-padded copy) and the TMA descriptors to build. It needs no tensors and imports no Gluon: the
operands ``Candidate.run`` receives are dense channels-last, so every stride follows from the problem.
The same plan drives the launch (:mod:`conv_gluon.launch`) and the compile checks (:mod:`conv_gluon.aot`),
so the compile checks compile exactly what runs.
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
KERNELS = {"fwd_gather": "fwd_gather", "fwd_box": "fwd_box", "bwd_data_gather": "fwd_gather",
           "bwd_data_box": "fwd_box"}

#: The candidate kernels of each direction.
DIRECTION_KERNELS = {"fwd": ("fwd_gather", "fwd_box"), "bwd_data": ("bwd_data_gather", "bwd_data_box")}

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

    @property
    def config_name(self) -> str:
        return self.config.name

    @property
    def workspace_bytes(self) -> int:
        """Memory beyond the result: the zero-padded weight copy, when there is one (cached per weight)."""
        return self.weight.numel * element_size(self.dtype) if self.weight.packed else 0


# ---- support ------------------------------------------------------------------------------------------


def int32_issue(problem: ConvProblem, config: TileConfig | None = None) -> str | None:
    """Why 32-bit offsets cannot address the problem's tensors (the padded weight matrix included), or None."""
    shapes = [("input", math.prod(problem.input_shape)), ("weight", math.prod(problem.weight_shape)),
              ("output", math.prod(problem.output_shape))]
    if config is not None and problem.ndim in (1, 2):
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
    return _box_issue(g, problem.in_channels, problem.dtype, config, "input")


def _box_issue(g: Geometry, channels: int, dtype: str, config: TileConfig, what: str) -> str | None:
    if g.stride != (1, 1):
        return f"stride {g.stride}: a box of output pixels maps to a box of input pixels at stride 1 only"
    if channels * element_size(dtype) % TMA_ALIGN:
        return (f"{channels} {what} channels: a pixel's channels must span a multiple of {TMA_ALIGN} bytes for "
                "TMA (8 channels of a 16-bit dtype)")
    if g.groups > 1 and g.cin % config.block_k:
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


def make_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The forward launch of candidate kernel ``kernel`` (``fwd_gather`` or ``fwd_box``) with ``config``."""
    if kernel not in DIRECTION_KERNELS["fwd"]:
        raise ValueError(f"unknown forward kernel {kernel!r}; known: {DIRECTION_KERNELS['fwd']}")
    if kernel == "fwd_box":
        issue = box_issue(problem, config)
        if issue:
            raise ValueError(f"fwd_box cannot run {problem.key}: {issue}")
    g = Geometry.of(problem)
    return geometry_plan(kernel, g, config, tab, dtype=problem.dtype, in_channels=problem.in_channels,
                         out_channels=problem.out_channels, bias=problem.bias, activation=problem.activation,
                         sy=dense_nhwc_strides(g.batch, g.p, g.q, problem.out_channels),
                         weight=weight_matrix(problem, config), out_dtype=problem.out_dtype)


def geometry_plan(kernel: str, g: Geometry, config: TileConfig, tab: ArchTable, *, dtype: str, in_channels: int,
                  out_channels: int, bias: bool, activation: str | None, sy: tuple[int, int, int],
                  weight: WeightMatrix, y_offset: int = 0, out_dtype: str | None = None) -> Plan:
    """The launch of the forward kernel on geometry ``g`` (a problem's, or a data-gradient phase's): the
    input dense channels-last with ``in_channels`` channels, the output with pixel strides ``sy`` from
    element ``y_offset`` of its tensor."""
    a_mode = a_mode_of(kernel, g.cin, dtype)
    producer = tab.producers[a_mode]
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    out_size = element_size(out_dtype or dtype)
    stage_out = not tiling.direct_store(g.cout, sy, y_offset, out_size)
    staging = tiling.staging_bytes(bm, bn, out_size) if stage_out else 0
    stages = tiling.fitting_stages(bm, bn, bk, config.stages, element_size(dtype), staging,
                                   spec(tab.name).shared_memory_bytes)
    if a_mode == "tma_box":
        box = tiling.box_shape(g.p, g.q, bm, tab.box_widths_for(bn))
        tiles = tiling.box_grid(g, box, bn)
    else:
        box = (1, 1)
        tiles = tiling.gather_grid(g, bm, bn)
    ncb = tiling.channel_blocks(g.cin, bk)
    sx = dense_nhwc_strides(g.batch, g.h, g.w, in_channels)
    scalars = dict(M=g.pixels, P=g.p, Q=g.q, H=g.h, W=g.w, C_G=g.cin, K_G=g.cout, S=g.s, TAPS=g.taps, NCB=ncb,
                   STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                   DIL_H=g.dil[0], DIL_W=g.dil[1], sx_n=sx[0], sx_h=sx[1], sx_w=sx[2], sy_n=sy[0], sy_h=sy[1],
                   sy_w=sy[2], TILES_M=tiles.tiles_m, TILES_N=tiles.tiles_n, NUM_TILES=tiles.num_tiles,
                   TILES_Q=tiles.tiles_q, TILES_IMG=tiles.tiles_img)
    constexprs = dict(A_MODE=A_MODES[a_mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages,
                      GROUP_M=config.group_m, BOX_H=box[0], BOX_W=box[1], VEC=tiling.vector_width(g.cin),
                      EVEN_C=g.cin % bk == 0, HAS_BIAS=bias, ACTIVATION=ACTIVATIONS[activation or ""],
                      STAGE_OUT=stage_out,
                      PRODUCER_WARPS=producer.warps, PRODUCER_REGS=producer.regs)
    w_map = TensorMap((weight.rows, weight.cols), (weight.cols, 1), (bn, bk))
    x_map = None
    if a_mode == "tma_box":
        x_map = TensorMap((g.batch, g.h, g.w, in_channels), (*sx, 1), (1, box[0], box[1], bk))
    limit = tiling.maxnreg(config.num_warps, producer.warps, tab.registers_per_sm, tab.max_registers_per_thread)
    return Plan(kernel, a_mode, config, tiles, tuple(scalars.items()), tuple(constexprs.items()), config.num_warps,
                limit, weight, w_map, x_map, dtype, stages, staging)


# ---- the data gradient: one forward launch per stride phase ------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One stride phase of the data gradient: the forward launch that computes it, its filter taps (rows and
    columns, in the launch's order) and where its first element lies in ``dx`` (elements)."""

    plan: Plan
    taps_h: tuple[int, ...]
    taps_w: tuple[int, ...]
    y_offset: int


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
    """The data gradient of ``problem`` with ``bwd_data_gather`` or ``bwd_data_box`` and ``config``.

    Phase ``(ph, pw)`` computes ``dx[:, :, ph::stride_h, pw::stride_w]`` as a stride-1 forward convolution of
    ``dy`` (:func:`tiling.phase_geometry`) with the weight transposed (input and output channels swapped per
    group) and restricted to the phase's taps in the phase's order; its output strides step over the other
    phases' pixels. Nothing is masked away: each phase multiplies exactly its taps.
    """
    if kernel not in DIRECTION_KERNELS["bwd_data"]:
        raise ValueError(f"unknown data-gradient kernel {kernel!r}; known: {DIRECTION_KERNELS['bwd_data']}")
    if kernel == "bwd_data_box":
        issue = box_issue(problem, config)
        if issue:
            raise ValueError(f"bwd_data_box cannot run {problem.key}: {issue}")
    g = Geometry.of(problem)
    c_total, k_total = problem.in_channels, problem.out_channels
    k_pad = tiling.channel_blocks(g.cout, config.block_k) * config.block_k
    sx_n, sx_h, sx_w = dense_nhwc_strides(g.batch, g.h, g.w, c_total)
    phases, zeros = [], []
    for ph, pw in tiling.data_gradient_phases(g):
        if not ph.taps or not pw.taps:
            zeros.append((ph.phase, pw.phase))
            continue
        pg = tiling.phase_geometry(g, ph, pw)
        weight = WeightMatrix(c_total, pg.taps, g.cout, k_pad)
        y_offset = ph.phase * sx_h + pw.phase * sx_w
        p = geometry_plan(kernel.replace("bwd_data", "fwd"), pg, config, tab, dtype=problem.dtype,
                          in_channels=k_total, out_channels=c_total, bias=False, activation=None,
                          sy=(sx_n, g.stride[0] * sx_h, g.stride[1] * sx_w), weight=weight, y_offset=y_offset)
        p = dataclasses.replace(p, kernel=kernel)
        phases.append(Phase(p, ph.taps, pw.taps, y_offset))
    return DataGradPlan(kernel, config, tuple(phases), tuple(zeros), problem.dtype)


# ---- ahead-of-time compilation ------------------------------------------------------------------------

#: Triton's names of the pointer element types.
TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def role_dtypes(problem: ConvProblem) -> dict[str, str]:
    """Element dtype of each tensor argument of the forward kernel (for the data gradient: ``x`` is ``dy``,
    ``y_ptr`` is ``dx``)."""
    a, b = problem.operand_dtypes
    return {"x": a, "w_desc": b, "bias_ptr": problem.result_dtype, "y_ptr": problem.result_dtype}


def aot_specialization(plan: Plan, arg_names, dtypes: dict[str, str], descriptor_signature,
                       unaligned: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """``(signature, constexprs, attrs)`` for ``triton.compile(GluonASTSource(...))``, as Triton's JIT would
    specialize this plan's launch: integer arguments equal to 1 become constexprs, integers and (16-byte
    aligned, as torch allocates) pointers divisible by 16 get the divisibility attribute, but the pointers
    named in ``unaligned`` (a data-gradient phase's output starts inside ``dx``).
    ``descriptor_signature(tensor_map, dtype)`` gives a descriptor argument's type string."""
    scalars, constexprs = dict(plan.scalars), dict(plan.constexprs)
    constexprs["num_warps"] = plan.num_warps
    signature, consts, attrs = {}, {}, {}
    divisible = [["tt.divisibility", 16]]
    for index, name in enumerate(arg_names):
        if name == "x" and plan.x_map is not None:
            signature[name] = descriptor_signature(plan.x_map, dtypes["x"])
        elif name == "w_desc":
            signature[name] = descriptor_signature(plan.w_map, dtypes["w_desc"])
        elif name in ("x", "bias_ptr", "y_ptr"):
            signature[name] = "*" + TRITON_DTYPE[dtypes[name]]
            if name not in unaligned:
                attrs[(index,)] = divisible
        elif name in scalars:
            value = scalars[name]
            if value == 1:
                signature[name], consts[name] = "constexpr", 1
                continue
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(index,)] = divisible
        else:
            signature[name], consts[name] = "constexpr", constexprs[name]
    return signature, consts, attrs
