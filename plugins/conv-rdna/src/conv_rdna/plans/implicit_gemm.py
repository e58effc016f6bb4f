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
from .common import (Plan, cdiv, conv_scalars, depth_scalars, epilogue, flipped_weight, forward_weight, named,
                     phase_output, pixel_vector, row_vector, single_phase, strides_ncdhw, strides_nchw,
                     tile_constexprs, tiled_launch, weight_scalars)


def forward_gemm_args(problem: ConvProblem, config: TileConfig, g: Geometry, weight: dict, output: dict) -> tuple:
    """(grid, pointers, scalars, constexprs) shared by the forward implicit GEMMs: output pixels x output
    channels tiles, one grid column per group, operands through their strides, the fused epilogue.
    ``g`` is the convolution the kernel computes (the problem's, or a phase of its data gradient as a
    forward convolution of ``dy``), ``weight`` and ``output`` the weight's and the result's scalar arguments."""
    sx = strides_nchw(problem.operand_shapes[0], problem.layout)
    scalars = {**conv_scalars(g), **named("sx", sx), **weight, **output}
    grid = (cdiv(g.pixels, config.block_m) * cdiv(g.cout, config.block_n), g.groups)
    pointers = dict(x_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    constexprs = {**epilogue(problem), **tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, g.q)}
    return grid, pointers, scalars, constexprs


def implicit_gemm(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """Any 1D, 2D or 3D forward convolution: the 2D arguments of :func:`forward_gemm_args` with the depth axis
    added (extents, stride, padding, dilation, and each tensor's depth stride)."""
    g = Geometry.of(problem)
    sy = strides_ncdhw(problem.result_shape, problem.layout)
    grid, pointers, scalars, constexprs = forward_gemm_args(problem, config, g, weight_scalars(problem),
                                                             named("sy", sy))
    scalars.update(depth_scalars(g), sxd=strides_ncdhw(problem.operand_shapes[0], problem.layout)[2])
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


def merged_pixel_stride(strides: tuple[int, ...], g: Geometry) -> int:
    """The stride of the pixel axis of a dense tensor whose depth, height and width merge into one (a 1x1x1
    filter at stride 1 reads each pixel once): the width's, which the others are multiples of (0: an axis of
    size 1 below 3D)."""
    _, _, sd, sh, sw = strides
    assert sh in (0, g.w * sw) and sd in (0, g.h * g.w * sw), "dense tensors merge D, H and W"
    return sw


def gemm1x1(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    g = Geometry.of(problem)
    sa_shape, out_shape = problem.operand_shapes[0], problem.result_shape
    sa, sy = strides_ncdhw(sa_shape, problem.layout), strides_ncdhw(out_shape, problem.layout)
    swk, swc, _, _ = strides_nchw(problem.weight_shape, problem.layout)
    pixels = g.d * g.h * g.w
    forward = problem.direction == "fwd"
    c_red, c_out = (g.cin, g.cout) if forward else (g.cout, g.cin)
    sw_red, sw_out = (swc, swk) if forward else (swk, swc)
    sap, syp = merged_pixel_stride(sa, g), merged_pixel_stride(sy, g)
    scalars = dict(BATCH=g.batch, HW=pixels, C_RED=c_red, C_OUT=c_out, A_OFF=0, san=sa[0], sac=sa[1], sap=sap,
                   sw_red=sw_red, sw_out=sw_out, sw_group=g.cout * swk, syn=sy[0], syc=sy[1], syp=syp)
    grid = (cdiv(g.batch * pixels, config.block_m) * cdiv(c_out, config.block_n), g.groups)
    pointers = dict(a_ptr="a", w_ptr="b", bias_ptr="bias" if problem.bias else "out", y_ptr="out")
    pixels_contiguous = sap == 1 and syp == 1  # channels first (or one channel)
    pix_vec = pixel_vector(pixels, sa[0], sa[1], sy[0], sy[1]) if pixels_contiguous else 1
    constexprs = {"PIX_VEC": pix_vec, **epilogue(problem), **tile_constexprs(config), "GROUP_M": config.group_m,
                  "ROW_VEC": row_vector(problem.layout, pixels)}
    return Plan(kernel, config, 1, (tiled_launch(conv_gemm1x1, grid, pointers, scalars, constexprs, config),))
