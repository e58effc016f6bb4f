"""What the plans of every direction share: descriptor and weight-matrix shapes, and which kernel can run what.

The checks here are the per-kernel gating of :mod:`conv_gluon.registry` (each entry's ``applies``): whether TMA
boxes can carry the input, whether a filter column's kernel fits the filter, whether 32-bit offsets reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.kit import declines
from conv_core.problem import ConvProblem, element_size

from .. import tiling
from ..configs import ArchTable, TileConfig

#: Filter rows of the kernels whose k-steps take a whole filter column, its taps sharing one input box (the
#: ``*_rows_box`` kernels: the forward's tall box, the data gradient at stride 1, the weight gradient's units).
ROWS = 3

#: The ways a kernel brings its input, the last part of its name (``<direction>_<input>``): gathered by a
#: producer partition, as TMA boxes, or as tall boxes of a filter column. Which kernels exist is the
#: registry's (:mod:`conv_gluon.registry`); the plans read how each brings its input from its name.
INPUTS = ("gather", "box", "rows_box")

#: Alignment (bytes) TMA needs of a tensor's base and of every stride but the last.
TMA_ALIGN = 16

#: The narrowest box row of ``bwd_weight_rows_box``: its MMAs go one box row at a time (the wgmma K is 16).
ROWS_MIN_WIDTH = 16


def rows_of(kernel: str) -> int:
    """Filter rows per k-step (forward) or unit (weight gradient) of candidate kernel ``kernel``: ``ROWS`` for a
    kernel of a filter column (``*_rows_box``), else 1."""
    return ROWS if kernel.endswith("_rows_box") else 1


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


# ---- support ------------------------------------------------------------------------------------------


def int32_issue(problem: ConvProblem, config: TileConfig | None = None) -> str | None:
    """Why 32-bit offsets cannot address the problem's tensors (the padded weight matrix, or the weight
    gradient's padded output gradient, included), or None. (The weight gradient's float32 partials are bounded
    by the table's ``max_workspace_mb``, within 32-bit offsets.)"""
    if problem.direction == "bwd_weight":
        return declines.int32_issue(problem, ("padded output gradient",
                                              Geometry.of(problem).pixels * dy_channels(problem)))
    if config is not None:
        return declines.int32_issue(problem, ("padded weight", weight_matrix(problem, config).numel))
    return declines.int32_issue(problem)


#: The box kernels that take 3D (NDHWC): ``fwd_box``, whose box tiles lie in one output plane and read, per depth
#: tap, one input plane of a rank-4 descriptor over the batch's N x D planes (``kernels/fwd.py``);
#: ``bwd_data_box``, which runs it per stride phase (every phase a stride-1 convolution of ``dy``, a depth phase's
#: planes of ``dx`` out); ``bwd_weight_box``, whose steps are boxes of one output plane of ``dy`` and, per depth tap,
#: of an input plane of ``x``. Not the filter columns' (``*_rows_box``).
BOXES_3D = ("fwd_box", "bwd_data_box", "bwd_weight_box")


def box_issue(problem: ConvProblem, config: TileConfig, kernel: str = "fwd_box") -> str | None:
    """Why the input cannot come as TMA boxes for ``kernel`` (a ``*_box`` one), or None."""
    if kernel not in BOXES_3D:
        reason = declines.ndim_issue(problem, (1, 2), elsewhere=f"{problem.direction}_gather")
        if reason:
            return (f"{reason}; of the box kernels only {', '.join(BOXES_3D)} take 3D so far (boxes of one plane "
                    "per depth tap; a filter column's boxes are not written for it)")
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
    """Why a kernel of a filter column (:func:`rows_of`) cannot run ``problem`` with ``config`` (beyond
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
    issue = box_issue(problem, config, kernel) if kernel.endswith("_box") else None
    if issue is None and rows_of(kernel) > 1:
        issue = rows_issue(problem, kernel, config, tab)
    return issue


def check_kernel(problem: ConvProblem, direction: str, kernel: str, config: TileConfig, tab: ArchTable) -> None:
    """Raise ``ValueError`` unless ``kernel`` is one of ``direction``'s (``<direction>_<input>``, :data:`INPUTS`)
    and can run ``problem`` with ``config`` (:func:`kernel_issue` finds nothing)."""
    known = tuple(f"{direction}_{way}" for way in INPUTS)
    if kernel not in known:
        raise ValueError(f"unknown {direction} kernel {kernel!r}; known: {known}")
    issue = kernel_issue(problem, kernel, config, tab)
    if issue:
        raise ValueError(f"{kernel} cannot run {problem.key}: {issue}")


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
