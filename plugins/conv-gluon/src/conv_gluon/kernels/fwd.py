"""Forward convolution, channels-last, 16-bit operands: a persistent, warp-specialized implicit GEMM.

Per convolution group ``g`` the output is the GEMM ``Y[m, n] = sum_k A[m, k] B[n, k]`` with

* ``m`` the output pixels ``(image, p, q)`` (``M = N * P * Q``), ``n`` the group's output channels,
* ``k`` the reduction, walked as ``TAPS`` filter taps ``(r, s)`` (outer) x ``NCB`` blocks of ``BLOCK_K``
  input channels (inner): one *k-step* per (tap, channel block);
* ``A`` the input pixel ``(p * stride - pad + r * dil, q * stride - pad + s * dil)`` of the step's tap,
  zero outside the image (the padding) and beyond the group's channels;
* ``B`` the weight as a ``[K_total, TAPS * NCB * BLOCK_K]`` matrix, row ``k`` = output channel, columns
  tap-major then channel (``plan.py`` gives it either as a free view of the channels-last weight, or as a
  zero-padded copy when the group's channels are not a multiple of ``BLOCK_K``).

Each program is persistent: it takes tiles ``pid, pid + grid, ...`` (``common.tile_coords``) and runs
two partitions over the same sequence of (tile, k-step), through the ring, barriers and copies of
``kernels/pipeline.py`` (shared with the weight gradient, ``kernels/bwd_weight.py``):

``producer`` (a worker partition)
    brings step ``i``'s tiles into stage ``i % STAGES`` of a ring in shared memory, once the consumer has
    released that stage (``empty`` barrier), and signals the ``ready`` barrier. ``B`` always comes by TMA.
    ``A`` comes in one of three ways (``A_MODE``):

    * ``"tma_box"`` (stride 1, channels a multiple of 8): the tile is a ``BOX_H x BOX_W`` rectangle of
      output pixels of one image (3D: of one output plane), so for a tap its input is the box
      ``[1, BOX_H, BOX_W, BLOCK_K]`` of the NHWC input at ``(n, p0 - pad + r*dil, q0 - pad + s*dil, c0)``: one
      TMA per step, the padding and the channel tail read as zeros by the hardware. One warp issues everything.
    * ``"cp_async"``: ``PRODUCER_WARPS`` warps gather the ``[BLOCK_M, BLOCK_K]`` tile with ``cp.async``
      (16, 8 or 4 bytes per copy: ``VEC`` channels), masked copies filling zeros; every producer thread's
      ``cp.async.mbarrier.arrive.noinc`` counts towards ``ready`` when its copies land, so the producer
      never waits for its own loads and keeps up to ``STAGES`` steps in flight.
    * ``"registers"`` (odd channel counts, where no copy is 4 bytes wide): the same gather through
      registers, stored to shared memory, fenced, one arrival.

``consumer`` (the default partition, ``num_warps`` = 4 or 8: one or two warpgroups sharing each tile along
``m``)
    waits for ``ready``, issues the step's ``wgmma`` asynchronously, waits until at most one is in flight and
    then releases the *previous* step's stage; after a tile's last step it drains the MMAs, releases the stage
    and runs the fused epilogue (activation on the accumulator that started from the bias, one rounding,
    masked store: straight from the accumulator registers, or staged through shared memory where 16-bit
    stores cannot be paired, ``STAGE_OUT``), while the producer already fills the ring with the next tile.

``fwd_rows_box`` (``ROWS = 3``, ``tma_box`` and a filter of 3 rows) walks a tile's reduction by filter column
instead of by tap: a k-step is a (column ``s``, channel block), and its three taps ``(r, s)`` read the same
input box ``r * DIL_H`` rows further down. So the producer loads one *tall box* per step (the tile's
``BOX_H`` rows and the ``HALO_H`` rows below them: two TMA copies into one stage of an input ring of
``A_STAGES``) and the column's three weight tiles (into a weight ring of ``STAGES``), and the consumer issues
three ``wgmma``s on views of the tall box ``r * ROW_DIL`` box rows down. Per three MMAs that is one input box
and a bit, where per-tap steps load three: the large forward layers are bound by what the SMs read from L2.
Its epilogue stores 16-bit dense outputs by TMA (``TMA_STORE``: ``common.store_tile_tma``).

The data gradient runs this same kernel once per stride phase (``plan.make_bwd_data_plan``): ``x`` is then
``dy``, the weight matrix the phase's transposed taps, and ``Y_START`` / ``sy_*`` the phase's pixels of ``dx``.

3D (NDHWC, the gathering modes): output pixel rows are ``(image, z, p, q)`` (``M = N Z P Q``) and the reduction
walks depth taps ``t`` outside the plane's taps ``(r, s)``. The producer decodes a tile's rows once
(``pipeline.pixel_coords``) and per depth tap moves their base to the input plane ``z * STRIDE_D - PAD_D +
t * DIL_D``, masking the rows whose plane lies outside the volume (``pipeline.depth_offsets``). ``tma_box``
(``fwd_box``: stride 1 in the plane, any stride in depth) takes 3D too: its tiles are boxes of one output plane,
box tiles per ``(image, z)``, and the descriptor is rank 4 over the batch's ``N x D`` input planes; per depth tap
the producer reads its boxes in plane ``image * D + d`` (``pipeline.input_plane``), and where ``d`` lies outside the
volume at plane -1, outside the tensor, which TMA reads as zeros: the whole box is padding. Below 3D
``Z = D = T = STRIDE_D = DIL_D = 1`` (constants to the JIT) and ``PAD_D = 0`` (a constexpr): the depth axis folds
away and the 2D kernels compile to the instructions they did before it existed.

Registers are redistributed between the partitions (``setmaxnreg``): the producer gets
``PRODUCER_REGS`` per thread, the consumer the rest of the kernel's ``maxnreg`` budget (``plan.py``).
Nothing is atomic and every tile's reduction order is fixed: results are bitwise reproducible.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .codes import A_MODES
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


@gluon.jit
def _start_accumulator(bias_ptr, g, K_G, n0, cols, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                       HAS_BIAS: gl.constexpr, acc_layout: gl.constexpr):
    """A tile's accumulator: the bias of its output channels, or zeros.

    Every tile starts its accumulator afresh and every wgmma accumulates (use_acc=True). A first wgmma with
    use_acc=False on the previous tile's registers instead made ptxas serialize all of them (C7514:
    accumulator registers read between issue and wait). Loaded here, the bias is dead before the MMAs, where
    an epilogue add would keep BLOCK_N / 4 per-column values live next to the accumulator (and spill)."""
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    if HAS_BIAS:
        bias = gl.load(bias_ptr + g * K_G + n0 + cols, mask=cols < K_G - n0, other=0.0).to(gl.float32)
        acc = acc + bias[None, :]
    return acc


@gluon.jit
def _box_pixels(pid_m, rows, P, Q, TILES_Q, TILES_IMG, BOX_H: gl.constexpr, BOX_W: gl.constexpr):
    """``(image, p, q, inside)`` of the tile rows of box tile ``pid_m`` (``BOX_H x BOX_W`` output pixels of
    one image, row-major), ``inside`` false for the slots past the image's edge."""
    img = pid_m // TILES_IMG
    rest = pid_m - img * TILES_IMG
    tp = rest // TILES_Q
    p = tp * BOX_H + rows // BOX_W
    q = (rest - tp * TILES_Q) * BOX_W + rows % BOX_W
    return img, p, q, (p < P) & (q < Q)


