"""What the kernels are launched with: the one place that turns a problem into kernel arguments.

:func:`make_plan` maps ``(problem, family, configuration)`` to a :class:`Plan`: the launches (kernel,
grid, scalar arguments, constexprs, warps, stages), which tensor each pointer argument is, and the
float32 workspace. It needs no tensors: strides are those of dense tensors in ``problem.layout``,
which is what ``Candidate.run`` receives (:mod:`conv_rdna.launch` checks it). The same plan drives the
launch and the ahead-of-time compile checks (:mod:`conv_rdna.specialization`, used by :mod:`conv_rdna.aot`),
so the compile test compiles exactly what ships.

1D problems run as 2D with ``H = 1`` (height strides 0). Tensor offsets are 32-bit: problems whose
tensors reach 2**31 elements are declined (:func:`int32_issue`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.launch_site import LaunchSite
from conv_core.problem import ConvProblem
from conv_core.layout import dense_strides

from .configs import ArchTable, SumSplits, TileConfig, depthwise_split_count, split_count
from .kernels.bwd_data import conv_bwd_data_phased
from .kernels.bwd_weight import conv_bwd_weight_partial, reduce_splits
from .kernels.channels_first import conv_bwd_weight_cf, conv_fwd_cf
from .kernels.col2im import conv_col2im
from .kernels.conv3x3 import conv_fwd_3x3
from .kernels.depthwise import conv_dw_bwd_data, conv_dw_bwd_weight, conv_dw_fwd
from .kernels.few_channels import conv_fwd_few_cin, conv_fwd_few_cout
from .kernels.few_channels_bwd import conv_bwd_weight_few_cin, conv_bwd_weight_few_cout
from .kernels.gemm1x1 import conv_gemm1x1
from .kernels.implicit_gemm import conv_fwd_implicit_gemm

#: Largest element count (and so offset) of any tensor a kernel indexes with 32-bit arithmetic.
INT32_ELEMENTS = 2**31 - 1
#: Largest grid size along axes 1 and 2.
GRID_YZ_LIMIT = 65535

#: Candidate kernels (the ``kernel`` part of the id) -> the configuration family they take.
KERNELS = {
    "implicit_gemm": "implicit_gemm",
    "conv3x3": "conv3x3",
    "gemm1x1": "gemm1x1",
    "bwd_data_phased": "bwd_data",
    "bwd_weight_split": "bwd_weight",
    "bwd_weight_atomic": "bwd_weight",
    "depthwise_fwd": "depthwise_fwd",
    "depthwise_bwd_data": "depthwise_bwd_data",
    "depthwise_bwd_weight": "depthwise_bwd_weight",
    "few_channels_in": "few_channels_in",
    "few_channels_out": "few_channels_out",
    "few_channels_in_bwd_weight": "few_channels_in_bwd_weight",
    "few_channels_out_bwd_weight": "few_channels_out_bwd_weight",
    "few_channels_in_bwd_data": "few_channels_in_bwd_data",
    "few_channels_out_bwd_data": "few_channels_out_bwd_data",
    "col2im_bwd_data": "col2im_bwd_data",
    "winograd_f4x3": "winograd",
    "winograd_f4x3_bwd_weight": "winograd_bwd_weight",
    "implicit_gemm_cf": "implicit_gemm_cf",
    "bwd_data_cf": "implicit_gemm_cf",
    "bwd_weight_cf": "bwd_weight_cf",
}

#: The channels-first kernels (``kernels/channels_first.py``), one per direction.
CHANNELS_FIRST_KERNELS = {"fwd": "implicit_gemm_cf", "bwd_data": "bwd_data_cf", "bwd_weight": "bwd_weight_cf"}

#: The depthwise kernels (``groups == in_channels``), one per direction; they take ``StencilConfig``.
DEPTHWISE_KERNELS = ("depthwise_fwd", "depthwise_bwd_data", "depthwise_bwd_weight")

#: Triton specializes an integer argument on its divisibility by this: what the compiler knows of an
#: address without the kernel's hints.
COMPILER_DIVISIBILITY = 16

def interpreting() -> bool:
    """Whether Triton kernels run under the CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class Launch:
    """One kernel launch. ``pointers`` maps pointer parameters to roles, bound at run time:
    ``a``, ``b`` (the operands), ``bias``, ``out`` (the result), ``workspace`` (float32 scratch)."""

    kernel: object
    grid: tuple[int, ...]
    pointers: tuple[tuple[str, str], ...]
    scalars: tuple[tuple[str, int], ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    num_stages: int

    @property
    def name(self) -> str:
        return self.kernel.__name__

    @functools.cached_property
    def site(self) -> LaunchSite:
        """The launch with everything but its tensors bound (launched without the JIT's per-call work)."""
        return LaunchSite(self.kernel, self.grid, tuple(name for name, _ in self.pointers),
                          {**dict(self.scalars), **dict(self.constexprs)},
                          dict(num_warps=self.num_warps, num_stages=self.num_stages))


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
    #: :func:`conv_rdna.launch.repack` (:data:`WEIGHT_FORMS`).
    weight_form: str = ""
    #: parts of the workspace that launches bind under roles of their own, ``(role, first float32 word, float32
    #: words, dtype)``: Winograd's transformed operands and partial results (:func:`conv_rdna.launch.workspace`).
    workspace_views: tuple[tuple[str, int, int, str], ...] = ()

    @property
    def config_name(self) -> str:
        return self.config.name + (f"x{self.split}" if "bwd_weight" in self.kernel else "")

    @property
    def workspace_bytes(self) -> int:
        return 4 * self.workspace_elements


# ---- geometry --------------------------------------------------------------------------------------


def strides_nchw(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int]:
    """(batch, channel, height, width) strides of a dense 3D or 4D tensor; 1D has height stride 0."""
    s = dense_strides(shape, layout)
    return s if len(s) == 4 else (s[0], s[1], 0, s[2])


def int32_issue(problem: ConvProblem) -> str | None:
    """Why 32-bit offsets cannot address the problem's tensors, or None."""
    for what, shape in (("input", problem.input_shape), ("weight", problem.weight_shape),
                        ("output", problem.output_shape)):
        if math.prod(shape) > INT32_ELEMENTS:
            return (f"the {what} has {math.prod(shape)} elements; the kernels use 32-bit offsets "
                    f"(at most {INT32_ELEMENTS} elements per tensor)")
    return None


def grid_issue(problem: ConvProblem) -> str | None:
    """Why the grid would be too large along axis 1 (groups x stride phases), or None."""
    phases = math.prod(problem.stride) if problem.direction == "bwd_data" else 1
    if problem.groups * phases > GRID_YZ_LIMIT:
        return f"groups x stride phases = {problem.groups * phases} exceeds the grid limit {GRID_YZ_LIMIT}"
    return None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- plans -------------------------------------------------------------------------------------------


def make_plan(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The launches of candidate kernel ``kernel`` (a key of :data:`KERNELS`) with ``config``."""
    builder = {"depthwise_fwd": _depthwise_fwd, "depthwise_bwd_data": _depthwise_bwd_data,
               "depthwise_bwd_weight": _depthwise_bwd_weight,
               "implicit_gemm": _implicit_gemm, "conv3x3": _conv3x3, "gemm1x1": _gemm1x1, "bwd_data_phased": _bwd_data,
               "bwd_weight_split": _bwd_weight, "bwd_weight_atomic": _bwd_weight,
               "few_channels_in": _few_cin, "few_channels_out": _few_cout,
               "few_channels_in_bwd_weight": _few_channels_bwd_weight,
               "few_channels_out_bwd_weight": _few_channels_bwd_weight,
               "few_channels_in_bwd_data": _few_cout, "few_channels_out_bwd_data": _few_cin,
               "col2im_bwd_data": _col2im_bwd_data,
               "winograd_f4x3": _winograd, "winograd_f4x3_bwd_weight": _winograd_bwd_weight,
               "implicit_gemm_cf": _implicit_gemm_cf, "bwd_data_cf": _bwd_data_cf,
               "bwd_weight_cf": _bwd_weight_cf}[kernel]
    return builder(problem, kernel, config, tab)


def _winograd(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    from .winograd import make_plan as winograd_plan  # the family's host module (it imports this one)

    return winograd_plan(problem, kernel, config, tab)


def _winograd_bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    from .winograd_bwd_weight import make_plan as winograd_bwd_weight_plan  # as _winograd

    return winograd_bwd_weight_plan(problem, kernel, config, tab)


def make_launch(kernel, grid, pointers: dict, scalars: dict, constexprs: dict, num_warps: int,
                num_stages: int = 1) -> Launch:
    """A :class:`Launch` from dicts, its arguments checked against the kernel's parameters here, on the host:
    Triton's interpreter ignores an unknown keyword that the compiled launch rejects."""
    given = [*pointers, *scalars, *constexprs]
    if sorted(given) != sorted(kernel.arg_names):
        raise TypeError(f"{kernel.__name__}: arguments {sorted(set(given) ^ set(kernel.arg_names))} do not match "
                        "its parameters")
    return Launch(kernel, tuple(grid), tuple(pointers.items()), tuple(scalars.items()), tuple(constexprs.items()),
                  num_warps, num_stages)


def workspace_layout(*parts: tuple[str, int, str]) -> tuple[tuple[tuple[str, int, int, str], ...], int]:
    """:attr:`Plan.workspace_views` of ``parts`` (``(role, float32 words, dtype)``) one after the other, and the
    float32 words they take together."""
    views, first = [], 0
    for role, words, dtype in parts:
        views.append((role, first, words, dtype))
        first += words
    return tuple(views), first


def _tiles(config: TileConfig) -> dict:
    return dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, INTERPRET=interpreting())


def _launch(kernel, grid, pointers, scalars, constexprs, config: TileConfig) -> Launch:
    """:func:`make_launch` with ``config``'s warps and stages."""
    return make_launch(kernel, grid, pointers, scalars, constexprs, config.num_warps, config.num_stages)


def _conv_scalars(g: Geometry) -> dict:
    return dict(BATCH=g.batch, C_G=g.cin, H=g.h, W=g.w, K_G=g.cout, P=g.p, Q=g.q, R=g.r, S=g.s,
                STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                DIL_H=g.dil[0], DIL_W=g.dil[1])


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


def _divisors(**divisors: int) -> dict:
    """``{NAME_MAGIC, NAME_SHIFT}`` of :func:`divisor` for each ``NAME=d``: the kernels' pixel decoding."""
    scalars = {}
    for name, d in divisors.items():
        scalars[f"{name}_MAGIC"], scalars[f"{name}_SHIFT"] = divisor(d)
    return scalars


def phase_output(problem: ConvProblem, first=(0, 0), step=(1, 1)) -> dict:
    """The result's scalar arguments of a forward kernel writing every ``step``-th pixel of it from ``first``
    (``Y_OFF``, ``syn``, ``syc``, ``syh``, ``syw``): all of it, or one stride phase of a data gradient's ``dx``."""
    syn, syc, syh, syw = strides_nchw(problem.result_shape, problem.layout)
    return dict(Y_OFF=first[0] * syh + first[1] * syw, syn=syn, syc=syc, syh=step[0] * syh, syw=step[1] * syw)


def _named(prefix: str, strides) -> dict:
    return {f"{prefix}{axis}": v for axis, v in zip("nchw", strides)}


def _epilogue(problem: ConvProblem) -> dict:
    return dict(HAS_BIAS=problem.bias, ACTIVATION=problem.activation or "")


def _weight_scalars(problem: ConvProblem) -> dict:
    """The weight as the general kernels address it: its four strides."""
    return dict(zip(("swk", "swc", "swr", "sws"), strides_nchw(problem.weight_shape, problem.layout)))


def forward_weight(problem: ConvProblem) -> dict:
    """The weight as a forward kernel addressed through an offset and strides reads it (``W_OFF``, per group
    ``swg``, produced channel ``swo``, reduced channel ``swi``, taps ``swr``, ``sws``): as it is."""
    g = Geometry.of(problem)
    swk, swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)
    return dict(W_OFF=0, swg=g.cout * swk, swo=swk, swi=swc, swr=swr, sws=sws)


