"""Backward passes of convolutions with very few input or output channels per group (memory-bound layers).

Weight gradients: two kernels with the split reduction of :mod:`.bwd_weight` (``program_id(2)`` owns a
contiguous range of ``PIX_PER_SPLIT`` pixels, a multiple of ``BLOCK_K``; each split stores its float32
partial tile into its own workspace slice, laid out like ``dw``, and ``bwd_weight.reduce_splits`` sums the
slices in a fixed order: deterministic; with one split the partial is the result). Every tensor is addressed
through its strides (NCHW and NHWC in place; 1D runs as ``H = 1``); the group is ``program_id(1)``.
Data gradients need no kernel of their own: see the end.

The general weight gradient (``bwd_weight_split``) owns one filter tap per program and multiplies
``[output channels, input channels]`` tiles at least 16 wide. With 3 channels on one side 13 of 16 lanes
of that side are padding, and every tap re-reads the large operand: the loss is the layers' whole cost.

``conv_bwd_weight_few_cin``: few input channels (the RGB stem, ``3 -> 64``, 7x7 stride 2)
-----------------------------------------------------------------------------------------------
``dw[k, (r, s, c)] = sum_j dy[j, k] * im2col(x)[j, (r, s, c)]`` over the output pixels ``j`` of the batch:
the transpose of :func:`.few_channels.conv_fwd_few_cin`'s GEMM. The flattened (tap, channel) index of
its reduction (``K_RED = C_G * R * S``, 147 for the stem) becomes the **columns** of the tile: a
program owns ``[BLOCK_M output channels, BLOCK_N (tap, channel) pairs]``, decoded into ``(r, s, c)`` in
the operands' memory order by the forward kernel's own helper (:func:`.few_channels.decode_tap_channel`),
once per program since the columns do not change along the reduction. Each ``BLOCK_K`` step then decodes
its pixels and loads ``dy[BLOCK_M, BLOCK_K]`` (contiguous along channels in NHWC, along the pixels of an
image in NCHW) and gathers ``x[BLOCK_K, BLOCK_N]`` as ``x_row[j] + x_off[column]`` masked by two
unsigned compares, as the forward kernel does (lanes past the range or past ``K_RED`` get a far negative
row offset). Column tiles are the fastest grid index, so the programs that share a ``dy`` tile run
together and read it from DRAM once.

Bytes for the stem at batch 32, bf16 (dy 51.4 MB, x 9.6 MB: a 20 us floor on the H100). The general
kernel re-reads ``dy`` once per tap (49 x 51 MB through L2) with 3 of 16 columns real. Here ``dy`` passes
L2 once per column tile (3 tiles of 64 columns: 147 of 192 real) and DRAM about once; the gathered ``x``
(147 elements per output pixel) comes from L1/L2, since each input pixel lies in about 12 windows (49
taps at stride 2 x 2); the float32 workspace adds ``splits x 9408 x 4`` bytes written and read once
(88 splits: 3.3 MB).

``conv_bwd_weight_few_cout``: few output channels (the image output, ``128 -> 3``, 3x3)
-------------------------------------------------------------------------------------------
Here ``x`` (128 channels) is the large operand and ``dy`` (3 channels) the small one, so the taps go into
the **rows**: a program owns ``[BLOCK_M (k, r, s) rows, BLOCK_N input channels]`` (27 rows for 3 channels
of a 3x3 filter) and the reduction runs over **input** pixels ``i``:

``dw[k, c, r, s] = sum_i x[i, c] * dy[o(i, r, s), k]``, ``o = (i + pad - (r, s) * dil) / stride``,

a term only where both divisions are exact and ``o`` lies inside ``dy``. Each step loads
``x[BLOCK_K, BLOCK_N]`` plainly (every input pixel once per column tile: in NHWC a pixel's 128 channels
are 256 contiguous bytes; in NCHW a step's pixels are consecutive along W) and gathers
``dy[BLOCK_M, BLOCK_K]``, the masked operand (two unsigned compares and, at stride > 1, two exact-division
tests per element; at stride 1 the divisions fold away). Its addresses come from the unmasked, bounded
coordinates, so they stay within 32 bits in masked lanes too. At stride 2 three of four gathered lanes are
masked, as each input pixel meets a quarter of the taps; the matrix work is small beside the bytes.

Bytes for the image output (batch 1, 512 x 512, bf16: x 67 MB, dy 1.5 MB, a 23 us floor): the general
kernel re-reads ``x`` once per tap (9 x 67 MB through L2) with 3 of 16 rows real. Here ``x`` is read
once, and ``dy`` (27 gathered elements per input pixel, each ``dy`` element used by 9 taps) from L1;
27 of ``BLOCK_M`` rows are real (32 on RDNA; 64 on Hopper, whose wgmma wants tiles of 64 rows).

Data gradients: the forward few-channel kernels, one launch per stride phase
-------------------------------------------------------------------------------
At stride 1 the data gradient is a forward convolution of ``dy`` with ``w'[c, k, r, s] = w[k, c, R-1-r,
S-1-s]`` and padding ``dil*(R-1) - pad`` (negative when the padding exceeds the filter's reach), as for
``bwd_data_cf``. The forward kernels of :mod:`.few_channels` address their weight through an offset and
strides, so the host passes the transposition and the flip as strides (negative ones for the taps), not
a copy: the data gradient of a layer with few **output** channels (``dy`` has few channels: the image
output's, ``K_RED = 3 x 9 = 27``, one reduction step, 128 produced channels written once: 67 MB, a 23 us
floor) runs ``conv_fwd_few_cin``, and that of a layer with few **input** channels (``dx`` has few: the
SD-VAE decoder's ``conv_in`` ``4 -> 512``, 36 Z columns over 512 reduced channels, ``dy`` read once plus
the halo) runs ``conv_fwd_few_cout``.

At stride ``s`` (dilation 1) the input pixels split into ``s x s`` phases by their position modulo the
stride. Along one axis, pixel ``h = s*i + a`` receives from the taps ``r = r0 + s*t`` with
``r0 = (a + pad) mod s`` only, and from ``dy[i + e - t]`` with ``e = (a + pad - r0) / s``: a stride-1
forward convolution of ``dy`` with the ``ceil((R - r0) / s)`` taps ``r0, r0 + s, ...`` flipped, padded by
``taps - 1 - e``. Each phase is one launch: its weight is the same strides as the stride-1 flip
multiplied by ``s`` from an offset tap, and its output ``dx`` from pixel ``(a, b)`` (``Y_OFF``) with the
pixel strides multiplied by ``s``. A phase that has pixels but no tap (stride larger than the filter)
would need zeros written; such layers keep the phased general kernel.

Only the data gradient of few **output** channels runs by phases. That of few input channels stays at
stride 1: on the RGB stem (7x7, stride 2; four phases of 3-4 x 3-4 taps, 48 Z columns for 3 channels)
``conv_fwd_few_cout``'s shift-and-add, not its bytes, bounds it: 290 us a phase on the H100, with L1 70%
busy and DRAM 6% (Nsight Compute), slower than the phased general kernel, which there takes 16-column
tiles instead (the sm_90 ``bwd_data`` bucket for at most 16 input channels). At any stride the data
gradient of few input channels also has :mod:`.col2im`: the GEMM over ``dy`` once, then a gather.
"""

