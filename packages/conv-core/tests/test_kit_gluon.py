"""What conv-gluon needs of ``conv_core.kit`` beyond ``test_kit.py``: the stride phases as its data gradient
reads them, launches whose kernel takes ``num_warps`` as a parameter (Gluon), launches without ``num_stages``."""

from __future__ import annotations

import random

import pytest
from conv_core.geometry import Geometry
from conv_core.kit.launch import make_launch
from conv_core.kit.phases import data_gradient_phases, phase_axis
from conv_core.problem import ConvProblem


@pytest.mark.parametrize("seed", range(4))
def test_phase_axes_match_the_definition(seed):
    """Every (dx element, tap, dy element) of the data gradient appears in exactly one phase, as the phase's
    stride-1 correlation reads it: p = i - pad' + t * dil'."""
    rng = random.Random(seed)
    for _ in range(300):
        size, k, stride, dil, pad = (rng.randint(1, 13), rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 3),
                                     rng.randint(0, 5))
        for phase in range(stride):
            axis = phase_axis(phase, size, k, stride, pad, dil)
            assert axis.size == len(range(phase, size, stride))
            for i in range(axis.size):
                h = phase + stride * i
                wanted = sorted((r, (h + pad - r * dil) // stride) for r in range(k)
                                if (h + pad - r * dil) % stride == 0)
                got = sorted((r, i - axis.pad + t * axis.dil) for t, r in enumerate(axis.taps))
                assert got == wanted, (size, k, stride, dil, pad, phase, i)


def test_phases_of_a_1x1_stride_2_have_one_tap_or_none():
    g = Geometry.of(ConvProblem("fwd", 1, 4, 4, (9, 8), 1, 2, 0, 1))
    phases = data_gradient_phases(g)
    assert [p.first for p in phases] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(len(p.rows.taps), len(p.cols.taps)) for p in phases] == [(1, 1), (1, 0), (0, 1), (0, 0)]
    assert [p.has_taps for p in phases] == [True, False, False, False]
    pg = phases[0].geometry(g)
    assert (pg.h, pg.w, pg.p, pg.q, pg.r, pg.s, pg.cin, pg.cout) == (5, 4, 5, 4, 1, 1, 4, 4)


class FakeKernel:
    """The parameters of a Gluon kernel: its launch option ``num_warps`` is a constexpr parameter."""

    __name__ = "fake"
    arg_names = ["x_desc", "y_ptr", "N", "BLOCK", "num_warps"]


def test_a_launch_option_may_be_a_kernel_parameter():
    launch = make_launch(FakeKernel, (4,), {"x_desc": "a", "y_ptr": "out"}, {"N": 10}, {"BLOCK": 64}, 4, None,
                         maxnreg=168, descriptors={"x_desc": "map"})
    assert launch.options == {"num_warps": 4, "maxnreg": 168}  # no num_stages: the compiler's default
    assert launch.values == {"N": 10, "BLOCK": 64} and launch.on_grid((2,)).grid == (2,)
    site = launch.make_site(lambda name, data: lambda t: (data, t))
    assert (site.pointers, site.roles) == (("x_desc", "y_ptr"), ("a", "out"))
    assert site.arguments["x_desc"]("tensor") == ("map", "tensor")
    with pytest.raises(TypeError):  # num_warps given twice (as a constexpr and as the option)
        make_launch(FakeKernel, (4,), {"x_desc": "a", "y_ptr": "out"}, {"N": 10}, {"BLOCK": 64, "num_warps": 4}, 4)
    with pytest.raises(TypeError):
        make_launch(FakeKernel, (4,), {"x_desc": "a"}, {"N": 10}, {"BLOCK": 64}, 4)
