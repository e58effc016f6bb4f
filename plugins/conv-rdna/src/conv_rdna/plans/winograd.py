"""Winograd F(4x4, 3x3), host side: which problems, the plan, the weight-transform cache, the run, the estimate.

The kernels and the algorithm are explained in :mod:`conv_rdna.kernels.winograd`; the derivation of
the matrices, the error analysis and the performance model in ``docs/winograd.md``.

- :func:`applies`: the gate. Forward or data gradient, 2D, 3x3, stride 1, dilation 1, groups 1, a
  convolution computed with at most :data:`MAX_PADDING` on each side, at least :data:`MIN_CHANNELS` input
  *and* output channels, float16 / bfloat16 / float32, and a workspace that 32-bit offsets address.
- :func:`forward_view`: the forward convolution the kernels compute. The data gradient of a stride-1 3x3
  layer is one: ``dx`` is ``dy`` convolved with the weight transposed and flipped, padded by ``2 - pad``
  (the weight transform reads the weight that way, through an offset and negative tap strides; no copy).
- :func:`make_plan`: four launches (:data:`LAUNCHES`): the weight transform (run only when
  :data:`WEIGHT_CACHE` misses), the input transform, the 36 GEMMs, the output transform with the
  epilogue. The workspace is ``V`` (36 x tiles x C, input dtype) then ``M`` (36 x tiles x K,
  :func:`~conv_rdna.kernels.winograd.m_dtype`), carved from one float32 buffer.
- :data:`WEIGHT_CACHE`: the transformed weight ``U`` (36 x C x K in the input dtype, 4x the weight) is
  computed once per weight, version and direction and kept in conv-core's
  :class:`~conv_core.weight_cache.DerivedWeightCache` (never stale after an in-place update; recomputed
  inside a CUDA graph being captured).
- :func:`estimate_us`: the roofline of the Winograd algorithm: ``2 * 36 * tiles * C * K`` GEMM flops at
  the table's compute efficiency, the transforms' memory traffic at its memory efficiency.
- :data:`ERROR_FACTOR`: the measured error factor per dtype (tests/test_winograd.py measures it).
- Hardware status, as for every family: the candidate is tagged ``experimental`` on a GPU until the
  offline sweep (:mod:`conv_rdna.sweep`) has timed the ``winograd`` family there, i.e. until
  ``data/swept/<arch>.json`` has its winners (``configs.ArchTable.is_measured("winograd")``).
"""

from __future__ import annotations

import functools
import math
import os

import torch
from conv_core.arch import spec
from conv_core.estimate import roofline_us
from conv_core.problem import ConvProblem, element_size
from conv_core.layout import is_dense_in, to_layout
from conv_core.weight_cache import DerivedWeightCache

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS, interpreting
from conv_core.kit.launch import launch_all, make_launch, workspace, workspace_layout

from .. import configs
from ..kernels import winograd as kernels
from .common import Plan, cdiv, flipped_weight, forward_weight, named, strides_nchw

#: Candidate kernel (the ``kernel`` part of the id) and its configuration family.
KERNEL = "winograd_f4x3"
FAMILY = "winograd"
#: The plan's launches, in order.
LAUNCHES = ("weight", "input", "gemm", "output")
#: Index of the matrix-multiply launch.
GEMM_LAUNCH = LAUNCHES.index("gemm")

#: Fewest input and output channels served (see docs/winograd.md, "The gate").
MIN_CHANNELS = 64
#: Most padding on any side of the forward convolution computed (:func:`forward_view`): every result pixel
#: then sees at least 2 x 2 taps of its window. With 2 a corner pixel sees one, while its error comes from
#: the rounding of its whole 6x6 patch: it needs an error factor of 3.5 (float16) to 4.7 (bfloat16) where
#: padding 1 needs 0.9 to 1.1 (docs/winograd.md, "The gate").
MAX_PADDING = 1
DTYPES = ("float16", "bfloat16", "float32")
#: Transformed values per tile (6x6) and output pixels per tile (4x4).
POINTS2, TILE2 = kernels.POINTS_N**2, kernels.TILE**2

