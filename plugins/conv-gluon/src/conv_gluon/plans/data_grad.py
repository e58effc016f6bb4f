"""The data gradient: the forward kernel once per stride phase (:mod:`conv_core.kit.phases`; 3D: each depth phase
of :func:`conv_core.kit.phases.phase_axis` with each phase of the ``(h, w)`` plane)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.kit.phases import PhaseAxis, data_gradient_phases, phase_axis
from conv_core.problem import ConvProblem, element_size

from .. import tiling
from ..configs import ArchTable, TileConfig
from .common import WeightMatrix, check_kernel, dense_pixel_strides
from .forward import Plan, geometry_plan


@dataclass(frozen=True)
class Phase:
    """One stride phase of the data gradient: the forward launch that computes it (its output starts at
    ``dx``'s pixel ``Y_START``) and its filter taps (rows and columns, and 3D depths, in the launch's order)."""

    plan: Plan
    taps_h: tuple[int, ...]
    taps_w: tuple[int, ...]
    taps_d: tuple[int, ...] = (0,)

    @property
    def form(self) -> tuple:
        """The phase's weight matrix as :func:`conv_gluon.weights.pack_transposed` makes it (its arguments)."""
        return self.taps_h, self.taps_w, self.plan.weight.c_pad, self.taps_d


@dataclass(frozen=True)
class DataGradPlan:
    """The data gradient as forward launches: one per stride phase with taps; the phases without taps (a
    1x1 filter at stride 2: three of four) are zeros, each given by its first ``dx`` pixel (2D: ``(h, w)``, 1D:
    ``(0, w)``, 3D: ``(d, h, w)``)."""

    kernel: str
    config: TileConfig
    phases: tuple[Phase, ...]
    zero_phases: tuple[tuple[int, ...], ...]
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
    the other phases' pixels. Nothing is masked away: each phase multiplies exactly its taps. 3D: every depth
    phase (:func:`depth_phases`) with every phase of the plane, the launch's depth axis the depth phase's.
    """
    check_kernel(problem, "bwd_data", kernel, config, tab)
    g = Geometry.of(problem)
    c_total, k_total = problem.in_channels, problem.out_channels
    k_pad = tiling.channel_blocks(g.cout, config.block_k) * config.block_k
    dx_d, dx_h, dx_w = dense_pixel_strides(g.h, g.w)
    phases, zeros = [], []
    for pd in depth_phases(g):
        for phase in data_gradient_phases(g):
            ph, pw = phase.rows, phase.cols
            if not (pd.taps and phase.has_taps):
                zeros.append((pd.phase, *phase.first) if problem.ndim == 3 else phase.first)
                continue
            # the phase's forward launch: dy's planes in, the depth phase's planes of dx out
            pg = dataclasses.replace(phase.geometry(g), d=g.od, od=pd.size, t=len(pd.taps), stride_d=1,
                                     pad_d=pd.pad, dil_d=pd.dil)
            weight = WeightMatrix(c_total, pg.taps, g.cout, k_pad)
            p = geometry_plan(kernel.replace("bwd_data", "fwd"), pg, config, tab, dtype=problem.dtype,
                              in_channels=k_total, out_channels=c_total, bias=False, activation=None,
                              sy=(g.d * dx_d, g.stride[0] * dx_h, g.stride[1] * dx_w), weight=weight,
                              y_start=pd.phase * dx_d + ph.phase * dx_h + pw.phase * dx_w, sy_d=g.stride_d * dx_d)
            p = dataclasses.replace(p, kernel=kernel)
            phases.append(Phase(p, ph.taps, pw.taps, pd.taps))
    return DataGradPlan(kernel, config, tuple(phases), tuple(zeros), problem.dtype, g)


def depth_phases(g: Geometry) -> tuple[PhaseAxis, ...]:
    """The stride phases of ``g``'s depth axis that have planes (:func:`conv_core.kit.phases.phase_axis`); below
    3D one phase of one plane and one tap."""
    axes = (phase_axis(a, g.d, g.t, g.stride_d, g.pad_d, g.dil_d) for a in range(g.stride_d))
    return tuple(axis for axis in axes if axis.size)
