"""Winograd F(4x4, 3x3) for the weight gradient: ``dw`` of a 3x3 / stride-1 layer as 36 GEMMs over tiles.

The forward algorithm and its matrices are explained in :mod:`conv_rdna.kernels.winograd`; the host
side (gate, plan, estimate) is :mod:`conv_rdna.plans.winograd_bwd_weight`, the derivation and the error
analysis ``docs/winograd.md`` ("The weight gradient").

1. The algorithm
----------------

The forward computes each 4x4 output tile ``Y`` of a 6x6 input patch ``D`` as
``Y = A^T [(G g G^T) (.) (B^T D B)] A``, a bilinear function of the filter ``g`` and the patch. The
weight gradient is the derivative of ``sum <dY, Y>`` with respect to ``g``; moving the matrices across
the inner products gives, for each tile::

    dg = G^T [ (A dY A^T) (.) (B^T D B) ] G

Summed over the tiles ``t`` of every image, for output channel ``k`` and input channel ``c``::

    V[xi, nu, t, c] = (B^T D[t, c] B)[xi, nu]          the forward's input transform, unchanged
    U[xi, nu, t, k] = (A dY[t, k] A^T)[xi, nu]         the output-gradient transform (4x4 -> 6x6)
    Z[xi, nu, k, c] = sum_t U[xi, nu, t, k] V[xi, nu, t, c]    36 GEMMs reduced over the tiles
    dw[k, c]        = G^T Z[:, :, k, c] G              the weight-gradient transform (6x6 -> 3x3)

The GEMMs do 36 multiply-adds per tile and channel pair where the direct weight gradient does
16 x 9 = 144: the forward's 4x saving. Tiles past the output's edge hold zeros of ``dY``, and the
patches read zeros in the padding, so border tiles need no special case: the identity holds for the
zero-extended images.

2. The scaled matrices
----------------------

A diagonal ``D`` may move between ``A`` and ``G`` (``(D^-1 A, D G)``: the element-wise product
carries ``D_xi D_nu`` across). :data:`AW` is ``A`` with each row scaled to a largest magnitude of
1 and :data:`GW` is ``G`` with the same scales, so that ``U``, which is stored in 16 bits, stays
within ``2.41^2 = 5.8`` times ``max|dy|`` (float16 overflows only for output gradients above about
11000), and the scales act in float32, in the last transform. With the forward's points
``0, +-3/2, +-2/3`` the rows of ``AW`` are the values of ``1, x, x^2, x^3`` at the points, scaled:
``AW`` has the entries ``1, 8/27, 4/9, 2/3`` of ``B^T``'s rows, and ``GW`` is ``G`` times
``97/36`` (points 0 and infinity) or ``729/520`` (the others).

3. The kernels (one pass over memory each; the workspace is float32 only for ``Z``)
-------------------------------------------------------------------------------------

- the input transform is :func:`conv_rdna.kernels.winograd.winograd_input_transform`: ``V[36, T, C]``;
- :func:`winograd_dy_transform`: ``U[36, T, K]`` in the input dtype, one program per ``BLOCK_T``
  tiles x ``BLOCK_K`` output channels, columns then rows through :func:`_aw6` (4 -> 6 values);
- :func:`winograd_bwd_weight_gemm`: ``Z[split, xi*6 + nu] = U[xi,nu]^T @ V[xi,nu]`` over the tiles of
  one split, ``[K, T] @ [T, C]`` with float32 accumulation, stored as float32 (``program_id``: output
  tile, point, split). The tiles are split so that 36 points x output tiles x splits fill the GPU;
- :func:`winograd_bwd_weight_output`: ``dw[k, c] = sum_split GW^T Z[split][:, :, k, c] GW`` in split
  order (the same bits on every run), rounded once to ``dw``'s dtype and stored through its strides.
"""

from __future__ import annotations

from fractions import Fraction

import triton
import triton.language as tl

from .common import cast_for_store, jit_any_size, mma, swizzle
from .winograd import AT, G, POINTS_N, TILE, TILE_SIZE, _store6

# ---- the scaled matrices, exactly ------------------------------------------------------------------------

#: ``A``'s row scales: the largest magnitude in each column of ``A^T``.
_SCALES = [max(abs(row[x]) for row in AT) for x in range(len(G))]
#: ``D^-1 A`` (6 x 4) and ``D G`` (6 x 3).
AW = [[AT[i][x] / _SCALES[x] for i in range(TILE)] for x in range(len(G))]
GW = [[v * _SCALES[x] for v in G[x]] for x in range(len(G))]

# The kernels spell the transforms out with these constants; their structure is checked here, once.
_Q, _P, _R = Fraction(8, 27), Fraction(4, 9), Fraction(2, 3)
_D0, _D1 = _SCALES[0], _SCALES[1]  # 97/36, 729/520
_Z, _O = Fraction(0), Fraction(1)
assert AW == [[_O, _Z, _Z, _Z], [_Q, _P, _R, _O], [_Q, -_P, _R, -_O], [_O, _R, _P, _Q], [_O, -_R, _P, -_Q],
              [_Z, _Z, _Z, _O]], AW
