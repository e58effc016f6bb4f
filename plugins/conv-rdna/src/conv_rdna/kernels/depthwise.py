"""Depthwise convolutions (``groups == in_channels``, channel multiplier ``MULT = out_channels / groups``).

Output channel ``k`` reads input channel ``k // MULT`` only, so there is no reduction across channels and
nothing for the matrix units: each kernel is a memory-bound stencil that keeps a tile of results in
float32 registers and walks the filter taps with plain fused multiply-adds.

``y[n, k, p, q] = sum_{r, s} x[n, k // MULT, p*stride_h - pad_h + r*dil_h, q*stride_w - pad_w + s*dil_w]
* w[k, 0, r, s]``

Tiles. A program owns a ``BLOCK_H x BLOCK_W`` block of pixels of one image (2D, so that the input rows
a tap reads are shared by the block's rows in L1) times ``BLOCK_C`` channels, as a ``[pixels,
channels]`` tile, the pixel block flattened row-major. Every tensor is addressed through its strides,
in place, and the same tile serves both layouts because Triton makes the provably contiguous axis the
fastest one:

- NHWC: channels are contiguous (unit stride, an ``arange`` block), so loads and stores are vectors
  along C (16 bytes per thread);
- NCHW: with stride 1 the pixel axis is provably contiguous along W, so a warp's loads run along W
  (coalesced). With stride > 1 nothing is provably contiguous and Triton (3.6) makes the first axis,
  the pixels, the fastest: still coalesced, W-strided. That is why the pixels come first.

The channel axis of a tile runs over *input* channels ``c`` (contiguous in NHWC); a multiplier index
``m`` is a grid axis (forward, weight gradient) or a loop (data gradient), and the output channel is
``k = c*MULT + m``. ``ALIGN`` (a constexpr, from the host) is the largest power of two up to 16 dividing
every pixel stride, declared with ``tl.multiple_of`` on the pixel offsets: Triton only specializes
integers divisible by 16, so without it NHWC rows of, say, 72 or 120 channels would load element by
element instead of in 16-byte vectors.

Sliding along W (``SLIDE = 4``, forward and stride-1 data gradient, where the stride and dilation along
W are 1; the host decides). Each tile row is then a *slot* of 4 consecutive output columns with 4
accumulators. Output column ``q + v`` takes input column ``q - pad + s + v`` at tap ``s``, so a filter
row needs ``S + 3`` input columns: the kernel loads 3, then one per tap, and rotates four float32 tiles
(``x0 <- x1 <- x2 <- x3``): one load, one conversion and one weight vector per tap serve 4 outputs.
Per-tap reloads from L1 and their conversions, not DRAM, are what bound a 7x7 stencil, so this is the
main cost saving. The filter width ``S`` is a constexpr of these two kernels, so the taps along a row
are unrolled (the rotation becomes register renaming and the weight offsets immediates); the filter
height, strides, padding and dilation stay runtime arguments.

Kernels:

- :func:`conv_dw_fwd`: the forward convolution with the fused epilogue (bias, activation of
  ``conv_core.activations``, one rounding to the output dtype).
- :func:`conv_dw_bwd_data`: ``dx``, the same stencil with the flipped filter, by stride phase (as
  ``bwd_data_phased``): the input pixels ``h = ph + i*stride_h`` (``w`` likewise) of phase ``(ph, pw)``
  take exactly the taps ``r = r0 + t*STEP_R`` (``STEP_R = stride_h / gcd(stride_h, dil_h)``) with
  ``p = i + (ph + pad_h - r*dil_h) / stride_h`` an exact division, so stride 2 wastes no tap and any
  asymmetric padding is exact. The ``MULT`` output channels of an input channel are summed in the kernel.
- :func:`conv_dw_bwd_weight`: ``dw[k, 0, r, s]``, a reduction over every output pixel of the batch per
  (channel, tap). A program owns ``BLOCK_T`` taps x ``BLOCK_C`` channels and one split of the output
  rows ``(n, p)``; it walks each row ``BLOCK_W`` columns at a time with a ``[BLOCK_W, BLOCK_T, BLOCK_C]``
  float32 accumulator (the ``dy`` chunk is loaded once and reused by every tap; the input is gathered
  per tap, from cache) and sums the pixel axis once at the end. Each split stores its partial into its own slice of a
  float32 workspace (or the result itself when there is one split); ``bwd_weight.reduce_splits`` then
  adds the slices in a fixed order: deterministic.

3D: a pixel block is a block of one output plane ``od`` (a grid axis with the image), and the filter's
depth taps run with its rows (one loop over ``TD x R``); the data gradient's stride phases gain the depth's,
and the weight gradient's rows are ``(n, od, p)``. Below 3D the depth sizes, stride and step are 1, which the
JIT compiles in, and the depth arithmetic folds away (:func:`~.common.depth_origin`).

bfloat16 under the interpreter: there is no ``tl.dot`` here, so only the store needs the workaround
(``cast_for_store`` rounds to nearest even when ``INTERPRET``).
"""

