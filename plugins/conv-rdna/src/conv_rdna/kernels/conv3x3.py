"""3x3 convolutions: the implicit GEMM with its nine taps known to the compiler.

The GEMM is :mod:`.implicit_gemm`'s (``M`` = output pixels of the batch, ``N`` = produced channels of the
group, ``K`` = taps x reduced channels), with two differences that a fixed 3x3 filter allows:

- **Channels outer, taps inner.** Step ``i`` is tap ``i % 9`` of channel block ``i // 9``, so the nine
  consecutive steps of a block read nine shifted windows of the same input rows: after the first, their
  loads hit L1 (in NHWC each pixel's ``BLOCK_K`` channels are one contiguous run). The general kernel walks
  taps outer, so each tap re-reads the whole input tile from L2.
- **Taps are constants.** The divisions that decode a step are by 9 and 3 (a multiply and a shift), where
  the general kernel divides by the run-time channel-block count and filter width at every step.

It is still one flat loop, so the compiler software-pipelines it across taps and channel blocks alike.
The weight is addressed through an offset and per-axis strides (``o``: produced channel, ``i``: reduced
channel, then the taps), and the result through an offset and its strides, as :func:`.channels_first.conv_fwd_cf`
is: the host runs the stride-1 data gradient through this kernel as the forward convolution of ``dy`` with the
weight transposed and flipped by negative strides (``plans.common.flipped_weight``), with no copy. Every tensor is
addressed through its strides (NCHW and NHWC in place); the group is ``program_id(1)``; the epilogue fuses bias,
activation and the cast.
"""

import triton.language as tl

from .common import add_bias_and_activate, cast_for_store, forward_tile, jit_any_size, mma

@jit_any_size
def conv_fwd_3x3(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C_G, H, W, K_G, P, Q,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
    sxn, sxc, sxh, sxw, W_OFF, swg, swo, swi, swr, sws, Y_OFF, syn, syc, syh, syw,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    TAPS_H: tl.constexpr = 3  # the filter this kernel is compiled for
    TAPS_W: tl.constexpr = 3
    g = tl.program_id(1)
    offs_m, m_ok, n, p, q, h0, w0, offs_n, n_ok = forward_tile(BATCH, P, Q, K_G, STRIDE_H, STRIDE_W, PAD_H, PAD_W,
                                                               BLOCK_M, BLOCK_N, GROUP_M, ROW_VEC)
    offs_c = tl.arange(0, BLOCK_K)

    x_rows = x_ptr + g * C_G * sxc + n * sxn  # [BLOCK_M] each pixel's image
    w_cols = w_ptr + W_OFF + g * swg + offs_n * swo  # [BLOCK_N] each produced channel's filter

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, tl.cdiv(C_G, BLOCK_K) * (TAPS_H * TAPS_W)):
        tap = i % (TAPS_H * TAPS_W)
        r = tap // TAPS_W
        s = tap % TAPS_W
        c = (i // (TAPS_H * TAPS_W)) * BLOCK_K + offs_c
        c_ok = c < C_G
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        pix_ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (h * sxh + w * sxw)[:, None] + (c * sxc)[None, :],
                    mask=pix_ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_cols[None, :] + (c * swi)[:, None] + (r * swr + s * sws),
                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    acc = add_bias_and_activate(acc, bias_ptr + g * K_G, offs_n, n_ok, HAS_BIAS, ACTIVATION)
    y = y_ptr + Y_OFF + (n * syn + p * syh + q * syw)[:, None] + ((g * K_G + offs_n) * syc)[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
