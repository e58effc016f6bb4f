"""Geometry: a 1D or 2D problem as the 2D convolution of one group."""

from __future__ import annotations

import pytest
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


def test_3d_has_no_2d_geometry():
    with pytest.raises(ValueError, match="3D"):
        Geometry.of(ConvProblem("fwd", 1, 4, 4, (5, 5, 5), 3, 1, 1, 1))
