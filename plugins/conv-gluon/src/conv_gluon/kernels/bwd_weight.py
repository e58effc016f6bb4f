"""Weight gradient, channels-last, 16-bit operands: a persistent, wave-specialized GEMM per filter tap, its
reduction over the pixels split, the splits summed by a second kernel in a fixed order.

Per convolution group ``g`` and filter tap ``(r, s)`` the weight gradient is the GEMM

    ``dW[k, c, r, s] = sum_j dy[j, g*K_G + k] * x[n, p*stride - pad + r*dil, q*stride - pad + s*dil, g*C_G + c]``

over the output pixels ``j = (n, p, q)`` (``x`` is zero outside the image): ``M`` = the group's output channels
``k``, ``N`` its input channels ``c``, reduced over ``J = N * P * Q`` pixels, walked as *k-steps* of ``BLOCK_K``
pixels. ``A = dy^T``: a ``dy`` tile ``[BLOCK_K pixels, BLOCK_M channels]`` is rows of the 2D view ``[J, K]`` of
the NHWC ``dy`` (a plain TMA box), handed to ``wgmma`` transposed (an MN-major shared-memory operand, which
Hopper's ``wgmma`` reads for 16-bit types: ``HGMMA ... tnspA``); ``B`` = the ``x`` tile ``[BLOCK_K pixels,
BLOCK_N channels]`` of the step's pixels shifted by the tap (MN-major too). Channels past a group's end in
either tile only feed accumulator rows or columns the epilogue masks away, so a tile may read the next
group's channels; pixels past the end are zeros in both tiles.

Work is cut into *units* (``tiling.unit_coords``): one (split, group, tap, ``BLOCK_M x BLOCK_N`` tile), where a
split is a range of ``SPLIT_STEPS`` consecutive k-steps (the host chooses how many, ``tiling.choose_split_steps``:
enough units for every SM, a bounded workspace). Units are numbered split-major, so the units that run at
the same time share one range of pixels in L2. Each program is persistent (one per SM: the ring fills its
shared memory, and the producer fills the next unit's stages during this unit's epilogue); it takes units
``pid, pid + grid, ...`` and runs two partitions over them:

``producer`` (a worker partition: the conv-to-GEMM address arithmetic and every load, nothing else)
    brings step ``i``'s ``dy`` and ``x`` tiles into stage ``i % STAGES`` of the ring once the consumer has
    released it (``kernels/pipeline.py``: the same ring, barriers and gathering copies as the forward). ``dy``
    always comes by TMA. ``x`` comes in one of three ways (``X_MODE``, the codes of ``codes.A_MODES``):

    * ``"cp_async"``: 4 warps decode each step's pixels into image rows and columns for the unit's tap and
      gather the tile with masked ``cp.async`` copies of ``VEC`` channels (zeros for padding, pixels past the
      end and channels past the group), each thread's ``noinc`` arrival counting towards ``ready``;
    * ``"registers"``: the same through registers, for odd channel counts (no copy is 4 bytes wide);
    * ``"tma_box"`` (stride 1, ``x``'s pixels a multiple of 16 bytes): a k-step is a ``BOX_H x BOX_W`` box of
      one image's output pixels, so ``dy``'s tile is the box ``[1, BOX_H, BOX_W, BLOCK_M]`` of the 4D ``dy`` and
      ``x``'s the box ``[1, BOX_H, BOX_W, BLOCK_N]`` at the tap's offset, padding read as zeros by the TMA
      unit; one warp issues both loads. Slots past an image's edge read zeros of ``dy`` (and finite ``x``).
    * ``"tma_box"`` with ``ROWS = 3`` (``bwd_weight_rows_box``, a filter of 3 rows): a unit takes a whole
      filter column ``s``, its three taps ``(0, s), (1, s), (2, s)`` at once. They read the same ``dy`` tile,
      and their ``x`` boxes are one box moved down by ``DIL_H`` rows each; so a step loads ``dy`` once and
      ``x`` as two boxes one above the other (rows ``p0 - PAD_H`` to ``p0 - PAD_H + 2 BOX_H``, which holds all
      three taps' rows as ``BOX_H >= 2 DIL_H``): three pixel-tiles where per-tap units load six. The weight
      gradient is bound by the bytes it brings from L2, not by its MMAs. Each tap's tile starts a whole box
      row further than the last, so its MMA goes one box row (``BOX_W`` pixels, at least 16) at a time:
      ``dy``'s row ``j`` against the x rows ``r DIL_H + j``.

``consumer`` (the default partition, one or two warpgroups: the MMAs and the epilogue, no address arithmetic)
    waits for ``ready``, issues the step's ``wgmma`` asynchronously (with ``ROWS = 3``: per tap, into three
    accumulators), keeps the step in flight and releases the previous step's stage; after a unit's last step it
    drains the MMAs and stores the float32 tile (``ROWS = 3``: the three): into its split's slice of the
    workspace (``[SPLITS, K, TAPS, C_PAD]``: the channels-last ``dW`` with each tap's channels padded to 16, so
    that every row and tap starts 64-byte aligned and the stores are vectors; the padding columns get whatever
    the tile holds there and are never read), or, with one split, straight into ``dW`` in its dtype (staged
    through shared memory where 16-bit stores cannot be paired, ``STAGE_OUT``).

3D (NDHWC, the gathering modes): a unit's tap is ``(t, r, s)`` (units numbered with the depth tap ``t`` between
the group and the plane's tap, ``unit_coords``), its pixels ``(image, z, p, q)``; the producer masks the pixels
whose input plane ``z * STRIDE_D - PAD_D + t * DIL_D`` lies outside the volume. Below 3D all of it folds away, as
in the forward.

:func:`sum_splits` then adds the slices element by element in split order and rounds once to ``dW``'s
dtype. No atomics and a fixed order everywhere: bitwise the same result on every run and every grid size.
Registers move to the consumer with ``setmaxnreg`` as in the forward (``PRODUCER_REGS`` for the producer).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .codes import A_MODES, ACTIVATIONS
from .common import store_tile, store_tile_tma, tile_coords
from .compat import tma_load
from .pipeline import (
    accumulator_layout,
    acquire_stage,
    depth_offsets,
    drain_mma,
    gather_into,
    gather_layout,
    init_ring,
    input_plane,
    mma_step,
    pixel_coords,
    ready_arrivals,
    retire_ring,
    tap_offsets,
    tile_mask,
    wait_stage,
)

TMA_BOX = gl.constexpr(A_MODES["tma_box"])
NO_ACTIVATION = gl.constexpr(ACTIVATIONS[""])


@gluon.jit
def unit_coords(unit, TAPS, T, GROUPS, TILES_M, TILES_N, GROUP_M: gl.constexpr):
    """``(split, group, t, tap, pid_m, pid_n)`` of unit ``unit`` (the twin of ``tiling.unit_coords``, whose tap
    is ``t * TAPS + tap``): the forward's banded tile order, with (split, group, depth tap ``t``, tap) in the
    role of its group, split outermost. With ``ROWS = 3`` the ``TAPS`` units per tile are the filter's columns,
    and ``tap`` is the column ``s``. Below 3D ``T`` is 1, a constant: ``t`` folds to 0."""
    outer, pid_m, pid_n = tile_coords(unit, TILES_M, TILES_N, GROUP_M)
    deep = outer // TAPS
    tap = outer - deep * TAPS
    rest = deep // T
    t = deep - rest * T
    split = rest // GROUPS
    g = rest - split * GROUPS
    return split, g, t, tap, pid_m, pid_n


@gluon.jit
def split_steps(split, STEPS, SPLIT_STEPS):
    """``(first k-step, k-steps)`` of split ``split``: whole ranges of ``SPLIT_STEPS``, the last one shorter."""
    k0 = split * SPLIT_STEPS
    return k0, gl.minimum(STEPS - k0, SPLIT_STEPS)


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, out_buf, out_ptr, out_desc, K_G, C_G, TAPS, T, GROUPS, OUT_ROW, OUT_TAP,
              SPLIT_STRIDE, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS,
              X_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              GROUP_M: gl.constexpr, STAGE_OUT: gl.constexpr, TMA_STORE: gl.constexpr, num_warps: gl.constexpr):
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_M, BLOCK_N, num_warps)
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))
    step = 0
    for unit in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        split, g, t, tap, pid_m, pid_n = unit_coords(unit, TAPS, T, GROUPS, TILES_M, TILES_N, GROUP_M)
        _, n_steps = split_steps(split, STEPS, SPLIT_STEPS)
        # a fresh accumulator and use_acc=True throughout, as in the forward (a first use_acc=False on the
        # previous unit's registers made ptxas serialize the wgmmas)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        prev = 0
        for kk in range(n_steps):
            stage = wait_stage(ready, step)
            if X_MODE == TMA_BOX:  # boxes of output pixels, flattened (BOX_W is a multiple of 8 rows)
                a = a_bufs.index(stage).reshape([BLOCK_K, BLOCK_M]).permute((1, 0))
                b = b_bufs.index(stage).reshape([BLOCK_K, BLOCK_N])
            else:
                # x was written by other threads' generic-proxy copies: order them before the async proxy
                fence_async_shared()
                a = a_bufs.index(stage).permute((1, 0))
                b = b_bufs.index(stage)
            acc = mma_step(a, b, acc, empty, prev, kk)
            prev = stage
            step += 1
        acc = drain_mma(acc, empty, prev)

        _store_unit_tile(acc, out_buf, out_ptr, out_desc, split, g, t * TAPS + tap, pid_m * BLOCK_M, pid_n * BLOCK_N,
                         rows, cols, K_G, OUT_ROW, OUT_TAP, SPLIT_STRIDE, STAGE_OUT, TMA_STORE)
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def _store_unit_tile(acc, out_buf, out_ptr, out_desc, split, g, tap, m0, n0, rows, cols, K_G, OUT_ROW, OUT_TAP,
                     SPLIT_STRIDE, STAGE_OUT: gl.constexpr, TMA_STORE: gl.constexpr):
    """Store a unit's tile of tap ``tap`` into its split's slice: by TMA through ``out_buf`` into ``out_desc``
    (``[splits, K, taps, OUT_TAP]``, clipped at ``OUT_TAP`` and ``K``; the copy waits for the previous one to
    have read the buffer), or from registers, rows up to the group's ``K_G`` and columns up to ``OUT_TAP``:
    ``C_G`` in ``dW``; in the workspace the padding too (never read back), which keeps the column mask constant
    over 16 columns and the float32 stores vectors."""
    if TMA_STORE:
        store_tile_tma(acc, out_desc, out_buf, [split, g * K_G + m0, tap, n0], NO_ACTIVATION)
    else:
        tile = out_ptr + split * SPLIT_STRIDE + (g * K_G + m0) * OUT_ROW + tap * OUT_TAP + n0
        store_tile(acc, tile, rows * OUT_ROW, rows < K_G - m0, cols, OUT_TAP - n0, NO_ACTIVATION, STAGE_OUT)


@gluon.jit
def _rows_step(a, x_lo, x_hi, acc0, acc1, acc2, BOX_H: gl.constexpr, BOX_W: gl.constexpr, ROW_DIL: gl.constexpr):
    """Issue one step of a filter column's unit: for every box row ``j`` of ``dy`` (``a``: ``[BLOCK_K, BLOCK_M]``,
    handed to the MMA transposed), tap ``r`` multiplies it by the x row ``r * ROW_DIL + j`` of the two stacked
    boxes ``x_lo``, ``x_hi`` (``[BLOCK_K, BLOCK_N]`` each). Every slice starts on a multiple of its length
    (``BOX_W`` pixels), as Gluon's subviews must. All asynchronous: ``3 * BOX_H`` groups."""
    for j in gl.static_range(BOX_H):
        a_j = a.slice(j * BOX_W, BOX_W).permute((1, 0))
        for r in gl.static_range(3):
            if r * ROW_DIL + j < BOX_H:
                x_t = x_lo.slice((r * ROW_DIL + j) * BOX_W, BOX_W)
            else:
                x_t = x_hi.slice((r * ROW_DIL + j - BOX_H) * BOX_W, BOX_W)
            if r == 0:
                acc0 = warpgroup_mma(a_j, x_t, acc0, use_acc=True, is_async=True)
            elif r == 1:
                acc1 = warpgroup_mma(a_j, x_t, acc1, use_acc=True, is_async=True)
            else:
                acc2 = warpgroup_mma(a_j, x_t, acc2, use_acc=True, is_async=True)
    return acc0, acc1, acc2


