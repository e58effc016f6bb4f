"""Plans of the few-channel kernels (kernels/few_channels.py, kernels/few_channels_bwd.py): the forward of few
input channels (``conv_fwd_few_cin``) or few output channels (``conv_fwd_few_cout``), both also run on ``dy`` for
the data gradients (with the flipped weight, a launch per stride phase), and the few-channel weight gradients;
and which of them serve a problem (:func:`few_channels_kernels`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.kit.launch import Launch
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig, split_count
from ..kernels.few_channels import conv_fwd_few_cin, conv_fwd_few_cout
from ..kernels.few_channels_bwd import conv_bwd_weight_few_cin, conv_bwd_weight_few_cout
from .common import (Plan, bwd_data_phases, cdiv, conv_scalars, epilogue, flipped_weight, forward_weight, named,
                     phase_output, pixel_ranges, reduce_launch, row_vector, strides_nchw, tile_constexprs, tiled_launch)
from .implicit_gemm import forward_gemm_args

#: Largest input / output channel count per group the few-channel kernels are offered for.
FEW_CHANNELS = 8
#: Smallest ``BLOCK_M`` and ``BLOCK_N`` of any ``few_channels_out`` (and ``few_channels_in_bwd_data``, which
#: runs the same kernel) configuration (tests/test_few_channels.py checks the tables): the kernel is offered
#: only when the filter fits a tile of these sizes, so that every table can run every problem it is
#: offered for. ``few_channels_out_bwd_weight`` keeps the same bound on the taps (its rows are ``K_G * R * S``).
FEW_COUT_MIN_BLOCK_M = 256
FEW_COUT_MIN_BLOCK_N = 32


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
            key = (cdiv(g.p, tile_p) * cdiv(g.q, tile_q), -tile_w)
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
        on_dy = [phase.geometry(g) for phase in bwd_data_phases(g)]
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
    return tuple(run(phase.geometry(g), flipped_weight(problem, phase), phase.first, g.stride)
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
        chunks = cdiv(g.cout, few_cout_chunk(g, config))
        tiles = g.batch * g.groups * chunks * cdiv(g.p, tile_p) * cdiv(g.q, tile_q)
        work += 2 * tiles * config.block_m * config.block_n * cdiv(g.cin, config.block_k) * config.block_k
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


def few_cin(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``conv_fwd_few_cin``: the forward of few input channels, or on ``dy`` the data gradient of few output
    channels (a launch per stride phase)."""
    launches = []
    for run in forward_runs(problem):
        grid, pointers, scalars, constexprs = forward_gemm_args(problem, config, run.geometry, run.weight,
                                                                 run.output)
        constexprs["CHANNELS_INNER"] = problem.layout == "channels_last"
        for name in ("C_G", "R", "S"):
            constexprs[name] = scalars.pop(name)
        constexprs["OUTER"] = few_cin_outer_steps(run.geometry, problem.layout, config.block_k)
        launches.append(tiled_launch(conv_fwd_few_cin, grid, pointers, scalars, constexprs, config))
    return Plan(kernel, config, 1, tuple(launches))


def few_cout(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
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
    tiles_q = cdiv(g.q, tile_q)
    tiles = cdiv(g.p, tile_p) * tiles_q
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**conv_scalars(g), **named("sx", sx), **run.weight, **run.output,
               "TILE_P": tile_p, "TILE_Q": tile_q, "TILES_Q": tiles_q, "TILES": tiles, "K_CHUNK": chunk}
    grid = (g.batch * tiles, g.groups, cdiv(g.cout, chunk))
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**epilogue(problem), **tile_constexprs(config), "TILE_W": tile_w,
                  "K_PAD": 1 << (chunk - 1).bit_length()}
    return tiled_launch(conv_fwd_few_cout, grid, pointers, scalars, constexprs, config)


def few_channels_bwd_weight(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
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
    scalars = {**conv_scalars(g), "PIX_PER_SPLIT": per_split,
               **named("sx", strides_nchw(problem.input_shape, problem.layout)),
               **named("sdy", strides_nchw(problem.output_shape, problem.layout)),
               "so_split": numel if workspace else 0, **dict(zip(("so_k", "so_c", "so_r", "so_s"), so))}
    rows, cols = (g.cout * g.r * g.s, g.cin) if cout_rows else (g.cout, g.cin * g.r * g.s)
    grid = (cdiv(rows, config.block_m) * cdiv(cols, config.block_n), g.groups, split)
    constexprs = {**tile_constexprs(config), "ROW_VEC": row_vector(problem.layout, g.w if cout_rows else g.q)}
    if not cout_rows:
        constexprs["CHANNELS_INNER"] = problem.layout == "channels_last"
    kernel_fn = conv_bwd_weight_few_cout if cout_rows else conv_bwd_weight_few_cin
    launches = [tiled_launch(kernel_fn, grid, dict(x_ptr="a", dy_ptr="b", out_ptr=target), scalars, constexprs, config)]
    if workspace:  # sum the partials in split order, cast to the result
        launches.append(reduce_launch(numel, split, tab))
    return Plan(kernel, config, split, tuple(launches), workspace)


