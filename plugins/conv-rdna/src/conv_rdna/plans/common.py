"""What every family's plan is made of: the :class:`Plan`, the kernels' shared scalar arguments (strides,
sizes, the fused epilogue, the weight read as it is or flipped), the split reduction's launch, and the data
gradient's stride phases as rdna's kernels run them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.kit.declines import interpreting
from conv_core.kit.launch import Launch, make_launch
from conv_core.kit.phases import Phase, data_gradient_phases
from conv_core.layout import dense_strides
from conv_core.problem import ConvProblem

from ..configs import ArchTable, SumSplits, TileConfig
from ..kernels.bwd_weight import reduce_splits

#: Triton specializes an integer argument on its divisibility by this: what the compiler knows of an
#: address without the kernel's hints.
COMPILER_DIVISIBILITY = 16


@dataclass(frozen=True)
class Plan:
    """Everything one candidate's ``run`` does, decided from the problem alone."""

    kernel: str
    config: TileConfig
    split: int
    launches: tuple[Launch, ...]
    #: float32 elements of scratch memory (0: none).
    workspace_elements: int = 0
    #: the workspace (or the result: the float32 accumulator, or a data gradient with tap-less phases) must
    #: be zeroed first.
    zero: str | None = None
    #: how many times the workspace is written and read back (``col2im_bwd_data``: once per chunk of images).
    workspace_fills: int = 1
    #: the weight the launches read (role ``b``): ``""`` as given, or a cached copy repacked by
    #: :func:`conv_rdna.launch.repack` (:data:`conv_rdna.plans.channels_first.WEIGHT_FORMS`).
    weight_form: str = ""
    #: parts of the workspace that launches bind under roles of their own, ``(role, first float32 word, float32
    #: words, dtype)``: Winograd's transformed operands and partial results (:func:`conv_core.kit.launch.workspace`).
    workspace_views: tuple[tuple[str, int, int, str], ...] = ()
    #: the problem's geometry (set by :func:`conv_rdna.registry.make_plan`), for the estimates
    geometry: Geometry | None = None

    @property
    def config_name(self) -> str:
        return self.config.name + (f"x{self.split}" if "bwd_weight" in self.kernel else "")

    @property
    def workspace_bytes(self) -> int:
        return 4 * self.workspace_elements


# ---- arguments ---------------------------------------------------------------------------------------


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def strides_ncdhw(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int, int]:
    """(batch, channel, depth, height, width) strides of a dense 3D, 4D or 5D tensor; the axes a lower rank lacks
    have stride 0 (their one index is 0)."""
    s = dense_strides(shape, layout)
    return (s[0], s[1], *(0,) * (5 - len(s)), *s[2:])


def strides_nchw(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int]:
    """(batch, channel, height, width) strides of a dense 3D or 4D tensor; 1D has height stride 0."""
    n, c, _, h, w = strides_ncdhw(shape, layout)
    return n, c, h, w


def tile_constexprs(config: TileConfig) -> dict:
    """The GEMM tile's constexprs."""
    return dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, INTERPRET=interpreting())


def tiled_launch(kernel, grid, pointers, scalars, constexprs, config) -> Launch:
    """:func:`~conv_core.kit.launch.make_launch` with ``config``'s warps and stages."""
    return make_launch(kernel, grid, pointers, scalars, constexprs, config.num_warps, config.num_stages)


def conv_scalars(g: Geometry) -> dict:
    return dict(BATCH=g.batch, C_G=g.cin, H=g.h, W=g.w, K_G=g.cout, P=g.p, Q=g.q, R=g.r, S=g.s,
                STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                DIL_H=g.dil[0], DIL_W=g.dil[1])


def depth_scalars(g: Geometry) -> dict:
    """The depth axis of the kernels that take 3D problems (:func:`~conv_rdna.kernels.common.depth_origin`):
    sizes, stride, dilation and the front padding plus one, all 1 below 3D, where the JIT compiles them in."""
    return dict(D=g.d, OD=g.od, TD=g.t, STRIDE_D=g.stride_d, PAD_D1=g.pad_d + 1, DIL_D=g.dil_d)


