"""Winograd F(4x4, 3x3) for the weight gradient, host side: which problems, the plan, the run, the estimate.

The kernels and the algorithm are explained in :mod:`conv_rdna.kernels.winograd_bwd_weight`; the
derivation and the error analysis in ``docs/winograd.md`` ("The weight gradient").

- :func:`applies`: the weight gradient of the layers the forward candidate serves
  (:func:`conv_rdna.plans.winograd.layer_applies`: 2D, 3x3, stride 1, dilation 1, one group, at most
  :data:`~conv_rdna.plans.winograd.MAX_PADDING` a side, at least 64 channels each way), with at least
  :data:`MIN_TILES` tiles of ``dy`` and a workspace that 32-bit offsets address.
- :func:`make_plan`: four launches (:data:`LAUNCHES`): the forward's input transform of ``x`` (``V``), the
  transform of ``dy`` (``U``), the 36 GEMMs reduced over tiles in ``split`` ranges (``Z``, float32), the
  final transform that sums the splits in order and writes ``dw``. The workspace is ``V``, ``U`` (input
  dtype) then ``Z``, views of one float32 buffer that the plugin's shared :func:`~conv_rdna.launch.run`
  binds. Nothing is cached: both operands are activations.
- :func:`estimate_us`: the GEMMs' flops at the table's compute efficiency, the transforms' and the
  partials' traffic at its memory efficiency.
- Hardware status, as for every family: tagged ``experimental`` on a GPU until the offline sweep has timed
  the ``winograd_bwd_weight`` family there (``configs.ArchTable.is_measured``).
"""

from __future__ import annotations

import functools
import math

from conv_core.arch import spec
from conv_core.estimate import roofline_us
from conv_core.problem import ConvProblem, element_size

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS, interpreting
from conv_core.kit.launch import make_launch, workspace_layout

from .. import configs
from ..kernels import winograd as forward_kernels
from ..kernels import winograd_bwd_weight as kernels
from . import winograd
from .common import Plan, cdiv, named, pixel_ranges, strides_nchw

#: Candidate kernel (the ``kernel`` part of the id) and its configuration family.
KERNEL = "winograd_f4x3_bwd_weight"
FAMILY = "winograd_bwd_weight"
#: The plan's launches, in order.
LAUNCHES = ("input", "dy", "gemm", "output")
#: Index of the matrix-multiply launch.
GEMM_LAUNCH = LAUNCHES.index("gemm")
POINTS2 = winograd.POINTS2
#: Fewest 4x4 tiles of ``dy`` (over the batch) served. Each weight-gradient element sums one product per
#: tile and transformed point, so the transforms' rounding relative to ``absref`` shrinks like 1/sqrt(tiles):
#: the error factor is measured at this count and bounds every larger one. RetinaNet's 7 x 7 level at batch
#: 1 (4 tiles) needs E = 4.6; such layers take microseconds on the direct kernels anyway.
MIN_TILES = 16

#: The error factor each dtype needed (docs/tolerance.md): the largest over 100 seeds of random operands on
#: 2 x 64 -> 64 channels, 9 x 16 pixels, padding (1, 0) x (0, 1) (:data:`MIN_TILES` tiles, border tiles on
#: every side), the result in the input dtype (tests/test_winograd_bwd_weight.py::test_error_factor
#: re-measures seeds 0-3).
MEASURED_ERROR_FACTOR = {"float16": 1.27, "bfloat16": 1.12, "float32": 0.0}
#: The tolerance model's error factor E per input dtype: about twice the measured one (at least 1). float32: 0
#: measured, the transforms' float32 rounding stays inside the tolerance's accumulation term.
ERROR_FACTOR = {"float16": 2.5, "bfloat16": 2.2, "float32": 2.0}


# ---- which problems -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def tiles(problem: ConvProblem) -> tuple[int, int, int]:
    """``(tiles_h, tiles_w, tiles)``: the 4x4 tiles of ``dy`` per column and row, and over the batch."""
    return winograd.tiles(problem.with_direction("fwd"))


def workspace_issue(problem: ConvProblem) -> str | None:
    """Why the kernels' 32-bit offsets cannot address ``V``, ``U`` or one split of ``Z``, or None."""
    t, c, k = tiles(problem)[2], problem.in_channels, problem.out_channels
    for what, n in (("V", POINTS2 * t * c), ("U", POINTS2 * t * k), ("Z", POINTS2 * c * k)):
        if n > INT32_ELEMENTS:
            return f"the transformed {what} would have {n} elements (32-bit offsets)"
    return None


def applies(problem: ConvProblem) -> bool:
    """Whether the candidate is offered for ``problem`` (the forward's gate in the weight-gradient direction,
    and enough tiles)."""
    return (problem.direction == "bwd_weight" and winograd.layer_applies(problem) and tiles(problem)[2] >= MIN_TILES
            and workspace_issue(problem) is None)


def error_factor(problem: ConvProblem) -> float:
    return ERROR_FACTOR[problem.dtype]


# ---- the plan -----------------------------------------------------------------------------------------


def workspace_parts(problem: ConvProblem, split: int) -> tuple[int, int, int]:
    """float32 words of ``V``, ``U`` and the ``split`` partials ``Z``, in that order (16-byte aligned)."""
    t, c, k = tiles(problem)[2], problem.in_channels, problem.out_channels
    words = winograd.float32_words
    return (words(POINTS2 * t * c, problem.dtype), words(POINTS2 * t * k, problem.dtype),
            split * POINTS2 * k * c)