@gluon.jit
def _box_origin(pid_m, TILES_Q, TILES_IMG, BOX_H: gl.constexpr, BOX_W: gl.constexpr):
    """``(image, p0, q0)``: the top-left output pixel of box tile ``pid_m``."""
    img = pid_m // TILES_IMG
    rest = pid_m - img * TILES_IMG
    tp = rest // TILES_Q
    return img, tp * BOX_H, (rest - tp * TILES_Q) * BOX_W


@gluon.jit
def _output_offsets(img, z, p, q, sy_n, sy_d, sy_h, sy_w, Y_START, Y_CHANNELS):
    """Offsets (elements) of output pixels ``(img, z, p, q)``: their pixel index times ``Y_CHANNELS``. The pixel
    strides change with the image size and are not specialised on; ``Y_CHANNELS`` is, so Triton sees rows start
    on multiples of 16 elements wherever the channel count is one (paired 16-bit stores)."""
    return (Y_START + img * sy_n + z * sy_d + p * sy_h + q * sy_w) * Y_CHANNELS


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr,
              M, Z, P, Q, K_G, sy_n, sy_d, sy_h, sy_w, Y_START, Y_CHANNELS, K_STEPS, TILES_M, TILES_N, NUM_TILES,
              TILES_Q, TILES_IMG,
              A_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              BOX_H: gl.constexpr, BOX_W: gl.constexpr, GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr,
              ACTIVATION: gl.constexpr, STAGE_OUT: gl.constexpr, num_warps: gl.constexpr):
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_M, BLOCK_N, num_warps)
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))
    step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        n0 = pid_n * BLOCK_N
        acc = _start_accumulator(bias_ptr, g, K_G, n0, cols, BLOCK_M, BLOCK_N, HAS_BIAS, acc_layout)
        prev = 0
        for kk in range(K_STEPS):
            stage = wait_stage(ready, step)
            if A_MODE == TMA_BOX:
                a = a_bufs.index(stage).reshape([BLOCK_M, BLOCK_K])
            else:
                # the tile was written by other threads' generic-proxy copies: order them before the
                # wgmma's async-proxy reads
                fence_async_shared()
                a = a_bufs.index(stage)
            b = b_bufs.index(stage).permute((1, 0))
            acc = mma_step(a, b, acc, empty, prev, kk)
            prev = stage
            step += 1
        acc = drain_mma(acc, empty, prev)

        if A_MODE == TMA_BOX:  # a box of one output plane, image * Z + z
            plane, p, q, row_ok = _box_pixels(pid_m, rows, P, Q, TILES_Q, TILES_IMG, BOX_H, BOX_W)
            img = plane // Z
            z = plane - img * Z
        else:
            m = pid_m * BLOCK_M + rows
            row_ok = m < M
            img, z, p, q = pixel_coords(m, Z, P, Q)
        row_off = _output_offsets(img, z, p, q, sy_n, sy_d, sy_h, sy_w, Y_START, Y_CHANNELS)
        store_tile(acc, y_ptr + (g * K_G + n0), row_off, row_ok, cols, K_G - n0, ACTIVATION, STAGE_OUT)


