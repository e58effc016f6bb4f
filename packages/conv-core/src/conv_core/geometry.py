"""A 1D or 2D problem as the 2D convolution of one group: the sizes a kernel's index arithmetic works on.

Backends that tile a convolution per group (an implicit GEMM, a stencil) all need the same numbers:
channels per group, input, output and filter sizes, stride, the leading (top/left) padding and dilation,
with 1D problems as 2D ones of height 1 (unit stride and dilation along H, no vertical padding). The
trailing padding only shapes the output size, which the problem already gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .problem import ConvProblem


@dataclass(frozen=True)
class Geometry:
    """The problem as a 2D convolution, per group."""

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

    @classmethod
    def of(cls, problem: ConvProblem) -> Geometry:
        if problem.ndim not in (1, 2):
            raise ValueError(f"{problem.ndim}D problems have no 2D geometry")

        def two(values) -> tuple[int, int]:
            return tuple(values) if len(values) == 2 else (1, *values)

        g = problem.groups
        pads = tuple(lo for lo, _ in problem.padding)
        return cls(problem.batch, g, problem.in_channels // g, problem.out_channels // g,
                   *two(problem.input_size), *two(problem.output_size), *two(problem.filter_size),
                   two(problem.stride), pads if len(pads) == 2 else (0, pads[0]), two(problem.dilation))

    @property
    def taps(self) -> int:
        return self.r * self.s

    @property
    def pixels(self) -> int:
        """Output pixels of the batch (an implicit GEMM's ``M``)."""
        return self.batch * self.p * self.q
