"""How long a plan should take: roofline estimates with the table's efficiencies (initial guesses; measured
tables replace them). Each kernel's registry entry names its estimate (:mod:`conv_rdna.registry`).

Compute efficiency scales with the tile utilization and, for channels-first tensors on kernels tiled for
channels-last ones, with the table's ``channels_first_factor``. Workspace traffic (written once, read once)
and a result zeroed before the launches add to the memory time.
"""

from __future__ import annotations

import math

from conv_core.arch import spec
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem, element_size

from . import configs
from .plans.common import Plan, cdiv
from .plans import shuffle
from .plans.few_channels import few_cout_work
from .plans.grouped import groups_per_tile


def roofline(problem: ConvProblem, p: Plan, compute: float, memory: float) -> float:
    """The plan's time at fractions ``compute`` and ``memory`` of the roofline rates, its launches, workspace
    traffic and zeroed result included."""
    us = estimate_us(problem, compute, memory, launches=len(p.launches) + (1 if p.zero else 0))
    copy_us_per_byte = 1 / (spec(problem.arch).copy_tbps * 1e6) / memory
    us += 2 * p.workspace_fills * p.workspace_bytes * copy_us_per_byte
    if p.zero == "out":  # the result is written twice: zeros, then what the launches add or place
        us += math.prod(problem.result_shape) * element_size(problem.result_dtype) * copy_us_per_byte
    return us


def tile_utilization(problem: ConvProblem, p: Plan, family: str) -> float:
    """Fraction of the matrix work in the tiles that is real (the rest multiplies padding), on the family's GEMM
    view (``bwd_data_shuffle`` on its own: its columns are taps x channels)."""
    view = shuffle.gemm_view(p.geometry) if p.kernel == shuffle.KERNEL else configs.gemm_view(problem, family)
    c = p.config
    pixel_blocks = family == "bwd_weight" or family in configs.FEW_CHANNELS_BWD_WEIGHT_FAMILIES
    red_block = 1 if pixel_blocks else c.block_k  # batch-wide pixel blocks: only the last is partial
    used = 1.0
    for size, block in ((view["m"], c.block_m), (view["n"], c.block_n), (view["red"], red_block)):
        used *= size / (math.ceil(size / block) * block)
    return used


def tiled(problem: ConvProblem, p: Plan, tab: configs.ArchTable, *, family: str,
          channels_first_kernel: bool = False) -> float:
    """A GEMM-tiled kernel of ``family``; one tiled for channels-last tensors (not ``channels_first_kernel``)
    runs channels-first ones at the table's ``channels_first_factor``."""
    eff = tab.efficiency[p.kernel]
    compute = eff["compute"] * tile_utilization(problem, p, family)
    if problem.layout == "channels_first" and not channels_first_kernel:
        compute *= tab.efficiency["channels_first_factor"]
    return roofline(problem, p, compute, eff["memory"])


def few_cout(problem: ConvProblem, p: Plan, tab: configs.ArchTable) -> float:
    """``few_channels_out``'s forward kernel (itself, or the data gradient of few input channels on ``dy``): its
    work counts halo pixels, output slots outside the tile and padded columns, and it reads the input (most
    of the bytes) once per output-channel chunk."""
    eff = tab.efficiency[p.kernel]
    utilization, reads = few_cout_work(problem, p.config)
    compute = eff["compute"] * utilization
    if problem.layout == "channels_first":
        compute *= tab.efficiency["channels_first_factor"]
    return roofline(problem, p, compute, eff["memory"] / reads)


def depthwise_utilization(problem: ConvProblem, p: Plan) -> float:
    """Fraction of a depthwise plan's tile lanes that hold real work (pixels x channels, and taps for the
    weight gradient): the blocks after fitting (``plans.depthwise.fit_pixel_block``), the first launch's. A pixel
    block lies in one plane of a 3D map, so the depth (a grid axis) wastes no lane."""
    g, const = p.geometry, dict(p.launches[0].constexprs)
    channels = problem.in_channels

    def used(size: int, block: int) -> float:
        return size / (math.ceil(size / block) * block)

    if problem.direction == "bwd_weight":  # every tap (t, r, s) of every output pixel (n, od, p, q)
        return used(g.taps, const["BLOCK_T"]) * used(channels, const["BLOCK_C"]) * used(g.pixels, const["BLOCK_W"])
    rows, cols = (g.p, g.q) if problem.direction == "fwd" else (cdiv(g.h, g.stride[0]), cdiv(g.w, g.stride[1]))
    return used(rows, const["BLOCK_H"]) * used(cols, const["BLOCK_W"]) * used(channels, const["BLOCK_C"])


def depthwise(problem: ConvProblem, p: Plan, tab: configs.ArchTable) -> float:
    """FMA stencils: "compute" is their fraction of the matrix-unit rate; a channels-first tile loads along W
    without vectors, which costs both rates the kernel's own "channels_first" factor."""
    eff = tab.efficiency[p.kernel]
    compute, memory = eff["compute"] * depthwise_utilization(problem, p), eff["memory"]
    if problem.layout == "channels_first":
        compute, memory = compute * eff["channels_first"], memory * eff["channels_first"]
    return roofline(problem, p, compute, memory)



def grouped_utilization(problem: ConvProblem, p: Plan) -> float:
    """Fraction of a grouped plan's matrix work that is real: each tile of ``G_T`` groups multiplies ``G_T``
    diagonal blocks of ``produced x reduced`` channels in a ``width x depth`` tile (the rest is the block diagonal's
    zeros and padding), the last tile of groups may be partial, and so may the last block of pixel rows (the
    weight gradient's pixel blocks are batch-wide: only its last is partial)."""
    view, c = configs.gemm_view(problem, p.kernel), p.config  # each kernel is its family
    if p.kernel == "grouped_bwd_weight":  # rows: output channels; columns: input channels
        produced, reduced, width, depth, rows = view["m"], view["n"], c.block_m, c.block_n, 1.0
    else:
        produced, reduced, width, depth = view["n"], view["red"], c.block_n, c.block_k
        rows = view["m"] / (math.ceil(view["m"] / c.block_m) * c.block_m)
    tiles = math.ceil(problem.groups / groups_per_tile(problem.groups, produced, reduced, width, depth))
    return rows * problem.groups * produced * reduced / (tiles * width * depth)


def grouped(problem: ConvProblem, p: Plan, tab: configs.ArchTable) -> float:
    """The grouped kernels: the block diagonal's utilization on the compute side; they read each operand once per
    tile of groups (the whole of it: the tiles partition the channels), so the bytes are the problem's, plus the
    weight gradient's workspace and a data gradient's zeroed ``dx`` (:func:`roofline`)."""
    eff = tab.efficiency[p.kernel]
    compute = eff["compute"] * grouped_utilization(problem, p)
    if problem.layout == "channels_first":
        compute *= tab.efficiency["channels_first_factor"]
    return roofline(problem, p, compute, eff["memory"])
