"""Grouped convolutions of 2 to 64 channels per group: several groups per tile, the weight block-diagonal.

The general implicit GEMM runs one group per tile. With ResNeXt's 4 channels per group its 16-wide channel
blocks hold 4 real columns and 4 real reduction lanes, and a 64-wide configured tile 4 of 64: the matrix
units multiply padding, and every group is a launch column of its own. Here a tile covers ``GROUPS_PER_TILE``
consecutive groups (``G_T``), so that its ``G_T * K_G`` output channels fill the ``BLOCK_N`` columns the
table gives (at least the matrix instruction's 16): 4 groups of 4 channels make a 16-wide tile, 8 of 2 too.
The reduction of one tap runs over the tile's ``G_T * C_G`` input channels, contiguous in channels-last
(one vector load a pixel), and the weight is loaded as a **block-diagonal** ``[BLOCK_K, BLOCK_N]`` tile:
``w[k, c % C_G, r, s]`` where input lane ``c`` and column ``k`` belong to the same group, zero elsewhere. With
16 or more channels per group a tile is one group, its width the group's rounded up to a power of two.

The price is matrix work on the zeros: a fraction ``1 - 1/G_T`` of each tile's products. These layers are
memory-bound, so that work is nearly free. Per output pixel of a 3x3 layer of ``C`` channels in and out, 2-byte
operands (the input read once, the output written once: ``4C`` bytes):

- 4 channels per group (ResNeXt-50 32x4d's first stage, C = 128): ``2 * 9 * 4 * 128`` = 9216 real flops for 512
  bytes, 18 a byte. Tiles of 4 groups execute 4x that, 72 a byte: still under the ridge point of an H100 (990
  TFLOP/s / 3.35 TB/s = 295) and of an RX 7900 XTX (123 / 0.96 = 128). One group per 16x16 tile, as the general
  kernel runs it, executes 16x (288 a byte, at the H100's ridge and past the 7900's) and gathers 8 bytes a pixel
  in each of 32 launch columns.
- 32 channels per group (the last stage, C = 1024): 144 real flops a byte, and a tile is one group, 32 wide, with
  nothing masked: the block diagonal costs nothing where the layer has the most flops.

The forward kernel :func:`conv_fwd_grouped` computes any forward convolution of an operand addressed through
strides with a weight addressed through an offset and strides (``W_OFF``, per group ``swg``, produced channel
``swo``, reduced channel ``swi``, taps ``swr``, ``sws``): the data gradient runs it on ``dy``, one launch per
stride phase of ``dx``, with the weight transposed and flipped by strides (``conv_rdna.plans.common``), so that no
tap is masked: a masked loop would execute every tap at stride 2, four times the matrix work of the phases.

The weight gradient :func:`conv_bwd_weight_grouped_partial` computes ``[G_T * K_G, G_T * C_G]`` of one tap per
program, reduced over the batch's output pixels, and stores only the diagonal blocks; the pixels are split into
ranges summed in order through a float32 workspace (``kernels.bwd_weight.reduce_splits``, deterministic).
"""

import triton.language as tl

from .common import (add_bias_and_activate, as_multiple, cast_for_store, forward_tile, jit_any_size, mma,
                     pixel_coords, row_length)


