"""The data gradient: the forward kernel once per stride phase (:mod:`conv_core.kit.phases`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.kit.phases import data_gradient_phases
from conv_core.problem import ConvProblem, element_size

from .. import tiling
from ..configs import ArchTable, TileConfig
from .common import WeightMatrix, check_kernel, dense_pixel_strides
from .forward import Plan, geometry_plan


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
    #: the problem's geometry (each phase's launch has its own)
    geometry: Geometry

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
    ``dy`` (:meth:`conv_core.kit.phases.Phase.geometry`) with the weight transposed (input and output channels
    swapped per group) and restricted to the phase's taps in the phase's order; its output strides step over
    the other phases' pixels. Nothing is masked away: each phase multiplies exactly its taps.
    """
    check_kernel(problem, "bwd_data", kernel, config, tab)
    g = Geometry.of(problem)
    c_total, k_total = problem.in_channels, problem.out_channels
    k_pad = tiling.channel_blocks(g.cout, config.block_k) * config.block_k
    dx_n, dx_h, dx_w = dense_pixel_strides(g.h, g.w)
    phases, zeros = [], []
    for phase in data_gradient_phases(g):
        ph, pw = phase.rows, phase.cols
        if not phase.has_taps:
            zeros.append(phase.first)
            continue
        pg = phase.geometry(g)
        weight = WeightMatrix(c_total, pg.taps, g.cout, k_pad)
        p = geometry_plan(kernel.replace("bwd_data", "fwd"), pg, config, tab, dtype=problem.dtype,
                          in_channels=k_total, out_channels=c_total, bias=False, activation=None,
                          sy=(dx_n, g.stride[0] * dx_h, g.stride[1] * dx_w), weight=weight,
                          y_start=ph.phase * dx_h + pw.phase * dx_w)
        p = dataclasses.replace(p, kernel=kernel)
        phases.append(Phase(p, ph.taps, pw.taps))
    return DataGradPlan(kernel, config, tuple(phases), tuple(zeros), problem.dtype, g)
