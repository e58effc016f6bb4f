"""Forward convolutions with very few input or output channels per group (memory-bound layers).

Two kernels, both with the fused bias / activation / cast epilogue of :mod:`.implicit_gemm` and every
tensor addressed through its strides (NCHW and NHWC in place; 1D runs as ``H = 1``; the group is
``program_id(1)``). The weight is addressed through an offset and strides (``swo`` per produced channel,
``swi`` per reduced channel, ``swr`` and ``sws`` per tap; group ``g`` starts ``W_OFF + g * W_EXTRA`` elements
past row ``g * K_G``, both 0 in the forward), so that the host also runs stride-1 data gradients through these
kernels with the weight transposed and flipped by those strides instead of a copy (:mod:`.few_channels_bwd`).
The output starts ``Y_OFF`` elements past ``y_ptr`` (0 in the forward): a strided data gradient runs one
launch per stride phase, each writing every ``stride``-th pixel of ``dx`` from its own first one.
The vector part of the weight address stays ``(g * K_G + column) * swo``, which the output address shares:
the forward's register use is the one it was swept with (a separate group stride cost one configuration
38 registers and a spill).

``conv_fwd_few_cin``: few input channels (an RGB stem, ``3 -> 64``, 7x7 stride 2)
-------------------------------------------------------------------------------------
An implicit GEMM ``Y[M, N] = A[M, K] @ B[K, N]`` like :mod:`.implicit_gemm`, but the reduction index
``k`` runs over the flattened ``(filter tap, channel)`` pairs jointly: ``K = C_G * R * S`` (147 for the
stem) is padded to whole ``BLOCK_K`` chunks, where blocking taps x channel blocks of at least 16 would
multiply 13 padding lanes for every 3 real ones. Each lane's ``k`` is decoded into ``(r, s, c)``; the
``[BLOCK_M, BLOCK_K]`` input tile is then a masked gather ``x_row[m] + off[k]`` whose mask is two
unsigned compares (``0 <= h < H`` and ``0 <= w < W`` at once). Reduction lanes past ``K`` and rows past
``M`` get a large negative row offset, so the same compares mask them.

The gather, not the bytes, bounds these layers (Nsight Compute on the stem: 72% issue-bound, DRAM 5%),
so the lanes' arithmetic is kept out of the loop. ``C_G``, ``R`` and ``S`` are constexprs (a division by
a constant is a multiply and a shift; by a run-time value about 20 instructions), and a long ``k`` is
walked as ``OUTER`` steps of its leading digit in memory order (the filter row in NHWC, the channel in
NCHW; :func:`conv_rdna.plans.few_channels.few_cin_outer_steps`), each over the same lanes of the other two digits
(``INNER``: the stem's 21 ``(s, c)`` lanes of a filter row, or its 49 ``(r, s)`` taps of a channel). A
lane's decode and offsets then do not depend on the step: they are computed once per program and a step
adds one row or channel offset. For the stem that is 7 steps of 32 lanes instead of 5 of 32 (more
padding) at a quarter of the instructions per gathered element, 225 -> 125 us on the H100 (113 us with
the 128 x 64 tiles the sweep then chose in NHWC). A ``k`` of at most two chunks is one step.

The order of ``k`` follows the memory order of the operands (``CHANNELS_INNER``): channels-last
``k = (r, s, c)``, channels-first ``k = (c, r, s)``. In NHWC the ``S * C`` elements of one filter row
of a pixel's window are then consecutive in memory (21 x 2 bytes for the stem), so the lanes of a warp
that walk ``k`` read runs of neighbouring addresses, and the weight tile is contiguous along ``k`` in
either layout. With 3 channels no vector wider than one element is aligned, so the gather is made of
element loads whose sectors coalesce; the input (3 channels) is a small part of the traffic, the
output (``BLOCK_N`` channels) the large one, stored as ``BLOCK_M`` x ``BLOCK_N`` tiles (contiguous in
NHWC when ``BLOCK_N`` covers every output channel). Tiles are large in ``M`` (128-256 pixels) so the
weight, re-read from L1/L2 for every tile, costs little. The gather addresses are 32-bit offsets from
one base pointer (half the registers of a tile of 64-bit pointers); Triton lays the gathered tile out
with one pixel row per thread, so every thread holds the decoded ``k`` vectors of a whole step, which
is what bounds ``BLOCK_M x BLOCK_K`` per thread (16 warps for 256 x 32 on sm_90).

``conv_fwd_few_cout``: few output channels (an image output, ``128 -> 3``, 3x3)
----------------------------------------------------------------------------------
Here the output tile is tiny in ``N`` and the cost is the input, read once. An implicit GEMM with
``BLOCK_N = 16`` re-reads each input tile once per filter tap (9 times for 3x3: 2.3 KB of input
per output pixel pass through L2 / shared memory for 128 channels), and 13 of its 16 MMA columns are
padding. This kernel moves fewer bytes by **expanding the taps into the columns** instead:

1. the program takes a 2D tile of ``TILE_H x TILE_W = BLOCK_M`` input pixels (with the halo the
   filter needs) and computes ``Z[pixel, (k, r, s)] = sum_c x[pixel, c] * w[k, c, r, s]``: a GEMM over
   the input channels in ``BLOCK_K`` steps whose ``N = K_CHUNK * R * S`` columns are every tap of every
   output channel (27 of ``BLOCK_N = 32`` for 3 -> 3x3). Each input element is loaded **once** per
   program (plus the halo shared with the neighbouring tiles, which hits L2: 1.3x for 16x16 tiles and
   a 3x3 filter);
2. shift and add: ``y[p, q, k] = sum_(r,s) Z[(p*stride + r*dil, q*stride + s*dil), (k, r, s)]``. The
   shift is a different row offset per column of ``Z``; it is one ``tl.gather`` of the flattened ``Z``
   (rank 1, so Triton lowers it through shared memory: ``Z`` written once, each element read once; a
   rank-2 gather is lowered to warp shuffles instead, 8 per element for 256 rows), then for each
   output channel a masked row sum of its ``R * S`` columns, stored as its own ``[BLOCK_M]`` vector
   (assembling the channels into one 2D tile first made Triton's layout propagation keep the gathered
   tile in two layouts, gathering it twice and spilling).

Bytes moved per output pixel for 128 -> 3, 3x3, fp16 (H100, 16x16 tiles): input 256 B x 1.3 (halo)
from L2 plus ``Z`` 128 B x 1.3 through shared memory, against 2304 B of input through L2 and shared
memory for the per-tap implicit GEMM; MMA work 1.6x the useful FLOPs (196 of 256 slots are outputs, 27
of 32 columns are taps) against 5.3x (3 of 16 columns). The output tile covers the pixels whose whole window lies in the
input tile: ``TILE_P = (TILE_H - 1 - (R-1)*dil) // stride + 1`` rows by ``TILE_Q`` columns (the host
picks the tile shape that needs the fewest tiles, :func:`conv_rdna.plans.few_channels.few_cout_tile`); output slots
use the input tile's coordinates, so slots outside ``TILE_P x TILE_Q`` are masked. Output channels that
do not fit ``BLOCK_N // (R*S)`` columns are split into chunks on ``program_id(2)``, each re-reading
the input (the kernel is offered for at most 8 output channels per group).
"""