#: The error factor each dtype needed (docs/tolerance.md): the largest over 100 seeds of random operands on
#: 2 x 64 -> 64 channels, 13 x 11 pixels, padding (1, 2) x (0, 1), output in the input dtype and in float32
#: (tests/test_winograd.py::test_error_factor re-measures seeds 0-3). float32: 0, the transforms' float32
#: rounding stays inside the tolerance's accumulation term.
MEASURED_ERROR_FACTOR = {"float16": 0.91, "bfloat16": 1.42, "float32": 0.0}
#: The tolerance model's error factor E per input dtype: about twice the measured one (at least 1). Errors
#: relative to ``absref`` fall like 1/sqrt(C) (docs/winograd.md), so 64 channels, the fewest served, need most.
ERROR_FACTOR = {"float16": 2.0, "bfloat16": 3.0, "float32": 2.0}


# ---- which problems -----------------------------------------------------------------------------------


#: Directions the kernels serve (the data gradient as a forward convolution: :func:`forward_view`).
DIRECTIONS = ("fwd", "bwd_data")


@functools.lru_cache(maxsize=1024)
def forward_view(problem: ConvProblem) -> ConvProblem:
    """The forward convolution the kernels compute for ``problem``: the problem itself, or for its data
    gradient the convolution of ``dy`` (``out_channels`` -> ``in_channels``, ``output_size`` in) with the
    weight transposed and flipped, padded by ``2 - pad`` on each side, whose output is ``dx``."""
    if problem.direction == "fwd":
        return problem
    return problem.replace(direction="fwd", in_channels=problem.out_channels, out_channels=problem.in_channels,
                           input_size=problem.output_size,
                           padding=tuple((2 - lo, 2 - hi) for lo, hi in problem.padding))


def computed_padding(problem: ConvProblem) -> tuple[int, ...]:
    """Every side's padding of the forward convolution computed (:func:`forward_view`: ``2 - pad`` for the
    data gradient, negative where the layer pads by more than 2; the layer's own for the weight gradient)."""
    sides = [side for pair in problem.padding for side in pair]
    return tuple(2 - side for side in sides) if problem.direction == "bwd_data" else tuple(sides)


