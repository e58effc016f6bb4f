"""Geometry: a 1D, 2D or 3D problem as the 3D convolution of one group (depth 1 below 3D)."""

from __future__ import annotations

from conv_core.geometry import Geometry
from conv_core.problem import ConvProblem


def test_2d_per_group_with_the_leading_padding():
    p = ConvProblem("fwd", 2, 8, 12, (9, 10), (3, 2), (2, 1), ((1, 0), (2, 1)), (1, 2), groups=4)
    g = Geometry.of(p)
    assert (g.batch, g.groups, g.cin, g.cout) == (2, 4, 2, 3)
    assert (g.h, g.w, (g.p, g.q), g.r, g.s) == (9, 10, p.output_size, 3, 2)
    assert (g.stride, g.pad, g.dil) == ((2, 1), (1, 2), (1, 2))
    assert g.taps == 6 and g.pixels == 2 * g.p * g.q


def test_1d_is_a_2d_problem_of_height_one():
    g = Geometry.of(ConvProblem("fwd", 1, 4, 4, (30,), 5, 3, ((2, 1),), 2))
    assert (g.h, g.p, g.r, g.stride, g.pad, g.dil) == (1, 1, 1, (1, 3), (0, 2), (1, 2))


def test_2d_has_depth_one():
    g = Geometry.of(ConvProblem("fwd", 2, 4, 4, (9, 10), 3, 2, 1, 1))
    assert (g.d, g.od, g.t, g.stride_d, g.pad_d, g.dil_d) == (1, 1, 1, 1, 0, 1)


def test_3d_adds_a_depth_axis_and_keeps_the_2d_fields():
    p = ConvProblem("fwd", 2, 8, 12, (5, 9, 10), (2, 3, 2), (3, 2, 1), ((1, 2), (1, 0), (2, 1)), (2, 1, 2), groups=4)
    g = Geometry.of(p)
    assert (g.cin, g.cout, g.h, g.w, (g.od, g.p, g.q), g.r, g.s) == (2, 3, 9, 10, p.output_size, 3, 2)
    assert (g.stride, g.pad, g.dil) == ((2, 1), (1, 2), (1, 2))
    assert (g.d, g.t, g.stride_d, g.pad_d, g.dil_d) == (5, 2, 3, 1, 2)
    assert g.taps == 12 and g.pixels == 2 * g.od * g.p * g.q