def tap_steps(g: Geometry) -> dict:
    """``STEP_T``, ``STEP_R``, ``STEP_S``: how far apart the taps of a data-gradient stride phase are along each
    axis, as the phased kernels take them."""
    return {f"STEP_{axis}": stride // math.gcd(stride, dil)
            for axis, stride, dil in zip("TRS", (g.stride_d, *g.stride), (g.dil_d, *g.dil))}


def named(prefix: str, strides) -> dict:
    """``{prefix}n``, ``{prefix}c``, ``{prefix}h``, ``{prefix}w`` of four strides; with five, ``{prefix}d`` too."""
    return {f"{prefix}{axis}": v for axis, v in zip("nchw" if len(strides) == 4 else "ncdhw", strides)}


def epilogue(problem: ConvProblem) -> dict:
    return dict(HAS_BIAS=problem.bias, ACTIVATION=problem.activation or "")


def pixel_vector(pixels: int, *strides: int) -> int:
    """``PIX_VEC`` of the kernels whose tile rows are channels-first pixels: the largest power of two up to 8
    elements (16 bytes of bf16) that divides an image's pixel count and the image and channel strides, so
    that runs of that many pixels are contiguous, aligned and masked alike (``pixels``: the tile rows')."""
    return math.gcd(8, pixels, *strides)


def row_vector(layout: str, *rows: int) -> int:
    """``ROW_VEC`` of the kernels that decode pixel rows (``kernels.common.row_length``): 16 in channels-first,
    whose loads and stores run along the rows, where every row length given is a multiple of 16; else 1 (in
    channels-last the rows' alignment changes no load, so that no image size compiles a kernel again)."""
    aligned = all(row % COMPILER_DIVISIBILITY == 0 for row in rows)
    return COMPILER_DIVISIBILITY if layout == "channels_first" and aligned else 1


def divisor(d: int) -> tuple[int, int]:
    """``(MAGIC, SHIFT)`` with which ``kernels.common.divide`` divides by ``d`` (``1 <= d < 2**31``): ``SHIFT =
    ceil(log2 d)`` and ``MAGIC = floor(2**32 * (2**SHIFT - d) / d) + 1``, below 2**32, passed as the signed 32-bit
    integer of the same bits so that every divisor gives the kernel the same argument types."""
    shift = (d - 1).bit_length()
    magic = (2**32 * (2**shift - d)) // d + 1
    return (magic - 2**32 if magic >= 2**31 else magic), shift


def divisors(**by_name: int) -> dict:
    """``{NAME_MAGIC, NAME_SHIFT}`` of :func:`divisor` for each ``NAME=d``: the kernels' pixel decoding."""
    scalars = {}
    for name, d in by_name.items():
        scalars[f"{name}_MAGIC"], scalars[f"{name}_SHIFT"] = divisor(d)
    return scalars


def phase_output(problem: ConvProblem, first=(0, 0), step=(1, 1)) -> dict:
    """The result's scalar arguments of a forward kernel writing every ``step``-th pixel of it from ``first``
    (``Y_OFF``, ``syn``, ``syc``, ``syh``, ``syw``): all of it, or one stride phase of a data gradient's ``dx``."""
    syn, syc, syh, syw = strides_nchw(problem.result_shape, problem.layout)
    return dict(Y_OFF=first[0] * syh + first[1] * syw, syn=syn, syc=syc, syh=step[0] * syh, syw=step[1] * syw)


def weight_scalars(problem: ConvProblem) -> dict:
    """The weight as the general kernels address it: its strides (``swt``: along the filter depth, 0 below 3D)."""
    return dict(zip(("swk", "swc", "swt", "swr", "sws"), strides_ncdhw(problem.weight_shape, problem.layout)))


def forward_weight(problem: ConvProblem) -> dict:
    """The weight as a forward kernel addressed through an offset and strides reads it (``W_OFF``, per group
    ``swg``, produced channel ``swo``, reduced channel ``swi``, taps ``swr``, ``sws``): as it is."""
    g = Geometry.of(problem)
    swk, swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)
    return dict(W_OFF=0, swg=g.cout * swk, swo=swk, swi=swc, swr=swr, sws=sws)