assert _SCALES == [_D0, _D1, _D1, _D1, _D1, _D0] and (_D0, _D1) == (Fraction(97, 36), Fraction(729, 520)), _SCALES
assert GW == [[_D0, _Z, _Z], [_D1 * _P, _D1 * _R, _D1], [_D1 * _P, -_D1 * _R, _D1], [_D1, _D1 * _R, _D1 * _P],
              [_D1, -_D1 * _R, _D1 * _P], [_Z, _Z, _D0]], GW

Q827 = tl.constexpr(float(_Q))
P49 = tl.constexpr(float(_P))
R23 = tl.constexpr(float(_R))
D0 = tl.constexpr(float(_D0))
D1 = tl.constexpr(float(_D1))
D1P = tl.constexpr(float(_D1 * _P))
D1R = tl.constexpr(float(_D1 * _R))
#: Transformed points per tile: the GEMMs' batch, the partials' slices per split.
POINTS2 = tl.constexpr(POINTS_N**2)


# ---- the small transforms, on tensors ----------------------------------------------------------------------


@triton.jit
def _aw6(y0, y1, y2, y3):
    """``AW`` applied to four output-gradient values: six; rows +-3/2 and +-2/3 share even and odd parts."""
    e1 = y0 * Q827 + y2 * R23
    o1 = y1 * P49 + y3
    e3 = y0 + y2 * P49
    o3 = y1 * R23 + y3 * Q827
    return y0, e1 + o1, e1 - o1, e3 + o3, e3 - o3, y3


@triton.jit
def _gw3(z0, z1, z2, z3, z4, z5):
    """``GW^T`` applied to six transformed values: the three taps."""
    s12 = z1 + z2
    s34 = z3 + z4
    return (z0 * D0 + s12 * D1P + s34 * D1, ((z1 - z2) + (z3 - z4)) * D1R,
            s12 * D1 + s34 * D1P + z5 * D0)


# ---- output-gradient transform: U = AW dY AW^T -------------------------------------------------------------


@triton.jit
def _load_dy_column(base, p0, col_ok, P, sdyh, mask):
    """The four output-gradient pixels of one tile column (rows ``p0 .. p0+3``), float32, zero past the
    output's edge, transformed by ``AW``: six values."""
    return _aw6(tl.load(base, mask=mask & col_ok & (p0 < P), other=0.0).to(tl.float32),
                tl.load(base + sdyh, mask=mask & col_ok & (p0 + 1 < P), other=0.0).to(tl.float32),
                tl.load(base + 2 * sdyh, mask=mask & col_ok & (p0 + 2 < P), other=0.0).to(tl.float32),
                tl.load(base + 3 * sdyh, mask=mask & col_ok & (p0 + 3 < P), other=0.0).to(tl.float32))


