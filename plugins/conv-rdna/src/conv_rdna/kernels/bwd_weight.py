"""Weight gradient ``dw = conv_backward_weight(x, dy)`` with a split reduction.

Within group ``g`` and for one tap ``(t, r, s)`` the weight gradient is the GEMM

``dw[k, c, t, r, s] = sum_{(n, od, p, q)} dy[n, g*K_G + k, od, p, q] * x[n, g*C_G + c, od*stride_d - pad_d +
t*dil_d, p*stride_h - pad_h + r*dil_h, ...]``

(depth 1 below 3D: the JIT compiles the depth sizes in as the constant 1 and the depth arithmetic folds away,
:func:`~.common.depth_origin`). ``M`` = output channels, ``N`` = input channels, ``K`` = every output pixel of
the batch: short and
wide GEMMs whose reduction is long. To fill the GPU the reduction is split into ``SPLITS`` contiguous
ranges of ``PIX_PER_SPLIT`` pixels (a multiple of ``BLOCK_K``), one per ``program_id(2)``:

- deterministic: :func:`conv_bwd_weight_partial` stores each split's float32 partial tile into its own
  slice of a workspace, and :func:`reduce_splits` sums the slices in a fixed order and casts: the same
  bits on every run. With one split the partial kernel writes the result directly (no workspace).
- atomics (``ATOMIC``): every split adds its tile into one float32 buffer with ``tl.atomic_add``;
  faster to finish, but the order of the additions, and so the last bits, vary between runs.

Tiling of the partial kernel: one program per ``[BLOCK_M output channels, BLOCK_N input channels]``
tile of one tap; ``program_id(0)`` enumerates ``(tap, input-channel tile, output-channel tile)``
(output-channel tiles fastest, so neighbouring programs gather the same input tile), ``program_id(1)``
the group. Each ``BLOCK_K`` step decodes its pixels ``(n, od, p, q)`` and gathers ``dy[BLOCK_M, BLOCK_K]``
and ``x[BLOCK_K, BLOCK_N]`` (zero in the padding). In channels-last the loads run along the channels and
the pixels are decoded with the host's magic numbers (:func:`~.common.divide`, a tenth of the instructions of
a division); in channels-first they run along the pixels and ``//`` and ``%`` stay, because the compiler
reads from them that ``q`` runs in steps of one where ``Q`` is a multiple of 16, and vectorises the loads.
In 3D channels-last the output plane ``od`` comes from the magic numbers' ``(n, od)`` by a plain division.
"""

import triton.language as tl

from .common import (as_multiple, cast_for_store, depth_origin, jit_any_size, mma, pixel_coords, row_length,
                     volume_weight_grad_tile)


@jit_any_size
def conv_bwd_weight_partial(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_G, D, H, W, K_G, OD, P, Q, TD, R, S,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, PIX_PER_SPLIT,
    P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT,
    sxn, sxc, sxd, sxh, sxw, sdyn, sdyc, sdyd, sdyh, sdyw,
    so_split, so_k, so_c, so_t, so_r, so_s,
    ATOMIC: tl.constexpr, CHANNELS_LAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ROW_VEC: tl.constexpr, INTERPRET: tl.constexpr,
):
    Q = row_length(Q, ROW_VEC)
    PIX_PER_SPLIT = as_multiple(PIX_PER_SPLIT, BLOCK_K)  # whole blocks: each step starts on a block
    g = tl.program_id(1)
    split = tl.program_id(2)
    t, r, s, offs_m, m_ok, offs_n, n_ok = volume_weight_grad_tile(K_G, C_G, TD, R, S, BLOCK_M, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)

    dy_rows = dy_ptr + (g * K_G + offs_m) * sdyc  # [BLOCK_M]
    x_cols = x_ptr + (g * C_G + offs_n) * sxc  # [BLOCK_N]

    pix_end = tl.minimum((split + 1) * PIX_PER_SPLIT, BATCH * OD * P * Q)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j0 in range(split * PIX_PER_SPLIT, pix_end, BLOCK_K):
        j = j0 + offs_k  # output pixels (n, od, p, q) of this step
        j_ok = j < pix_end
        if CHANNELS_LAST:
            image, p, q = pixel_coords(j, P, Q, P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT)  # image: (n, od)
            od = image % OD
            n = image // OD
        else:
            q = j % Q
            p = (j // Q) % P
            od = (j // (Q * P)) % OD
            n = j // (Q * P * OD)
        z = depth_origin(od, STRIDE_D, PAD_D1) + t * DIL_D
        h = p * STRIDE_H - PAD_H + r * DIL_H
        w = q * STRIDE_W - PAD_W + s * DIL_W
        x_ok = j_ok & (z >= 0) & (z < D) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(dy_rows[:, None] + (n * sdyn + od * sdyd + p * sdyh + q * sdyw)[None, :],
                    mask=m_ok[:, None] & j_ok[None, :], other=0.0)
        b = tl.load(x_cols[None, :] + (n * sxn + z * sxd + h * sxh + w * sxw)[:, None],
                    mask=x_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, INTERPRET)

    out = (out_ptr + split * so_split + t * so_t + r * so_r + s * so_s
           + ((g * K_G + offs_m) * so_k)[:, None] + (offs_n * so_c)[None, :])
    mask = m_ok[:, None] & n_ok[None, :]
    if ATOMIC:
        tl.atomic_add(out, acc, mask=mask)
    else:
        tl.store(out, cast_for_store(acc, out_ptr, INTERPRET), mask=mask)


@jit_any_size
def reduce_splits(ws_ptr, out_ptr, NUMEL, SPLITS, BLOCK: tl.constexpr, SPLIT_ROWS: tl.constexpr,
                  INTERPRET: tl.constexpr):
    """``out[e] = sum_{s < SPLITS} ws[s*NUMEL + e]``, cast to ``out``'s dtype.

    ``ws`` holds ``SPLITS`` float32 copies of the result laid out like ``out`` (dense), so the
    reduction is flat; with ``SPLITS = 1`` it is the cast of the atomics variant's float32 buffer.
    A program owns ``BLOCK // SPLIT_ROWS`` elements and loads ``SPLIT_ROWS`` splits of them at once: a
    small weight (64 x 64) summed a split at a time left a few programs waiting on one load after another.
    With at least 512 elements a row, four warps hold every row of their elements, so the sum over the rows
    stays in each thread. The order of the additions is fixed by the tile's shape: the same bits on every run.
    """
    COLUMNS: tl.constexpr = BLOCK // SPLIT_ROWS
    offs = tl.program_id(0) * COLUMNS + tl.arange(0, COLUMNS)
    ok = offs < NUMEL
    rows = tl.arange(0, SPLIT_ROWS)
    acc = tl.zeros((COLUMNS,), dtype=tl.float32)
    for first in range(0, SPLITS, SPLIT_ROWS):
        split = first + rows
        tile = tl.load(ws_ptr + split[:, None] * NUMEL + offs[None, :], mask=(split < SPLITS)[:, None] & ok[None, :],
                       other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + offs, cast_for_store(acc, out_ptr, INTERPRET), mask=ok)
