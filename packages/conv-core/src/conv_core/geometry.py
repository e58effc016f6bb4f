"""A 1D, 2D or 3D problem as the 3D convolution of one group: the sizes a kernel's index arithmetic works on.

Backends that tile a convolution per group (an implicit GEMM, a stencil) all need the same numbers:
channels per group, input, output and filter sizes, stride, the leading (front/top/left) padding and
dilation. The 2D fields (``h, w, p, q, r, s`` and the pairs ``stride, pad, dil``) are the height and width
axes; the depth axis has fields of its own (``d, od, t, stride_d, pad_d, dil_d``), so that a 2D kernel reads
what it always did. Lower ranks are higher ones of size 1: a 2D problem has depth 1 (a one-tap filter, unit
stride and dilation, no padding), a 1D one also height 1. The trailing padding only shapes the output size,
which the problem already gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .problem import ConvProblem


@dataclass(frozen=True)
class Geometry:
    """The problem as a 3D convolution, per group (depth 1 below 3D)."""

    batch: int
    groups: int
    cin: int  # input channels per group
    cout: int  # output channels per group
    h: int
    w: int
    p: int
    q: int
    r: int
    s: int
    stride: tuple[int, int]
    pad: tuple[int, int]  # top, left
    dil: tuple[int, int]
    d: int = 1  # input depth
    od: int = 1  # output depth
    t: int = 1  # filter depth
    stride_d: int = 1
    pad_d: int = 0  # front
    dil_d: int = 1

    @classmethod
    def of(cls, problem: ConvProblem) -> Geometry:
        def three(values, fill: int) -> tuple[int, int, int]:
            return (fill,) * (3 - len(values)) + tuple(values)

        g = problem.groups
        (d, h, w), (od, p, q) = three(problem.input_size, 1), three(problem.output_size, 1)
        t, r, s = three(problem.filter_size, 1)
        stride, dil = three(problem.stride, 1), three(problem.dilation, 1)
        pad = three(tuple(lo for lo, _ in problem.padding), 0)
        return cls(problem.batch, g, problem.in_channels // g, problem.out_channels // g, h, w, p, q, r, s,
                   stride[1:], pad[1:], dil[1:], d, od, t, stride[0], pad[0], dil[0])

    @property
    def taps(self) -> int:
        return self.t * self.r * self.s

    @property
    def pixels(self) -> int:
        """Output pixels of the batch (an implicit GEMM's ``M``)."""
        return self.batch * self.od * self.p * self.q
