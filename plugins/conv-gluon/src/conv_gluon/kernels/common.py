"""Pieces every kernel of the backend shares: the persistent tile order and the fused epilogue.

The tile order has a Python twin, :func:`conv_gluon.tiling.tile_coords`, which the CPU tests check for
being a bijection; the two must stay the same arithmetic.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma

from .codes import ACTIVATIONS
from .compat import tma_store

RELU = gl.constexpr(ACTIVATIONS["relu"])
RELU6 = gl.constexpr(ACTIVATIONS["relu6"])
GELU = gl.constexpr(ACTIVATIONS["gelu"])
GELU_TANH = gl.constexpr(ACTIVATIONS["gelu_tanh"])
SILU = gl.constexpr(ACTIVATIONS["silu"])
NO_ACTIVATION = gl.constexpr(ACTIVATIONS[""])


@gluon.jit
def tile_coords(tile, TILES_M, TILES_N, GROUP_M: gl.constexpr):
    """``(group, pid_m, pid_n)`` of linear tile ``tile``.

    Tiles are numbered group after group (a convolution group never shares a tile with another); within a
    group, bands of ``GROUP_M`` row tiles are walked column by column, so that consecutive tiles of one
    persistent program, and the tiles that neighbouring programs take at the same time, share input rows
    and weight columns in L2.
    """
    per_group = TILES_M * TILES_N
    g = tile // per_group
    t = tile - g * per_group
    band_size = GROUP_M * TILES_N
    band = t // band_size
    first_m = band * GROUP_M
    rows_in_band = gl.minimum(TILES_M - first_m, GROUP_M)
    in_band = t - band * band_size
    pid_m = first_m + in_band % rows_in_band
    pid_n = in_band // rows_in_band
    return g, pid_m, pid_n


@gluon.jit
def _erfc(u):
    """erfc to a relative error below 1.2e-7 everywhere (Chebyshev fit, Numerical Recipes 6.2): one exp and
    ten FMAs per element. libdevice's erf, branching per element, made ptxas spill a 128-register
    accumulator's epilogue; this gives gelu an error below 2.2e-7 |x| in float32 (torch's own: 3.5e-7)."""
    z = gl.abs(u)
    t = 1.0 / (1.0 + 0.5 * z)
    p = 0.17087277
    p = p * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    r = t * gl.exp(p - z * z)
    return gl.where(u >= 0.0, r, 2.0 - r)


@gluon.jit
def activation(x, ACTIVATION: gl.constexpr):
    """``conv_core.activations`` on a float32 tile (``ACTIVATION``: a code of ``codes.ACTIVATIONS``)."""
    if ACTIVATION == RELU:
        x = gl.maximum(x, 0.0)
    elif ACTIVATION == RELU6:
        x = gl.minimum(gl.maximum(x, 0.0), 6.0)
    elif ACTIVATION == GELU:  # exact gelu, x * Phi(x) = x/2 * erfc(-x / sqrt(2))
        x = 0.5 * x * _erfc(-0.7071067811865476 * x)
    elif ACTIVATION == GELU_TANH:  # tanh(u) = 1 - 2 / (exp(2u) + 1): finite for every u
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (2.0 - 2.0 / (gl.exp(2.0 * u) + 1.0))
    elif ACTIVATION == SILU:
        x = x / (1.0 + gl.exp(-x))
    else:
        gl.static_assert(ACTIVATION == NO_ACTIVATION, "unknown activation code")
    return x


@gluon.jit
def store_tile(acc, y_ptr, row_off, row_ok, cols, cols_left, ACTIVATION: gl.constexpr, STAGE_OUT: gl.constexpr):
    """Activation, one rounding to the output dtype, masked store (the kernels start the accumulator with the
    bias).

    ``y_ptr`` points at the tile's first channel; ``row_off`` / ``row_ok``: each row's pixel offset and
    validity; ``cols``: the tile's column indices; ``cols_left``: how many of them are real output channels.
    The store goes straight from the accumulator's registers, in pairs of 16-bit values, where Triton can see
    that rows start 16-byte aligned; otherwise (``STAGE_OUT``: 16-bit outputs whose channel count or strides
    are not multiples of 16) the tile is first staged through shared memory into whole rows: converting the
    accumulator to single 16-bit values in place made ptxas serialize every ``wgmma`` of the kernel (C7514).
    """
    acc = activation(acc, ACTIVATION)
    out = acc.to(y_ptr.dtype.element_ty)
    if STAGE_OUT:
        layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
        out = gl.convert_layout(out, layout)
        row_off = gl.convert_layout(row_off, gl.SliceLayout(1, layout))
        row_ok = gl.convert_layout(row_ok, gl.SliceLayout(1, layout))
        cols = gl.convert_layout(cols, gl.SliceLayout(0, layout))
    offs = row_off[:, None] + cols[None, :]
    mask = row_ok[:, None] & (cols < cols_left)[None, :]
    gl.store(y_ptr + offs, out, mask=mask)


@gluon.jit
def store_tile_tma(acc, y_desc, out_buf, coords, ACTIVATION: gl.constexpr):
    """The epilogue through TMA: activation, one rounding to the output dtype, the tile written into the
    shared-memory buffer ``out_buf`` (``y_desc``'s box, any shape of ``acc``'s elements) and copied to its box
    of the output at ``coords`` asynchronously, clipped at the output's edges (no masks). The copy runs on
    while the consumer starts the next tile's MMAs; only the next epilogue waits for it to have read the
    buffer. Stored from the accumulator's registers instead (4 bytes a thread, partial sectors, the tensor
    cores idle), ``fwd_rows_box`` ran 128 x 384 x 64 x 64 at 759 TFLOP/s where this runs it at 864, and the
    RetinaNet head's weight gradients at 1.046x cuDNN where this gives 1.106x (the fifth benchmark page)."""
    out = activation(acc, ACTIVATION).to(out_buf.dtype)
    tma.store_wait(0)
    out_buf.reshape([acc.shape[0], acc.shape[1]]).store(out)
    fence_async_shared()
    tma_store(y_desc, coords, out_buf)
