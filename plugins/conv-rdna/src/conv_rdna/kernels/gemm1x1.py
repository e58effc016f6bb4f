"""1x1 convolutions (stride 1, no padding) as a plain GEMM, forward and data gradient.

A 1x1 convolution with stride 1 and no padding touches each pixel once, so within group ``g`` it is

``OUT[pixel, o] = sum_i ACT[pixel, i] * WT[i, o]``

with ``pixel = (n, hw)`` over the whole batch (``H*W`` merged: dense tensors of either layout have
``stride_h = W * stride_w``). Forward: ``ACT = x``, ``i`` = input channel, ``o`` = output channel,
``WT[i, o] = w[o, i]``. Data gradient: ``ACT = dy``, ``i`` = output channel, ``o`` = input channel,
``WT[i, o] = w[i, o]``. The host passes the weight strides of the reduced and the produced channel
(swapped between the two directions) and the weight offset of a group; the kernel does not know
which direction it computes.

``A_OFF`` (elements) moves ``ACT`` to a later image: :mod:`.col2im` runs its GEMM on chunks of the batch.

Tiling: one program per ``[BLOCK_M, BLOCK_N]`` tile of ``OUT`` (``GROUP_M`` row sweeps), group on
``program_id(1)``; the K loop walks ``BLOCK_K`` channels at a time with no index arithmetic beyond a
pointer increment. The bias / activation epilogue is the forward one (off for the data gradient).
"""

import triton
import triton.language as tl

from .common import add_bias_and_activate, cast_for_store, mma, swizzle


@triton.jit
def conv_gemm1x1(
    a_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, HW, C_RED, C_OUT,
    A_OFF, san, sac, sap, sw_red, sw_out, sw_group, syn, syc, syp,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INTERPRET: tl.constexpr,
):
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

    a_tile = a_ptr + A_OFF + g * C_RED * sac + (n * san + hw * sap)[:, None] + (offs_k * sac)[None, :]
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
    y = y_ptr + (n * syn + hw * syp)[:, None] + ((g * C_OUT + offs_n) * syc)[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
