"""The data gradient of few input channels as a GEMM and a gather (``col2im_bwd_data``).

``dx[n, c, h, w] = sum_(k, r, s) dy[n, k, p, q] * w[k, c, r, s]`` over the taps that reach ``(h, w)``:
``h + pad_h - r*dil_h = p*stride_h`` with ``0 <= p < P``, and the same along W. With few input channels
(the RGB stem: 3) the output ``dx`` is small and ``dy`` (64 channels) is the large operand. The general
data gradient re-reads ``dy`` once per tap of a stride phase, with 3 of its 16 matrix columns real
(the stem: 49 taps over four phases, 16 x 51 MB through L2 per phase); the few-channel forward kernel
run on ``dy`` reads it once but must shift and add its 48 Z columns per phase, and that bounds it.

Here the two halves are separate kernels:

1. ``Z[j, (c, r, s)] = sum_k dy[j, k] * w[k, (c, r, s)]`` over the output pixels ``j``: a plain GEMM with
   ``dy``'s pixels as rows and every (channel, tap) column of the group (147 for the stem) as columns,
   :func:`.gemm1x1.conv_gemm1x1` with the weight's rows as its reduced channels. ``dy`` is read once
   per column tile, every matrix column but the last tile's padding is real, and ``Z`` is written in
   float32 (the workspace), in the weight's own column order (its memory order in either layout);
2. :func:`conv_col2im` gathers ``dx``: a program owns ``BLOCK_M`` input pixels of one stride phase
   (``program_id(2)``: the pixels ``h = a + stride_h * i``, ``w = b + stride_w * j``) x every channel of
   the group. The taps that reach a pixel depend only on its phase (``r * dil_h = a + pad_h`` modulo the
   stride: every ``stride / gcd(stride, dil)``-th tap from :func:`first_tap`), so the program walks only
   those (9 to 16 of the stem's 49) and adds, for each, the ``Z`` element of the output pixel it reaches, if
   that pixel lies inside ``dy``. A pure gather: each ``dx`` element sums its terms in tap order in
   float32 and is rounded once, so the result is deterministic; each ``Z`` element is read exactly once.

Bytes for the stem at batch 32 (bf16 ``dy`` 51 MB, ``dx`` 9.6 MB, ``Z`` 236 MB in float32): ``Z`` is
written once and read once, about 0.5 GB, near 0.2 ms at the copy rate. Measured on the H100 (2026-11-21)
it takes 570-600 us in NHWC (the GEMM about 270, the gather about 300), level with the phased general kernel;
in NCHW the weight's column order puts a pixel's channels 49 floats apart in ``Z`` and the gather is
L2-bound (540 us). On the SD-VAE's ``conv_in`` (4 -> 512, 64x64) it is the fastest data gradient in NCHW.
To bound the workspace the host runs both kernels on chunks of whole images
(:data:`conv_rdna.plans.col2im.COL2IM_WORKSPACE_BYTES` of ``Z`` at most), the chunk's first image given by
``N0`` here and by the GEMM's ``A_OFF``.
"""

import triton
import triton.language as tl

from .common import cast_for_store, jit_any_size
from .few_channels import inside


@triton.jit
def first_tap(e, DIL, STRIDE: tl.constexpr, STEP: tl.constexpr, R):
    """The smallest tap ``r`` with ``r * DIL = e (mod STRIDE)``, or ``R`` if there is none. The taps that reach a
    pixel of the phase (``e = phase + pad``) are then ``r, r + STEP, ...``, ``STEP = STRIDE / gcd(STRIDE, DIL)``."""
    first = R
    for t in tl.static_range(STEP):
        first = tl.where(((e - t * DIL) % STRIDE == 0) & (first == R), t, first)
    return first


@jit_any_size
def conv_col2im(
    z_ptr, dx_ptr,
    BATCH, N0, H, W, P, Q, R, S, PAD_H, PAD_W, DIL_H, DIL_W, H_PH, W_PH,
    Z_COLS, szc, szr, szs, sxn, sxc, sxh, sxw,
    C_G: tl.constexpr, STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr, STEP_H: tl.constexpr, STEP_W: tl.constexpr,
    BLOCK_M: tl.constexpr, C_PAD: tl.constexpr, INTERPRET: tl.constexpr,
):
    g = tl.program_id(1)
    a = tl.program_id(2) // STRIDE_W  # the stride phase: pixels (a + STRIDE_H * i, b + STRIDE_W * j)
    b = tl.program_id(2) % STRIDE_W
    # Rows: the phase's pixels (n, i, j) of the chunk (H_PH x W_PH per image, the largest phase's);
    # columns: the group's channels.
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m = tl.minimum(offs_m, BATCH * H_PH * W_PH - 1)
    h = a + STRIDE_H * ((m // W_PH) % H_PH)
    w = b + STRIDE_W * (m % W_PH)
    n = m // (W_PH * H_PH)
    m_ok = (offs_m < BATCH * H_PH * W_PH) & (h < H) & (w < W)
    c = tl.arange(0, C_PAD)
    c_ok = c < C_G
    z_cols = z_ptr + g * C_G * R * S + c * szc  # [C_PAD]: the group's (c, 0, 0) columns of Z

    # Only the phase's taps: each reaches every pixel of the phase, at an exact output pixel (p, q).
    acc = tl.zeros((BLOCK_M, C_PAD), dtype=tl.float32)
    for r in range(first_tap(a + PAD_H, DIL_H, STRIDE_H, STEP_H, R), R, STEP_H):
        p = (h + PAD_H - r * DIL_H) // STRIDE_H
        for s in range(first_tap(b + PAD_W, DIL_W, STRIDE_W, STEP_W, S), S, STEP_W):
            q = (w + PAD_W - s * DIL_W) // STRIDE_W
            ok = inside(p, P, q, Q) & m_ok
            row = ((n * P + p) * Q + q) * Z_COLS + r * szr + s * szs
            acc += tl.load(z_cols[None, :] + row[:, None], mask=ok[:, None] & c_ok[None, :], other=0.0)

    dx = dx_ptr + ((N0 + n) * sxn + h * sxh + w * sxw)[:, None] + ((g * C_G + c) * sxc)[None, :]
    tl.store(dx, cast_for_store(acc, dx_ptr, INTERPRET), mask=m_ok[:, None] & c_ok[None, :])
