"""Data gradient ``dx = conv_backward_input(dy, w)``, decomposed by stride phase.

``dx[n, c, h, w] = sum_{k, r, s} dy[n, k, p, q] * w[k, c, r, s]`` over the taps for which
``p = (h + pad_h - r*dil_h) / stride_h`` (and ``q`` likewise) is a whole number inside ``dy``.
Whether ``r`` qualifies depends only on ``h mod stride_h``, the row's *phase*. So the input pixels are
split into ``stride_h * stride_w`` phases; within phase ``(ph, pw)`` (rows ``h = ph + i*stride_h``,
columns ``w = pw + j*stride_w``) every pixel uses the same taps:

- ``r = r0 + t*STEP_R`` with ``STEP_R = stride_h / gcd(stride_h, dil_h)`` and ``r0`` the first tap in
  ``[0, STEP_R)`` with ``(ph + pad_h - r0*dil_h) % stride_h == 0`` (none: the phase gets no gradient),
- and ``p = i + (ph + pad_h - r*dil_h) / stride_h``, an exact division.

Each phase is then an implicit GEMM with no wasted taps: ``M`` = pixels of the phase, ``N`` = input
channels of the group, ``K`` = the phase's taps x output channels of the group. With stride 1 there is
one phase and every tap. (The alternative, looping over every tap and masking those that do not
divide, wastes ``1 - 1/(stride_h*stride_w)`` of the matrix work.)

In 3D the depth axis is split the same way (``stride_d * stride_h * stride_w`` phases, depth taps
``t = t0 + u*STEP_T``); below 3D its sizes, stride and step are 1, which the JIT compiles in, and the depth
arithmetic folds away (:func:`~.common.depth_origin`).

Tiling: one program per ``[BLOCK_M, BLOCK_N]`` tile of one phase; ``program_id(1)`` enumerates
``(group, phase)``. Every phase gets the grid of the largest one, ``cdiv(D, stride_d) x cdiv(H, stride_h) x
cdiv(W, stride_w)`` pixels, and masks the rest. The reduction is one flat loop over the phase's taps x
``BLOCK_K`` output channels.
"""

import triton.language as tl

from .common import cast_for_store, jit_any_size, mma, row_length, swizzle, tap_coords


@jit_any_size
def conv_bwd_data_phased(
    dy_ptr, w_ptr, dx_ptr,
    BATCH, C_G, D, H, W, K_G, OD, P, Q, TD, R, S,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, STEP_T, STEP_R, STEP_S, D_PH, H_PH, W_PH,
    sdyn, sdyc, sdyd, sdyh, sdyw, swk, swc, swt, swr, sws, sdxn, sdxc, sdxd, sdxh, sdxw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    W_PH = row_length(W_PH, ROW_VEC)  # the host vouches for both
    W = row_length(W, ROW_VEC)
    phases = STRIDE_D * STRIDE_H * STRIDE_W
    g = tl.program_id(1) // phases
    pd = (tl.program_id(1) // (STRIDE_H * STRIDE_W)) % STRIDE_D
    ph = (tl.program_id(1) % (STRIDE_H * STRIDE_W)) // STRIDE_W
    pw = tl.program_id(1) % STRIDE_W
    M = BATCH * D_PH * H_PH * W_PH
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(C_G, BLOCK_N), GROUP_M)

    # Rows: the phase's input pixels (n, z = pd + e*stride_d, h = ph + i*stride_h, w = pw + j*stride_w).
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    i = (offs_m // W_PH) % H_PH
    j = offs_m % W_PH
    e = (offs_m // (W_PH * H_PH)) % D_PH
    n = offs_m // (W_PH * H_PH * D_PH)
    z = pd + e * STRIDE_D
    h = ph + i * STRIDE_H
    w = pw + j * STRIDE_W
    m_ok = (offs_m < M) & (z < D) & (h < H) & (w < W)
    # Columns: input channels of the group.
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < C_G
    offs_k = tl.arange(0, BLOCK_K)

    # The phase's first tap along each axis (TD, R or S: none), and how many taps it has.
    t0 = TD
    for t in range(0, STEP_T):
        t0 = tl.where((t0 == TD) & ((pd + PAD_D1 - 1 - t * DIL_D) % STRIDE_D == 0), t, t0)
    r0 = R
    for r in range(0, STEP_R):
        r0 = tl.where((r0 == R) & ((ph + PAD_H - r * DIL_H) % STRIDE_H == 0), r, r0)
    s0 = S
    for s in range(0, STEP_S):
        s0 = tl.where((s0 == S) & ((pw + PAD_W - s * DIL_W) % STRIDE_W == 0), s, s0)
    taps_t = tl.maximum(TD - t0 + STEP_T - 1, 0) // STEP_T
    taps_r = tl.maximum(R - r0 + STEP_R - 1, 0) // STEP_R
    taps_s = tl.maximum(S - s0 + STEP_S - 1, 0) // STEP_S

    dy_rows = dy_ptr + g * K_G * sdyc + n * sdyn  # [BLOCK_M]
    w_cols = w_ptr + g * K_G * swk + offs_n * swc  # [BLOCK_N]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_blocks = tl.cdiv(K_G, BLOCK_K)
    for it in range(0, taps_t * taps_r * taps_s * k_blocks):
        tap = it // k_blocks
        k = (it % k_blocks) * BLOCK_K + offs_k
        k_ok = k < K_G
        tt, tr, ts = tap_coords(tap, taps_t, taps_r, taps_s)  # the phase's taps
        t = t0 + tt * STEP_T
        r = r0 + tr * STEP_R
        s = s0 + ts * STEP_S
        od = e + (pd + PAD_D1 - 1 - t * DIL_D) // STRIDE_D  # exact divisions: t, r and s belong to the phase
        p = i + (ph + PAD_H - r * DIL_H) // STRIDE_H
        q = j + (pw + PAD_W - s * DIL_W) // STRIDE_W
        pix_ok = m_ok & (od >= 0) & (od < OD) & (p >= 0) & (p < P) & (q >= 0) & (q < Q)
        a = tl.load(dy_rows[:, None] + (od * sdyd + p * sdyh + q * sdyw)[:, None] + (k * sdyc)[None, :],
                    mask=pix_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_cols[None, :] + (k * swk)[:, None] + (t * swt + r * swr + s * sws),
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    dx = dx_ptr + (n * sdxn + z * sdxd + h * sdxh + w * sdxw)[:, None] + ((g * C_G + offs_n) * sdxc)[None, :]
    tl.store(dx, cast_for_store(acc, dx_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
