"""Winograd F(4x4, 3x3): a 3x3 / stride-1 convolution as 36 small GEMMs between two transforms.

This module is a tutorial as much as code. The host side (weight cache, plan, launch, estimate, gate)
is :mod:`conv_rdna.plans.winograd`; the derivation and the error analysis are in ``docs/winograd.md``.

1. The algorithm
----------------

A 3x3 convolution (a correlation, as in every DL framework) of one 6x6 input patch ``d`` gives a
4x4 output tile ``y``; done directly that costs 16 x 9 = 144 multiplications per channel pair.
Winograd's minimal filtering algorithm computes the same tile with 36::

    y = A^T [ (G g G^T) (.) (B^T d B) ] A          (.) = element-wise product of two 6x6 matrices

``G`` (6x3), ``B^T`` (6x6) and ``A^T`` (4x6) come from Toom-Cook interpolation: evaluate the filter
and the data polynomials at 6 points, multiply the values point-wise, interpolate (derived in
:func:`toom_cook_matrices`). Summed over input channels ``c`` for output channel ``k`` and tile ``t``::

    U[xi, nu, c, k] = (G g[k, c] G^T)[xi, nu]          the weight transform (once per weight)
    V[xi, nu, t, c] = (B^T d[t, c] B)[xi, nu]          the input transform (once per tile and channel)
    M[xi, nu, t, k] = sum_c V[xi, nu, t, c] U[xi, nu, c, k]        36 independent GEMMs
    y[t, k]        = A^T M[:, :, t, k] A               the output transform (+ bias, activation)

Per output pixel and channel pair that is 36/16 = 2.25 multiplications instead of 9: the GEMMs do a
quarter of the direct convolution's matrix work (F(2x2, 3x3) would save 2.25x). The price is the
transforms, and transformed data 36/16 = 2.25x the size of the tiles it came from.

2. The interpolation points
---------------------------

The points are ``0, +-3/2, +-2/3`` and infinity (:data:`POINTS`), not the textbook ``0, +-1, +-2``:
rounding the transformed operands to 16 bits costs about 4-5x less error with them (``docs/winograd.md``:
in the same rounding model the textbook points need an error factor of about 2.8 at 64 channels where
these need 0.5). Each row of ``B^T`` and ``G`` is scaled to a largest entry of 1 and ``A^T`` takes the
scale back, so transformed values stay within a few times the data: a float16 ``V`` cannot overflow
for inputs below about 11000 in magnitude.

With symmetric points, rows for ``+p`` and ``-p`` share their even and odd parts, so the 6-point
transforms (:func:`_bt6`, :func:`_g6`, :func:`_at6`) take 14, 6 and 14 additions/multiplications
where the matrices have 22, 14 and 18 non-zero entries.

3. The kernels (staged, one pass over memory each)
--------------------------------------------------

- :func:`winograd_weight_transform`: ``w[k, c, 3, 3]`` -> ``U[36, C, K]`` in the input dtype (K
  contiguous). Launched only when the weight cache misses.
- :func:`winograd_input_transform`: one program per ``BLOCK_T`` tiles x ``BLOCK_C`` channels loads the
  6x6 patches (zero outside the image: any padding, asymmetric included), transforms the 6 columns
  then the 6 rows in float32 and stores ``V[36, T, C]`` rounded to the input dtype, the operand type of
  the tensor-core dot.
- :func:`winograd_gemm`: a batched GEMM, ``program_id(1)`` = ``xi*6 + nu``:
  ``M[xi,nu][T, K] = V[xi,nu][T, C] @ U[xi,nu][C, K]`` with ``tl.dot`` and float32 accumulation, tiles
  of ``BLOCK_M`` tiles x ``BLOCK_N`` output channels stepping ``BLOCK_K`` input channels. Stored as
  float32, or bfloat16 for bfloat16 problems (:func:`m_dtype`: half the traffic, same range).
- :func:`winograd_output_transform`: loads the 36 ``M`` values of ``BLOCK_T`` tiles x ``BLOCK_K``
  output channels, transforms columns then rows into the 4x4 tile, applies bias and activation in
  float32, rounds once to the output dtype and stores the pixels inside the output (border tiles of
  sizes that are not multiples of 4 are masked). A pixel whose 3x3 window lies wholly in the padding
  gets exactly ``act(bias)``: the tile's transforms would leave its neighbours' rounding noise there.

Why not one fused kernel: a fused program would hold 36 accumulators per (tile, output channel),
2.25x the accumulator of an implicit-GEMM tile of the same pixels, and would redo the input transform
for every block of output channels. Tiles small enough to fit the registers (16 tiles x 32 channels)
re-read the transformed weight from L2 for every 16 tiles, and are too small for Hopper's warp-group
MMA. The staged form runs each GEMM with large tiles at plain-GEMM efficiency, computes every
transform once, and pays for it in memory traffic (``V`` and ``M`` are 2.25x the input and output);
see ``docs/winograd.md`` for when that wins.

Every transform is computed in float32; the only roundings are the stores of ``U``, ``V`` (to the
input dtype, for the dot), ``M`` (bfloat16 problems only) and ``y``.

4. Reading the transform kernels
--------------------------------

Triton has no arrays of tensors, so the 36 values of a patch are 36 named ``[BLOCK_T, BLOCK_C]``
blocks: ``t{xi}{j}`` is row ``xi`` of ``B^T d`` in patch column ``j``. Each thread holds the same few
(tile, channel) elements of all of them, so the transform is thread-local arithmetic, no shuffles.
It is separable: a pass down each patch column (:func:`_load_column`: six masked loads, then
:func:`_bt6`) leaves 36 values, a pass along each row (:func:`_bt6` again) yields six results that
:func:`_store6` writes at once, so about 42 values per element are live at the peak (about 120
registers per thread with the GPU tables' 8 tiles x 64 channels over 8 warps). The output transform
is the same with :func:`_at6` (6 -> 4) and 24 live values. The matrix entries are ``tl.constexpr``
globals taken from the exact matrices, written ``tensor * CONST`` (under the interpreter ``CONST *
tensor`` would stay wrapped in a constexpr). ``INTERPRET`` selects the bfloat16 workarounds of
:mod:`.common` (dot operands upcast, stores rounded to nearest even).
"""

