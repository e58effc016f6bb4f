"""Plans of the forward implicit GEMMs (kernels/implicit_gemm.py, kernels/conv3x3.py, kernels/gemm1x1.py): output
pixels x output channels tiles, one grid column per group; ``conv3x3`` also runs the stride-1 data gradient on
``dy``, ``gemm1x1`` the 1x1 data gradient."""

from __future__ import annotations

from conv_core.geometry import Geometry
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig
from ..kernels.conv3x3 import conv_fwd_3x3
from ..kernels.gemm1x1 import conv_gemm1x1
from ..kernels.implicit_gemm import conv_fwd_implicit_gemm
from .common import (Plan, cdiv, conv_scalars, epilogue, flipped_weight, forward_weight, named, phase_output,
                     pixel_vector, row_vector, single_phase, strides_nchw, tile_constexprs, tiled_launch,
                     weight_scalars)


def forward_gemm_args(problem: ConvProblem, config: TileConfig, g: Geometry, weight: dict, output: dict) -> tuple:
    """(grid, pointers, scalars, constexprs) shared by the forward implicit GEMMs: output pixels x output
    channels tiles, one grid column per group, operands through their strides, the fused epilogue.
    ``g`` is the convolution the kernel computes (the problem's, or a phase of its data gradient as a
    forward convolution of ``dy``), ``weight`` and ``output`` the weight's and the result's scalar arguments."""
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**conv_scalars(g), **named("sx", sx), **weight, **output}
    grid = (cdiv(g.batch * g.p * g.q, config.block_m) * cdiv(g.cout, config.block_n), g.groups)
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**epilogue(problem), **tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.q)}
    return grid, pointers, scalars, constexprs


def implicit_gemm(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    sy = strides_nchw(problem.result_shape, problem.layout)
    grid, pointers, scalars, constexprs = forward_gemm_args(problem, config, Geometry.of(problem),
                                                             weight_scalars(problem), named("sy", sy))
    return Plan(kernel, config, 1, (tiled_launch(conv_fwd_implicit_gemm, grid, pointers, scalars, constexprs, config),))


def three_by_three(problem: ConvProblem) -> bool:
    """Whether ``conv3x3`` runs ``problem``: a 2D 3x3 filter, forward at any stride, or the data gradient at stride 1
    (then one forward convolution of ``dy``, :func:`bwd_data_phases`)."""
    return problem.filter_size == (3, 3) and (problem.direction == "fwd"
                                              or (problem.direction == "bwd_data" and problem.stride == (1, 1)))


def conv3x3(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``conv_fwd_3x3`` over the problem's forward convolution, or over ``dy`` with the weight transposed and
    flipped by strides (the stride-1 data gradient's one phase); the filter size is the kernel's constant."""
    g = Geometry.of(problem)
    if problem.direction == "fwd":
        on, weight = g, forward_weight(problem)
    else:
        phase = single_phase(g)
        on, weight = phase.geometry(g), flipped_weight(problem, phase)
    grid, pointers, scalars, constexprs = forward_gemm_args(problem, config, on, weight, phase_output(problem))
    del scalars["R"], scalars["S"]
    return Plan(kernel, config, 1, (tiled_launch(conv_fwd_3x3, grid, pointers, scalars, constexprs, config),))


def gemm1x1(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    sa_shape, out_shape = problem.operand_shapes[0], problem.result_shape
    sa, sy = strides_nchw(sa_shape, problem.layout), strides_nchw(out_shape, problem.layout)
    swk, swc, _, _ = strides_nchw(problem.weight_shape, problem.layout)
    assert sa[2] in (0, g.w * sa[3]) and sy[2] in (0, g.w * sy[3]), "dense tensors merge H and W"
    forward = problem.direction == "fwd"
    c_red, c_out = (g.cin, g.cout) if forward else (g.cout, g.cin)
    sw_red, sw_out = (swc, swk) if forward else (swk, swc)
    scalars = dict(BATCH=g.batch, HW=g.h * g.w, C_RED=c_red, C_OUT=c_out, A_OFF=0, san=sa[0], sac=sa[1], sap=sa[3],
                   sw_red=sw_red, sw_out=sw_out, sw_group=g.cout * swk, syn=sy[0], syc=sy[1], syp=sy[3])
    grid = (cdiv(g.batch * g.h * g.w, config.block_m) * cdiv(c_out, config.block_n), g.groups)
    pointers = dict(a_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    pixels_contiguous = sa[3] == 1 and sy[3] == 1  # channels first (or one channel)
    pix_vec = pixel_vector(g.h * g.w, sa[0], sa[1], sy[0], sy[1]) if pixels_contiguous else 1
    constexprs = {"PIX_VEC": pix_vec, **epilogue(problem), **tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.h * g.w)}
    return Plan(kernel, config, 1, (tiled_launch(conv_gemm1x1, grid, pointers, scalars, constexprs, config),))
