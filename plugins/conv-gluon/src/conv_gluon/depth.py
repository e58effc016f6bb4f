"""The depth axis of a 3D (NDHWC) problem, and the 2D plane geometry the gathering kernels tile.

The gathering kernels address a 3D convolution as their 2D one with a depth axis beside it: output pixel rows
decode to ``(n, z, p, q)``, the reduction walks taps ``(t, r, s)``, and every axis has its own bound. Tiling
needs only the output's pixel count and the per-plane sizes, so a 3D problem tiles as the 2D geometry of its
``(h, w)`` plane with ``N * Z`` images (:func:`plane_of`), and :class:`Depth` carries the rest. A 1D or 2D
problem has :data:`FLAT` depth: one plane, a one-tap filter, unit stride and dilation, no padding; those 1s
are what Triton's JIT compiles in as constants (and the padding is a constexpr), so the 2D kernels compile to
the code they always did.

(conv-core's :class:`~conv_core.geometry.Geometry` is gaining depth fields of its own; until they land this
module reads the problem's sizes itself.)
"""

from __future__ import annotations

from dataclasses import dataclass

from conv_core.geometry import Geometry
from conv_core.problem import ConvProblem


@dataclass(frozen=True)
class Depth:
    """One problem's depth axis: input depth ``d``, output depth ``z``, filter depth ``t``, its stride, front
    padding and dilation."""

    d: int = 1
    z: int = 1
    t: int = 1
    stride: int = 1
    pad: int = 0
    dil: int = 1


#: The depth of a 1D or 2D problem.
FLAT = Depth()


def depth_of(problem: ConvProblem) -> Depth:
    """``problem``'s depth axis (:data:`FLAT` below 3D)."""
    if problem.ndim != 3:
        return FLAT
    return Depth(problem.input_size[0], problem.output_size[0], problem.filter_size[0], problem.stride[0],
                 problem.padding[0][0], problem.dilation[0])


def plane_of(problem: ConvProblem) -> Geometry:
    """The 2D geometry of ``problem``'s ``(h, w)`` plane, per group, with one image per output plane (``N * Z``):
    its pixels are the problem's output pixels."""
    if problem.ndim != 3:
        return Geometry.of(problem)
    g, z = problem.groups, problem.output_size[0]
    return Geometry(problem.batch * z, g, problem.in_channels // g, problem.out_channels // g,
                    *problem.input_size[1:], *problem.output_size[1:], *problem.filter_size[1:],
                    tuple(problem.stride[1:]), tuple(lo for lo, _ in problem.padding[1:]), tuple(problem.dilation[1:]))


def taps(problem: ConvProblem) -> int:
    """Filter taps of ``problem``, every axis's."""
    return depth_of(problem).t * plane_of(problem).taps