from __future__ import annotations

from fractions import Fraction

import triton
import triton.language as tl

from .common import activation, cast_for_store, jit_any_size, mma, swizzle

# ---- the transform matrices, exactly ------------------------------------------------------------------

#: Output tile and filter size of F(m, r), and the number of transformed points ``n = m + r - 1``.
TILE, FILTER = 4, 3
POINTS_N = TILE + FILTER - 1
#: The finite interpolation points (the sixth is infinity).
POINTS = (Fraction(0), Fraction(3, 2), Fraction(-3, 2), Fraction(2, 3), Fraction(-2, 3))


def _solve(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """The inverse of a square matrix of Fractions (Gauss-Jordan, exact)."""
    n = len(matrix)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [v / rows[col][col] for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


def toom_cook_matrices(points, m: int = TILE, r: int = FILTER):
    """``(A^T, G, B^T)`` of F(m, r) for finite ``points`` (m + r - 2 of them) plus infinity, as Fractions.

    Evaluating a polynomial of degree ``k - 1`` at the points (and taking its leading coefficient, its
    "value at infinity") is the ``n x k`` Vandermonde matrix ``W_k``. Linear convolution of a filter
    ``g`` (r taps) with ``h`` (m values) is ``s = W_n^-1 [(W_r g) (.) (W_m h)]``, i.e. the Toeplitz
    matrix ``T(g) = W_n^-1 diag(W_r g) W_m``. The correlation we want, ``y_i = sum_j g_j d_(i+j)``, is
    ``y = T(g)^T d = W_m^T diag(W_r g) W_n^-T d``, so ``A^T = W_m^T``, ``G = W_r``, ``B^T = W_n^-T``.

    Any diagonal scaling ``D`` may move between ``B^T`` and ``G`` (``D B^T``, ``D^-1 G``), and between
    ``G`` and ``A^T``; we scale every row of ``B^T`` and of ``G`` to a largest magnitude of 1 and give
    ``A^T`` the product of both scales, so transformed values stay in the range of the data.
    """
    n = m + r - 1
    points = [Fraction(p) for p in points]
    assert len(points) == n - 1 and len(set(points)) == n - 1, "need m + r - 2 distinct finite points"

    def vandermonde(k: int) -> list[list[Fraction]]:
        return [[p**j for j in range(k)] for p in points] + [[Fraction(int(j == k - 1)) for j in range(k)]]

    g, w_m = vandermonde(r), vandermonde(m)
    b_t = [list(col) for col in zip(*_solve(vandermonde(n)))]  # W_n^-T
    a_t = [list(col) for col in zip(*w_m)]
    for x in range(n):
        sb, sg = max(abs(v) for v in b_t[x]), max(abs(v) for v in g[x])
        b_t[x] = [v / sb for v in b_t[x]]
        g[x] = [v / sg for v in g[x]]
        for i in range(m):
            a_t[i][x] *= sb * sg
    return a_t, g, b_t


AT, G, BT = toom_cook_matrices(POINTS)

# The kernels below spell out the transforms with these constants; the structure they rely on (which
# entries are equal, opposite or zero) is checked here against the exact matrices, once, at import.
_B0, _P, _Q, _R = BT[0][0], -BT[1][1], -BT[1][2], BT[1][4]  # 36/97, 4/9, 8/27, 2/3
_A0, _AB, _AC, _AS, _AT_ = AT[0][0], AT[0][1], AT[0][3], AT[1][1], AT[1][3]  # 97/36, 27/65, 729/520, 81/130, 243/260
_Z = Fraction(0)
assert BT == [[_B0, _Z, -1, _Z, _B0, _Z], [_Z, -_P, -_Q, 1, _R, _Z], [_Z, _P, -_Q, -1, _R, _Z],
              [_Z, _R, 1, -_Q, -_P, _Z], [_Z, -_R, 1, _Q, -_P, _Z], [_Z, _B0, _Z, -1, _Z, _B0]], BT
assert G == [[1, _Z, _Z], [_P, _R, 1], [_P, -_R, 1], [1, _R, _P], [1, -_R, _P], [_Z, _Z, 1]], G
assert AT == [[_A0, _AB, _AB, _AC, _AC, _Z], [_Z, _AS, -_AS, _AT_, -_AT_, _Z], [_Z, _AT_, _AT_, _AS, _AS, _Z],
              [_Z, _AC, -_AC, _AB, -_AB, _A0]], AT

# Constants for the kernels (Triton takes module globals only as constexpr): the tile size, and the
# matrices' entries in float32.
TILE_SIZE = tl.constexpr(TILE)
B0 = tl.constexpr(float(_B0))
P49 = tl.constexpr(float(_P))
Q827 = tl.constexpr(float(_Q))
R23 = tl.constexpr(float(_R))
A0 = tl.constexpr(float(_A0))
AB = tl.constexpr(float(_AB))
AC = tl.constexpr(float(_AC))
AS = tl.constexpr(float(_AS))
AT1 = tl.constexpr(float(_AT_))


def m_dtype(dtype: str) -> str:
    """Dtype of the GEMM result ``M``: bfloat16 for bfloat16 problems (float32's range, half the bytes),
    float32 otherwise (a float16 ``M`` could overflow where the output, after ``A^T``, would not)."""
    return "bfloat16" if dtype == "bfloat16" else "float32"


# ---- the 6-point transforms, on six tensors -------------------------------------------------------------


@triton.jit
def _bt6(d0, d1, d2, d3, d4, d5):
    """``B^T`` applied to a line of six values: rows +-3/2 and +-2/3 share even and odd parts."""
    e1 = d4 * R23 - d2 * Q827
    o1 = d3 - d1 * P49
    e3 = d2 - d4 * P49
    o3 = d1 * R23 - d3 * Q827
    return (d0 + d4) * B0 - d2, e1 + o1, e1 - o1, e3 + o3, e3 - o3, (d1 + d5) * B0 - d3


@triton.jit
def _g6(g0, g1, g2):
    """``G`` applied to three filter taps."""
    o = g1 * R23
    e1 = g0 * P49 + g2
    e3 = g0 + g2 * P49
    return g0, e1 + o, e1 - o, e3 + o, e3 - o, g2


@triton.jit
def _at6(m0, m1, m2, m3, m4, m5):
    """``A^T`` applied to a line of six transformed values: four outputs."""
    s12 = m1 + m2
    d12 = m1 - m2
    s34 = m3 + m4
    d34 = m3 - m4
    return (m0 * A0 + s12 * AB + s34 * AC, d12 * AS + d34 * AT1, s12 * AT1 + s34 * AS,
            d12 * AC + d34 * AB + m5 * A0)


@triton.jit
def _store6(ptr, step, v0, v1, v2, v3, v4, v5, mask, INTERPRET: tl.constexpr):
    """Store six tensors at ``ptr + i*step``, rounded to ``ptr``'s element type."""
    tl.store(ptr, cast_for_store(v0, ptr, INTERPRET), mask=mask)
    tl.store(ptr + step, cast_for_store(v1, ptr, INTERPRET), mask=mask)
    tl.store(ptr + 2 * step, cast_for_store(v2, ptr, INTERPRET), mask=mask)
    tl.store(ptr + 3 * step, cast_for_store(v3, ptr, INTERPRET), mask=mask)
    tl.store(ptr + 4 * step, cast_for_store(v4, ptr, INTERPRET), mask=mask)
    tl.store(ptr + 5 * step, cast_for_store(v5, ptr, INTERPRET), mask=mask)


# ---- weight transform: U = G g G^T -------------------------------------------------------------------------


@triton.jit
def _load_taps(base, swr, mask):
    return (tl.load(base, mask=mask, other=0.0).to(tl.float32),
            tl.load(base + swr, mask=mask, other=0.0).to(tl.float32),
            tl.load(base + 2 * swr, mask=mask, other=0.0).to(tl.float32))


@jit_any_size
def winograd_weight_transform(
    w_ptr, u_ptr, C, K, W_OFF, swo, swi, swr, sws,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr,
):
    """``U[xi*6 + nu, c, k] = (G w[k, c] G^T)[xi, nu]`` for a ``BLOCK_C x BLOCK_K`` block, in ``u``'s dtype.
    ``w[k, c, r, s]`` is at ``W_OFF + k*swo + c*swi + r*swr + s*sws``: the weight as it is, or transposed
    and flipped (negative tap strides from its last tap) for the data gradient."""
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_c < C)[:, None] & (offs_k < K)[None, :]
    base = w_ptr + W_OFF + offs_c[:, None] * swi + offs_k[None, :] * swo
    # Columns s of the filter: G along r (3 taps -> 6 values t[xi][s]).
    t00, t10, t20, t30, t40, t50 = _g6(*_load_taps(base, swr, mask))
    t01, t11, t21, t31, t41, t51 = _g6(*_load_taps(base + sws, swr, mask))
    t02, t12, t22, t32, t42, t52 = _g6(*_load_taps(base + 2 * sws, swr, mask))
    # Rows xi: G along s, stored as U[xi*6 + 0..5].
    out = u_ptr + offs_c[:, None] * K + offs_k[None, :]
    step = C * K
    _store6(out, step, *_g6(t00, t01, t02), mask, INTERPRET)
    _store6(out + 6 * step, step, *_g6(t10, t11, t12), mask, INTERPRET)
    _store6(out + 12 * step, step, *_g6(t20, t21, t22), mask, INTERPRET)
    _store6(out + 18 * step, step, *_g6(t30, t31, t32), mask, INTERPRET)
    _store6(out + 24 * step, step, *_g6(t40, t41, t42), mask, INTERPRET)
    _store6(out + 30 * step, step, *_g6(t50, t51, t52), mask, INTERPRET)


# ---- input transform: V = B^T d B --------------------------------------------------------------------------


@triton.jit
def _load_column(base, h0, col_ok, H, sxh, mask):
    """The six pixels of one patch column (rows ``h0 .. h0+5``), float32, zero outside the image."""
    d0 = tl.load(base, mask=mask & col_ok & (h0 >= 0) & (h0 < H), other=0.0).to(tl.float32)
    d1 = tl.load(base + sxh, mask=mask & col_ok & (h0 >= -1) & (h0 < H - 1), other=0.0).to(tl.float32)
    d2 = tl.load(base + 2 * sxh, mask=mask & col_ok & (h0 >= -2) & (h0 < H - 2), other=0.0).to(tl.float32)
    d3 = tl.load(base + 3 * sxh, mask=mask & col_ok & (h0 >= -3) & (h0 < H - 3), other=0.0).to(tl.float32)
    d4 = tl.load(base + 4 * sxh, mask=mask & col_ok & (h0 >= -4) & (h0 < H - 4), other=0.0).to(tl.float32)
    d5 = tl.load(base + 5 * sxh, mask=mask & col_ok & (h0 >= -5) & (h0 < H - 5), other=0.0).to(tl.float32)
    return _bt6(d0, d1, d2, d3, d4, d5)


@jit_any_size
def winograd_input_transform(
    x_ptr, v_ptr,
    C, H, W, TILES_H, TILES_W, T, PAD_H, PAD_W,
    sxn, sxc, sxh, sxw,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRET: tl.constexpr,
):
    """``V[xi*6 + nu, t, c] = (B^T d[t, c] B)[xi, nu]`` for ``BLOCK_T`` tiles x ``BLOCK_C`` channels."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    t_ok = offs_t < T
    mask = t_ok[:, None] & (offs_c < C)[None, :]
    tw = offs_t % TILES_W
    th = (offs_t // TILES_W) % TILES_H
    n = offs_t // (TILES_W * TILES_H)
    h0 = (th * TILE_SIZE - PAD_H)[:, None]  # top-left pixel of each tile's 6x6 patch (may be in the padding)
    w0 = (tw * TILE_SIZE - PAD_W)[:, None]
    base = x_ptr + (n * sxn)[:, None] + offs_c[None, :] * sxc + h0 * sxh + w0 * sxw
    # Columns j of the patch: B^T along h -> t[xi][j].
    t00, t10, t20, t30, t40, t50 = _load_column(base, h0, (w0 >= 0) & (w0 < W), H, sxh, mask)
    t01, t11, t21, t31, t41, t51 = _load_column(base + sxw, h0, (w0 >= -1) & (w0 < W - 1), H, sxh, mask)
    t02, t12, t22, t32, t42, t52 = _load_column(base + 2 * sxw, h0, (w0 >= -2) & (w0 < W - 2), H, sxh, mask)
    t03, t13, t23, t33, t43, t53 = _load_column(base + 3 * sxw, h0, (w0 >= -3) & (w0 < W - 3), H, sxh, mask)
    t04, t14, t24, t34, t44, t54 = _load_column(base + 4 * sxw, h0, (w0 >= -4) & (w0 < W - 4), H, sxh, mask)
    t05, t15, t25, t35, t45, t55 = _load_column(base + 5 * sxw, h0, (w0 >= -5) & (w0 < W - 5), H, sxh, mask)
    # Rows xi: B^T along w, stored as V[xi*6 + 0..5], rounded to the operand dtype of the GEMM.
    out = v_ptr + offs_t[:, None] * C + offs_c[None, :]
    step = T * C
    _store6(out, step, *_bt6(t00, t01, t02, t03, t04, t05), mask, INTERPRET)
    _store6(out + 6 * step, step, *_bt6(t10, t11, t12, t13, t14, t15), mask, INTERPRET)
    _store6(out + 12 * step, step, *_bt6(t20, t21, t22, t23, t24, t25), mask, INTERPRET)
    _store6(out + 18 * step, step, *_bt6(t30, t31, t32, t33, t34, t35), mask, INTERPRET)
    _store6(out + 24 * step, step, *_bt6(t40, t41, t42, t43, t44, t45), mask, INTERPRET)
    _store6(out + 30 * step, step, *_bt6(t50, t51, t52, t53, t54, t55), mask, INTERPRET)


# ---- the 36 GEMMs -----------------------------------------------------------------------------------------


@jit_any_size
def winograd_gemm(
    v_ptr, u_ptr, m_ptr, T, C, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """``M[b] = V[b] @ U[b]`` for ``b = program_id(1)`` in 0..35: ``[T, C] @ [C, K]``, float32 accumulation."""
    b = tl.program_id(1)
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(T, BLOCK_M), tl.cdiv(K, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # tiles
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels
    offs_k = tl.arange(0, BLOCK_K)  # input channels
    m_ok = offs_m < T
    n_ok = offs_n < K
    a = v_ptr + b * T * C + offs_m[:, None] * C + offs_k[None, :]
    w = u_ptr + b * C * K + offs_k[:, None] * K + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):
        k_ok = offs_k < C - k0
        va = tl.load(a, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        ub = tl.load(w, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(va, ub, acc, INTERPRET)
        a += BLOCK_K
        w += BLOCK_K * K
    out = m_ptr + b * T * K + offs_m[:, None] * K + offs_n[None, :]
    tl.store(out, cast_for_store(acc, m_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])


# ---- output transform: y = A^T M A, epilogue ---------------------------------------------------------------


@triton.jit
def _load_m_column(ptr, step, mask):
    """``M[xi*6 + nu]`` for xi = 0..5 (``ptr`` at ``M[nu]``), float32, transformed by ``A^T``: 4 values."""
    return _at6(tl.load(ptr, mask=mask, other=0.0).to(tl.float32),
                tl.load(ptr + 6 * step, mask=mask, other=0.0).to(tl.float32),
                tl.load(ptr + 12 * step, mask=mask, other=0.0).to(tl.float32),
                tl.load(ptr + 18 * step, mask=mask, other=0.0).to(tl.float32),
                tl.load(ptr + 24 * step, mask=mask, other=0.0).to(tl.float32),
                tl.load(ptr + 30 * step, mask=mask, other=0.0).to(tl.float32))


@triton.jit
def _finish(y, live, bias, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """Epilogue in float32. ``live``: the pixel's 3x3 window touches the image; where it lies wholly in the
    padding the convolution is exactly 0 (the tile's transforms would leave rounding noise of its
    neighbours there)."""
    y = tl.where(live, y, 0.0)
    if HAS_BIAS:
        y += bias[None, :]
    return activation(y, ACTIVATION)


@triton.jit
def _store_row(ptr, row_ok, row_live, q0, Q, W, PAD_W, syw, z0, z1, z2, z3, z4, z5, bias, mask,
               HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, INTERPRET: tl.constexpr):
    """Output row ``i`` of each tile from its six column-transformed values: ``A^T`` along ``w``,
    epilogue, one rounding, masked to the pixels inside the output."""
    y0, y1, y2, y3 = _at6(z0, z1, z2, z3, z4, z5)
    ok = mask & row_ok
    c = q0 - PAD_W  # input column of the window's first tap; the window touches the image if c in [-2, W)
    tl.store(ptr, cast_for_store(_finish(y0, row_live & (c >= -2) & (c < W), bias, HAS_BIAS, ACTIVATION), ptr,
                                 INTERPRET), mask=ok & (q0 < Q))
    tl.store(ptr + syw, cast_for_store(_finish(y1, row_live & (c >= -3) & (c < W - 1), bias, HAS_BIAS, ACTIVATION),
                                       ptr, INTERPRET), mask=ok & (q0 + 1 < Q))
    tl.store(ptr + 2 * syw, cast_for_store(_finish(y2, row_live & (c >= -4) & (c < W - 2), bias, HAS_BIAS,
                                                   ACTIVATION), ptr, INTERPRET), mask=ok & (q0 + 2 < Q))
    tl.store(ptr + 3 * syw, cast_for_store(_finish(y3, row_live & (c >= -5) & (c < W - 3), bias, HAS_BIAS,
                                                   ACTIVATION), ptr, INTERPRET), mask=ok & (q0 + 3 < Q))


@jit_any_size
def winograd_output_transform(
    m_ptr, bias_ptr, y_ptr,
    K, P, Q, H, W, PAD_H, PAD_W, TILES_H, TILES_W, T,
    syn, syc, syh, syw,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr,
):
    """``y[tile pixels, k] = act((A^T M A) + bias)`` for ``BLOCK_T`` tiles x ``BLOCK_K`` output channels."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_ok = offs_k < K
    mask = (offs_t < T)[:, None] & k_ok[None, :]
    tw = offs_t % TILES_W
    th = (offs_t // TILES_W) % TILES_H
    n = offs_t // (TILES_W * TILES_H)
    p0 = (th * TILE_SIZE)[:, None]
    q0 = (tw * TILE_SIZE)[:, None]
    bias = tl.zeros((BLOCK_K,), dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_k, mask=k_ok, other=0.0).to(tl.float32)
    # Columns nu of the 6x6 M: A^T along xi -> z[i][nu].
    src = m_ptr + offs_t[:, None] * K + offs_k[None, :]
    step = T * K
    z00, z10, z20, z30 = _load_m_column(src, step, mask)
    z01, z11, z21, z31 = _load_m_column(src + step, step, mask)
    z02, z12, z22, z32 = _load_m_column(src + 2 * step, step, mask)
    z03, z13, z23, z33 = _load_m_column(src + 3 * step, step, mask)
    z04, z14, z24, z34 = _load_m_column(src + 4 * step, step, mask)
    z05, z15, z25, z35 = _load_m_column(src + 5 * step, step, mask)
    # Rows i: A^T along nu, epilogue, store the 4 pixels of the row that lie inside the output.
    dst = y_ptr + (n * syn)[:, None] + offs_k[None, :] * syc + p0 * syh + q0 * syw
    r = p0 - PAD_H  # input row of the window's first tap; the window touches the image if r in [-2, H)
    _store_row(dst, p0 < P, (r >= -2) & (r < H), q0, Q, W, PAD_W, syw, z00, z01, z02, z03, z04, z05, bias, mask,
               HAS_BIAS, ACTIVATION, INTERPRET)
    _store_row(dst + syh, p0 + 1 < P, (r >= -3) & (r < H - 1), q0, Q, W, PAD_W, syw, z10, z11, z12, z13, z14, z15,
               bias, mask, HAS_BIAS, ACTIVATION, INTERPRET)
    _store_row(dst + 2 * syh, p0 + 2 < P, (r >= -4) & (r < H - 2), q0, Q, W, PAD_W, syw, z20, z21, z22, z23, z24,
               z25, bias, mask, HAS_BIAS, ACTIVATION, INTERPRET)
    _store_row(dst + 3 * syh, p0 + 3 < P, (r >= -5) & (r < H - 3), q0, Q, W, PAD_W, syw, z30, z31, z32, z33, z34,
               z35, bias, mask, HAS_BIAS, ACTIVATION, INTERPRET)
