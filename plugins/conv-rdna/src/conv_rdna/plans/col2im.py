"""Plan of ``col2im_bwd_data`` (kernels/col2im.py): the data gradient of few input channels at any stride as
``Z = dy @ w`` (``conv_gemm1x1`` into the float32 workspace) and a gather of ``dx`` from ``Z``."""

from __future__ import annotations

import math

from conv_core.geometry import Geometry
from conv_core.kit.declines import interpreting
from conv_core.kit.launch import Launch
from conv_core.problem import ConvProblem

from ..configs import ArchTable, TileConfig
from ..kernels.col2im import conv_col2im
from ..kernels.gemm1x1 import conv_gemm1x1
from .common import Plan, cdiv, named, pow2_at_least, row_vector, strides_nchw, tile_constexprs, tiled_launch

#: Most bytes of float32 ``Z`` that ``col2im_bwd_data`` holds at once: it runs on chunks of whole images
#: below this (the ResNet stem at batch 32 needs 236 MB for the whole batch: 8 images a chunk).
COL2IM_WORKSPACE_BYTES = 64 << 20


def col2im_bwd_data(problem: ConvProblem, kernel: str, config: TileConfig, tab: ArchTable) -> Plan:
    """``col2im_bwd_data`` (kernels/col2im.py): per chunk of images, ``Z = dy @ w`` into the float32 workspace,
    then the gather of ``dx`` from ``Z``; the workspace holds one chunk's ``Z``."""
    g = Geometry.of(problem)
    z_cols = g.groups * g.cin * g.r * g.s
    chunk = max(1, min(g.batch, COL2IM_WORKSPACE_BYTES // (4 * g.p * g.q * z_cols)))
    launches = []
    for n0 in range(0, g.batch, chunk):
        images = min(chunk, g.batch - n0)
        launches += [_col2im_gemm(problem, g, config, n0, images), _col2im_gather(problem, g, tab, n0, images)]
    return Plan(kernel, config, 1, tuple(launches), chunk * g.p * g.q * z_cols,
                workspace_fills=cdiv(g.batch, chunk))


def _col2im_gemm(problem: ConvProblem, g: Geometry, config: TileConfig, n0: int, images: int) -> Launch:
    """``conv_gemm1x1`` on ``images`` images of ``dy`` from image ``n0``: ``dy``'s channels reduced against the
    weight's rows, whose ``C_G * R * S`` columns (in the weight's memory order: ``c*swc + r*swr + s*sws``)
    are ``Z``'s, every group's side by side in a row of ``Z``. ``config`` tiles it."""
    sdy = strides_nchw(problem.output_shape, problem.layout)
    swk = strides_nchw(problem.weight_shape, problem.layout)[0]
    assert sdy[2] in (0, g.q * sdy[3]), "dense dy merges P and Q"
    cols = g.cin * g.r * g.s
    z_cols = g.groups * cols
    scalars = dict(BATCH=images, HW=g.p * g.q, C_RED=g.cout, C_OUT=cols, A_OFF=n0 * sdy[0], san=sdy[0],
                   sac=sdy[1], sap=sdy[3], sw_red=swk, sw_out=1, sw_group=g.cout * swk,
                   syn=g.p * g.q * z_cols, syc=1, syp=z_cols)
    grid = (cdiv(images * g.p * g.q, config.block_m) * cdiv(cols, config.block_n), g.groups)
    pointers = dict(a_ptr="a", w_ptr="b", bias_ptr="workspace", y_ptr="workspace")
    constexprs = dict(PIX_VEC=1, HAS_BIAS=False, ACTIVATION="", **tile_constexprs(config), GROUP_M=config.group_m,
                      ROW_VEC=row_vector(problem.layout, g.p * g.q))
    return tiled_launch(conv_gemm1x1, grid, pointers, scalars, constexprs, config)


def _col2im_gather(problem: ConvProblem, g: Geometry, tab: ArchTable, n0: int, images: int) -> Launch:
    """``conv_col2im`` on the same images: one grid plane per stride phase, and as many elements (pixels x
    channels) a program as the table's split reduction sums (``reduce``: both are passes over float32
    partials)."""
    swc, swr, sws = strides_nchw(problem.weight_shape, problem.layout)[1:]
    (sh, sw_), (dh, dw) = g.stride, g.dil
    h_ph, w_ph = cdiv(g.h, sh), cdiv(g.w, sw_)  # the largest stride phase
    scalars = dict(BATCH=images, N0=n0, H=g.h, W=g.w, P=g.p, Q=g.q, R=g.r, S=g.s, PAD_H=g.pad[0], PAD_W=g.pad[1],
                   DIL_H=dh, DIL_W=dw, H_PH=h_ph, W_PH=w_ph, Z_COLS=g.groups * g.cin * g.r * g.s, szc=swc, szr=swr,
                   szs=sws, **named("sx", strides_nchw(problem.input_shape, problem.layout)))
    c_pad = pow2_at_least(g.cin)
    block_m = max(tab.reduce_block // c_pad, 16)
    constexprs = dict(C_G=g.cin, STRIDE_H=sh, STRIDE_W=sw_, STEP_H=sh // math.gcd(sh, dh),
                      STEP_W=sw_ // math.gcd(sw_, dw), BLOCK_M=block_m, C_PAD=c_pad, INTERPRET=interpreting())
    return Launch(conv_col2im, (cdiv(images * h_ph * w_ph, block_m), g.groups, sh * sw_),
                  (("z_ptr", "workspace"), ("dx_ptr", "out")), tuple(scalars.items()), tuple(constexprs.items()),
                  tab.reduce_warps, 1)