import triton
import triton.language as tl

from .common import as_multiple, cast_for_store, jit_any_size, mma, row_length
from .few_channels import FAR, decode_tap_channel, inside


@triton.jit
def _pixel_range(PIX_PER_SPLIT, PIXELS):
    """``[first, end)``: the pixels of this program's split (``program_id(2)``)."""
    first = tl.program_id(2) * PIX_PER_SPLIT
    return first, tl.minimum(first + PIX_PER_SPLIT, PIXELS)


@triton.jit
def _store_partial(acc, out_ptr, so_split, rows, row_ok, cols, col_ok, INTERPRET: tl.constexpr):
    """Store the split's float32 tile at row offsets ``rows`` and column offsets ``cols`` of its slice of the
    workspace (``so_split`` elements apart; 0 with one split, where the slice is the result)."""
    out = out_ptr + tl.program_id(2) * so_split + rows[:, None] + cols[None, :]
    tl.store(out, cast_for_store(acc, out_ptr, INTERPRET), mask=row_ok[:, None] & col_ok[None, :])


@jit_any_size
def conv_bwd_weight_few_cin(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, PIX_PER_SPLIT,
    sxn, sxc, sxh, sxw, sdyn, sdyc, sdyh, sdyw,
    so_split, so_k, so_c, so_r, so_s,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CHANNELS_INNER: tl.constexpr, ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    Q = row_length(Q, ROW_VEC)
    PIX_PER_SPLIT = as_multiple(PIX_PER_SPLIT, BLOCK_K)  # whole blocks: each step starts on a block
    g = tl.program_id(1)
    K_RED = C_G * R * S
    n_tiles = tl.cdiv(K_RED, BLOCK_N)
    pid = tl.program_id(0)  # column tiles fastest: the programs sharing a dy tile are neighbours

    # Rows: output channels of the group.
    offs_m = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < K_G
    dy_rows = dy_ptr + (g * K_G + offs_m) * sdyc
    # Columns: (tap, channel) pairs in the operands' memory order, decoded once.
    red = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    red_ok = red < K_RED
    r, s, c = decode_tap_channel(red, C_G, R, S, CHANNELS_INNER)
    dr = tl.where(red_ok, r * DIL_H, FAR)
    ds = s * DIL_W
    x_off = c * sxc + r * DIL_H * sxh + ds * sxw
    x_grp = x_ptr + g * C_G * sxc

    first, end = _pixel_range(PIX_PER_SPLIT, BATCH * P * Q)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j0 in range(first, end, BLOCK_K):
        j = j0 + tl.arange(0, BLOCK_K)  # output pixels (n, p, q)
        j_ok = j < end
        q = j % Q
        p = (j // Q) % P
        n = j // (Q * P)
        h0 = p * STRIDE_H - PAD_H
        w0 = q * STRIDE_W - PAD_W
        a = tl.load(dy_rows[:, None] + (n * sdyn + p * sdyh + q * sdyw)[None, :],
                    mask=m_ok[:, None] & j_ok[None, :], other=0.0)
        ok = inside(tl.where(j_ok, h0, FAR)[:, None] + dr[None, :], H, w0[:, None] + ds[None, :], W)
        b = tl.load(x_grp + ((n * sxn + h0 * sxh + w0 * sxw)[:, None] + x_off[None, :]), mask=ok, other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    _store_partial(acc, out_ptr, so_split, (g * K_G + offs_m) * so_k, m_ok, c * so_c + r * so_r + s * so_s,
                   red_ok, INTERPRET)


@jit_any_size
def conv_bwd_weight_few_cout(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, PIX_PER_SPLIT,
    sxn, sxc, sxh, sxw, sdyn, sdyc, sdyh, sdyw,
    so_split, so_k, so_c, so_r, so_s,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    W = row_length(W, ROW_VEC)  # the rows of x, which this kernel walks
    PIX_PER_SPLIT = as_multiple(PIX_PER_SPLIT, BLOCK_K)  # whole blocks: each step starts on a block
    g = tl.program_id(1)
    RS = R * S
    m_tiles = tl.cdiv(K_G * RS, BLOCK_M)
    pid = tl.program_id(0)  # row tiles fastest: the programs sharing an x tile are neighbours

    # Rows: (k, r, s) of the group's output channels; the tap moves the dy pixel, o = i + pad - (r, s)*dil.
    rows = (pid % m_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < K_G * RS
    k = rows // RS
    r = (rows % RS) // S
    s = rows % S
    tap_h = PAD_H - r * DIL_H
    tap_w = PAD_W - s * DIL_W
    dy_rows = dy_ptr + (g * K_G + k) * sdyc
    # Columns: input channels of the group.
    offs_n = (pid // m_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < C_G
    x_cols = x_ptr + (g * C_G + offs_n) * sxc

    first, end = _pixel_range(PIX_PER_SPLIT, BATCH * H * W)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i0 in range(first, end, BLOCK_K):
        i = i0 + tl.arange(0, BLOCK_K)  # input pixels (n, h, w)
        i_ok = i < end
        w = i % W
        h = (i // W) % H
        n = i // (W * H)
        b = tl.load(x_cols[None, :] + (n * sxn + h * sxh + w * sxw)[:, None],
                    mask=i_ok[:, None] & n_ok[None, :], other=0.0)
        oh = h[None, :] + tap_h[:, None]  # stride * p where the division is exact
        ow = w[None, :] + tap_w[:, None]
        p = oh // STRIDE_H  # bounded: addresses stay within 32 bits in masked lanes too
        q = ow // STRIDE_W
        ok = inside(oh, P * STRIDE_H, ow, Q * STRIDE_W) & (p * STRIDE_H == oh) & (q * STRIDE_W == ow)
        ok = ok & row_ok[:, None] & i_ok[None, :]
        a = tl.load(dy_rows[:, None] + n[None, :] * sdyn + p * sdyh + q * sdyw, mask=ok, other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    _store_partial(acc, out_ptr, so_split, (g * K_G + k) * so_k + r * so_r + s * so_s, row_ok, offs_n * so_c,
                   n_ok, INTERPRET)