import triton
import triton.language as tl

from .common import activation, add_bias_and_activate, cast_for_store, jit_any_size, mma, row_length, swizzle

#: Offset that sends a row or reduction lane out of bounds (negative, so ``(unsigned) h < H`` fails).
FAR = tl.constexpr(-(1 << 29))


@triton.jit
def inside(h, H, w, W):
    """``0 <= h < H and 0 <= w < W`` with two unsigned compares."""
    return (h.to(tl.uint32, bitcast=True) < H) & (w.to(tl.uint32, bitcast=True) < W)


@triton.jit
def decode_tap_channel(k, C_G, R, S, CHANNELS_INNER: tl.constexpr):
    """``(r, s, c)`` of flattened (tap, channel) indices ``k``, in the operands' memory order: channels-last
    ``k = (r*S + s)*C_G + c``, channels-first ``k = (c*R + r)*S + s``. One definition for the forward
    reduction of :func:`conv_fwd_few_cin` and the columns of the weight gradient that mirrors it
    (:func:`conv_rdna.kernels.few_channels_bwd.conv_bwd_weight_few_cin`), so both orders agree."""
    if CHANNELS_INNER:
        c = k % C_G
        t = k // C_G
        s = t % S
        r = t // S
    else:
        s = k % S
        t = k // S
        r = t % R
        c = t // R
    return r, s, c


