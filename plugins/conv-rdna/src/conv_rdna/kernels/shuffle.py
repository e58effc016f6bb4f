"""The data gradient of a convolution whose filter equals its stride, as one GEMM stored through a pixel shuffle.

A transposed convolution with kernel = stride (UNet's k2 s2 up-convolutions) is such a data gradient. With the
filter size equal to the stride along every axis, the windows of neighbouring ``dy`` pixels never overlap: each
element of ``dx`` receives exactly one tap of one ``dy`` pixel, or none past the last window. So, in group ``g``,

``Z[pixel, (tap, c)] = sum_k dy[pixel, k] * w[k, c, tap]``

is the whole computation (``pixel = (n, od, p, q)`` of ``dy``, ``tap = (t, r, s)``), and ``Z``'s element
``[(n, od, p, q), (t, r, s, c)]`` is ``dx[n, c, od*TD + t - pad_d, p*R + r - pad_h, q*S + s - pad_w]``. One
program computes a ``[BLOCK_M, BLOCK_N]`` tile of ``Z`` and stores it there directly (the shuffle): ``dy`` is
read once for all the taps, where ``bwd_data_phased`` runs a GEMM of ``N`` = channels per tap and reads ``dy``
once per tap. The store address splits into a row part (the window's origin) and a column part (channel and
tap), so the shuffle costs one add per element. Elements of ``dx`` past the last window are no tap's: the plan
zeroes ``dx`` first when there are any.

A transposed convolution's epilogue (``HAS_BIAS``: the bias of ``dx``'s channel ``g * C_G + c``, then
``ACTIVATION``) is applied to the tile before its store; such problems have no element past the last window.

Columns run tap-major, ``(t, r, s, c)``: in channels-last the columns of a tile within one tap are consecutive
channels of one ``dx`` pixel, and so are the weight's (a channels-last weight ``[K, TD, R, S, C]`` holds each
``w[k]`` as one row of ``Z``'s columns). The depth sizes are the constant 1 below 3D, as in the implicit GEMM.
"""

import triton.language as tl

from .common import add_bias_and_activate, cast_for_store, jit_any_size, mma, tap_coords, volume_tile


@jit_any_size
def conv_shuffle_bwd_data(
    dy_ptr, w_ptr, bias_ptr, dx_ptr,
    BATCH, OD, P, Q, K_G, C_G, D, H, W, PAD_D1, PAD_H, PAD_W,
    sdyn, sdyc, sdyd, sdyh, sdyw, swk, swc, swt, swr, sws, sdxn, sdxc, sdxd, sdxh, sdxw,
    TD: tl.constexpr, R: tl.constexpr, S: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    g = tl.program_id(1)
    # rows: dy's pixels and their windows' origins in dx (stride = filter); columns: (tap, channel) of Z
    offs_m, m_ok, n, od, p, q, z0, h0, w0, offs_n, n_ok = volume_tile(
        BATCH, OD, P, Q, TD * R * S * C_G, TD, R, S, PAD_D1, PAD_H, PAD_W, BLOCK_M, BLOCK_N, GROUP_M, ROW_VEC)
    c = offs_n % C_G
    t, r, s = tap_coords(offs_n // C_G, TD, R, S)
    offs_k = tl.arange(0, BLOCK_K)  # dy's channels of the group

    dy_tile = dy_ptr + (n * sdyn + od * sdyd + p * sdyh + q * sdyw)[:, None] + ((g * K_G + offs_k) * sdyc)[None, :]
    w_tile = w_ptr + ((g * K_G + offs_k) * swk)[:, None] + (c * swc + t * swt + r * swr + s * sws)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K_G, BLOCK_K):
        k_ok = offs_k < K_G - k0
        a = tl.load(dy_tile, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_tile, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)
        dy_tile += BLOCK_K * sdyc
        w_tile += BLOCK_K * swk
    acc = add_bias_and_activate(acc, bias_ptr + g * C_G, c, n_ok, HAS_BIAS, ACTIVATION)
    result = cast_for_store(acc, dx_ptr, INTERPRET)

    # dx's coordinates of each element, each bound 0 <= coordinate < size as one unsigned comparison
    inside = (((z0[:, None] + t[None, :]).to(tl.uint32) < D) & ((h0[:, None] + r[None, :]).to(tl.uint32) < H)
              & ((w0[:, None] + s[None, :]).to(tl.uint32) < W))
    rows = n * sdxn + z0 * sdxd + h0 * sdxh + w0 * sdxw
    cols = (g * C_G + c) * sdxc + t * sdxd + r * sdxh + s * sdxw
    dx = dx_ptr + rows[:, None] + cols[None, :]
    tl.store(dx, result, mask=m_ok[:, None] & n_ok[None, :] & inside)
