"""Forward convolution as an implicit GEMM, with the bias / activation / cast epilogue fused.

Within one group ``g`` the convolution is the GEMM ``Y[M, N] = A[M, K] @ B[K, N]`` with

- ``M`` = output pixels ``(n, od, p, q)`` of the whole batch,
- ``N`` = output channels of the group,
- ``K`` = taps ``(t, r, s)`` x input channels of the group,

where ``A[(n, od, p, q), (t, r, s, c)] = x[n, g*C_G + c, od*stride_d - pad_d + t*dil_d, p*stride_h - pad_h +
r*dil_h, ...]`` is never built: each ``[BLOCK_M, BLOCK_K]`` tile is gathered straight from the input, zero
where the tap falls in the padding. ``B[(t, r, s, c), k] = w[g*K_G + k, c, t, r, s]``.

Tiling: one program computes a ``[BLOCK_M, BLOCK_N]`` output tile (tiles ordered by ``GROUP_M`` row
sweeps); ``program_id(1)`` is the group. The reduction is one flat loop over ``taps x channel blocks``
(tap outer, ``BLOCK_K`` input channels inner), so the pixel coordinates of a tap are computed once per
``BLOCK_K`` channels and the loop is a single software-pipelined loop even when a group has only a
few channels. Every tensor is addressed through its strides: NC(D)HW and N(D)HWC are read and written in
place. 1D and 2D convolutions run as depth 1 (``D = OD = TD = 1``, which the JIT compiles in: the depth
arithmetic folds away, :func:`~.common.depth_origin`), 1D ones also as ``H = 1``. So the depth sizes stay
specialised (not in :data:`~.common.SIZES`), for 1D/2D to carry no depth arithmetic: a 3D clip length compiles
the kernel again only when it changes class (1, a multiple of 16, neither).
"""

import triton.language as tl

from .common import add_bias_and_activate, cast_for_store, jit_any_size, mma, tap_coords, volume_tile


@jit_any_size
def conv_fwd_implicit_gemm(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C_G, D, H, W, K_G, OD, P, Q, TD, R, S,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
    sxn, sxc, sxd, sxh, sxw, swk, swc, swt, swr, sws, syn, syc, syd, syh, syw,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    g = tl.program_id(1)
    offs_m, m_ok, n, od, p, q, z0, h0, w0, offs_n, n_ok = volume_tile(BATCH, OD, P, Q, K_G, STRIDE_D, STRIDE_H,
                                                                      STRIDE_W, PAD_D1, PAD_H, PAD_W, BLOCK_M,
                                                                      BLOCK_N, GROUP_M, ROW_VEC)
    offs_c = tl.arange(0, BLOCK_K)

    x_rows = x_ptr + g * C_G * sxc + n * sxn  # [BLOCK_M] start of each pixel's image
    w_cols = w_ptr + (g * K_G + offs_n) * swk  # [BLOCK_N] start of each output channel's filter

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    c_blocks = tl.cdiv(C_G, BLOCK_K)
    for i in range(0, TD * R * S * c_blocks):
        tap = i // c_blocks
        c = (i % c_blocks) * BLOCK_K + offs_c
        c_ok = c < C_G
        t, r, s = tap_coords(tap, TD, R, S)
        z = z0 + t * DIL_D
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        pix_ok = m_ok & (z >= 0) & (z < D) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (z * sxd + h * sxh + w * sxw)[:, None] + c[None, :] * sxc,
                    mask=pix_ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_cols[None, :] + (c * swc)[:, None] + (t * swt + r * swr + s * sws),
                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    # Epilogue in float32: bias, activation, one rounding to the output dtype.
    acc = add_bias_and_activate(acc, bias_ptr + g * K_G, offs_n, n_ok, HAS_BIAS, ACTIVATION)
    y = y_ptr + (n * syn + od * syd + p * syh + q * syw)[:, None] + ((g * K_G + offs_n) * syc)[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