@jit_any_size
def winograd_dy_transform(
    dy_ptr, u_ptr,
    K, P, Q, TILES_H, TILES_W, T,
    sdyn, sdyc, sdyh, sdyw,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr,
):
    """``U[xi*6 + nu, t, k] = (AW dY[t, k] AW^T)[xi, nu]`` for ``BLOCK_T`` tiles x ``BLOCK_K`` channels."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_t < T)[:, None] & (offs_k < K)[None, :]
    tw = offs_t % TILES_W
    th = (offs_t // TILES_W) % TILES_H
    n = offs_t // (TILES_W * TILES_H)
    p0 = (th * TILE_SIZE)[:, None]
    q0 = (tw * TILE_SIZE)[:, None]
    base = dy_ptr + (n * sdyn)[:, None] + offs_k[None, :] * sdyc + p0 * sdyh + q0 * sdyw
    # Columns j of the tile: AW along p -> t[xi][j].
    t00, t10, t20, t30, t40, t50 = _load_dy_column(base, p0, q0 < Q, P, sdyh, mask)
    t01, t11, t21, t31, t41, t51 = _load_dy_column(base + sdyw, p0, q0 + 1 < Q, P, sdyh, mask)
    t02, t12, t22, t32, t42, t52 = _load_dy_column(base + 2 * sdyw, p0, q0 + 2 < Q, P, sdyh, mask)
    t03, t13, t23, t33, t43, t53 = _load_dy_column(base + 3 * sdyw, p0, q0 + 3 < Q, P, sdyh, mask)
    # Rows xi: AW along q, stored as U[xi*6 + 0..5], rounded to the operand dtype of the GEMM.
    out = u_ptr + offs_t[:, None] * K + offs_k[None, :]
    step = T * K
    _store6(out, step, *_aw6(t00, t01, t02, t03), mask, INTERPRET)
    _store6(out + 6 * step, step, *_aw6(t10, t11, t12, t13), mask, INTERPRET)
    _store6(out + 12 * step, step, *_aw6(t20, t21, t22, t23), mask, INTERPRET)
    _store6(out + 18 * step, step, *_aw6(t30, t31, t32, t33), mask, INTERPRET)
    _store6(out + 24 * step, step, *_aw6(t40, t41, t42, t43), mask, INTERPRET)
    _store6(out + 30 * step, step, *_aw6(t50, t51, t52, t53), mask, INTERPRET)


# ---- the 36 GEMMs, reduced over tiles --------------------------------------------------------------------


@jit_any_size
def winograd_bwd_weight_gemm(
    u_ptr, v_ptr, z_ptr, T, K, C, TILES_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """``Z[split, b] = U[b]^T @ V[b]`` over the tiles of ``split`` (``program_id(2)``), for ``b =
    program_id(1)`` in 0..35: ``[K, T] @ [T, C]``, float32 accumulation and result."""
    b = tl.program_id(1)
    split = tl.program_id(2)
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(K, BLOCK_M), tl.cdiv(C, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output channels
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # input channels
    offs_k = tl.arange(0, BLOCK_K)  # tiles
    m_ok = offs_m < K
    n_ok = offs_n < C
    first = split * TILES_PER_SPLIT
    end = tl.minimum(first + TILES_PER_SPLIT, T)
    a = u_ptr + b * T * K + (first + offs_k)[None, :] * K + offs_m[:, None]  # U[b]^T: [BLOCK_M, BLOCK_K]
    v = v_ptr + b * T * C + (first + offs_k)[:, None] * C + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t0 in range(first, end, BLOCK_K):
        t_ok = offs_k < end - t0
        ua = tl.load(a, mask=m_ok[:, None] & t_ok[None, :], other=0.0)
        vb = tl.load(v, mask=t_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(ua, vb, acc, INTERPRET)
        a += BLOCK_K * K
        v += BLOCK_K * C
    out = z_ptr + (split * POINTS2 + b) * K * C + offs_m[:, None] * C + offs_n[None, :]
    tl.store(out, acc, mask=m_ok[:, None] & n_ok[None, :])


# ---- weight-gradient transform: dw = GW^T Z GW ------------------------------------------------------------


@triton.jit
def _gw3_row(ptr, step, mask):
    """``Z[xi*6 + nu]`` for nu = 0..5 (``ptr`` at ``Z[xi*6]``), transformed by ``GW^T`` along nu: 3 values."""
    return _gw3(tl.load(ptr, mask=mask, other=0.0), tl.load(ptr + step, mask=mask, other=0.0),
                tl.load(ptr + 2 * step, mask=mask, other=0.0), tl.load(ptr + 3 * step, mask=mask, other=0.0),
                tl.load(ptr + 4 * step, mask=mask, other=0.0), tl.load(ptr + 5 * step, mask=mask, other=0.0))


@jit_any_size
def winograd_bwd_weight_output(
    z_ptr, dw_ptr, K, C, SPLITS,
    so_k, so_c, so_r, so_s,
    BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRET: tl.constexpr,
):
    """``dw[k, c, r, s] = sum_split (GW^T Z[split][:, :, k, c] GW)[r, s]`` for ``BLOCK_K x BLOCK_C``
    channel pairs, summed in split order, rounded once to ``dw``'s dtype."""
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_k < K)[:, None] & (offs_c < C)[None, :]
    src = z_ptr + offs_k[:, None] * C + offs_c[None, :]
    step = K * C
    w00 = tl.zeros((BLOCK_K, BLOCK_C), dtype=tl.float32)
    w01, w02, w10, w11, w12, w20, w21, w22 = w00, w00, w00, w00, w00, w00, w00, w00
    for split in range(0, SPLITS):
        z = src + split * POINTS2 * step
        # Rows xi of Z: GW^T along nu -> h[xi][s].
        h00, h01, h02 = _gw3_row(z, step, mask)
        h10, h11, h12 = _gw3_row(z + 6 * step, step, mask)
        h20, h21, h22 = _gw3_row(z + 12 * step, step, mask)
        h30, h31, h32 = _gw3_row(z + 18 * step, step, mask)
        h40, h41, h42 = _gw3_row(z + 24 * step, step, mask)
        h50, h51, h52 = _gw3_row(z + 30 * step, step, mask)
        # Columns s: GW^T along xi -> the taps (r, s).
        a0, a1, a2 = _gw3(h00, h10, h20, h30, h40, h50)
        b0, b1, b2 = _gw3(h01, h11, h21, h31, h41, h51)
        c0, c1, c2 = _gw3(h02, h12, h22, h32, h42, h52)
        w00, w10, w20 = w00 + a0, w10 + a1, w20 + a2
        w01, w11, w21 = w01 + b0, w11 + b1, w21 + b2
        w02, w12, w22 = w02 + c0, w12 + c1, w22 + c2
    out = dw_ptr + offs_k[:, None] * so_k + offs_c[None, :] * so_c
    tl.store(out, cast_for_store(w00, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + so_s, cast_for_store(w01, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + 2 * so_s, cast_for_store(w02, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + so_r, cast_for_store(w10, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + so_r + so_s, cast_for_store(w11, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + so_r + 2 * so_s, cast_for_store(w12, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + 2 * so_r, cast_for_store(w20, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + 2 * so_r + so_s, cast_for_store(w21, dw_ptr, INTERPRET), mask=mask)
    tl.store(out + 2 * so_r + 2 * so_s, cast_for_store(w22, dw_ptr, INTERPRET), mask=mask)