def tiles(problem: ConvProblem) -> tuple[int, int, int]:
    """``(tiles_h, tiles_w, tiles)``: 4x4 tiles of the result per column and row, and over the batch."""
    p, q = forward_view(problem).output_size
    th, tw = -(-p // kernels.TILE), -(-q // kernels.TILE)
    return th, tw, problem.batch * th * tw


def workspace_issue(problem: ConvProblem) -> str | None:
    """Why the kernels' 32-bit offsets cannot address ``V``, ``M`` or ``U``, or None."""
    view = forward_view(problem)
    t, c, k = tiles(view)[2], view.in_channels, view.out_channels
    for what, n in (("V", POINTS2 * t * c), ("M", POINTS2 * t * k), ("U", POINTS2 * c * k)):
        if n > INT32_ELEMENTS:
            return f"the transformed {what} would have {n} elements (32-bit offsets)"
    return None


def layer_applies(problem: ConvProblem) -> bool:
    """The gate's conditions on the layer, which the weight gradient's candidate shares
    (:mod:`conv_rdna.plans.winograd_bwd_weight`): everything but the direction and the workspace."""
    return (problem.ndim == 2 and problem.groups == 1
            and problem.filter_size == (3, 3) and problem.stride == (1, 1) and problem.dilation == (1, 1)
            and all(0 <= side <= MAX_PADDING for side in computed_padding(problem))
            and problem.in_channels >= MIN_CHANNELS and problem.out_channels >= MIN_CHANNELS
            and problem.dtype in DTYPES and problem.weight_dtype == problem.dtype)


def applies(problem: ConvProblem) -> bool:
    """Whether the Winograd candidate is offered for ``problem`` (the gate; docs/winograd.md)."""
    return problem.direction in DIRECTIONS and layer_applies(problem) and workspace_issue(problem) is None


def error_factor(problem: ConvProblem) -> float:
    return ERROR_FACTOR[problem.dtype]


# ---- the plan -----------------------------------------------------------------------------------------


def transform_blocks(tab: configs.ArchTable) -> dict:
    """The transform kernels' blocks of the table: ``configs.json`` ``archs.<arch>.winograd_transforms``
    (``same_as`` followed): ``BLOCK_T`` tiles x ``BLOCK_C`` channels per program, ``num_warps``. The
    weight transform takes ``BLOCK_T`` input x ``BLOCK_C`` output channels."""
    return tab.winograd_transforms


def float32_words(elements: int, dtype: str) -> int:
    """float32 words holding ``elements`` of ``dtype``, rounded up to 16 bytes (aligned pointers)."""
    return -(-elements * element_size(dtype) // 16) * 4


def workspace_parts(problem: ConvProblem) -> tuple[int, int]:
    """float32 words of ``V`` and of ``M`` in the workspace (``V`` first)."""
    problem = forward_view(problem)
    t = tiles(problem)[2]
    return (float32_words(POINTS2 * t * problem.in_channels, problem.dtype),
            float32_words(POINTS2 * t * problem.out_channels, kernels.m_dtype(problem.dtype)))


def make_plan(problem: ConvProblem, kernel: str, config: configs.TileConfig, tab: configs.ArchTable) -> Plan:
    """The four launches (:data:`LAUNCHES`) for ``problem``, dense operands in its layout: those of its
    :func:`forward_view`, whose weight transform reads the weight as it is or transposed and flipped."""
    view = forward_view(problem)
    g = Geometry.of(view)
    th, tw, t = tiles(view)
    c, k = g.cin, g.cout
    blocks = transform_blocks(tab)
    bt, bc, warps = blocks["BLOCK_T"], blocks["BLOCK_C"], blocks["num_warps"]
    interpret = interpreting()
    sx = strides_nchw(view.input_shape, problem.layout)
    sy = strides_nchw(view.output_shape, problem.layout)
    sw = forward_weight(problem) if problem.direction == "fwd" else flipped_weight(problem)

    launch = make_launch
    weight = launch(kernels.winograd_weight_transform, (cdiv(k, bc), cdiv(c, bt)), dict(w_ptr="b", u_ptr="u"),
                    dict(C=c, K=k, **{name: sw[name] for name in ("W_OFF", "swo", "swi", "swr", "sws")}),
                    dict(BLOCK_C=bt, BLOCK_K=bc, INTERPRET=interpret), warps)
    inp = launch(kernels.winograd_input_transform, (cdiv(t, bt), cdiv(c, bc)), dict(x_ptr="a", v_ptr="v"),
                 dict(C=c, H=g.h, W=g.w, TILES_H=th, TILES_W=tw, T=t, PAD_H=g.pad[0], PAD_W=g.pad[1],
                      **named("sx", sx)),
                 dict(BLOCK_T=bt, BLOCK_C=bc, INTERPRET=interpret), warps)
    gemm = launch(kernels.winograd_gemm, (cdiv(t, config.block_m) * cdiv(k, config.block_n), POINTS2),
                  dict(v_ptr="v", u_ptr="u", m_ptr="m"), dict(T=t, C=c, K=k),
                  dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                       GROUP_M=config.group_m, INTERPRET=interpret), config.num_warps, config.num_stages)
    out = launch(kernels.winograd_output_transform, (cdiv(t, bt), cdiv(k, bc)),
                 dict(m_ptr="m", bias_ptr="bias" if problem.bias else "out", y_ptr="out"),
                 dict(K=k, P=g.p, Q=g.q, H=g.h, W=g.w, PAD_H=g.pad[0], PAD_W=g.pad[1], TILES_H=th, TILES_W=tw, T=t,
                      **named("sy", sy)),
                 dict(HAS_BIAS=problem.bias, ACTIVATION=problem.activation or "", BLOCK_T=bt, BLOCK_K=bc,
                      INTERPRET=interpret), warps)
    v_words, m_words = workspace_parts(view)
    views, words = workspace_layout(("v", v_words, problem.dtype), ("m", m_words, kernels.m_dtype(problem.dtype)))
    return Plan(kernel, config, 1, (weight, inp, gemm, out), words, workspace_views=views)


# ---- the transformed-weight cache ------------------------------------------------------------------------


#: The process's cache: ``CONV_RDNA_WINOGRAD_CACHE_ENTRIES`` (default 64) transformed weights of at most
#: ``CONV_RDNA_WINOGRAD_CACHE_MB`` (default 1024) MiB together.
WEIGHT_CACHE = DerivedWeightCache(int(os.environ.get("CONV_RDNA_WINOGRAD_CACHE_ENTRIES", 64)),
                                  int(os.environ.get("CONV_RDNA_WINOGRAD_CACHE_MB", 1024)) << 20)


# ---- running --------------------------------------------------------------------------------------------


def transform_weight(problem: ConvProblem, p: Plan, w: torch.Tensor) -> torch.Tensor:
    """``U`` (36 x C x K, input dtype, flat; of the weight transposed and flipped for the data gradient) of
    weight ``w``, computed now."""
    w = to_layout(w, problem.layout)
    u = torch.empty(POINTS2 * problem.in_channels * problem.out_channels, dtype=w.dtype, device=w.device)
    launch_all(p.launches[:1], {"b": w, "u": u}, w.device)
    return u


def run(problem: ConvProblem, p: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem`` on ``a`` (``x``; ``dy`` for the data gradient), ``w = b`` (and ``bias``) into
    ``out`` or a new tensor."""
    layout = problem.layout
    if out is not None and not is_dense_in(out, layout):
        out.copy_(run(problem, p, a, b, bias))
        return out
    a = to_layout(a, layout)
    u = WEIGHT_CACHE.get(b, lambda: transform_weight(problem, p, b), form=problem.direction)
    result = problem.empty_result(a.device) if out is None else out
    tensors = {"a": a, "u": u, "out": result, **workspace(p.workspace_elements, p.workspace_views, a.device)}
    if bias is not None:
        tensors["bias"] = bias.contiguous()
    launch_all(p.launches[1:], tensors, a.device)
    return result


# ---- the estimate -----------------------------------------------------------------------------------------


def gemm_utilization(problem: ConvProblem, config: configs.TileConfig) -> float:
    """Fraction of the GEMM tiles' work that is real (tiles x output channels x input channels)."""
    problem = forward_view(problem)
    used = 1.0
    for size, block in ((tiles(problem)[2], config.block_m), (problem.out_channels, config.block_n),
                        (problem.in_channels, config.block_k)):
        used *= size / (math.ceil(size / block) * block)
    return used


def traffic(problem: ConvProblem) -> dict[str, int]:
    """Bytes each stage moves: the input transform (``x`` read, ``V`` written), the GEMMs (``V`` and
    ``U`` read, ``M`` written), the output transform (``M`` read, bias, ``y`` written)."""
    problem = forward_view(problem)
    t = tiles(problem)[2]
    c, k = problem.in_channels, problem.out_channels
    es, ms = element_size(problem.dtype), element_size(kernels.m_dtype(problem.dtype))
    x_bytes = math.prod(problem.input_shape) * es
    y_bytes = math.prod(problem.output_shape) * element_size(problem.out_dtype)
    v, m, u = POINTS2 * t * c * es, POINTS2 * t * k * ms, POINTS2 * c * k * es
    bias = k * element_size(problem.out_dtype) if problem.bias else 0
    return {"x": x_bytes, "v": v, "u": u, "m": m, "y": y_bytes + bias}


def winograd_flops(problem: ConvProblem) -> int:
    """The GEMMs' flops: ``2 * 36 * tiles * C * K`` (a quarter of ``problem.flops`` when the output is a
    multiple of 4; the transforms' additions are on the memory side of the roofline)."""
    problem = forward_view(problem)
    return 2 * POINTS2 * tiles(problem)[2] * problem.in_channels * problem.out_channels


def estimate_us(problem: ConvProblem, p: Plan, tab: configs.ArchTable) -> float:
    """Three kernels in sequence at the roofline rates of ``conv_core.estimate``, scaled by the table's
    efficiencies: the input transform (memory), the GEMMs (the slower of their flops and bytes), the
    output transform (memory), plus three launches. Channels-first tensors: the transforms' reads of
    ``x`` and writes of ``y`` are strided, at ``channels_first_factor`` of the memory efficiency."""
    eff = tab.efficiency[KERNEL]
    problem = forward_view(problem)
    compute_us, memory_us = roofline_us(problem)
    per_flop, per_byte = compute_us / problem.flops, memory_us / problem.min_bytes
    b = traffic(problem)
    strided = 1.0 / tab.efficiency["channels_first_factor"] if problem.layout == "channels_first" else 1.0
    mem = eff["memory"]
    t_input = (b["x"] * strided + b["v"]) * per_byte / mem
    t_gemm = max(winograd_flops(problem) * per_flop / (eff["compute"] * gemm_utilization(problem, p.config)),
                 (b["v"] + b["u"] + b["m"]) * per_byte / mem)
    t_output = (b["m"] + b["y"] * strided) * per_byte / mem
    return t_input + t_gemm + t_output + (len(LAUNCHES) - 1) * spec(problem.arch).launch_us
