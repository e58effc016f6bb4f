"""Channels-first (NCHW) convolutions whose loads run along the pixels of one image.

In NCHW the contiguous axis is the pixel axis ``(h, w)`` of one channel. The general kernels tile the
whole batch's pixels as one flat axis and decode ``(n, p, q)`` row by row, so the compiler cannot tell
that neighbouring rows of a tile are neighbouring addresses: every element becomes a scalar load in no
useful order. These kernels tile the pixels of one image at a time: a tile row is an output pixel
``j = p*Q + q`` of image ``n``. Where a convolution keeps the row length (``FLAT``: stride 1, ``Q == W``:
every "same" stride-1 and every 1x1 stride-1 layer) the input pixel a tap reads is ``j`` plus a constant,
``(r*dil_h - pad_h)*W + s*dil_w - pad_w``, so the tile's addresses are visibly consecutive and the loads
coalesce (and vectorise where the shift is aligned: 1x1 layers, the output gradient). Other geometries
compute ``(h, w)`` per pixel, still image by image.

Whether a load or store vectorises is the compiler's reading of its addresses and its mask: they must be
visibly contiguous and aligned, and the mask constant, over runs of ``PIX_VEC`` pixels. The host passes
the image's pixel count ``PQ`` and ``PIX_VEC`` (the largest power of two up to 8 that divides ``PQ`` and
the image and channel strides), and the kernels declare it on the values they compute (a hint on a
function's argument is lost). ``INSIDE`` layers (``FLAT`` without padding, such as 1x1 stride-1 layers) skip the tap
bounds, which every tap of theirs meets.

The reduction walks a block of ``BLOCK_K`` channels through all the taps before the next block
(channels outer, taps inner), so consecutive steps read overlapping input rows and the same weight
rows from L1. Each kernel has two reduction loops (``PIPELINED``, host:
``plans.channels_first.pipelined_pixels``). Where
the pixel loads are aligned vectors the compiler can see (on an architecture with asynchronous copies), the
plain loop: the compiler's pipeliner turns the loads into copies to shared memory, ``num_stages`` deep.
Elsewhere (a tap's one-element shift, pixel counts the compiler cannot see are multiples of 16, or no
asynchronous copies) the loads cannot become copies, and the kernels prefetch instead: step ``i + 1``'s tiles
are loaded into registers before step ``i``'s matrix multiply, which hides their latency behind it.

:func:`conv_fwd_cf` computes ``y = conv(x, w)`` with the fused bias / activation / cast epilogue. The
weight is addressed through an offset and four strides (``o``: produced channel, ``i``: reduced
channel, then the taps), and the result's pixels through an offset and two strides unless it is dense
(``DENSE_Y``), so the host runs the data gradient through the same kernel, one launch per stride phase
of ``dx`` (``plans.common.bwd_data_phases``): each phase is a stride-1 convolution of ``dy`` with the phase's taps
of the weight, transposed (``o`` = input channel, ``i`` = output channel) and flipped, writing every
stride-th pixel of ``dx`` from the phase's first. A phase without taps (a 1x1 filter at stride 2) has no
launch: the host zeroes ``dx`` first.

:func:`conv_bwd_weight_cf` computes one split of the weight gradient per tap: ``dw[k, c] += dy[k, j] @
x[j, c]`` over the pixel blocks of its range (blocks never straddle two images), each split's float32
tile into its own workspace slice; ``bwd_weight.reduce_splits`` sums the slices in a fixed order.
"""

import triton
import triton.language as tl

from .common import (add_bias_and_activate, cast_for_store, divide, jit_any_size, mma, row_length, swizzle,
                     weight_grad_tile)