@gluon.jit
def _rows_view(a_bufs, stage, row, BOX_H: gl.constexpr, HALO_H: gl.constexpr, BLOCK_M: gl.constexpr,
               BLOCK_K: gl.constexpr):
    """Rows ``row`` to ``row + BOX_H - 1`` of ring stage ``stage``'s tall box as the ``[BLOCK_M, BLOCK_K]``
    ``wgmma`` operand. A box row is a whole number of swizzle atoms (``BOX_W`` is a multiple of 8), so a view
    may start on any row; Gluon's subslices may not, hence the index and reinterpretation."""
    return a_bufs.index(stage * (BOX_H + HALO_H) + row)._reinterpret(a_bufs.dtype, [BLOCK_M, BLOCK_K],
                                                                     a_bufs.layout)


@gluon.jit
def _rows_consumer(a_bufs, b_bufs, a_ready, a_empty, b_ready, b_empty, out_buf, bias_ptr, y_ptr, y_desc,
                   P, Q, K_G, S, NCB, sy_n, sy_h, sy_w, Y_START, Y_CHANNELS, TILES_M, TILES_N, NUM_TILES, TILES_Q,
                   TILES_IMG, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BOX_H: gl.constexpr,
                   BOX_W: gl.constexpr, HALO_H: gl.constexpr, ROWS: gl.constexpr, ROW_DIL: gl.constexpr,
                   GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
                   STAGE_OUT: gl.constexpr, TMA_STORE: gl.constexpr, num_warps: gl.constexpr):
    """The consumer of ``fwd_rows_box``: per step (filter column, channel block) one tall input box, read by
    the ``ROWS`` taps of the column as views ``ROW_DIL`` rows apart, each against its own weight tile. One
    ``wgmma`` in flight, as in :func:`_consumer`; a weight stage is released as soon as its MMA is done, the
    input box once the column's last tap is. With ``TMA_STORE`` the epilogue goes through ``out_buf`` and a
    TMA copy (:func:`common.store_tile_tma`)."""
    acc_layout: gl.constexpr = accumulator_layout(BLOCK_M, BLOCK_N, num_warps)
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))
    a_step = 0
    b_step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        n0 = pid_n * BLOCK_N
        acc = _start_accumulator(bias_ptr, g, K_G, n0, cols, BLOCK_M, BLOCK_N, HAS_BIAS, acc_layout)
        prev_a = 0
        prev_b = 0
        for kk in range(S * NCB):
            a_stage = wait_stage(a_ready, a_step)
            for r in gl.static_range(ROWS):
                b_stage = wait_stage(b_ready, b_step)
                a = _rows_view(a_bufs, a_stage, r * ROW_DIL, BOX_H, HALO_H, BLOCK_M, BLOCK_K)
                acc = mma_step(a, b_bufs.index(b_stage).permute((1, 0)), acc, b_empty, prev_b, kk * ROWS + r)
                if r == 0:  # the previous step's last MMA is done: its box is free too
                    mbarrier.arrive(a_empty.index(prev_a), pred=kk > 0)
                prev_b = b_stage
                b_step += 1
            prev_a = a_stage
            a_step += 1
        acc = drain_mma(acc, b_empty, prev_b)
        mbarrier.arrive(a_empty.index(prev_a))

        if TMA_STORE:
            img, p0, q0 = _box_origin(pid_m, TILES_Q, TILES_IMG, BOX_H, BOX_W)
            store_tile_tma(acc, y_desc, out_buf, [img, p0, q0, g * K_G + n0], ACTIVATION)
        else:
            img, p, q, row_ok = _box_pixels(pid_m, rows, P, Q, TILES_Q, TILES_IMG, BOX_H, BOX_W)
            row_off = _output_offsets(img, 0, p, q, sy_n, 0, sy_h, sy_w, Y_START, Y_CHANNELS)
            store_tile(acc, y_ptr + (g * K_G + n0), row_off, row_ok, cols, K_G - n0, ACTIVATION, STAGE_OUT)
    if TMA_STORE:
        tma.store_wait(0)