def make_plan(problem: ConvProblem, kernel: str, config: configs.TileConfig, tab: configs.ArchTable) -> Plan:
    """The four launches (:data:`LAUNCHES`) for ``problem``, dense operands in its layout."""
    g = Geometry.of(problem)
    th, tw, t = tiles(problem)
    c, k = g.cin, g.cout
    blocks = winograd.transform_blocks(tab)
    bt, bc, warps = blocks["BLOCK_T"], blocks["BLOCK_C"], blocks["num_warps"]
    interpret = interpreting()
    per_split, split = pixel_ranges(t, config.block_k,
                                         configs.split_count(tab, problem, config, INT32_ELEMENTS, FAMILY))

    make = make_launch
    sx = strides_nchw(problem.input_shape, problem.layout)
    sdy = strides_nchw(problem.output_shape, problem.layout)
    so = strides_nchw(problem.weight_shape, problem.layout)
    inp = make(forward_kernels.winograd_input_transform, (cdiv(t, bt), cdiv(c, bc)), dict(x_ptr="a", v_ptr="v"),
               dict(C=c, H=g.h, W=g.w, TILES_H=th, TILES_W=tw, T=t, PAD_H=g.pad[0], PAD_W=g.pad[1],
                    **named("sx", sx)),
               dict(BLOCK_T=bt, BLOCK_C=bc, INTERPRET=interpret), warps)
    dyt = make(kernels.winograd_dy_transform, (cdiv(t, bt), cdiv(k, bc)), dict(dy_ptr="b", u_ptr="u"),
               dict(K=k, P=g.p, Q=g.q, TILES_H=th, TILES_W=tw, T=t, **named("sdy", sdy)),
               dict(BLOCK_T=bt, BLOCK_K=bc, INTERPRET=interpret), warps)
    gemm = make(kernels.winograd_bwd_weight_gemm, (cdiv(k, config.block_m) * cdiv(c, config.block_n), POINTS2, split),
                dict(u_ptr="u", v_ptr="v", z_ptr="z"), dict(T=t, K=k, C=c, TILES_PER_SPLIT=per_split),
                dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                     GROUP_M=config.group_m, INTERPRET=interpret), config.num_warps, config.num_stages)
    out = make(kernels.winograd_bwd_weight_output, (cdiv(k, bt), cdiv(c, bc)), dict(z_ptr="z", dw_ptr="out"),
               dict(K=k, C=c, SPLITS=split, **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))),
               dict(BLOCK_K=bt, BLOCK_C=bc, INTERPRET=interpret), warps)
    v_words, u_words, z_words = workspace_parts(problem, split)
    views, words = workspace_layout(("v", v_words, problem.dtype), ("u", u_words, problem.dtype),
                                    ("z", z_words, "float32"))
    return Plan(kernel, config, split, (inp, dyt, gemm, out), words, workspace_views=views)


# ---- the estimate -----------------------------------------------------------------------------------------


def traffic(problem: ConvProblem, split: int) -> dict[str, int]:
    """Bytes each stage moves: ``x`` and ``dy`` read, ``V`` and ``U`` written then read by the GEMMs, the
    partials ``Z`` written and read, ``dw`` written."""
    t, c, k = tiles(problem)[2], problem.in_channels, problem.out_channels
    es = element_size(problem.dtype)
    return {"x": math.prod(problem.input_shape) * es, "dy": math.prod(problem.output_shape) * es,
            "v": POINTS2 * t * c * es, "u": POINTS2 * t * k * es, "z": split * POINTS2 * k * c * 4,
            "dw": math.prod(problem.weight_shape) * element_size(problem.result_dtype)}


def gemm_utilization(problem: ConvProblem, config: configs.TileConfig) -> float:
    """Fraction of the GEMM tiles' work that is real (output x input channels; the tiles are reduced)."""
    used = 1.0
    for size, block in ((problem.out_channels, config.block_m), (problem.in_channels, config.block_n)):
        used *= size / (math.ceil(size / block) * block)
    return used


def winograd_flops(problem: ConvProblem) -> int:
    """The GEMMs' flops: ``2 * 36 * tiles * C * K``."""
    return 2 * POINTS2 * tiles(problem)[2] * problem.in_channels * problem.out_channels


def estimate_us(problem: ConvProblem, p: Plan, tab: configs.ArchTable) -> float:
    """Four kernels in sequence at the roofline rates of ``conv_core.estimate``, scaled by the table's
    efficiencies, as :func:`conv_rdna.plans.winograd.estimate_us` (channels-first reads of ``x`` and ``dy`` at
    ``channels_first_factor`` of the memory efficiency)."""
    eff = tab.efficiency[KERNEL]
    compute_us, memory_us = roofline_us(problem)
    per_flop, per_byte = compute_us / problem.flops, memory_us / problem.min_bytes
    b = traffic(problem, p.split)
    strided = 1.0 / tab.efficiency["channels_first_factor"] if problem.layout == "channels_first" else 1.0
    mem = eff["memory"]
    t_transforms = ((b["x"] + b["dy"]) * strided + b["v"] + b["u"]) * per_byte / mem
    t_gemm = max(winograd_flops(problem) * per_flop / (eff["compute"] * gemm_utilization(problem, p.config)),
                 (b["v"] + b["u"] + b["z"]) * per_byte / mem)
    t_output = (b["z"] + b["dw"]) * per_byte / mem
    return t_transforms + t_gemm + t_output + (len(LAUNCHES) - 1) * spec(problem.arch).launch_us
