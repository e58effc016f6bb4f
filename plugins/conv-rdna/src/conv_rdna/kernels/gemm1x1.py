"""1x1 convolutions (stride 1, no padding) as a plain GEMM, forward and data gradient.

A 1x1 convolution with stride 1 and no padding touches each pixel once, so within group ``g`` it is

``OUT[pixel, o] = sum_i ACT[pixel, i] * WT[i, o]``

with ``pixel = (n, hw)`` over the whole batch (``H*W`` merged, ``D*H*W`` in 3D: dense tensors of either
layout have ``stride_h = W * stride_w`` and ``stride_d = H * stride_h``). Forward: ``ACT = x``, ``i`` = input
channel, ``o`` = output channel, ``WT[i, o] = w[o, i]``. Data gradient: ``ACT = dy``, ``i`` = output channel,
``o`` = input channel, ``WT[i, o] = w[i, o]``. The host passes the weight strides of the reduced and the
produced channel (swapped between the two directions) and the weight offset of a group; the kernel does not
know which direction it computes.

``A_OFF`` (elements) moves ``ACT`` to a later image: :mod:`.col2im` runs its GEMM on chunks of the batch.

In channels-first tensors a tile's pixels are contiguous within each image. ``PIX_VEC`` (host: the
largest power of two up to 8 that divides ``HW`` and the image and channel strides; 1 in channels-last)
tells the compiler so, along with the alignment of runs of that many pixels, which it cannot see through
``// HW`` and ``% HW`` by itself unless ``HW`` divides by 16 (ResNet's 14 x 14 maps: 196 pixels, ``PIX_VEC`` 4).

Tiling: one program per ``[BLOCK_M, BLOCK_N]`` tile of ``OUT`` (``GROUP_M`` row sweeps), group on
``program_id(1)``; the K loop walks ``BLOCK_K`` channels at a time with no index arithmetic beyond a
pointer increment. The bias / activation epilogue is the forward one (off for the data gradient).
"""

import triton.language as tl

from .common import add_bias_and_activate, as_multiple, cast_for_store, jit_any_size, mma, row_length, swizzle


@jit_any_size
def conv_gemm1x1(
    a_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, HW, C_RED, C_OUT,
    A_OFF, san, sac, sap, sw_red, sw_out, sw_group, syn, syc, syp,
    PIX_VEC: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    HW = row_length(HW, ROW_VEC)  # an image's pixels: one row here
    A_OFF = as_multiple(A_OFF, san)  # whole images: as aligned as an image
    g = tl.program_id(1)
    M = BATCH * HW
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(C_OUT, BLOCK_N), GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # pixels (n, hw)
    m_ok = offs_m < M
    n = offs_m // HW
    hw = offs_m % HW
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # produced channels of the group
    n_ok = offs_n < C_OUT
    offs_k = tl.arange(0, BLOCK_K)  # reduced channels of the group
    a_group = A_OFF + g * C_RED * sac
    a_rows = n * san + hw * sap
    a_cols = offs_k * sac
    if PIX_VEC > 1:
        m_ok = tl.max_constancy(m_ok, PIX_VEC)
        a_group = tl.multiple_of(a_group, PIX_VEC)
        a_rows = tl.max_contiguous(tl.multiple_of(a_rows, PIX_VEC), PIX_VEC)
        a_cols = tl.multiple_of(a_cols, PIX_VEC)

    a_tile = a_ptr + a_group + a_rows[:, None] + a_cols[None, :]
    w_tile = w_ptr + g * sw_group + (offs_k * sw_red)[:, None] + (offs_n * sw_out)[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, C_RED, BLOCK_K):
        k_ok = offs_k < C_RED - k0
        a = tl.load(a_tile, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_tile, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)
        a_tile += BLOCK_K * sac
        w_tile += BLOCK_K * sw_red

    acc = add_bias_and_activate(acc, bias_ptr + g * C_OUT, offs_n, n_ok, HAS_BIAS, ACTIVATION)
    y_rows = n * syn + hw * syp  # computed here: live across the loop they cost registers
    y_cols = (g * C_OUT + offs_n) * syc
    if PIX_VEC > 1:
        y_rows = tl.max_contiguous(tl.multiple_of(y_rows, PIX_VEC), PIX_VEC)
        y_cols = tl.multiple_of(y_cols, PIX_VEC)
    y = y_ptr + y_rows[:, None] + y_cols[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