@gluon.jit
def _rows_consumer(a_bufs, b_bufs, ready, empty, out_buf, out_ptr, out_desc, K_G, S, TAPS, GROUPS, OUT_ROW, OUT_TAP,
                   SPLIT_STRIDE, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BOX_H: gl.constexpr,
                   BOX_W: gl.constexpr, ROW_DIL: gl.constexpr, GROUP_M: gl.constexpr, STAGE_OUT: gl.constexpr,
                   TMA_STORE: gl.constexpr, num_warps: gl.constexpr):
    """The consumer of units of a filter column (``ROWS = 3``): per step, ``dy`` against the three taps' rows
    of the stacked x boxes (stage ``s`` holds them as ``b_bufs`` ``2s`` and ``2s + 1``), one accumulator per
    filter row; it waits until only this step's MMAs are in flight before releasing the previous stage. The
    epilogue stores the three tiles."""
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_M, BLOCK_N, num_warps)
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))
    step = 0
    for unit in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        split, g, _, column, pid_m, pid_n = unit_coords(unit, TAPS, 1, GROUPS, TILES_M, TILES_N, GROUP_M)
        _, n_steps = split_steps(split, STEPS, SPLIT_STEPS)
        acc0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        acc1 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        acc2 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        prev = 0
        for kk in range(n_steps):
            stage = wait_stage(ready, step)
            a = a_bufs.index(stage).reshape([BLOCK_K, BLOCK_M])
            x_lo = b_bufs.index(2 * stage).reshape([BLOCK_K, BLOCK_N])
            x_hi = b_bufs.index(2 * stage + 1).reshape([BLOCK_K, BLOCK_N])
            acc0, acc1, acc2 = _rows_step(a, x_lo, x_hi, acc0, acc1, acc2, BOX_H, BOX_W, ROW_DIL)
            acc0, acc1, acc2 = warpgroup_mma_wait(3 * BOX_H, deps=(acc0, acc1, acc2))
            mbarrier.arrive(empty.index(prev), pred=kk > 0)
            prev = stage
            step += 1
        acc0, acc1, acc2 = warpgroup_mma_wait(0, deps=(acc0, acc1, acc2))
        mbarrier.arrive(empty.index(prev))

        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        # taps (r, s) lie r * S taps apart
        _store_unit_tile(acc0, out_buf, out_ptr, out_desc, split, g, column, m0, n0, rows, cols, K_G, OUT_ROW,
                         OUT_TAP, SPLIT_STRIDE, STAGE_OUT, TMA_STORE)
        _store_unit_tile(acc1, out_buf, out_ptr, out_desc, split, g, column + S, m0, n0, rows, cols, K_G, OUT_ROW,
                         OUT_TAP, SPLIT_STRIDE, STAGE_OUT, TMA_STORE)
        _store_unit_tile(acc2, out_buf, out_ptr, out_desc, split, g, column + 2 * S, m0, n0, rows, cols, K_G,
                         OUT_ROW, OUT_TAP, SPLIT_STRIDE, STAGE_OUT, TMA_STORE)
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def _gather_producer(dy_desc, x_ptr, a_bufs, b_bufs, ready, empty,
                     J, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, GROUPS, DY_GROUP, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H,
                     PAD_W, DIL_D, DIL_H, DIL_W, sx_n, sx_d, sx_h, sx_w, TILES_M, TILES_N, NUM_UNITS, STEPS,
                     SPLIT_STEPS,
                     X_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     GROUP_M: gl.constexpr, VEC: gl.constexpr, EVEN_C: gl.constexpr, PAD_D: gl.constexpr):
    """The gathering producer: per unit, its tap ``(t, r, s)``; per k-step the ``dy`` rows by TMA and the
    ``x`` pixels they read through the tap, decoded into ``(image, z, p, q)`` and gathered under each axis's
    bound."""
    layout: gl.constexpr = gather_layout(BLOCK_K, BLOCK_N, VEC, gl.num_warps())
    rows = gl.arange(0, BLOCK_K, gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, layout))
    c_vecs = C_G // VEC
    step = 0
    for unit in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        split, g, t, tap, pid_m, pid_n = unit_coords(unit, TAPS, T, GROUPS, TILES_M, TILES_N, GROUP_M)
        r = tap // S
        dh = r * DIL_H - PAD_H  # the tap's offset from an output pixel's top-left input pixel
        dw = (tap - r * S) * DIL_W - PAD_W
        c = pid_n * BLOCK_N + cols
        dy_col = g * DY_GROUP + pid_m * BLOCK_M  # a group's channels start on 16 bytes (plan.dy_group_channels)
        k0, n_steps = split_steps(split, STEPS, SPLIT_STEPS)
        for kk in range(n_steps):
            j0 = (k0 + kk) * BLOCK_K
            j = j0 + rows
            img, z, p, q = pixel_coords(j, Z, P, Q)
            base, d_ok = depth_offsets(img * sx_n + g * C_G, z, t, j < J, D, STRIDE_D, PAD_D, DIL_D, sx_d)
            off, ok = tap_offsets(base, p * STRIDE_H + dh, q * STRIDE_W + dw, d_ok, H, W, sx_h, sx_w, VEC)
            mask = tile_mask(ok, c, c_vecs, VEC, EVEN_C)
            stage = acquire_stage(empty, step)
            # the consumer's wgmma (async proxy) read this stage; our copies write it (generic proxy)
            fence_async_shared()
            bar = ready.index(stage)
            mbarrier.expect(bar, dy_desc.block_type.nbytes)
            # rows past J and channels past K read as zeros
            tma_load(dy_desc, [j0, dy_col], bar, a_bufs.index(stage))
            gather_into(b_bufs.index(stage), x_ptr + off[:, None] + c[None, :], mask, bar, X_MODE)
            step += 1