@jit_any_size
def conv_fwd_grouped(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS,
    sxn, sxc, sxh, sxw, W_OFF, swg, swo, swi, swr, sws, Y_OFF, syn, syc, syh, syw,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS_PER_TILE: tl.constexpr,
    GROUP_M: tl.constexpr, ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    # Rows: output pixels, one column tile (the grid's second axis walks the tiles of groups).
    offs_m, m_ok, n, p, q, h0, w0, j, _ = forward_tile(BATCH, P, Q, BLOCK_N, STRIDE_H, STRIDE_W, PAD_H, PAD_W,
                                                       BLOCK_M, BLOCK_N, GROUP_M, ROW_VEC)
    first = tl.program_id(1) * GROUPS_PER_TILE  # the tile's first group
    # Columns: produced channels first*K_G + j; reduction lanes: reduced channels first*C_G + i.
    g_out = first + j // K_G
    out_ok = (j < GROUPS_PER_TILE * K_G) & (g_out < GROUPS)
    i = tl.arange(0, BLOCK_K)
    g_in = first + i // C_G
    in_ok = (i < GROUPS_PER_TILE * C_G) & (g_in < GROUPS)
    diagonal = (g_in[:, None] == g_out[None, :]) & in_ok[:, None] & out_ok[None, :]

    # 1D offsets, combined per tap: 2D address tiles kept across the loop would hold a register per element.
    x_rows = x_ptr + n * sxn  # [BLOCK_M] each pixel's image
    x_chans = (first * C_G + i) * sxc  # [BLOCK_K]
    w_ins = w_ptr + W_OFF + (i % C_G) * swi  # [BLOCK_K] each lane's reduced channel
    w_outs = g_out * swg + (j % K_G) * swo  # [BLOCK_N] each column's produced channel

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for tap in range(0, R * S):
        r = tap // S
        s = tap % S
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        pix_ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load((x_rows + h * sxh + w * sxw)[:, None] + x_chans[None, :], mask=pix_ok[:, None] & in_ok[None, :],
                    other=0.0)
        b = tl.load((w_ins + r * swr + s * sws)[:, None] + w_outs[None, :], mask=diagonal, other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    # Epilogue in float32: bias, activation, one rounding to the output dtype.
    acc = add_bias_and_activate(acc, bias_ptr + first * K_G, j, out_ok, HAS_BIAS, ACTIVATION)
    y = y_ptr + Y_OFF + (n * syn + p * syh + q * syw)[:, None] + ((first * K_G + j) * syc)[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & out_ok[None, :])


@jit_any_size
def conv_bwd_weight_grouped_partial(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS, PIX_PER_SPLIT,
    P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT,
    sxn, sxc, sxh, sxw, sdyn, sdyc, sdyh, sdyw,
    so_split, so_k, so_c, so_r, so_s,
    CHANNELS_LAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS_PER_TILE: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    Q = row_length(Q, ROW_VEC)
    PIX_PER_SPLIT = as_multiple(PIX_PER_SPLIT, BLOCK_K)  # whole blocks: each step starts on a block
    # program_id(0): (tap, tile of groups), tiles fastest; the tap modulo R*S as in common.weight_grad_tile.
    tiles = tl.cdiv(GROUPS, GROUPS_PER_TILE)
    tap = (tl.program_id(0) // tiles) % (R * S)
    r = tap // S
    s = tap % S
    first = (tl.program_id(0) % tiles) * GROUPS_PER_TILE
    split = tl.program_id(1)
    # Rows: output channels first*K_G + i; columns: input channels first*C_G + j.
    i = tl.arange(0, BLOCK_M)
    g_out = first + i // K_G
    m_ok = (i < GROUPS_PER_TILE * K_G) & (g_out < GROUPS)
    j = tl.arange(0, BLOCK_N)
    g_in = first + j // C_G
    n_ok = (j < GROUPS_PER_TILE * C_G) & (g_in < GROUPS)
    offs_k = tl.arange(0, BLOCK_K)

    dy_rows = dy_ptr + (first * K_G + i) * sdyc  # [BLOCK_M]
    x_cols = x_ptr + (first * C_G + j) * sxc  # [BLOCK_N]

    pix_end = tl.minimum((split + 1) * PIX_PER_SPLIT, BATCH * P * Q)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j0 in range(split * PIX_PER_SPLIT, pix_end, BLOCK_K):
        pix = j0 + offs_k  # output pixels (n, p, q) of this step
        pix_ok = pix < pix_end
        if CHANNELS_LAST:
            n, p, q = pixel_coords(pix, P, Q, P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT)
        else:  # // and % let the compiler see runs of q along contiguous pixels (kernels/bwd_weight.py)
            q = pix % Q
            p = (pix // Q) % P
            n = pix // (Q * P)
        h = p * STRIDE_H - PAD_H + r * DIL_H
        w = q * STRIDE_W - PAD_W + s * DIL_W
        x_ok = pix_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(dy_rows[:, None] + (n * sdyn + p * sdyh + q * sdyw)[None, :],
                    mask=m_ok[:, None] & pix_ok[None, :], other=0.0)
        b = tl.load(x_cols[None, :] + (n * sxn + h * sxh + w * sxw)[:, None],
                    mask=x_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    # Only the diagonal blocks are weights: dw[first*K_G + i, j % C_G, r, s] where row and column share a group.
    out = (out_ptr + split * so_split + r * so_r + s * so_s
           + ((first * K_G + i) * so_k)[:, None] + ((j % C_G) * so_c)[None, :])
    diagonal = (g_out[:, None] == g_in[None, :]) & m_ok[:, None] & n_ok[None, :]
    tl.store(out, cast_for_store(acc, out_ptr, INTERPRET), mask=diagonal)
