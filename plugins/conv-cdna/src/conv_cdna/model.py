"""How long a plan takes on a chip: the model behind conv-cdna's estimates and the tables :mod:`conv_cdna.derive`
writes. Nothing here was measured on AMD hardware; the method is checked on the H100 (:mod:`conv_cdna.validate`).

A tiled kernel's grid of ``tiles`` workgroups is spread over the compute units; the busiest unit runs
``ceil(tiles / CUs)`` of them, ``resident`` at a time (what LDS and registers allow, :meth:`Chip.resident_tiles`).
Each tile does its share of the padded matrix work (the real work over the tile utilization) at the unit's matrix
rate, or less where the tile is too small for the L2 to feed it or a wave's part too small for the LDS to
(:meth:`Chip.operand_rate`: operand bytes per step against ``l2_bytes_per_clock_per_cu`` and
``lds_bytes_per_clock_per_cu``), or where its SIMDs hold fewer than :data:`~conv_cdna.chips.HIDING_WAVES` waves. The
memory time is the problem's bytes (workspaces written and read back included) at the copy rate. Each kernel reaches
fractions of both (:func:`factors`, fitted on the H100 by ``python -m conv_cdna.validate --fit``), and of its compute
rate a further fraction ``channels_first`` where it reads channels-first tensors against their layout
(:func:`strided_reads`: a kernel tiled for channels-last data gathers its operands across the channel axis, whose
stride is a whole image, where only runs of pixels are contiguous). The estimate is the slower of the two plus a
launch cost per launch::

    compute = ceil(tiles / CUs) * (flops / utilization / tiles) / (rate_per_CU * hiding)
              / compute_factor [/ channels_first_factor where strided_reads]
    memory  = bytes / copy_rate / memory_factor
    time    = max(compute, memory) + launches * launch_us

Depthwise stencils use no matrix units: their rate is the chip's float32 vector rate.
"""

from __future__ import annotations

import math

from conv_core.problem import ConvProblem, element_size
from conv_rdna.api import (COMPILER_DIVISIBILITY, DEPTHWISE_FAMILIES, GROUPED, REGISTRY, WINOGRAD_PLANS, Plan,
                           TileConfig, depthwise_utilization, few_cout_work, grouped_utilization, names,
                           tile_utilization)

from .chips import DATA, HIDING_WAVES, Chip

#: Kernels whose forward work is counted by ``few_channels_out``'s own model (halo pixels, re-read input).
FEW_COUT_KERNELS = ("few_channels_out", "few_channels_in_bwd_data")
#: Kernels tiled for channels-last data whose reduction runs over pixels (the weight gradients: ``K`` = batch x
#: pixels): on channels-first tensors their loads run along pixel rows.
PIXEL_REDUCTIONS = ("bwd_weight_split", "bwd_weight_atomic", "few_channels_in_bwd_weight",
                    "few_channels_out_bwd_weight")


def factors() -> dict[str, dict[str, float]]:
    """Each kernel's fractions of the modelled rates (``data/model.json``: ``compute``, ``memory``,
    ``channels_first``)."""
    return DATA.json("model.json")["factors"]


def work(problem: ConvProblem, p: Plan) -> tuple[float, float, int]:
    """``(flops, utilization, bytes)`` of a plan: its real matrix (or FMA) work, the fraction of the tiles that is
    real, and the bytes it moves (operands and result once, each input re-read where the kernel re-reads it,
    workspaces written and read back, a result zeroed first)."""
    family = REGISTRY.family_of(p.kernel)
    flops, reads = problem.flops, 1.0
    if family in DEPTHWISE_FAMILIES:
        utilization = depthwise_utilization(problem, p)
    elif p.kernel in FEW_COUT_KERNELS:
        utilization, reads = few_cout_work(problem, p.config)
    elif p.kernel in names(GROUPED):  # the block diagonal's zeros are unused work (conv_rdna.estimates)
        utilization = grouped_utilization(problem, p)
    elif p.kernel in WINOGRAD_PLANS:
        module = WINOGRAD_PLANS[p.kernel]
        flops = module.winograd_flops(problem)
        utilization = module.gemm_utilization(problem, p.config)
    else:
        utilization = tile_utilization(problem, p, family)
    moved = problem.min_bytes * reads + 2 * p.workspace_fills * p.workspace_bytes
    if p.zero == "out":
        moved += math.prod(problem.result_shape) * element_size(problem.result_dtype)
    return flops, utilization, moved


def tiles_of(p: Plan) -> int:
    """Workgroups of the plan's largest launch (its matrix work; the split reduction and transforms are smaller)."""
    return max(math.prod(launch.grid) for launch in p.launches)


def compute_us(problem: ConvProblem, p: Plan, chip: Chip) -> float:
    """The compute time at the full modelled rate (before the kernel's factor)."""
    flops, utilization, _ = work(problem, p)
    tiles = tiles_of(p)
    per_cu = ((chip.vector_tflops if REGISTRY.family_of(p.kernel) in DEPTHWISE_FAMILIES else chip.matmul_tflops)
              * 1e12 / chip.compute_units)
    c, waves_per_tile = p.config, math.ceil(p.config.num_warps / chip.simds_per_cu)
    if isinstance(c, TileConfig):
        per_cu = min(per_cu, chip.operand_rate(c, problem.dtype))
        resident = max(chip.resident_tiles(c, problem.dtype), 1)
    else:  # stencils: no LDS, few registers
        resident = chip.waves_per_simd // waves_per_tile
    per_unit = math.ceil(tiles / chip.compute_units)
    hiding = min(1.0, min(per_unit, resident) * waves_per_tile / HIDING_WAVES)
    return per_unit * (flops / utilization / tiles) / (per_cu * hiding) * 1e6


def memory_us(problem: ConvProblem, p: Plan, chip: Chip) -> float:
    """The memory time at the full copy rate (before the kernel's factor)."""
    return work(problem, p)[2] / (chip.copy_tbps * 1e12) * 1e6


def strided_reads(problem: ConvProblem, p: Plan) -> bool:
    """Whether the kernel's ``channels_first`` fraction applies: on channels-first tensors, but for the weight
    gradients of :data:`PIXEL_REDUCTIONS` on rows of a multiple of 16 pixels (``ROW_VEC`` 16), whose loads the
    compiler sees running along contiguous pixels and vectorises (``conv_rdna/kernels/bwd_weight.py``; the H100's
    times agree: no loss there, two to seven times elsewhere). The kernels written for channels-first tensors run
    nothing else, so their fraction is part of their compute fraction (and fitted as 1)."""
    if problem.layout != "channels_first":
        return False
    row_vec = max(dict(launch.constexprs).get("ROW_VEC", 1) for launch in p.launches)
    return not (p.kernel in PIXEL_REDUCTIONS and row_vec == COMPILER_DIVISIBILITY)


def estimate_us(problem: ConvProblem, p: Plan, chip: Chip, fitted: dict | None = None) -> float:
    """The plan's time on ``chip`` with the kernel's fitted factors (``fitted``: others, for the fit itself)."""
    f = (fitted or factors())[p.kernel]
    compute = f["compute"] * (f["channels_first"] if strided_reads(problem, p) else 1.0)
    return max(compute_us(problem, p, chip) / compute, memory_us(problem, p, chip) / f["memory"]) \
        + launches_of(p) * chip.launch_us


def launches_of(p: Plan) -> int:
    """Kernel launches of the plan, the zeroing of its workspace or result included."""
    return len(p.launches) + (1 if p.zero else 0)