def flipped_weight(problem: ConvProblem, phase: Phase | None = None) -> dict:
    """The same for the data gradient as a forward convolution of ``dy`` (:func:`bwd_data_phases`; at stride 1
    its one phase): ``w'[o=c, i=k, t_r, t_s] = w[k, c, r0 + sh*(taps_h-1-t_r), s0 + sw*(taps_w-1-t_s)]``,
    produced and reduced channels swapped and the phase's taps walked backwards from its last one (negative
    strides), so no copy of the weight is made."""
    g = Geometry.of(problem)
    phase = phase or _single_phase(g)
    swk, swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)
    (sh, sw_), (r0, s0), f = g.stride, phase.tap0, phase.geometry
    return dict(W_OFF=(r0 + sh * (f.r - 1)) * swr + (s0 + sw_ * (f.s - 1)) * sws, swg=g.cout * swk, swo=swc,
                swi=swk, swr=-sh * swr, sws=-sw_ * sws)


def _forward_gemm_args(problem: ConvProblem, config: TileConfig, g: Geometry, weight: dict, output: dict) -> tuple:
    """(grid, pointers, scalars, constexprs) shared by the forward implicit GEMMs: output pixels x output
    channels tiles, one grid column per group, operands through their strides, the fused epilogue.
    ``g`` is the convolution the kernel computes (the problem's, or a phase of its data gradient as a
    forward convolution of ``dy``), ``weight`` and ``output`` the weight's and the result's scalar arguments."""
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**_conv_scalars(g), **_named("sx", sx), **weight, **output}
    grid = (_cdiv(g.batch * g.p * g.q, config.block_m) * _cdiv(g.cout, config.block_n), g.groups)
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**_epilogue(problem), **_tiles(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.q)}
    return grid, pointers, scalars, constexprs