@jit_any_size
def conv_fwd_few_cin(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, H, W, K_G, P, Q,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
    sxn, sxc, sxh, sxw, W_OFF, W_EXTRA, swo, swi, swr, sws, Y_OFF, syn, syc, syh, syw,
    C_G: tl.constexpr, R: tl.constexpr, S: tl.constexpr, OUTER: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    CHANNELS_INNER: tl.constexpr, ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    Q = row_length(Q, ROW_VEC)
    g = tl.program_id(1)
    M = BATCH * P * Q
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(K_G, BLOCK_N), GROUP_M)

    # Rows: output pixels; their window's top-left input pixel. Rows past M go far out of bounds.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    m = tl.minimum(offs_m, M - 1)
    q = m % Q
    p = (m // Q) % P
    n = m // (Q * P)
    h0 = tl.where(m_ok, p * STRIDE_H - PAD_H, FAR)
    w0 = q * STRIDE_W - PAD_W
    x_img = x_ptr + g * C_G * sxc  # int32 offsets from one base pointer: half the registers of pointers
    x_rows = n * sxn + (p * STRIDE_H - PAD_H) * sxh + w0 * sxw
    # Columns: output channels of the group.
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K_G
    w_cols = (W_OFF + g * W_EXTRA) + (g * K_G + offs_n) * swo

    # Reduction: OUTER steps of the leading digit of k, each over the INNER lanes of the other two in
    # BLOCK_K chunks. A lane's (r, s, c) and offsets do not depend on the step, so they are computed once.
    INNER: tl.constexpr = C_G * R * S // OUTER
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for o in range(0, OUTER):
        for j0 in tl.static_range(0, INNER, BLOCK_K):
            j = j0 + tl.arange(0, BLOCK_K)
            r, s, c = decode_tap_channel(j, C_G, R, S, CHANNELS_INNER)
            if CHANNELS_INNER:  # the leading digit is the filter row
                r += o
            else:  # the input channel
                c += o
            j_ok = j < INNER
            dr = tl.where(j_ok, r * DIL_H, FAR)
            ds = s * DIL_W
            ok = inside(h0[:, None] + dr[None, :], H, w0[:, None] + ds[None, :], W)
            x_off = c * sxc + r * DIL_H * sxh + ds * sxw
            a = tl.load(x_img + (x_rows[:, None] + x_off[None, :]), mask=ok, other=0.0)
            b = tl.load(w_ptr + (w_cols[None, :] + (c * swi + r * swr + s * sws)[:, None]),
                        mask=j_ok[:, None] & n_ok[None, :], other=0.0)
            acc = mma(a, b, acc, INTERPRET)

    # Epilogue in float32: bias, activation, one rounding to the output dtype.
    acc = add_bias_and_activate(acc, bias_ptr + g * K_G, offs_n, n_ok, HAS_BIAS, ACTIVATION)
    y = y_ptr + Y_OFF + (n * syn + p * syh + q * syw)[:, None] + ((g * K_G + offs_n) * syc)[None, :]
    tl.store(y, cast_for_store(acc, y_ptr, INTERPRET), mask=m_ok[:, None] & n_ok[None, :])


@jit_any_size
def conv_fwd_few_cout(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    BATCH, C_G, H, W, K_G, P, Q, R, S,
    STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
    sxn, sxc, sxh, sxw, W_OFF, W_EXTRA, swo, swi, swr, sws, Y_OFF, syn, syc, syh, syw,
    TILE_P, TILE_Q, TILES_Q, TILES, K_CHUNK,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TILE_W: tl.constexpr,
    K_PAD: tl.constexpr, INTERPRET: tl.constexpr,
):
    tile = tl.program_id(0)
    g = tl.program_id(1)
    chunk = tl.program_id(2)
    n = tile // TILES
    t = tile % TILES
    p0 = (t // TILES_Q) * TILE_P  # first output pixel of the tile
    q0 = (t % TILES_Q) * TILE_Q

    # Rows of Z: the input pixels of the tile (TILE_H x TILE_W, row-major), zero in the padding.
    a = tl.arange(0, BLOCK_M)
    ah = a // TILE_W
    aw = a % TILE_W
    h = p0 * STRIDE_H - PAD_H + ah
    w = q0 * STRIDE_W - PAD_W + aw
    a_ok = inside(h, H, w, W)
    x_pix = x_ptr + n * sxn + g * C_G * sxc + h * sxh + w * sxw

    # Columns of Z: j = (kk*R + r)*S + s for output channel chunk*K_CHUNK + kk.
    j = tl.arange(0, BLOCK_N)
    RS = R * S
    kk_j = j // RS
    r_j = (j % RS) // S
    s_j = j % S
    k_j = chunk * K_CHUNK + kk_j
    j_ok = (kk_j < K_CHUNK) & (k_j < K_G)
    w_col = w_ptr + (W_OFF + g * W_EXTRA) + (g * K_G + k_j) * swo + r_j * swr + s_j * sws

    offs_c = tl.arange(0, BLOCK_K)
    z = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, C_G, BLOCK_K):
        c = c0 + offs_c
        c_ok = c < C_G
        xa = tl.load(x_pix[:, None] + (c * sxc)[None, :], mask=a_ok[:, None] & c_ok[None, :], other=0.0)
        wb = tl.load(w_col[None, :] + (c * swi)[:, None], mask=c_ok[:, None] & j_ok[None, :], other=0.0)
        z = mma(xa, wb, z, INTERPRET)

    # Shift and add. Output slot o = (oh, ow) uses the input tile's coordinates; its tap (r, s) is the
    # Z row (oh*stride + r*dil, ow*stride + s*dil), a different row for every column of Z.
    oh = ah
    ow = aw
    p = p0 + oh
    q = q0 + ow
    o_ok = (oh < TILE_P) & (ow < TILE_Q) & (p < P) & (q < Q)
    src = (oh[:, None] * STRIDE_H + (r_j * DIL_H)[None, :]) * TILE_W + ow[:, None] * STRIDE_W + (s_j * DIL_W)[None, :]
    src = tl.where(o_ok[:, None] & j_ok[None, :], src, 0)
    flat = tl.reshape(src * BLOCK_N + j[None, :], (BLOCK_M * BLOCK_N,))
    shifted = tl.reshape(tl.gather(tl.reshape(z, (BLOCK_M * BLOCK_N,)), flat, 0), (BLOCK_M, BLOCK_N))
    y_pix = y_ptr + Y_OFF + n * syn + p * syh + q * syw
    for i in tl.static_range(K_PAD):  # output channel i of the chunk: the sum of its R*S columns
        k = chunk * K_CHUNK + i
        k_ok = (i < K_CHUNK) & (k < K_G)
        acc = tl.sum(tl.where((kk_j == i)[None, :], shifted, 0.0), axis=1)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + g * K_G + k, mask=k_ok, other=0.0).to(tl.float32)
        acc = activation(acc, ACTIVATION)
        tl.store(y_pix + (g * K_G + k) * syc, cast_for_store(acc, y_ptr, INTERPRET), mask=o_ok & k_ok)