@gluon.jit
def _gather_producer(x_ptr, w_desc, a_bufs, b_bufs, ready, empty,
                     M, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, NCB, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H, PAD_W,
                     DIL_D, DIL_H, DIL_W, sx_n, sx_d, sx_h, sx_w, TILES_M, TILES_N, NUM_TILES,
                     A_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     GROUP_M: gl.constexpr, VEC: gl.constexpr, EVEN_C: gl.constexpr, PAD_D: gl.constexpr):
    """The gathering producer: per tile, its pixels decoded once into ``(image, z, p, q)``; per k-step (depth
    tap ``t``, then tap ``(r, s)`` of the plane, then channel block) the masked gather of the shifted pixels
    and the TMA load of the step's weight tile (column ``(t * TAPS + tap) * NCB + cb`` blocks in)."""
    layout: gl.constexpr = gather_layout(BLOCK_M, BLOCK_K, VEC, gl.num_warps())
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_K, gl.SliceLayout(0, layout))
    c_vecs = C_G // VEC
    step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        m = pid_m * BLOCK_M + rows
        m_ok = m < M
        img, z, p, q = pixel_coords(m, Z, P, Q)
        h0 = p * STRIDE_H - PAD_H
        w0 = q * STRIDE_W - PAD_W
        base = img * sx_n + g * C_G
        w_row = g * K_G + pid_n * BLOCK_N
        for t in range(T):
            plane, d_ok = depth_offsets(base, z, t, m_ok, D, STRIDE_D, PAD_D, DIL_D, sx_d)
            for tap in range(TAPS):
                r = tap // S
                h = h0 + r * DIL_H
                w = w0 + (tap - r * S) * DIL_W
                off, ok = tap_offsets(plane, h, w, d_ok, H, W, sx_h, sx_w, VEC)
                for cb in range(NCB):
                    stage = acquire_stage(empty, step)
                    # the consumer's wgmma (async proxy) read this stage; our copies write it (generic proxy)
                    fence_async_shared()
                    bar = ready.index(stage)
                    mbarrier.expect(bar, w_desc.block_type.nbytes)
                    tma_load(w_desc, [w_row, ((t * TAPS + tap) * NCB + cb) * BLOCK_K], bar, b_bufs.index(stage))
                    c = cb * BLOCK_K + cols
                    mask = tile_mask(ok, c, c_vecs, VEC, EVEN_C)
                    gather_into(a_bufs.index(stage), x_ptr + off[:, None] + c[None, :], mask, bar, A_MODE)
                    step += 1