@triton.jit
def _fwd_step(i, x_image, w_cols, offs_m, m_ok, h0, w0, n_ok, C_G, H, W, R, S, PAD_H, PAD_W, DIL_H, DIL_W,
              sxc, sxh, sxw, swi, swr, sws, valid, FLAT: tl.constexpr, INSIDE: tl.constexpr, PIX_VEC: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """The ``[pixels, channels]`` input tile and ``[channels, produced channels]`` weight tile of reduction
    step ``i`` (channel block ``i // (R*S)``, tap ``i % (R*S)``); all zeros where ``valid`` is false."""
    c = (i // (R * S)) * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = (c < C_G) & valid
    channels = c * sxc
    if PIX_VEC > 1:
        channels = tl.multiple_of(channels, PIX_VEC)
    r = (i % (R * S)) // S
    s = i % S
    if INSIDE:
        pix_ok = m_ok
    else:
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        pix_ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    if FLAT:  # p*sxh + q*sxw = j*sxw: the tap's pixels are the tile's, shifted
        pix = offs_m * sxw + (r * DIL_H - PAD_H) * sxh + (s * DIL_W - PAD_W) * sxw
    else:
        pix = h * sxh + w * sxw
    a = tl.load(x_image + pix[:, None] + channels[None, :], mask=pix_ok[:, None] & c_ok[None, :], other=0.0)
    b = tl.load(w_cols[None, :] + (c * swi)[:, None] + (r * swr + s * sws), mask=c_ok[:, None] & n_ok[None, :],
                other=0.0)
    return a, b


@jit_any_size
def conv_fwd_cf(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, PQ,
    sxn, sxc, sxh, sxw, W_OFF, swg, swo, swi, swr, sws, Y_OFF, syn, syc, syh, syw,
    FLAT: tl.constexpr, INSIDE: tl.constexpr, PIX_VEC: tl.constexpr, DENSE_Y: tl.constexpr, PIPELINED: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    PQ = row_length(PQ, ROW_VEC)  # an image's pixels are one row here; the pipeliner drops the PIX_VEC hints
    g = tl.program_id(1)
    tiles_per_image = tl.cdiv(PQ, BLOCK_M)
    pid_m, pid_n = swizzle(tl.program_id(0), BATCH * tiles_per_image, tl.cdiv(K_G, BLOCK_N), GROUP_M)
    n = pid_m // tiles_per_image

    # Rows: output pixels j = p*Q + q of image n; columns: produced channels of the group.
    offs_m = (pid_m % tiles_per_image) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < PQ
    h0 = (offs_m // Q) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K_G

    x_image = n * sxn + g * C_G * sxc
    y_image = n * syn
    y_cols = (g * K_G + offs_n) * syc
    if PIX_VEC > 1:
        m_ok = tl.max_constancy(m_ok, PIX_VEC)
        x_image = tl.multiple_of(x_image, PIX_VEC)
        y_image = tl.multiple_of(y_image, PIX_VEC)
        y_cols = tl.multiple_of(y_cols, PIX_VEC)
    x_image = x_ptr + x_image
    w_cols = w_ptr + W_OFF + g * swg + offs_n * swo  # [BLOCK_N]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    steps = tl.cdiv(C_G, BLOCK_K) * R * S
    if PIPELINED:  # loads the compiler can turn into asynchronous copies: it pipelines the plain loop
        for i in range(0, steps):
            a, b = _fwd_step(i, x_image, w_cols, offs_m, m_ok, h0, w0, n_ok, C_G, H, W, R, S, PAD_H, PAD_W, DIL_H,
                             DIL_W, sxc, sxh, sxw, swi, swr, sws, True, FLAT, INSIDE, PIX_VEC, BLOCK_K)
            acc = mma(a, b, acc, INTERPRET)
    else:
        a, b = _fwd_step(0, x_image, w_cols, offs_m, m_ok, h0, w0, n_ok, C_G, H, W, R, S, PAD_H, PAD_W, DIL_H, DIL_W,
                         sxc, sxh, sxw, swi, swr, sws, True, FLAT, INSIDE, PIX_VEC, BLOCK_K)
        for i in range(0, steps):
            a_next, b_next = _fwd_step(i + 1, x_image, w_cols, offs_m, m_ok, h0, w0, n_ok, C_G, H, W, R, S, PAD_H,
                                       PAD_W, DIL_H, DIL_W, sxc, sxh, sxw, swi, swr, sws, i + 1 < steps, FLAT, INSIDE,
                                       PIX_VEC, BLOCK_K)
            acc = mma(a, b, acc, INTERPRET)
            a, b = a_next, b_next

    acc = add_bias_and_activate(acc, bias_ptr + g * K_G, offs_n, n_ok, HAS_BIAS, ACTIVATION)
    if DENSE_Y:  # p*syh = p*Q*syw
        y_pixels = offs_m * syw
    else:  # a stride phase of dx: every syh / syw element from Y_OFF
        y_pixels = Y_OFF + (offs_m // Q) * syh + (offs_m % Q) * syw
    y = y_ptr + y_image + y_pixels[:, None] + y_cols[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _bwd_weight_step(blk, dy_rows, x_cols, m_ok, n_ok, r, s, tap_shift, blocks_per_image, H, W, PQ, Q,
                     Q_MAGIC, Q_SHIFT, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, sxn, sxh, sxw, sdyn, sdyw,
                     valid, FLAT: tl.constexpr, INSIDE: tl.constexpr, PIX_VEC: tl.constexpr, BLOCK_K: tl.constexpr):
    """The ``[output channels, pixels]`` tile of ``dy`` and the ``[pixels, input channels]`` tile of ``x``
    (at tap ``(r, s)``) of pixel block ``blk``; all zeros where ``valid`` is false.

    See the module's note on ``PQ``, ``PIX_VEC`` and ``INSIDE``."""
    n = blk // blocks_per_image
    j = (blk % blocks_per_image) * BLOCK_K + tl.arange(0, BLOCK_K)  # output pixels p*Q + q of image n
    j_ok = (j < PQ) & valid
    dy_image = n * sdyn
    x_image = n * sxn
    if PIX_VEC > 1:  # hints on the values computed here (a hint on a function's argument is lost)
        j_ok = tl.max_constancy(j_ok, PIX_VEC)
        dy_image = tl.multiple_of(dy_image, PIX_VEC)
        x_image = tl.multiple_of(x_image, PIX_VEC)
    if INSIDE:
        x_ok = j_ok
        pix = j * sxw + tap_shift
    else:
        p = divide(j, Q_MAGIC, Q_SHIFT)
        h = p * STRIDE_H - PAD_H + r * DIL_H
        w = (j - p * Q) * STRIDE_W - PAD_W + s * DIL_W
        x_ok = j_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        pix = j * sxw + tap_shift if FLAT else h * sxh + w * sxw
    a = tl.load(dy_rows[:, None] + dy_image + (j * sdyw)[None, :], mask=m_ok[:, None] & j_ok[None, :], other=0.0)
    b = tl.load(x_cols[None, :] + x_image + pix[:, None], mask=x_ok[:, None] & n_ok[None, :], other=0.0)
    return a, b


@jit_any_size
def conv_bwd_weight_cf(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, BLOCKS_PER_SPLIT, PQ, Q_MAGIC, Q_SHIFT,
    sxn, sxc, sxh, sxw, sdyn, sdyc, sdyw,
    so_split, so_k, so_c, so_r, so_s,
    FLAT: tl.constexpr, INSIDE: tl.constexpr, PIX_VEC: tl.constexpr, PIPELINED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    PQ = row_length(PQ, ROW_VEC)  # an image's pixels are one row here; the pipeliner drops the PIX_VEC hints
    g = tl.program_id(1)
    split = tl.program_id(2)
    r, s, offs_m, m_ok, offs_n, n_ok = weight_grad_tile(K_G, C_G, R, S, BLOCK_M, BLOCK_N)  # channels of the group

    dy_rows = (g * K_G + offs_m) * sdyc  # [BLOCK_M]
    x_cols = (g * C_G + offs_n) * sxc  # [BLOCK_N]
    if PIX_VEC > 1:  # the host's word: every image and channel starts on a PIX_VEC-element boundary
        dy_rows = tl.multiple_of(dy_rows, PIX_VEC)
        x_cols = tl.multiple_of(x_cols, PIX_VEC)
    dy_rows = dy_ptr + dy_rows
    x_cols = x_ptr + x_cols
    tap_shift = (r * DIL_H - PAD_H) * sxh + (s * DIL_W - PAD_W) * sxw

    blocks_per_image = tl.cdiv(PQ, BLOCK_K)
    first = split * BLOCKS_PER_SPLIT
    end = tl.minimum(first + BLOCKS_PER_SPLIT, BATCH * blocks_per_image)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PIPELINED:  # loads the compiler can turn into asynchronous copies: it pipelines the plain loop
        for blk in range(first, end):
            a, b = _bwd_weight_step(blk, dy_rows, x_cols, m_ok, n_ok, r, s, tap_shift, blocks_per_image, H, W, PQ, Q,
                                    Q_MAGIC, Q_SHIFT, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, sxn, sxh, sxw,
                                    sdyn, sdyw, True, FLAT, INSIDE, PIX_VEC, BLOCK_K)
            acc = mma(a, b, acc, INTERPRET)
    else:
        a, b = _bwd_weight_step(first, dy_rows, x_cols, m_ok, n_ok, r, s, tap_shift, blocks_per_image, H, W, PQ, Q,
                                Q_MAGIC, Q_SHIFT, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, sxn, sxh, sxw, sdyn,
                                sdyw, first < end, FLAT, INSIDE, PIX_VEC, BLOCK_K)
        for blk in range(first, end):
            a_next, b_next = _bwd_weight_step(blk + 1, dy_rows, x_cols, m_ok, n_ok, r, s, tap_shift, blocks_per_image,
                                              H, W, PQ, Q, Q_MAGIC, Q_SHIFT, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H,
                                              DIL_W, sxn, sxh, sxw, sdyn, sdyw, blk + 1 < end, FLAT, INSIDE, PIX_VEC,
                                              BLOCK_K)
            acc = mma(a, b, acc, INTERPRET)
            a, b = a_next, b_next

    out = (out_ptr + split * so_split + r * so_r + s * so_s
           + ((g * K_G + offs_m) * so_k)[:, None] + (offs_n * so_c)[None, :])
    tl.store(out, cast_for_store(acc, out_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])