@gluon.jit
def _box_producer(dy_desc, x_desc, a_bufs, b_bufs, ready, empty,
                  Z, D, C_G, K_G, T, S, TAPS, GROUPS, DY_GROUP, STRIDE_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, TILES_M,
                  TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS, TILES_Q, TILES_IMG, PAD_D: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BOX_H: gl.constexpr, BOX_W: gl.constexpr,
                  GROUP_M: gl.constexpr, ROWS: gl.constexpr):
    """The box producer: per unit, its tap (depth tap ``t``, then a tap or a filter column of the plane); per
    k-step a box of output pixels of one output plane (``image * Z + z``): ``dy``'s box there and the ``x`` box
    the tap reads, in the depth tap's input plane (``pipeline.input_plane``: outside the volume, zeros)."""
    x_boxes: gl.constexpr = 1 if ROWS == 1 else 2  # a filter column's unit: two x boxes, one above the other
    nbytes: gl.constexpr = dy_desc.block_type.nbytes + x_boxes * x_desc.block_type.nbytes
    step = 0
    for unit in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        split, g, t, tap, pid_m, pid_n = unit_coords(unit, TAPS, T, GROUPS, TILES_M, TILES_N, GROUP_M)
        row = tap // S
        dh = row * ROWS * DIL_H - PAD_H  # the unit's first filter row (ROWS = 3: row 0)
        dw = (tap - row * S) * DIL_W - PAD_W
        dy_col = g * DY_GROUP + pid_m * BLOCK_M
        x_col = g * C_G + pid_n * BLOCK_N
        k0, n_steps = split_steps(split, STEPS, SPLIT_STEPS)
        for kk in range(n_steps):
            box = k0 + kk
            plane = box // TILES_IMG
            rest = box - plane * TILES_IMG
            tp = rest // TILES_Q
            p0 = tp * BOX_H
            q0 = (rest - tp * TILES_Q) * BOX_W
            x_plane = input_plane(plane, t, Z, D, STRIDE_D, DIL_D, PAD_D)
            stage = acquire_stage(empty, step)
            bar = ready.index(stage)
            mbarrier.expect(bar, nbytes)
            # out-of-bounds elements (pixels past the image, padding, channels past the tensor) read as zeros
            tma_load(dy_desc, [plane, p0, q0, dy_col], bar, a_bufs.index(stage))
            if ROWS == 1:
                tma_load(x_desc, [x_plane, p0 + dh, q0 + dw, x_col], bar, b_bufs.index(stage))
            else:
                tma_load(x_desc, [x_plane, p0 + dh, q0 + dw, x_col], bar, b_bufs.index(2 * stage))
                tma_load(x_desc, [x_plane, p0 + dh + BOX_H, q0 + dw, x_col], bar, b_bufs.index(2 * stage + 1))
            step += 1