def _implicit_gemm(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    sy = strides_nchw(problem.result_shape, problem.layout)
    grid, pointers, scalars, constexprs = _forward_gemm_args(problem, config, Geometry.of(problem),
                                                             _weight_scalars(problem), _named("sy", sy))
    return Plan(kernel, config, 1, (_launch(conv_fwd_implicit_gemm, grid, pointers, scalars, constexprs, config),))


def three_by_three(problem: ConvProblem) -> bool:
    """Whether ``conv3x3`` runs ``problem``: a 2D 3x3 filter, forward at any stride, or the data gradient at stride 1
    (then one forward convolution of ``dy``, :func:`bwd_data_phases`)."""
    return problem.filter_size == (3, 3) and (problem.direction == "fwd"
                                              or (problem.direction == "bwd_data" and problem.stride == (1, 1)))


def _conv3x3(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``conv_fwd_3x3`` over the problem's forward convolution, or over ``dy`` with the weight transposed and
    flipped by strides (the stride-1 data gradient's one phase); the filter size is the kernel's constant."""
    g = Geometry.of(problem)
    if problem.direction == "fwd":
        on, weight = g, forward_weight(problem)
    else:
        phase = _single_phase(g)
        on, weight = phase.geometry, flipped_weight(problem, phase)
    grid, pointers, scalars, constexprs = _forward_gemm_args(problem, config, on, weight, phase_output(problem))
    del scalars["R"], scalars["S"]
    return Plan(kernel, config, 1, (_launch(conv_fwd_3x3, grid, pointers, scalars, constexprs, config),))


def _gemm1x1(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    sa_shape, out_shape = problem.operand_shapes[0], problem.result_shape
    sa, sy = strides_nchw(sa_shape, problem.layout), strides_nchw(out_shape, problem.layout)
    swk, swc, _, _ = strides_nchw(problem.weight_shape, problem.layout)
    assert sa[2] in (0, g.w * sa[3]) and sy[2] in (0, g.w * sy[3]), "dense tensors merge H and W"
    forward = problem.direction == "fwd"
    c_red, c_out = (g.cin, g.cout) if forward else (g.cout, g.cin)
    sw_red, sw_out = (swc, swk) if forward else (swk, swc)
    scalars = dict(BATCH=g.batch, HW=g.h * g.w, C_RED=c_red, C_OUT=c_out, A_OFF=0, san=sa[0], sac=sa[1], sap=sa[3],
                   sw_red=sw_red, sw_out=sw_out, sw_group=g.cout * swk, syn=sy[0], syc=sy[1], syp=sy[3])
    grid = (_cdiv(g.batch * g.h * g.w, config.block_m) * _cdiv(c_out, config.block_n), g.groups)
    pointers = dict(a_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    pixels_contiguous = sa[3] == 1 and sy[3] == 1  # channels first (or one channel)
    pix_vec = pixel_vector(g.h * g.w, sa[0], sa[1], sy[0], sy[1]) if pixels_contiguous else 1
    constexprs = {"PIX_VEC": pix_vec, **_epilogue(problem), **_tiles(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.h * g.w)}
    return Plan(kernel, config, 1, (_launch(conv_gemm1x1, grid, pointers, scalars, constexprs, config),))


#: Most bytes of float32 ``Z`` that ``col2im_bwd_data`` holds at once: it runs on chunks of whole images
#: below this (the ResNet stem at batch 32 needs 236 MB for the whole batch: 8 images a chunk).
COL2IM_WORKSPACE_BYTES = 64 << 20


def _col2im_bwd_data(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``col2im_bwd_data`` (kernels/col2im.py): per chunk of images, ``Z = dy @ w`` into the float32 workspace,
    then the gather of ``dx`` from ``Z``; the workspace holds one chunk's ``Z``."""
    g = Geometry.of(problem)
    z_cols = g.groups * g.cin * g.r * g.s
    chunk = max(1, min(g.batch, COL2IM_WORKSPACE_BYTES // (4 * g.p * g.q * z_cols)))
    launches = []
    for n0 in range(0, g.batch, chunk):
        images = min(chunk, g.batch - n0)
        launches += [_col2im_gemm(problem, g, config, n0, images), _col2im_gather(problem, g, tab, n0, images)]
    return Plan(kernel, config, 1, tuple(launches), chunk * g.p * g.q * z_cols,
                workspace_fills=_cdiv(g.batch, chunk))


def _col2im_gemm(problem: ConvProblem, g: Geometry, config: TileConfig, n0: int, images: int) -> Launch:
    """``conv_gemm1x1`` on ``images`` images of ``dy`` from image ``n0``: ``dy``'s channels reduced against the
    weight's rows, whose ``C_G * R * S`` columns (in the weight's memory order: ``c*swc + r*swr + s*sws``)
    are ``Z``'s, every group's side by side in a row of ``Z``. ``config`` tiles it."""
    sdy = strides_nchw(problem.output_shape, problem.layout)
    swk = strides_nchw(problem.weight_shape, problem.layout)[0]
    assert sdy[2] in (0, g.q * sdy[3]), "dense dy merges P and Q"
    cols = g.cin * g.r * g.s
    z_cols = g.groups * cols
    scalars = dict(BATCH=images, HW=g.p * g.q, C_RED=g.cout, C_OUT=cols, A_OFF=n0 * sdy[0], san=sdy[0],
                   sac=sdy[1], sap=sdy[3], sw_red=swk, sw_out=1, sw_group=g.cout * swk,
                   syn=g.p * g.q * z_cols, syc=1, syp=z_cols)
    grid = (_cdiv(images * g.p * g.q, config.block_m) * _cdiv(cols, config.block_n), g.groups)
    pointers = dict(a_ptr="a", w_ptr="b", bias_ptr="workspace", y_ptr="workspace")
    constexprs = dict(PIX_VEC=1, HAS_BIAS=False, ACTIVATION="", **_tiles(config), GROUP_M=config.group_m,
                      ROW_VEC=row_vector(problem.layout, g.p * g.q))
    return _launch(conv_gemm1x1, grid, pointers, scalars, constexprs, config)


def _col2im_gather(problem: ConvProblem, g: Geometry, tab: ArchTable, n0: int, images: int) -> Launch:
    """``conv_col2im`` on the same images: one grid plane per stride phase, and as many elements (pixels x
    channels) a program as the table's split reduction sums (``reduce``: both are passes over float32
    partials)."""
    swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)[1:]
    (sh, sw_), (dh, dw) = g.stride, g.dil
    h_ph, w_ph = _cdiv(g.h, sh), _cdiv(g.w, sw_)  # the largest stride phase
    scalars = dict(BATCH=images, N0=n0, H=g.h, W=g.w, P=g.p, Q=g.q, R=g.r, S=g.s, PAD_H=g.pad[0], PAD_W=g.pad[1],
                   DIL_H=dh, DIL_W=dw, H_PH=h_ph, W_PH=w_ph, Z_COLS=g.groups * g.cin * g.r * g.s, szc=swc, szr=swr,
                   szs=sws, **_named("sx", strides_nchw(problem.input_shape, problem.layout)))
    c_pad = _pow2_at_least(g.cin)
    block_m = max(tab.reduce_block // c_pad, 16)
    constexprs = dict(C_G=g.cin, STRIDE_H=sh, STRIDE_W=sw_, STEP_H=sh // math.gcd(sh, dh),
                      STEP_W=sw_ // math.gcd(sw_, dw), BLOCK_M=block_m, C_PAD=c_pad, INTERPRET=interpreting())
    return Launch(conv_col2im, (_cdiv(images * h_ph * w_ph, block_m), g.groups, sh * sw_),
                  (("z_ptr", "workspace"), ("dx_ptr", "out")), tuple(scalars.items()), tuple(constexprs.items()),
                  tab.reduce_warps, 1)


def _bwd_data(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    sdy = strides_nchw(problem.output_shape, problem.layout)
    sdx = strides_nchw(problem.input_shape, problem.layout)
    (sh, sw_), (dh, dw) = g.stride, g.dil
    h_ph, w_ph = _cdiv(g.h, sh), _cdiv(g.w, sw_)
    scalars = {**_conv_scalars(g), "STEP_R": sh // math.gcd(sh, dh), "STEP_S": sw_ // math.gcd(sw_, dw),
               "H_PH": h_ph, "W_PH": w_ph, **_named("sdy", sdy), **_weight_scalars(problem), **_named("sdx", sdx)}
    grid = (_cdiv(g.batch * h_ph * w_ph, config.block_m) * _cdiv(g.cin, config.block_n), g.groups * sh * sw_)
    pointers = dict(dy_ptr="a", w_ptr="b", dx_ptr="out")
    constexprs = {**_tiles(config), "GROUP_M": config.group_m, "ROW_VEC": row_vector(problem.layout, w_ph, g.w)}
    return Plan(kernel, config, 1, (_launch(conv_bwd_data_phased, grid, pointers, scalars, constexprs, config),))


def pixel_ranges(pixels: int, block: int, split: int) -> tuple[int, int]:
    """``(pixels per split, splits)``: ``split`` ranges of whole ``block``-pixel blocks, fewer where the
    last ones would be empty."""
    per_split = _cdiv(_cdiv(pixels, block), split) * block
    return per_split, _cdiv(pixels, per_split)


def _bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    atomic = kernel == "bwd_weight_atomic"
    numel = math.prod(problem.weight_shape)
    per_split, split = pixel_ranges(g.batch * g.p * g.q, config.block_k,
                                    split_count(tab, problem, config, INT32_ELEMENTS))

    # Where the partial kernel writes, and what follows it.
    float32_result = problem.result_dtype == "float32"
    if atomic:
        target, workspace, zero = ("out", 0, "out") if float32_result else ("workspace", numel, "workspace")
    else:
        target, workspace, zero = ("out", 0, None) if split == 1 else ("workspace", split * numel, None)
    sx = strides_nchw(problem.input_shape, problem.layout)
    sdy = strides_nchw(problem.output_shape, problem.layout)
    so = strides_nchw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**_conv_scalars(g), "PIX_PER_SPLIT": per_split, **_divisors(P=g.p, Q=g.q), **_named("sx", sx),
               **_named("sdy", sdy), "so_split": numel if (target == "workspace" and not atomic) else 0,
               **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    grid = (_cdiv(g.cout, config.block_m) * _cdiv(g.cin, config.block_n) * g.r * g.s, g.groups, split)
    constexprs = {"ATOMIC": atomic, "CHANNELS_LAST": problem.layout == "channels_last", **_tiles(config),
                  "ROW_VEC": row_vector(problem.layout, g.q)}
    launches = [_launch(conv_bwd_weight_partial, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars,
                        constexprs, config)]
    if target == "workspace":  # sum the partials in split order (atomics: one buffer), cast to the result
        launches.append(_reduce_launch(numel, 1 if atomic else split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace, zero)


def _reduce_launch(numel: int, splits: int, tab: ArchTable) -> Launch:
    """``reduce_splits`` over a float32 workspace of ``splits`` dense copies of a ``numel``-element result."""
    tile = tab.sum_splits
    rows = sum_splits_rows(tile, splits)
    return Launch(reduce_splits, (_cdiv(numel, tile.BLOCK // rows),), (("ws_ptr", "workspace"), ("out_ptr", "out")),
                  (("NUMEL", numel), ("SPLITS", splits)),
                  (("BLOCK", tile.BLOCK), ("SPLIT_ROWS", rows), ("INTERPRET", interpreting())), tile.num_warps, 1)


def sum_splits_rows(tile: SumSplits, splits: int) -> int:
    """Splits ``reduce_splits`` loads at once: the largest power of two up to ``splits``, at most the table's
    ``SPLIT_ROWS``. No row of the first step is masked off, and with one split the kernel is a cast."""
    return min(tile.SPLIT_ROWS, 1 << (splits.bit_length() - 1))


# ---- channels first (kernels/channels_first.py) -----------------------------------------------------


def flat_pixels(g: Geometry) -> bool:
    """Whether output pixel ``p*Q + q`` reads input pixel ``p*W + q`` plus a per-tap constant (stride 1 and
    rows of equal length): the channels-first kernels' ``FLAT`` addressing."""
    return g.stride == (1, 1) and g.q == g.w


def inside_pixels(g: Geometry) -> bool:
    """Whether every tap of every output pixel reads inside the image (no padding on either side), with
    :func:`flat_pixels` addressing: the channels-first kernels' ``INSIDE``, which drops the tap bounds."""
    reach_h, reach_w = g.p + g.dil[0] * (g.r - 1), g.q + g.dil[1] * (g.s - 1)
    return flat_pixels(g) and g.pad == (0, 0) and reach_h <= g.h and reach_w <= g.w


def pipelined_pixels(tab: ArchTable, g: Geometry, every_tap: bool) -> bool:
    """Whether a channels-first kernel runs its plain reduction loop, which the compiler pipelines with
    asynchronous copies, rather than its register prefetch: on architectures that have the copies (the
    table's ``channels_first_async_copies``), where its pixel loads are aligned vectors the compiler can see
    by itself (an image's pixel count a multiple of :data:`COMPILER_DIVISIBILITY`: the pipeliner drops the
    kernels' ``PIX_VEC`` hints, and a load it cannot copy falls back to single elements), at ``every_tap``
    (the weight gradient's ``dy``, whose pixels are the tile's own) or else where no tap shifts them
    (:func:`inside_pixels`: the forward's input). Where only the forward's weight tile could be copied, the
    prefetch loop is the faster (H100: docs/benchmarks/2026-11-21-h100-rdna-11.md)."""
    aligned = every_tap or inside_pixels(g)
    return tab.channels_first_async_copies and aligned and (g.p * g.q) % COMPILER_DIVISIBILITY == 0


#: Repacked weights (:attr:`Plan.weight_form`): ``[R, S, reduced channels per group, produced channels]``,
#: the produced channels contiguous. ``"taps_outer"`` is the forward's (reduced: input channels); for the
#: data gradient as a forward convolution of ``dy``, ``"taps_outer_flipped"`` transposes the channels and
#: flips the taps.
WEIGHT_FORMS = ("taps_outer", "taps_outer_flipped")


def packed_weight(problem: ConvProblem, phase: Phase | None = None) -> dict:
    """The weight as ``conv_fwd_cf`` reads a :data:`WEIGHT_FORMS` copy of it: the forward's, or (``phase``)
    the flipped copy for that stride phase of the data gradient (:func:`bwd_data_phases`). The phase's tap
    ``t`` is the weight's ``r0 + stride*(taps-1-t)`` (:func:`flipped_weight`), which in the copy, whose taps
    run backwards, is ``R-1-r0-stride*(taps-1) + stride*t``: an offset and positive strides."""
    g = Geometry.of(problem)
    produced, reduced = (g.cin, g.cout) if phase else (g.cout, g.cin)
    sws = reduced * produced * g.groups
    weight = dict(W_OFF=0, swg=produced, swo=1, swi=produced * g.groups, swr=g.s * sws, sws=sws)
    if phase is None:
        return weight
    (sh, sw_), (r0, s0), f = g.stride, phase.tap0, phase.geometry
    first = (g.r - 1 - r0 - sh * (f.r - 1)) * weight["swr"] + (g.s - 1 - s0 - sw_ * (f.s - 1)) * sws
    return {**weight, "W_OFF": first, "swr": sh * weight["swr"], "sws": sw_ * sws}


def _cf_forward_launch(problem: ConvProblem, config: TileConfig, tab: ArchTable, g: Geometry, weight: dict,
                       first=(0, 0), step=(1, 1)) -> Launch:
    """``conv_fwd_cf`` over geometry ``g`` (operand ``a`` -> the result): the problem's forward convolution, or
    a stride phase of its data gradient on ``dy``, writing every ``step``-th pixel of the result from ``first``."""
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    output = phase_output(problem, first, step)
    scalars = {**_conv_scalars(g), "PQ": g.p * g.q, **_named("sx", sx), **weight, **output}
    grid = (g.batch * _cdiv(g.p * g.q, config.block_m) * _cdiv(g.cout, config.block_n), g.groups)
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {"FLAT": flat_pixels(g), "INSIDE": inside_pixels(g),
                  "PIX_VEC": pixel_vector(g.p * g.q, sx[0], sx[1], output["syn"], output["syc"]),
                  "DENSE_Y": step == (1, 1), "PIPELINED": pipelined_pixels(tab, g, every_tap=False),
                  **_epilogue(problem), **_tiles(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.p * g.q)}
    return _launch(conv_fwd_cf, grid, pointers, scalars, constexprs, config)


def _implicit_gemm_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """With more than one tap a step's weight tile, read from the weight as it is, would be a gather: its
    reduced channels lie ``R*S`` elements apart and its produced ones further, a 32-byte sector for each
    element. Those plans read a repacked copy (:data:`WEIGHT_FORMS`; cached per weight version), whose
    tile rows are contiguous runs of produced channels."""
    g = Geometry.of(problem)
    packed = g.r * g.s > 1
    weight = packed_weight(problem) if packed else forward_weight(problem)
    return Plan(kernel, config, 1, (_cf_forward_launch(problem, config, tab, g, weight),),
                weight_form=WEIGHT_FORMS[0] if packed else "")


@dataclass(frozen=True)
class Phase:
    """One stride phase of a data gradient as a forward convolution of ``dy`` (:func:`bwd_data_phases`)."""

    #: ``dy`` (``cout`` channels, ``p x q``) in, the phase's pixels of ``dx`` (``cin`` channels) out, stride 1.
    geometry: Geometry
    #: ``(a, b)``: the phase's first ``dx`` row and column; it owns every stride-th one from there.
    first: tuple[int, int]
    #: ``(r0, s0)``: the first weight tap the phase uses along each axis; it uses every stride-th one.
    tap0: tuple[int, int]


def _axis_phase(a: int, size: int, taps: int, stride: int, pad: int, dil: int) -> tuple[int, int, int, int]:
    """``(pixels, taps, first tap, padding)`` of phase ``a`` along one axis (see kernels/few_channels_bwd.py):
    pixel ``stride*i + a`` takes taps ``r0 + stride*t`` from ``dy[i + e - t]``, ``e = (a + pad - r0) / stride``
    (``stride == 1`` or ``dil == 1``)."""
    r0 = (a + pad) % stride
    phase_taps = len(range(r0, taps, stride))
    return len(range(a, size, stride)), phase_taps, r0, dil * (phase_taps - 1) - (a + pad - r0) // stride


def bwd_data_phases(g: Geometry, *, leave_zeros: bool = False) -> tuple[Phase, ...]:
    """The data gradient of ``g`` as stride-1 forward convolutions of ``dy``, one per stride phase of ``dx``
    that has pixels (one at stride 1, padded by ``dil*(R-1) - pad``); none where that cannot be done: a
    dilated strided layer, or a phase with pixels but no tap (a stride larger than the filter: its pixels
    are zeros) unless ``leave_zeros``, where such phases are left out and the caller writes their zeros
    (:func:`bwd_data_zeros`)."""
    if g.stride != (1, 1) and g.dil != (1, 1):
        return ()
    phases = []
    for a in range(g.stride[0]):
        for b in range(g.stride[1]):
            rows, taps_h, r0, pad_h = _axis_phase(a, g.h, g.r, g.stride[0], g.pad[0], g.dil[0])
            cols, taps_w, s0, pad_w = _axis_phase(b, g.w, g.s, g.stride[1], g.pad[1], g.dil[1])
            if not rows or not cols:
                continue
            if not taps_h or not taps_w:
                if leave_zeros:
                    continue
                return ()
            on_dy = dataclasses.replace(g, cin=g.cout, cout=g.cin, h=g.p, w=g.q, p=rows, q=cols, r=taps_h, s=taps_w,
                                        stride=(1, 1), pad=(pad_h, pad_w))
            phases.append(Phase(on_dy, (a, b), (r0, s0)))
    return tuple(phases)


def bwd_data_zeros(g: Geometry) -> bool:
    """Whether some stride phase of ``dx`` has pixels but no tap (``bwd_data_phases(g, leave_zeros=True)`` leaves
    it out): a 1x1 filter at stride 2, whose data gradient is zero at three pixels of four."""
    return bool(bwd_data_phases(g, leave_zeros=True)) and not bwd_data_phases(g)


def _single_phase(g: Geometry) -> Phase:
    assert g.stride == (1, 1), "the data gradient is one forward convolution at stride 1 only"
    return bwd_data_phases(g)[0]


def _bwd_data_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """One ``conv_fwd_cf`` launch per stride phase of ``dx`` that has taps (:func:`bwd_data_phases`: offered where
    it has some), on the flipped copy of the weight where it has several taps (as :func:`_implicit_gemm_cf`).
    Where some phases have none (:func:`bwd_data_zeros`), ``dx`` is zeroed first: one fill at the copy rate,
    where a launch per such phase would write every stride-th element, a fraction of each memory sector."""
    g = Geometry.of(problem)
    phases = bwd_data_phases(g, leave_zeros=True)
    assert phases, "the data gradient has no stride phases to run as forward convolutions"
    packed = g.r * g.s > 1
    launches = tuple(_cf_forward_launch(problem, config, tab, phase.geometry,
                                        packed_weight(problem, phase) if packed else flipped_weight(problem, phase),
                                        phase.first, g.stride) for phase in phases)
    return Plan(kernel, config, 1, launches, zero="out" if bwd_data_zeros(g) else None,
                weight_form=WEIGHT_FORMS[1] if packed else "")


def _bwd_weight_cf(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    numel = math.prod(problem.weight_shape)
    blocks = g.batch * _cdiv(g.p * g.q, config.block_k)  # pixel blocks never straddle two images
    per_split, split = pixel_ranges(blocks, 1, split_count(tab, problem, config, INT32_ELEMENTS))
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    sdyn, sdyc, _, sdyw = strides_nchw(problem.output_shape, problem.layout)
    so = strides_nchw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**_conv_scalars(g), "BLOCKS_PER_SPLIT": per_split, "PQ": g.p * g.q, **_divisors(Q=g.q),
               **_named("sx", strides_nchw(problem.input_shape, problem.layout)),
               "sdyn": sdyn, "sdyc": sdyc, "sdyw": sdyw, "so_split": numel if workspace else 0,
               **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    grid = (_cdiv(g.cout, config.block_m) * _cdiv(g.cin, config.block_n) * g.r * g.s, g.groups, split)
    pix_vec = pixel_vector(g.p * g.q, *(scalars[name] for name in ("sxn", "sxc", "sdyn", "sdyc")))
    constexprs = {"FLAT": flat_pixels(g), "INSIDE": inside_pixels(g), "PIX_VEC": pix_vec,
                  "PIPELINED": pipelined_pixels(tab, g, every_tap=True), **_tiles(config),
                  "ROW_VEC": row_vector(problem.layout, g.p * g.q)}
    launches = [_launch(conv_bwd_weight_cf, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs,
                        config)]
    if workspace:
        launches.append(_reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)


# ---- few channels (kernels/few_channels.py, kernels/few_channels_bwd.py) ------------------------------

#: Largest input / output channel count per group the few-channel kernels are offered for.
FEW_CHANNELS = 8
#: Smallest ``BLOCK_M`` and ``BLOCK_N`` of any ``few_channels_out`` (and ``few_channels_in_bwd_data``, which
#: runs the same kernel) configuration (tests/test_few_channels.py checks the tables): the kernel is offered
#: only when the filter fits a tile of these sizes, so that every table can run every problem it is
#: offered for. ``few_channels_out_bwd_weight`` keeps the same bound on the taps (its rows are ``K_G * R * S``).
FEW_COUT_MIN_BLOCK_M = 256
FEW_COUT_MIN_BLOCK_N = 32
#: The few-channel kernels that run on a forward convolution: the data gradients run them on ``dy``.
FEW_CHANNELS_FORWARD = {"few_channels_in": "few_channels_in", "few_channels_out": "few_channels_out",
                        "few_channels_in_bwd_data": "few_channels_out", "few_channels_out_bwd_data": "few_channels_in"}


def few_cout_tile(g: Geometry, block_m: int) -> tuple[int, int, int, int] | None:
    """``(TILE_H, TILE_W, TILE_P, TILE_Q)`` of ``few_channels_out``: an input tile of ``block_m`` pixels
    (powers of two) and the output pixels whose whole window lies inside it. The shape that needs the
    fewest tiles wins, then the widest; None when the filter's span fits no shape."""
    span_h, span_w = (g.r - 1) * g.dil[0] + 1, (g.s - 1) * g.dil[1] + 1
    best, best_key = None, None
    tile_w = 1
    while tile_w <= block_m:
        tile_h = block_m // tile_w
        if tile_h >= span_h and tile_w >= span_w:
            tile_p, tile_q = (tile_h - span_h) // g.stride[0] + 1, (tile_w - span_w) // g.stride[1] + 1
            key = (_cdiv(g.p, tile_p) * _cdiv(g.q, tile_q), -tile_w)
            if best_key is None or key < best_key:
                best, best_key = (tile_h, tile_w, tile_p, tile_q), key
        tile_w *= 2
    return best


def _few_cout_fits(g: Geometry) -> bool:
    """Whether ``few_channels_out``'s kernel can run convolution ``g``: few output channels, every tap of one
    in the smallest configuration's columns, the filter's window in its smallest tile."""
    return (g.cout <= FEW_CHANNELS and g.r * g.s <= FEW_COUT_MIN_BLOCK_N
            and few_cout_tile(g, FEW_COUT_MIN_BLOCK_M) is not None)


def few_channels_kernels(problem: ConvProblem) -> tuple[str, ...]:
    """The few-channel kernels that serve ``problem``: in every direction, those of few input channels per
    group, then those of few output channels (named after the layer, whatever the direction). The data
    gradients run the forward kernels on ``dy``: that of few output channels once per stride phase
    (:func:`bwd_data_phases`: not for dilated strided layers), that of few input channels at stride 1 only
    (and ``col2im_bwd_data``, a GEMM and a gather, at any stride);
    the weight gradient of few output channels keeps the forward's bound on the taps (its rows)."""
    g = Geometry.of(problem)
    if problem.direction == "bwd_weight":
        offered = (("few_channels_in_bwd_weight", g.cin <= FEW_CHANNELS),
                   ("few_channels_out_bwd_weight", g.cout <= FEW_CHANNELS and g.r * g.s <= FEW_COUT_MIN_BLOCK_N))
    elif problem.direction == "bwd_data":
        # dy -> dx: the layer's input channels are produced here. few_channels_in_bwd_data stays at stride 1:
        # on the stem's four phases (16 taps x 3 channels, 48 Z columns) its shift-and-add bounds it, not its
        # bytes (290 us a phase on the H100: L1 70% busy, DRAM 6%), slower than the phased general kernel.
        on_dy = [phase.geometry for phase in bwd_data_phases(g)]
        offered = (("few_channels_in_bwd_data", g.stride == (1, 1) and _few_cout_fits(on_dy[0])),
                   ("col2im_bwd_data", g.cin <= FEW_CHANNELS),
                   ("few_channels_out_bwd_data", bool(on_dy) and g.cout <= FEW_CHANNELS))
    else:
        offered = (("few_channels_in", g.cin <= FEW_CHANNELS), ("few_channels_out", _few_cout_fits(g)))
    return tuple(kernel for kernel, ok in offered if ok)


@dataclass(frozen=True)
class ForwardRun:
    """One forward convolution that a few-channel forward kernel computes for a problem, as its scalars."""

    geometry: Geometry
    #: ``W_OFF``, ``W_EXTRA``, ``swo``, ``swi``, ``swr``, ``sws`` (see kernels/few_channels.py).
    weight: dict
    #: ``Y_OFF``, ``syn``, ``syc``, ``syh``, ``syw``: where the result's pixels are written.
    output: dict


def forward_runs(problem: ConvProblem) -> tuple[ForwardRun, ...]:
    """What the few-channel forward kernels run for ``problem``: its own forward convolution, or for a data
    gradient one forward convolution of ``dy`` per stride phase (:func:`bwd_data_phases`) with the flipped
    weight (:func:`flipped_weight`), each writing every stride-th pixel of ``dx`` from its first one. The
    weight's group stride is given as what it adds to ``K_G`` produced-channel strides (``W_EXTRA``, 0 in the
    forward)."""
    g = Geometry.of(problem)

    def run(on: Geometry, weight: dict, first=(0, 0), stride=(1, 1)) -> ForwardRun:
        weight = dict(weight)
        weight["W_EXTRA"] = weight.pop("swg") - on.cout * weight["swo"]
        return ForwardRun(on, weight, phase_output(problem, first, stride))

    if problem.direction != "bwd_data":
        return (run(g, forward_weight(problem)),)
    return tuple(run(phase.geometry, flipped_weight(problem, phase), phase.first, g.stride)
                 for phase in bwd_data_phases(g))


def few_cout_chunk(g: Geometry, config: TileConfig) -> int:
    """Output channels per ``few_channels_out`` program: as many as have all their taps in ``BLOCK_N``."""
    return max(1, min(g.cout, config.block_n // (g.r * g.s)))


def few_cout_work(problem: ConvProblem, config: TileConfig) -> tuple[float, int]:
    """``(utilization, input reads)`` of ``few_channels_out``'s kernel (forward, or the data gradient of few
    input channels): the fraction of its matrix work that is useful (halo pixels, output slots outside the
    tile, padded columns and channels cost the rest), and how many times it reads the input from memory
    (once per output-channel chunk of each run: each stride phase of a data gradient reads all of ``dy``)."""
    work = reads = 0
    for run in forward_runs(problem):
        g = run.geometry
        tile_h, tile_w, tile_p, tile_q = few_cout_tile(g, config.block_m)
        chunks = _cdiv(g.cout, few_cout_chunk(g, config))
        tiles = g.batch * g.groups * chunks * _cdiv(g.p, tile_p) * _cdiv(g.q, tile_q)
        work += 2 * tiles * config.block_m * config.block_n * _cdiv(g.cin, config.block_k) * config.block_k
        reads += chunks
    return problem.flops / work, reads


def few_cin_outer_steps(g: Geometry, layout: str, block_k: int) -> int:
    """How many steps ``conv_fwd_few_cin`` splits its reduction ``k`` into: its leading digit in memory order
    (the filter row in channels-last, the channel in channels-first) when ``k`` spans more than two
    ``block_k`` chunks, else 1. Each step walks the other two digits in lanes whose offsets are computed
    once (the stem: 7 rows of 21 lanes in NHWC, 3 channels of 49 in NCHW); a short ``k`` is one step."""
    if g.cin * g.r * g.s <= 2 * block_k:
        return 1
    return g.r if layout == "channels_last" else g.cin


def _few_cin(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``conv_fwd_few_cin``: the forward of few input channels, or on ``dy`` the data gradient of few output
    channels (a launch per stride phase)."""
    launches = []
    for run in forward_runs(problem):
        grid, pointers, scalars, constexprs = _forward_gemm_args(problem, config, run.geometry, run.weight,
                                                                 run.output)
        constexprs["CHANNELS_INNER"] = problem.layout == "channels_last"
        for name in ("C_G", "R", "S"):
            constexprs[name] = scalars.pop(name)
        constexprs["OUTER"] = few_cin_outer_steps(run.geometry, problem.layout, config.block_k)
        launches.append(_launch(conv_fwd_few_cin, grid, pointers, scalars, constexprs, config))
    return Plan(kernel, config, 1, tuple(launches))


def _few_cout(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``conv_fwd_few_cout``: the forward of few output channels, or on ``dy`` the data gradient of few input
    channels (offered at stride 1, one run; the plan would take a launch per stride phase)."""
    return Plan(kernel, config, 1, tuple(_few_cout_launch(problem, kernel, config, run)
                                         for run in forward_runs(problem)))


def _few_cout_launch(problem: ConvProblem, kernel: str, config: TileConfig, run: ForwardRun) -> Launch:
    g = run.geometry
    tile = few_cout_tile(g, config.block_m)
    if tile is None or g.r * g.s > config.block_n:
        raise ValueError(f"{kernel} cannot run {problem.key} with {config.name}")
    tile_h, tile_w, tile_p, tile_q = tile
    chunk = few_cout_chunk(g, config)
    tiles_q = _cdiv(g.q, tile_q)
    tiles = _cdiv(g.p, tile_p) * tiles_q
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**_conv_scalars(g), **_named("sx", sx), **run.weight, **run.output,
               "TILE_P": tile_p, "TILE_Q": tile_q, "TILES_Q": tiles_q, "TILES": tiles, "K_CHUNK": chunk}
    grid = (g.batch * tiles, g.groups, _cdiv(g.cout, chunk))
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**_epilogue(problem), **_tiles(config), "TILE_W": tile_w,
                  "K_PAD": 1 << (chunk - 1).bit_length()}
    return _launch(conv_fwd_few_cout, grid, pointers, scalars, constexprs, config)


def _few_channels_bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """The few-channel weight gradients: tiles of (tap, input channel) columns (few input channels) or of
    (output channel, tap) rows (few output channels), the reduction over output or input pixels split into
    ranges whose float32 partials ``reduce_splits`` sums in order (deterministic, as ``bwd_weight_split``)."""
    g = Geometry.of(problem)
    cout_rows = kernel == "few_channels_out_bwd_weight"
    numel = math.prod(problem.weight_shape)
    pixels = g.batch * (g.h * g.w if cout_rows else g.p * g.q)
    per_split, split = pixel_ranges(pixels, config.block_k,
                                    split_count(tab, problem, config, INT32_ELEMENTS, family=kernel))
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    so = strides_nchw(problem.weight_shape, problem.layout)  # the workspace slices are laid out like dw
    scalars = {**_conv_scalars(g), "PIX_PER_SPLIT": per_split,
               **_named("sx", strides_nchw(problem.input_shape, problem.layout)),
               **_named("sdy", strides_nchw(problem.output_shape, problem.layout)),
               "so_split": numel if workspace else 0, **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    rows, cols = (g.cout * g.r * g.s, g.cin) if cout_rows else (g.cout, g.cin * g.r * g.s)
    grid = (_cdiv(rows, config.block_m) * _cdiv(cols, config.block_n), g.groups, split)
    constexprs = {**_tiles(config), "ROW_VEC": row_vector(problem.layout, g.w if cout_rows else g.q)}
    if not cout_rows:
        constexprs["CHANNELS_INNER"] = problem.layout == "channels_last"
    kernel_fn = conv_bwd_weight_few_cout if cout_rows else conv_bwd_weight_few_cin
    launches = [_launch(kernel_fn, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs, config)]
    if workspace:  # sum the partials in split order, cast to the result
        launches.append(_reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)


# ---- depthwise (kernels/depthwise.py) ------------------------------------------------------------------
# The table's blocks are fitted to the problem, never grown: a pixel block keeps its pixel count but takes
# the image's shape (8x16 on a 7x7 map becomes 8x8, on a 1D row 1x128; SLIDE x narrower where the kernel
# cannot slide along W), and channel / tap / pixel blocks shrink to the next power of two of what there is.
# The kernel id names the table's configuration.


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def fit_pixel_block(block_h: int, block_w: int, rows: int, cols: int) -> tuple[int, int]:
    """``(BLOCK_H, BLOCK_W)`` of at most ``block_h * block_w`` pixels for a ``rows x cols`` image."""
    pixels = block_h * block_w
    bw = min(block_w, _pow2_at_least(cols))
    bh = min(pixels // bw, _pow2_at_least(rows))
    return bh, min(pixels // bh, _pow2_at_least(cols))


def _depthwise_scalars(problem: ConvProblem, g: Geometry) -> dict:
    return dict(BATCH=g.batch, C=problem.in_channels, H=g.h, W=g.w, K=problem.out_channels, P=g.p, Q=g.q, R=g.r,
                S=g.s, MULT=g.cout, STRIDE_H=g.stride[0], STRIDE_W=g.stride[1], PAD_H=g.pad[0], PAD_W=g.pad[1],
                DIL_H=g.dil[0], DIL_W=g.dil[1])


def _depthwise_weight_strides(problem: ConvProblem) -> dict:
    swk, _, swr, sws = strides_nchw(problem.weight_shape, problem.layout)  # one input channel per filter
    return dict(swk=swk, swr=swr, sws=sws)


def pixel_alignment(*strides: tuple[int, ...]) -> int:
    """Largest power of two, at most 16, dividing every pixel stride (batch, height, width) given."""
    g = math.gcd(16, *(s for ss in strides for s in (ss[0], ss[2], ss[3])))
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
    along_w = g.stride[1] == 1 and g.dil[1] == 1 and (problem.direction == "fwd" or g.stride[0] == 1)
    slide = config.slide if along_w else 1
    bh, bw = fit_pixel_block(config.block_h, config.block_w // (2 if slide < config.slide else 1), rows, cols)
    return bh, bw, slide if bw >= slide else 1


def _depthwise_fwd(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c = problem.in_channels
    bh, bw, slide = depthwise_pixel_block(problem, config, g.p, g.q)
    bc = min(config.block_c, _pow2_at_least(c))
    sx, sy = strides_nchw(problem.input_shape, problem.layout), strides_nchw(problem.output_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), **_named("sx", sx), **_depthwise_weight_strides(problem),
               **_named("sy", sy)}
    del scalars["S"]  # a constexpr here: the taps along W are unrolled
    grid = (_cdiv(c, bc) * g.cout * _cdiv(g.p, bh) * _cdiv(g.q, bw) * g.batch,)  # g.cout: the multiplier
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {"S": g.s, **_epilogue(problem), **_stencil_constexprs(bh, bw, bc, slide, pixel_alignment(sx, sy))}
    return Plan(kernel, config, 1, (_launch(conv_dw_fwd, grid, pointers, scalars, constexprs, config),))


def _depthwise_bwd_data(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c = problem.in_channels
    (sh, sw_), (dh, dw) = g.stride, g.dil
    h_ph, w_ph = _cdiv(g.h, sh), _cdiv(g.w, sw_)  # every phase gets the grid of the largest one
    bh, bw, slide = depthwise_pixel_block(problem, config, h_ph, w_ph)
    bc = min(config.block_c, _pow2_at_least(c))
    sdy, sdx = strides_nchw(problem.output_shape, problem.layout), strides_nchw(problem.input_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), "STEP_R": sh // math.gcd(sh, dh), "STEP_S": sw_ // math.gcd(sw_, dw),
               "H_PH": h_ph, "W_PH": w_ph, **_named("sdy", sdy), **_depthwise_weight_strides(problem),
               **_named("sdx", sdx)}
    del scalars["S"]  # a constexpr here: the taps along W are unrolled
    grid = (_cdiv(c, bc) * _cdiv(h_ph, bh) * _cdiv(w_ph, bw) * g.batch * sh * sw_,)
    pointers = dict(dy_ptr="a", w_ptr="b", dx_ptr="out")
    constexprs = {"S": g.s, **_stencil_constexprs(bh, bw, bc, slide, pixel_alignment(sdy, sdx))}
    return Plan(kernel, config, 1, (_launch(conv_dw_bwd_data, grid, pointers, scalars, constexprs, config),))


def _depthwise_bwd_weight(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    c, taps = problem.in_channels, g.r * g.s
    fitted = dataclasses.replace(config, block_t=min(config.block_t, _pow2_at_least(taps)),
                                 block_c=min(config.block_c, _pow2_at_least(c)),
                                 block_w=min(config.block_w, _pow2_at_least(g.q)))  # chunks within a row
    split = depthwise_split_count(tab, problem, fitted, INT32_ELEMENTS)
    rows = g.batch * g.p  # the splits are ranges of output rows (n, p)
    per_split = _cdiv(rows, split)
    split = _cdiv(rows, per_split)  # no empty ranges
    numel = math.prod(problem.weight_shape)
    target, workspace = ("out", 0) if split == 1 else ("workspace", split * numel)
    so_k, _, so_r, so_s = strides_nchw(problem.weight_shape, problem.layout)  # workspace slices: laid out like dw
    sx, sdy = strides_nchw(problem.input_shape, problem.layout), strides_nchw(problem.output_shape, problem.layout)
    scalars = {**_depthwise_scalars(problem, g), "ROWS_PER_SPLIT": per_split, **_named("sx", sx), **_named("sdy", sdy),
               "so_split": numel if workspace else 0, "so_k": so_k, "so_r": so_r, "so_s": so_s}
    grid = (_cdiv(taps, fitted.block_t) * _cdiv(c, fitted.block_c) * g.cout * split,)
    constexprs = dict(BLOCK_T=fitted.block_t, BLOCK_W=fitted.block_w, BLOCK_C=fitted.block_c,
                      ALIGN=pixel_alignment(sx, sdy), INTERPRET=interpreting())
    launches = [_launch(conv_dw_bwd_weight, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs,
                        config)]
    if workspace:  # sum the partials in split order, cast to the result
        launches.append(_reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)