def flipped_weight(problem: ConvProblem, phase: Phase | None = None) -> dict:
    """The same for the data gradient as a forward convolution of ``dy`` (:func:`bwd_data_phases`; at stride 1
    its one phase): ``w'[o=c, i=k, t_r, t_s] = w[k, c, taps_r[t_r], taps_s[t_s]]``, produced and reduced
    channels swapped and the phase's taps walked from its first (largest) one down by its tap step (negative
    strides), so no copy of the weight is made."""
    g = Geometry.of(problem)
    phase = phase or single_phase(g)
    swk, swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)
    rows, cols = phase.rows, phase.cols
    return dict(W_OFF=rows.taps[0] * swr + cols.taps[0] * sws, swg=g.cout * swk, swo=swc, swi=swk,
                swr=-rows.tap_step * swr, sws=-cols.tap_step * sws)


# ---- the data gradient's stride phases ---------------------------------------------------------------


def bwd_data_phases(g: Geometry, *, leave_zeros: bool = False) -> tuple[Phase, ...]:
    """The data gradient of ``g`` as stride-1 forward convolutions of ``dy``
    (:func:`conv_core.kit.phases.data_gradient_phases`), one per stride phase of ``dx`` that has pixels (one at
    stride 1); none where rdna's kernels do not run it so: a dilated strided layer (its phases' taps would not
    be every stride-th one, which the kernels' weight strides and ``STEP_*`` assume), or a phase with pixels but
    no tap (a stride larger than the filter: its pixels are zeros) unless ``leave_zeros``, where such phases are
    left out and the caller writes their zeros (:func:`bwd_data_zeros`)."""
    if g.stride != (1, 1) and g.dil != (1, 1):
        return ()
    phases = data_gradient_phases(g)
    if not leave_zeros and not all(phase.has_taps for phase in phases):
        return ()
    return tuple(phase for phase in phases if phase.has_taps)


def bwd_data_zeros(g: Geometry) -> bool:
    """Whether some stride phase of ``dx`` has pixels but no tap (``bwd_data_phases(g, leave_zeros=True)`` leaves
    it out): a 1x1 filter at stride 2, whose data gradient is zero at three pixels of four."""
    return bool(bwd_data_phases(g, leave_zeros=True)) and not bwd_data_phases(g)


def single_phase(g: Geometry) -> Phase:
    """The stride-1 data gradient's one phase."""
    assert g.stride == (1, 1), "the data gradient is one forward convolution at stride 1 only"
    return bwd_data_phases(g)[0]


# ---- the split reduction (kernels/bwd_weight.py) -------------------------------------------------------


def pixel_ranges(pixels: int, block: int, split: int) -> tuple[int, int]:
    """``(pixels per split, splits)``: ``split`` ranges of whole ``block``-pixel blocks, fewer where the
    last ones would be empty."""
    per_split = cdiv(cdiv(pixels, block), split) * block
    return per_split, cdiv(pixels, per_split)


def reduce_launch(numel: int, splits: int, tab: ArchTable) -> Launch:
    """``reduce_splits`` over a float32 workspace of ``splits`` dense copies of a ``numel``-element result."""
    tile = tab.sum_splits
    rows = sum_splits_rows(tile, splits)
    return Launch(reduce_splits, (cdiv(numel, tile.BLOCK // rows),), (("ws_ptr", "workspace"), ("out_ptr", "out")),
                  (("NUMEL", numel), ("SPLITS", splits)),
                  (("BLOCK", tile.BLOCK), ("SPLIT_ROWS", rows), ("INTERPRET", interpreting())), tile.num_warps, 1)


def sum_splits_rows(tile: SumSplits, splits: int) -> int:
    """Splits ``reduce_splits`` loads at once: the largest power of two up to ``splits``, at most the table's
    ``SPLIT_ROWS``. No row of the first step is masked off, and with one split the kernel is a cast."""
    return min(tile.SPLIT_ROWS, 1 << (splits.bit_length() - 1))