#: The arguments that change with the batch or the image size: not specialised on (``fwd.SHAPE_ARGUMENTS``
#: says why), so a new batch or image size reuses the compiled kernel; the depths ``Z`` and ``D`` are specialised,
#: as the forward's.
SHAPE_ARGUMENTS = ("J", "P", "Q", "H", "W", "sx_n", "sx_d", "sx_h", "NUM_UNITS", "STEPS", "SPLIT_STEPS", "TILES_Q",
                   "TILES_IMG")


@gluon.jit(do_not_specialize=SHAPE_ARGUMENTS)
def conv_bwd_weight(dy_desc, x, out_ptr, out_desc,
                    J, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, GROUPS, DY_GROUP, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H,
                    PAD_W, DIL_D, DIL_H, DIL_W, sx_n, sx_d, sx_h, sx_w, OUT_ROW, OUT_TAP, SPLIT_STRIDE, TILES_M,
                    TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS, TILES_Q, TILES_IMG, PAD_D: gl.constexpr,
                    X_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                    STAGES: gl.constexpr, GROUP_M: gl.constexpr, BOX_H: gl.constexpr, BOX_W: gl.constexpr,
                    VEC: gl.constexpr, EVEN_C: gl.constexpr, STAGE_OUT: gl.constexpr, ROWS: gl.constexpr,
                    ROW_DIL: gl.constexpr, TMA_STORE: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``dy_desc``: TMA descriptor of ``dy`` as ``[J, K]`` with ``[BLOCK_K, BLOCK_M]`` boxes (gathering modes) or
    as ``[N, P, Q, K]`` with ``[1, BOX_H, BOX_W, BLOCK_M]`` boxes (``tma_box``); ``x``: the NHWC input, a pointer
    (gathering modes) or a rank-4 descriptor with ``[1, BOX_H, BOX_W, BLOCK_N]`` boxes; ``out_ptr``: the
    float32 workspace of ``SPLIT_STRIDE``-element slices, or ``dW`` itself (one split): rows of ``OUT_ROW``
    elements per output channel, ``OUT_TAP`` per tap (``C_PAD`` in the workspace, ``C_G`` in ``dW``).
    ``ROWS``: 1, or 3 for units of a whole filter column (``tma_box`` only: two ``x`` boxes per step, and
    ``ROW_DIL = DIL_H`` as a constant); ``TAPS`` counts the units per tile: taps, or columns. ``out_desc``: with
    ``TMA_STORE``, the descriptor of ``out_ptr``'s tensor as ``[splits, K, taps, OUT_TAP]`` with ``[1, BLOCK_M,
    1, BLOCK_N]`` boxes, the epilogue's TMA copies (else ``out_ptr`` again, unused). 3D: pixels
    ``(image, z, p, q)`` (``J = N Z P Q``), input planes ``sx_d`` apart, ``T`` depth taps of ``TAPS`` units per
    tile each, stored at taps ``t * TAPS + tap``; ``tma_box``: ``dy``'s descriptor over the ``N x Z`` output planes
    and ``x``'s over the ``N x D`` input planes, boxes of one plane; below 3D ``Z = D = T = 1`` and ``PAD_D = 0``."""
    dtype: gl.constexpr = dy_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + dy_desc.block_type.shape, dy_desc.layout)
    if X_MODE == TMA_BOX:
        x_buffers: gl.constexpr = STAGES if ROWS == 1 else 2 * STAGES  # a filter column's unit: 2 boxes a stage
        b_bufs = gl.allocate_shared_memory(dtype, [x_buffers] + x.block_type.shape, x.layout)
    else:
        b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_layout)
    ready, empty = init_ring(STAGES, ready_arrivals(X_MODE, PRODUCER_WARPS))
    if TMA_STORE:
        out_buf = gl.allocate_shared_memory(out_desc.dtype, out_desc.block_type.shape, out_desc.layout)
    else:
        out_buf = a_bufs  # (unused)

    # (the argument tuples are written inline: a tuple assigned to a variable turns constexprs into tensors)
    if ROWS == 3:
        gl.static_assert(X_MODE == TMA_BOX, "units of a filter column need the x boxes")
        gl.warp_specialize([
            (_rows_consumer, (a_bufs, b_bufs, ready, empty, out_buf, out_ptr, out_desc, K_G, S, TAPS, GROUPS,
                              OUT_ROW, OUT_TAP, SPLIT_STRIDE, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS,
                              BLOCK_M, BLOCK_N, BLOCK_K, BOX_H, BOX_W, ROW_DIL, GROUP_M, STAGE_OUT, TMA_STORE,
                              num_warps)),
            (_box_producer, (dy_desc, x, a_bufs, b_bufs, ready, empty, Z, D, C_G, K_G, T, S, TAPS, GROUPS,
                             DY_GROUP, STRIDE_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, TILES_M, TILES_N, NUM_UNITS, STEPS,
                             SPLIT_STEPS, TILES_Q, TILES_IMG, PAD_D, BLOCK_M, BLOCK_N, BOX_H, BOX_W, GROUP_M, ROWS)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    elif X_MODE == TMA_BOX:
        gl.static_assert(ROWS == 1, "ROWS is 1 or 3")
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, out_buf, out_ptr, out_desc, K_G, C_G, TAPS, T, GROUPS,
                         OUT_ROW, OUT_TAP, SPLIT_STRIDE, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS, X_MODE,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGE_OUT, TMA_STORE, num_warps)),
            (_box_producer, (dy_desc, x, a_bufs, b_bufs, ready, empty, Z, D, C_G, K_G, T, S, TAPS, GROUPS,
                             DY_GROUP, STRIDE_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, TILES_M, TILES_N, NUM_UNITS, STEPS,
                             SPLIT_STEPS, TILES_Q, TILES_IMG, PAD_D, BLOCK_M, BLOCK_N, BOX_H, BOX_W, GROUP_M, ROWS)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, out_buf, out_ptr, out_desc, K_G, C_G, TAPS, T, GROUPS,
                         OUT_ROW, OUT_TAP, SPLIT_STRIDE, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS, X_MODE,
                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGE_OUT, TMA_STORE, num_warps)),
            (_gather_producer, (dy_desc, x, a_bufs, b_bufs, ready, empty, J, Z, P, Q, D, H, W, C_G, K_G, T, S,
                                TAPS, GROUPS, DY_GROUP, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_D, DIL_H,
                                DIL_W, sx_n, sx_d, sx_h, sx_w, TILES_M, TILES_N, NUM_UNITS, STEPS, SPLIT_STEPS, X_MODE,
                                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, VEC, EVEN_C, PAD_D)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    retire_ring(ready, empty)


@gluon.jit(do_not_specialize=("SPLITS",))  # (the split count follows the batch and image size)
def sum_splits(ws_ptr, out_ptr, NUMEL, C_G, C_PAD, SPLITS, SPLIT_STRIDE, BLOCK: gl.constexpr,
               num_warps: gl.constexpr):
    """The second stage: ``dW`` element ``e`` (dense channels-last: ``(k, tap)`` row ``e / C_G``, channel
    ``e % C_G``) is the sum over the splits ``s`` of the workspace's ``s * SPLIT_STRIDE + row * C_PAD + c``,
    added in split order and rounded once to ``out``'s dtype. Consecutive threads take consecutive elements:
    coalesced reads of every slice and writes of ``dW``."""
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [num_warps], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout)
    mask = offs < NUMEL
    row = offs // C_G
    src = ws_ptr + row * C_PAD + (offs - row * C_G)
    acc = gl.load(src, mask=mask, other=0.0)
    for s in range(1, SPLITS):
        acc += gl.load(src + s * SPLIT_STRIDE, mask=mask, other=0.0)
    gl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