import triton
import triton.language as tl

from .common import activation, cast_for_store, depth_origin, jit_any_size, tap_coords


@triton.jit
def _pixel_block(t, P, Q, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, SLIDE: tl.constexpr):
    """Rows and first columns of the slots of pixel block ``t`` (row-major over ``cdiv(P, BLOCK_H) x
    cdiv(Q, BLOCK_W)``): ``BLOCK_H x BLOCK_W / SLIDE`` slots of ``SLIDE`` consecutive columns."""
    w_blocks = tl.cdiv(Q, BLOCK_W)
    slots = tl.arange(0, BLOCK_H * (BLOCK_W // SLIDE))
    p = (t // w_blocks) * BLOCK_H + slots // (BLOCK_W // SLIDE)
    q = (t % w_blocks) * BLOCK_W + (slots % (BLOCK_W // SLIDE)) * SLIDE
    return p, q


@triton.jit
def _load_cols(chan, row, col, row_ok, c_ok, W, sw, ALIGN: tl.constexpr):
    """The ``[slots, channels]`` tile at column ``col`` of each slot's row (``row``: the row's offset), as
    float32; zero outside the image (padding) and for channels past the end."""
    ok = row_ok & (col >= 0) & (col < W)
    pix = tl.multiple_of(row + col * sw, ALIGN)  # every pixel stride is a multiple of ALIGN
    return tl.load(chan[None, :] + pix[:, None], mask=ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)


@triton.jit
def _store_cols(acc, out_ptr, chan_off, pix, pix_ok, c_ok, ALIGN: tl.constexpr, INTERPRET: tl.constexpr):
    out = out_ptr + tl.multiple_of(pix, ALIGN)[:, None] + chan_off[None, :]
    tl.store(out, cast_for_store(acc, out_ptr, INTERPRET), mask=pix_ok[:, None] & c_ok[None, :])


@triton.jit
def _epilogue(acc, bias, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += bias[None, :]
    return activation(acc, ACTIVATION)


@jit_any_size
def conv_dw_fwd(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C, D, H, W, K, OD, P, Q, TD, R, MULT,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
    sxn, sxc, sxd, sxh, sxw, swk, swt, swr, sws, syn, syc, syd, syh, syw,
    S: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, SLIDE: tl.constexpr,
    ALIGN: tl.constexpr, INTERPRET: tl.constexpr,
):
    # program -> (input-channel block fastest, multiplier index m, pixel block, output plane, image)
    pid = tl.program_id(0)
    c_blocks = tl.cdiv(C, BLOCK_C)
    pix_blocks = tl.cdiv(P, BLOCK_H) * tl.cdiv(Q, BLOCK_W)
    cb = pid % c_blocks
    m = (pid // c_blocks) % MULT
    rest = pid // (c_blocks * MULT)
    plane = rest // pix_blocks
    od = plane % OD
    n = plane // OD
    p, q = _pixel_block(rest % pix_blocks, P, Q, BLOCK_H, BLOCK_W, SLIDE)
    z0 = depth_origin(od, STRIDE_D, PAD_D1)
    h0 = p * STRIDE_H - PAD_H

    c = cb * BLOCK_C + tl.arange(0, BLOCK_C)  # input channels: contiguous in NHWC
    c_ok = c < C
    k = c * MULT + m  # their output channels
    x_chan = x_ptr + c * sxc
    w_chan = w_ptr + k * swk
    y_pix = n * syn + od * syd + p * syh + q * syw
    bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
    if HAS_BIAS:  # loaded up front: held across the tap loops as values, not as a pointer (ptxas spilled it)
        bias = tl.load(bias_ptr + k, mask=c_ok, other=0.0).to(tl.float32)

    if SLIDE == 1:
        acc = tl.zeros((BLOCK_H * BLOCK_W, BLOCK_C), dtype=tl.float32)
        for tr in range(0, TD * R):  # filter rows (t, r)
            t, r, _ = tap_coords(tr, TD, R, 1)
            z = z0 + t * DIL_D
            h = h0 + r * DIL_H
            row_ok = (p < P) & (h >= 0) & (h < H) & (z >= 0) & (z < D)
            for s in tl.static_range(S):
                xv = _load_cols(x_chan, n * sxn + z * sxd + h * sxh, q * STRIDE_W - PAD_W + s * DIL_W, row_ok, c_ok,
                                W, sxw, ALIGN)
                wv = tl.load(w_chan + t * swt + r * swr + s * sws, mask=c_ok, other=0.0).to(tl.float32)
                acc += xv * wv[None, :]
        acc = _epilogue(acc, bias, HAS_BIAS, ACTIVATION)
        _store_cols(acc, y_ptr, k * syc, y_pix, (p < P) & (q < Q), c_ok, ALIGN, INTERPRET)
    else:
        # Stride 1 and dilation 1 along W (the host's condition), SLIDE = 4: output columns q .. q+3 of a
        # slot take input columns q - pad + s + v, so a filter row slides over 3 + S loaded columns,
        # x0..x3 holding columns s .. s+3 at tap s: one load per tap for four outputs.
        acc0 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        col = q - PAD_W
        for tr in range(0, TD * R):  # filter rows (t, r)
            t, r, _ = tap_coords(tr, TD, R, 1)
            z = z0 + t * DIL_D
            h = h0 + r * DIL_H
            row_ok = (p < P) & (h >= 0) & (h < H) & (z >= 0) & (z < D)
            row = n * sxn + z * sxd + h * sxh
            x0 = _load_cols(x_chan, row, col, row_ok, c_ok, W, sxw, ALIGN)
            x1 = _load_cols(x_chan, row, col + 1, row_ok, c_ok, W, sxw, ALIGN)
            x2 = _load_cols(x_chan, row, col + 2, row_ok, c_ok, W, sxw, ALIGN)
            for s in tl.static_range(S):  # unrolled: the rotation is renaming, weight offsets immediate
                x3 = _load_cols(x_chan, row, col + s + 3, row_ok, c_ok, W, sxw, ALIGN)
                wv = tl.load(w_chan + t * swt + r * swr + s * sws, mask=c_ok, other=0.0).to(tl.float32)[None, :]
                acc0 += x0 * wv
                acc1 += x1 * wv
                acc2 += x2 * wv
                acc3 += x3 * wv
                x0 = x1
                x1 = x2
                x2 = x3
        acc0 = _epilogue(acc0, bias, HAS_BIAS, ACTIVATION)
        _store_cols(acc0, y_ptr, k * syc, y_pix, (p < P) & (q < Q), c_ok, ALIGN, INTERPRET)
        acc1 = _epilogue(acc1, bias, HAS_BIAS, ACTIVATION)
        _store_cols(acc1, y_ptr, k * syc, y_pix + syw, (p < P) & (q + 1 < Q), c_ok, ALIGN, INTERPRET)
        acc2 = _epilogue(acc2, bias, HAS_BIAS, ACTIVATION)
        _store_cols(acc2, y_ptr, k * syc, y_pix + 2 * syw, (p < P) & (q + 2 < Q), c_ok, ALIGN, INTERPRET)
        acc3 = _epilogue(acc3, bias, HAS_BIAS, ACTIVATION)
        _store_cols(acc3, y_ptr, k * syc, y_pix + 3 * syw, (p < P) & (q + 3 < Q), c_ok, ALIGN, INTERPRET)


@jit_any_size
def conv_dw_bwd_data(
    dy_ptr, w_ptr, dx_ptr,
    BATCH, C, D, H, W, K, OD, P, Q, TD, R, MULT,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, STEP_T, STEP_R, STEP_S, D_PH, H_PH, W_PH,
    sdyn, sdyc, sdyd, sdyh, sdyw, swk, swt, swr, sws, sdxn, sdxc, sdxd, sdxh, sdxw,
    S: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, SLIDE: tl.constexpr,
    ALIGN: tl.constexpr, INTERPRET: tl.constexpr,
):
    # program -> (channel block fastest, pixel block of the phase, image, plane of the phase, phase)
    pid = tl.program_id(0)
    c_blocks = tl.cdiv(C, BLOCK_C)
    pix_blocks = tl.cdiv(H_PH, BLOCK_H) * tl.cdiv(W_PH, BLOCK_W)
    cb = pid % c_blocks
    rest = pid // c_blocks
    i, j = _pixel_block(rest % pix_blocks, H_PH, W_PH, BLOCK_H, BLOCK_W, SLIDE)
    n = (rest // pix_blocks) % BATCH
    planes = (rest // pix_blocks) // BATCH
    e = planes % D_PH
    phase = planes // D_PH
    pd = (phase // (STRIDE_W * STRIDE_H)) % STRIDE_D
    ph = phase // STRIDE_W - pd * STRIDE_H
    pw = phase % STRIDE_W
    z = pd + e * STRIDE_D  # the phase's input pixels
    h = ph + i * STRIDE_H
    w = pw + j * STRIDE_W
    c = cb * BLOCK_C + tl.arange(0, BLOCK_C)  # input channels
    c_ok = c < C

    if SLIDE == 1:
        # First tap of the phase in each direction: the one r in [0, STEP_R) with (ph + pad - r*dil) a
        # multiple of the stride, if any (r0 == STEP_R: none, the phase's rows get no tap: zeros).
        t0 = STEP_T
        for t in range(0, STEP_T):
            t0 = tl.where((t0 == STEP_T) & ((pd + PAD_D1 - 1 - t * DIL_D) % STRIDE_D == 0), t, t0)
        r0 = STEP_R
        for r in range(0, STEP_R):
            r0 = tl.where((r0 == STEP_R) & ((ph + PAD_H - r * DIL_H) % STRIDE_H == 0), r, r0)
        s0 = STEP_S
        for s in range(0, STEP_S):
            s0 = tl.where((s0 == STEP_S) & ((pw + PAD_W - s * DIL_W) % STRIDE_W == 0), s, s0)
        taps_t = tl.where(t0 < STEP_T, tl.maximum(TD - t0 + STEP_T - 1, 0) // STEP_T, 0)
        taps_r = tl.where(r0 < STEP_R, tl.maximum(R - r0 + STEP_R - 1, 0) // STEP_R, 0)
        taps_s = tl.where(s0 < STEP_S, tl.maximum(S - s0 + STEP_S - 1, 0) // STEP_S, 0)

        acc = tl.zeros((BLOCK_H * BLOCK_W, BLOCK_C), dtype=tl.float32)
        for ttr in range(0, taps_t * taps_r):  # the phase's filter rows (t, r)
            tt, tr, _ = tap_coords(ttr, taps_t, taps_r, 1)
            t = t0 + tt * STEP_T
            r = r0 + tr * STEP_R
            od = e + (pd + PAD_D1 - 1 - t * DIL_D) // STRIDE_D  # exact: t and r belong to the phase
            p = i + (ph + PAD_H - r * DIL_H) // STRIDE_H
            row_ok = (i < H_PH) & (h < H) & (p >= 0) & (p < P) & (z < D) & (od >= 0) & (od < OD)
            for ts in range(0, taps_s):
                s = s0 + ts * STEP_S
                q = j + (pw + PAD_W - s * DIL_W) // STRIDE_W
                for m in range(0, MULT):
                    k = c * MULT + m  # the output channels of input channel c
                    dyv = _load_cols(dy_ptr + k * sdyc, n * sdyn + od * sdyd + p * sdyh, q, row_ok, c_ok, Q, sdyw,
                                     ALIGN)
                    wv = tl.load(w_ptr + k * swk + t * swt + r * swr + s * sws, mask=c_ok, other=0.0).to(tl.float32)
                    acc += dyv * wv[None, :]
        dx_pix = n * sdxn + z * sdxd + h * sdxh + w * sdxw
        _store_cols(acc, dx_ptr, c * sdxc, dx_pix, (i < H_PH) & (j < W_PH) & (h < H) & (w < W) & (z < D), c_ok,
                    ALIGN, INTERPRET)
    else:
        # Stride 1 (one phase: z = e, h = i, w = j) and dilation 1 along W, SLIDE = 4: input columns w .. w+3 of a
        # slot take dy columns w + pad - s + v; walking the taps from s = S-1 down, the columns rise by one
        # per tap, so four dy tiles slide along the row as in the forward.
        acc0 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_H * (BLOCK_W // 4), BLOCK_C), dtype=tl.float32)
        col = w + PAD_W - (S - 1)
        for tr in range(0, TD * R):  # filter rows (t, r)
            t, r, _ = tap_coords(tr, TD, R, 1)
            od = z + PAD_D1 - 1 - t * DIL_D
            p = h + PAD_H - r * DIL_H
            row_ok = (h < H) & (p >= 0) & (p < P) & (z < D) & (od >= 0) & (od < OD)
            row = n * sdyn + od * sdyd + p * sdyh
            for m in range(0, MULT):
                k = c * MULT + m
                dy_chan = dy_ptr + k * sdyc
                d0 = _load_cols(dy_chan, row, col, row_ok, c_ok, Q, sdyw, ALIGN)
                d1 = _load_cols(dy_chan, row, col + 1, row_ok, c_ok, Q, sdyw, ALIGN)
                d2 = _load_cols(dy_chan, row, col + 2, row_ok, c_ok, Q, sdyw, ALIGN)
                for u in tl.static_range(S):
                    d3 = _load_cols(dy_chan, row, col + u + 3, row_ok, c_ok, Q, sdyw, ALIGN)
                    wv = tl.load(w_ptr + k * swk + t * swt + r * swr + (S - 1 - u) * sws, mask=c_ok, other=0.0)
                    wv = wv.to(tl.float32)[None, :]
                    acc0 += d0 * wv
                    acc1 += d1 * wv
                    acc2 += d2 * wv
                    acc3 += d3 * wv
                    d0 = d1
                    d1 = d2
                    d2 = d3
        dx_pix = n * sdxn + z * sdxd + h * sdxh + w * sdxw
        h_ok = (h < H) & (z < D)
        _store_cols(acc0, dx_ptr, c * sdxc, dx_pix, h_ok & (w < W), c_ok, ALIGN, INTERPRET)
        _store_cols(acc1, dx_ptr, c * sdxc, dx_pix + sdxw, h_ok & (w + 1 < W), c_ok, ALIGN, INTERPRET)
        _store_cols(acc2, dx_ptr, c * sdxc, dx_pix + 2 * sdxw, h_ok & (w + 2 < W), c_ok, ALIGN, INTERPRET)
        _store_cols(acc3, dx_ptr, c * sdxc, dx_pix + 3 * sdxw, h_ok & (w + 3 < W), c_ok, ALIGN, INTERPRET)


@jit_any_size
def conv_dw_bwd_weight(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C, D, H, W, K, OD, P, Q, TD, R, S, MULT,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, ROWS_PER_SPLIT,
    sxn, sxc, sxd, sxh, sxw, sdyn, sdyc, sdyd, sdyh, sdyw, so_split, so_k, so_t, so_r, so_s,
    BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, ALIGN: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    # program -> (tap block fastest, input-channel block, multiplier index m, split): neighbours share
    # their pixels' dy and x
    pid = tl.program_id(0)
    t_blocks = tl.cdiv(TD * R * S, BLOCK_T)
    c_blocks = tl.cdiv(C, BLOCK_C)
    tb = pid % t_blocks
    cb = (pid // t_blocks) % c_blocks
    m = (pid // (t_blocks * c_blocks)) % MULT
    split = pid // (t_blocks * c_blocks * MULT)

    tap = tb * BLOCK_T + tl.arange(0, BLOCK_T)  # taps (t, r, s)
    t_ok = tap < TD * R * S
    t, r, s = tap_coords(tap, TD, R, S)
    c = cb * BLOCK_C + tl.arange(0, BLOCK_C)  # input channels: contiguous in NHWC
    c_ok = c < C
    k = c * MULT + m  # their output channels
    x_chan = (x_ptr + c * sxc)[None, None, :]
    dy_chan = (dy_ptr + k * sdyc)[None, None, :]
    offs = tl.arange(0, BLOCK_W)

    acc = tl.zeros((BLOCK_W, BLOCK_T, BLOCK_C), dtype=tl.float32)  # [pixels, taps, channels]
    # The split's output rows (n, od, p), each walked BLOCK_W columns at a time: the row's coordinates are
    # scalars, so a chunk costs no per-pixel division and each tap's row offset and mask are per tap.
    for row in range(split * ROWS_PER_SPLIT, tl.minimum((split + 1) * ROWS_PER_SPLIT, BATCH * OD * P)):
        plane = row // P
        p = row % P
        od = plane % OD
        n = plane // OD
        z = depth_origin(od, STRIDE_D, PAD_D1) + t * DIL_D  # [BLOCK_T]
        h = p * STRIDE_H - PAD_H + r * DIL_H
        t_row_ok = t_ok & (h >= 0) & (h < H) & (z >= 0) & (z < D)
        for q0 in range(0, Q, BLOCK_W):
            q = q0 + offs  # [BLOCK_W]
            q_ok = q < Q
            dy_pix = tl.multiple_of(n * sdyn + od * sdyd + p * sdyh + q * sdyw, ALIGN)
            dyv = tl.load(dy_chan + dy_pix[:, None, None], mask=q_ok[:, None, None] & c_ok[None, None, :],
                          other=0.0)
            w = (q * STRIDE_W - PAD_W)[:, None] + (s * DIL_W)[None, :]  # [BLOCK_W, BLOCK_T]
            ok = q_ok[:, None] & t_row_ok[None, :] & (w >= 0) & (w < W)
            x_pix = tl.multiple_of(n * sxn + (z * sxd + h * sxh)[None, :] + w * sxw, [ALIGN, ALIGN])
            xv = tl.load(x_chan + x_pix[:, :, None], mask=ok[:, :, None] & c_ok[None, None, :], other=0.0)
            acc += xv.to(tl.float32) * dyv.to(tl.float32)

    part = tl.sum(acc, axis=0)  # [BLOCK_T, BLOCK_C]
    out = out_ptr + split * so_split + (t * so_t + r * so_r + s * so_s)[:, None] + (k * so_k)[None, :]
    tl.store(out, cast_for_store(part, out_ptr, INTERPRET), mask=t_ok[:, None] & c_ok[None, :])
