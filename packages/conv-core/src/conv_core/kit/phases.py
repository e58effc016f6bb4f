"""The data gradient as forward convolutions: one stride-1 convolution of ``dy`` per stride phase of ``dx``.

``dx[h] = sum_r dy[p] w[r]`` over the taps ``r`` with ``(h + pad - r * dil) % stride == 0``, at
``p = (h + pad - r * dil) / stride``. Which taps qualify depends only on the phase ``h % stride``; walked from
the largest, consecutive qualifying taps are ``stride / gcd(stride, dil)`` apart and read ``dy`` at consecutive
(dilated) positions. So the pixels of one phase are a forward correlation of ``dy`` at stride 1, with its own
dilation and (possibly negative) padding, over the phase's taps in descending order: any forward kernel can
compute a data gradient this way, with no zeros multiplied. A phase with pixels but no tap (a stride larger
than the filter's reach: a 1x1 filter at stride 2 leaves three phases of four) is all zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..geometry import Geometry


@dataclass(frozen=True)
class PhaseAxis:
    """One axis of a stride phase: ``dx`` positions ``phase + stride * i`` for ``i < size``, computed from
    ``dy[i - pad + t * dil]`` times the filter tap ``taps[t]``."""

    phase: int
    size: int
    #: the filter taps of the phase, in the order its convolution walks them (descending)
    taps: tuple[int, ...]
    dil: int
    pad: int

    @property
    def tap_step(self) -> int:
        """How far apart consecutive taps are in the filter (they descend by this much)."""
        return self.taps[0] - self.taps[1] if len(self.taps) > 1 else 1


def phase_axis(phase: int, size: int, filter_size: int, stride: int, pad: int, dil: int) -> PhaseAxis:
    """Phase ``phase`` of an axis of ``size`` data-gradient positions (see :class:`PhaseAxis`)."""
    count = len(range(phase, size, stride))
    taps = tuple(r for r in reversed(range(filter_size)) if (phase + pad - r * dil) % stride == 0)
    if not taps:
        return PhaseAxis(phase, count, (), 1, 0)
    first = (phase + pad - taps[0] * dil) // stride  # exact: the tap qualifies
    step = taps[0] - taps[1] if len(taps) > 1 else stride // math.gcd(stride, dil)
    return PhaseAxis(phase, count, taps, step * dil // stride, -first)


@dataclass(frozen=True)
class Phase:
    """One stride phase ``(rows.phase, cols.phase)`` of a 2D data gradient (1D: one row)."""

    rows: PhaseAxis
    cols: PhaseAxis

    @property
    def first(self) -> tuple[int, int]:
        """The phase's first ``dx`` pixel; it owns every stride-th one from there."""
        return self.rows.phase, self.cols.phase

    @property
    def has_taps(self) -> bool:
        """Whether the phase multiplies anything (else its pixels are zeros)."""
        return bool(self.rows.taps and self.cols.taps)

    def geometry(self, g: Geometry) -> Geometry:
        """The forward convolution that computes this phase of ``g``'s data gradient: ``dy`` in (``g.p x g.q``
        pixels of ``g.cout`` channels), the phase's ``dx`` pixels out (``g.cin`` channels), stride 1."""
        return Geometry(g.batch, g.groups, g.cout, g.cin, g.p, g.q, self.rows.size, self.cols.size,
                        len(self.rows.taps), len(self.cols.taps), (1, 1), (self.rows.pad, self.cols.pad),
                        (self.rows.dil, self.cols.dil))


def data_gradient_phases(g: Geometry) -> tuple[Phase, ...]:
    """Every stride phase of ``g``'s data gradient that has pixels (``stride_h x stride_w`` at most), with
    taps or without (:attr:`Phase.has_taps`), rows outer."""
    rows = [phase_axis(a, g.h, g.r, g.stride[0], g.pad[0], g.dil[0]) for a in range(g.stride[0])]
    cols = [phase_axis(b, g.w, g.s, g.stride[1], g.pad[1], g.dil[1]) for b in range(g.stride[1])]
    return tuple(Phase(r, c) for r in rows for c in cols if r.size and c.size)