@gluon.jit
def _box_producer(x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                  Z, D, C_G, K_G, T, S, TAPS, NCB, STRIDE_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, TILES_M, TILES_N,
                  NUM_TILES, TILES_Q, TILES_IMG, PAD_D: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                  BOX_H: gl.constexpr, BOX_W: gl.constexpr, GROUP_M: gl.constexpr):
    """The box producer: per k-step (depth tap ``t``, then tap ``(r, s)`` of the plane, then channel block) the
    TMA box of the tile's output pixels shifted by the tap, in the tap's input plane, and the step's weight tile
    (column ``(t * TAPS + tap) * NCB + cb`` blocks in)."""
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        plane, p0, q0 = _box_origin(pid_m, TILES_Q, TILES_IMG, BOX_H, BOX_W)
        w_row = g * K_G + pid_n * BLOCK_N
        for t in range(T):
            x_plane = input_plane(plane, t, Z, D, STRIDE_D, DIL_D, PAD_D)
            for tap in range(TAPS):
                r = tap // S
                h = p0 - PAD_H + r * DIL_H
                w = q0 - PAD_W + (tap - r * S) * DIL_W
                for cb in range(NCB):
                    stage = acquire_stage(empty, step)
                    bar = ready.index(stage)
                    mbarrier.expect(bar, nbytes)
                    tma_load(w_desc, [w_row, ((t * TAPS + tap) * NCB + cb) * BLOCK_K], bar, b_bufs.index(stage))
                    # out-of-bounds box elements (padding, negative coordinates, channels past C) read as zero
                    tma_load(x_desc, [x_plane, h, w, g * C_G + cb * BLOCK_K], bar, a_bufs.index(stage))
                    step += 1


@gluon.jit
def _rows_producer(x_desc, x_hi_desc, w_desc, a_bufs, b_bufs, a_ready, a_empty, b_ready, b_empty,
                   C_G, K_G, S, NCB, PAD_H, PAD_W, DIL_W, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
                   BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BOX_H: gl.constexpr, BOX_W: gl.constexpr,
                   HALO_H: gl.constexpr, ROWS: gl.constexpr, GROUP_M: gl.constexpr):
    """The producer of ``fwd_rows_box``: per step, the tall input box of a filter column (the tile's box and
    the ``HALO_H`` rows below it, two TMA copies into one stage of the input ring), then the column's
    ``ROWS`` weight tiles into the weight ring."""
    a_bytes: gl.constexpr = x_desc.block_type.nbytes + x_hi_desc.block_type.nbytes
    a_step = 0
    b_step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        img, p0, q0 = _box_origin(pid_m, TILES_Q, TILES_IMG, BOX_H, BOX_W)
        w_row = g * K_G + pid_n * BLOCK_N
        h = p0 - PAD_H
        for s in range(S):
            w = q0 - PAD_W + s * DIL_W
            for cb in range(NCB):
                c = g * C_G + cb * BLOCK_K
                a_stage = acquire_stage(a_empty, a_step)
                bar = a_ready.index(a_stage)
                mbarrier.expect(bar, a_bytes)
                first = a_stage * (BOX_H + HALO_H)
                tma_load(x_desc, [img, h, w, c], bar,
                         a_bufs.index(first)._reinterpret(a_bufs.dtype, x_desc.block_type.shape, x_desc.layout))
                tma_load(x_hi_desc, [img, h + BOX_H, w, c], bar,
                         a_bufs.index(first + BOX_H)._reinterpret(a_bufs.dtype, x_hi_desc.block_type.shape,
                                                                  x_hi_desc.layout))
                a_step += 1
                for r in gl.static_range(ROWS):
                    b_stage = acquire_stage(b_empty, b_step)
                    bar = b_ready.index(b_stage)
                    mbarrier.expect(bar, w_desc.block_type.nbytes)
                    tma_load(w_desc, [w_row, ((r * S + s) * NCB + cb) * BLOCK_K], bar, b_bufs.index(b_stage))
                    b_step += 1


#: The arguments that change with the batch or the image size. Triton's JIT would specialise on their values
#: (a 1 compiled in, a multiple of 16 marked divisible), so each new batch or image size could compile the
#: kernel again; nothing the code needs depends on them (the gathers' alignment comes from ``VEC``, the
#: output's from ``Y_CHANNELS``), so they stay plain integers. The depths ``Z`` and ``D`` are specialised: below
#: 3D they are 1, constants that fold the depth axis away (``pipeline.pixel_coords``, ``pipeline.depth_offsets``);
#: a 3D problem compiles again only where its depth crosses 1 or a multiple of 16.
SHAPE_ARGUMENTS = ("M", "P", "Q", "H", "W", "sx_n", "sx_d", "sx_h", "sy_n", "sy_d", "sy_h", "Y_START", "TILES_M",
                   "NUM_TILES", "TILES_Q", "TILES_IMG")


@gluon.jit(do_not_specialize=SHAPE_ARGUMENTS)
def conv_fwd(x, x_hi, w_desc, bias_ptr, y_ptr, y_desc,
             M, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, NCB, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_D, DIL_H,
             DIL_W, sx_n, sx_d, sx_h, sx_w, sy_n, sy_d, sy_h, sy_w, Y_START, Y_CHANNELS, TILES_M, TILES_N, NUM_TILES,
             TILES_Q, TILES_IMG, PAD_D: gl.constexpr, A_MODE: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
             BOX_H: gl.constexpr, BOX_W: gl.constexpr,
             VEC: gl.constexpr, EVEN_C: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
             STAGE_OUT: gl.constexpr, ROWS: gl.constexpr, ROW_DIL: gl.constexpr, HALO_H: gl.constexpr,
             A_STAGES: gl.constexpr, TMA_STORE: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
             PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``x``: the NHWC input, a pointer (gathering modes) or a rank-4 TMA descriptor (``tma_box``);
    ``x_hi``: with ``ROWS = 3`` (``fwd_rows_box``), the descriptor of the ``HALO_H``-row boxes below the
    tile's (else ``x`` again, unused); ``w_desc``: TMA descriptor of the ``[K_total, TAPS * NCB * BLOCK_K]``
    weight with ``[BLOCK_N, BLOCK_K]`` blocks; ``bias_ptr``: the bias (any pointer of the output's dtype when
    ``HAS_BIAS`` is false); ``y_ptr``: the output, channels contiguous, ``Y_CHANNELS`` elements a pixel; output
    pixel ``(image, p, q)`` is its pixel ``Y_START + image * sy_n + p * sy_h + q * sy_w`` (strides in pixels);
    ``y_desc``: with ``TMA_STORE``, its descriptor with the tile's box (else ``y_ptr`` again, unused).
    3D (gathering modes): output pixels ``(image, z, p, q)``, ``Z`` planes of ``P x Q`` (``M = N Z P Q``), output
    pixel offset ``z * sy_d`` more; the input ``D`` planes ``sx_d`` apart; ``T`` depth taps of ``TAPS`` each
    (the weight's columns ``(t, r, s)``-major); below 3D ``Z = D = T = 1`` and ``PAD_D = 0``.
    ``ROWS = 3``: ``STAGES`` weight tiles and ``A_STAGES`` tall input boxes in two rings."""
    dtype: gl.constexpr = w_desc.dtype
    if ROWS == 3:
        gl.static_assert(A_MODE == TMA_BOX, "the taps of a filter column share TMA boxes")
        # a stage of BOX_H + HALO_H box rows, each a whole number of swizzle atoms: every row may start a view
        rows_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
        a_bufs = gl.allocate_shared_memory(dtype, [A_STAGES * (BOX_H + HALO_H), BOX_W, BLOCK_K], rows_layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
        if TMA_STORE:
            out_buf = gl.allocate_shared_memory(y_desc.dtype, y_desc.block_type.shape, y_desc.layout)
        else:
            out_buf = b_bufs  # (unused)
        a_ready, a_empty = init_ring(A_STAGES, 1)
        b_ready, b_empty = init_ring(STAGES, 1)
        gl.warp_specialize([
            (_rows_consumer, (a_bufs, b_bufs, a_ready, a_empty, b_ready, b_empty, out_buf, bias_ptr, y_ptr, y_desc,
                              P, Q, K_G, S, NCB, sy_n, sy_h, sy_w, Y_START, Y_CHANNELS, TILES_M, TILES_N,
                              NUM_TILES, TILES_Q, TILES_IMG, BLOCK_M, BLOCK_N, BLOCK_K, BOX_H, BOX_W, HALO_H, ROWS,
                              ROW_DIL, GROUP_M, HAS_BIAS, ACTIVATION, STAGE_OUT, TMA_STORE, num_warps)),
            (_rows_producer, (x, x_hi, w_desc, a_bufs, b_bufs, a_ready, a_empty, b_ready, b_empty, C_G, K_G, S,
                              NCB, PAD_H, PAD_W, DIL_W, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG, BLOCK_N,
                              BLOCK_K, BOX_H, BOX_W, HALO_H, ROWS, GROUP_M)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
        retire_ring(a_ready, a_empty)
        retire_ring(b_ready, b_empty)
    else:
        gl.static_assert(ROWS == 1, "ROWS is 1 or 3")
        _conv_fwd_taps(x, w_desc, bias_ptr, y_ptr, M, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, NCB, STRIDE_D,
                       STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, sx_n, sx_d, sx_h, sx_w, sy_n, sy_d, sy_h,
                       sy_w, Y_START, Y_CHANNELS, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG, PAD_D, A_MODE,
                       BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, BOX_H, BOX_W, VEC, EVEN_C, HAS_BIAS, ACTIVATION,
                       STAGE_OUT, PRODUCER_WARPS, PRODUCER_REGS, num_warps)


@gluon.jit
def _conv_fwd_taps(x, w_desc, bias_ptr, y_ptr,
                   M, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS, NCB, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_D,
                   DIL_H, DIL_W, sx_n, sx_d, sx_h, sx_w, sy_n, sy_d, sy_h, sy_w, Y_START, Y_CHANNELS, TILES_M, TILES_N,
                   NUM_TILES, TILES_Q, TILES_IMG, PAD_D: gl.constexpr, A_MODE: gl.constexpr, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                   BOX_H: gl.constexpr, BOX_W: gl.constexpr,
                   VEC: gl.constexpr, EVEN_C: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
                   STAGE_OUT: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                   num_warps: gl.constexpr):
    """:func:`conv_fwd` a k-step per (tap, channel block): one ring of input and weight tiles."""
    dtype: gl.constexpr = w_desc.dtype
    if A_MODE == TMA_BOX:
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + x.block_type.shape, x.layout)
    else:
        a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    ready, empty = init_ring(STAGES, ready_arrivals(A_MODE, PRODUCER_WARPS))

    # (the argument tuples are written inline: a tuple assigned to a variable turns constexprs into tensors)
    if A_MODE == TMA_BOX:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr, M, Z, P, Q, K_G, sy_n, sy_d, sy_h, sy_w,
                         Y_START, Y_CHANNELS, T * TAPS * NCB, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
                         A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, BOX_H, BOX_W, GROUP_M, HAS_BIAS, ACTIVATION, STAGE_OUT,
                         num_warps)),
            (_box_producer, (x, w_desc, a_bufs, b_bufs, ready, empty, Z, D, C_G, K_G, T, S, TAPS, NCB, STRIDE_D,
                             PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
                             PAD_D, BLOCK_N, BLOCK_K, BOX_H, BOX_W, GROUP_M)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr, M, Z, P, Q, K_G, sy_n, sy_d, sy_h, sy_w,
                         Y_START, Y_CHANNELS, T * TAPS * NCB, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
                         A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, BOX_H, BOX_W, GROUP_M, HAS_BIAS, ACTIVATION, STAGE_OUT,
                         num_warps)),
            (_gather_producer, (x, w_desc, a_bufs, b_bufs, ready, empty, M, Z, P, Q, D, H, W, C_G, K_G, T, S, TAPS,
                                NCB, STRIDE_D, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W, sx_n, sx_d,
                                sx_h, sx_w, TILES_M, TILES_N, NUM_TILES, A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                                VEC, EVEN_C, PAD_D)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    retire_ring(ready, empty)
