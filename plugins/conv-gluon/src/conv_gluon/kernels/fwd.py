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
      output pixels of one image, so for a tap its input is the box ``[1, BOX_H, BOX_W, BLOCK_K]`` of the
      NHWC input at ``(n, p0 - pad + r*dil, q0 - pad + s*dil, c0)``: one TMA per step, the padding and the
      channel tail read as zeros by the hardware. One warp issues everything.
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

The data gradient runs this same kernel once per stride phase (``plan.make_bwd_data_plan``): ``x`` is then
``dy``, the weight matrix the phase's transposed taps, and ``y_ptr`` / ``sy_*`` the phase's pixels of ``dx``.

Registers are redistributed between the partitions (``setmaxnreg``): the producer gets
``PRODUCER_REGS`` per thread, the consumer the rest of the kernel's ``maxnreg`` budget (``plan.py``).
Nothing is atomic and every tile's reduction order is fixed: results are bitwise reproducible.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from .codes import A_MODES
from .common import store_tile, tile_coords
from .compat import tma_load
from .pipeline import (
    accumulator_layout,
    acquire_stage,
    drain_mma,
    gather_into,
    gather_layout,
    init_ring,
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
def _consumer(a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr,
              M, P, Q, K_G, sy_n, sy_h, sy_w, K_STEPS, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
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
        # Every tile starts its accumulator afresh, from the bias or from zeros, and every wgmma accumulates
        # (use_acc=True). A first wgmma with use_acc=False on the previous tile's registers instead made
        # ptxas serialize all of them (C7514: accumulator registers read between issue and wait). Loaded
        # here, the bias is dead before the MMAs, where an epilogue add would keep BLOCK_N / 4 per-column
        # values live next to the accumulator (and spill).
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        if HAS_BIAS:
            bias = gl.load(bias_ptr + g * K_G + n0 + cols, mask=cols < K_G - n0, other=0.0).to(gl.float32)
            acc = acc + bias[None, :]
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

        if A_MODE == TMA_BOX:
            img = pid_m // TILES_IMG
            rest = pid_m - img * TILES_IMG
            tp = rest // TILES_Q
            p = tp * BOX_H + rows // BOX_W
            q = (rest - tp * TILES_Q) * BOX_W + rows % BOX_W
            row_ok = (p < P) & (q < Q)
        else:
            m = pid_m * BLOCK_M + rows
            row_ok = m < M
            img, p, q = pixel_coords(m, P, Q)
        row_off = img * sy_n + p * sy_h + q * sy_w
        store_tile(acc, y_ptr + (g * K_G + n0), row_off, row_ok, cols, K_G - n0, ACTIVATION, STAGE_OUT)


@gluon.jit
def _gather_producer(x_ptr, w_desc, a_bufs, b_bufs, ready, empty,
                     M, P, Q, H, W, C_G, K_G, S, TAPS, NCB, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
                     sx_n, sx_h, sx_w, TILES_M, TILES_N, NUM_TILES,
                     A_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     GROUP_M: gl.constexpr, VEC: gl.constexpr, EVEN_C: gl.constexpr):
    layout: gl.constexpr = gather_layout(BLOCK_M, BLOCK_K, VEC, gl.num_warps())
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_K, gl.SliceLayout(0, layout))
    c_vecs = C_G // VEC
    step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        m = pid_m * BLOCK_M + rows
        m_ok = m < M
        img, p, q = pixel_coords(m, P, Q)
        h0 = p * STRIDE_H - PAD_H
        w0 = q * STRIDE_W - PAD_W
        base = img * sx_n + g * C_G
        w_row = g * K_G + pid_n * BLOCK_N
        for tap in range(TAPS):
            r = tap // S
            h = h0 + r * DIL_H
            w = w0 + (tap - r * S) * DIL_W
            off, ok = tap_offsets(base, h, w, m_ok, H, W, sx_h, sx_w, VEC)
            for cb in range(NCB):
                stage = acquire_stage(empty, step)
                # the consumer's wgmma (async proxy) read this stage; our copies write it (generic proxy)
                fence_async_shared()
                bar = ready.index(stage)
                mbarrier.expect(bar, w_desc.block_type.nbytes)
                tma_load(w_desc, [w_row, (tap * NCB + cb) * BLOCK_K], bar, b_bufs.index(stage))
                c = cb * BLOCK_K + cols
                mask = tile_mask(ok, c, c_vecs, VEC, EVEN_C)
                gather_into(a_bufs.index(stage), x_ptr + off[:, None] + c[None, :], mask, bar, A_MODE)
                step += 1


@gluon.jit
def _box_producer(x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                  C_G, K_G, S, TAPS, NCB, PAD_H, PAD_W, DIL_H, DIL_W, TILES_M, TILES_N, NUM_TILES, TILES_Q,
                  TILES_IMG, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BOX_H: gl.constexpr,
                  BOX_W: gl.constexpr, GROUP_M: gl.constexpr):
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    step = 0
    for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        g, pid_m, pid_n = tile_coords(tile, TILES_M, TILES_N, GROUP_M)
        img = pid_m // TILES_IMG
        rest = pid_m - img * TILES_IMG
        tp = rest // TILES_Q
        h0 = tp * BOX_H - PAD_H
        w0 = (rest - tp * TILES_Q) * BOX_W - PAD_W
        w_row = g * K_G + pid_n * BLOCK_N
        for tap in range(TAPS):
            r = tap // S
            h = h0 + r * DIL_H
            w = w0 + (tap - r * S) * DIL_W
            for cb in range(NCB):
                stage = acquire_stage(empty, step)
                bar = ready.index(stage)
                mbarrier.expect(bar, nbytes)
                tma_load(w_desc, [w_row, (tap * NCB + cb) * BLOCK_K], bar, b_bufs.index(stage))
                # out-of-bounds box elements (padding, negative coordinates, channels past C) read as zero
                tma_load(x_desc, [img, h, w, g * C_G + cb * BLOCK_K], bar, a_bufs.index(stage))
                step += 1


@gluon.jit
def conv_fwd(x, w_desc, bias_ptr, y_ptr,
             M, P, Q, H, W, C_G, K_G, S, TAPS, NCB, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
             sx_n, sx_h, sx_w, sy_n, sy_h, sy_w, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG,
             A_MODE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
             STAGES: gl.constexpr, GROUP_M: gl.constexpr, BOX_H: gl.constexpr, BOX_W: gl.constexpr,
             VEC: gl.constexpr, EVEN_C: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
             STAGE_OUT: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
             num_warps: gl.constexpr):
    """``x``: the NHWC input, a pointer (gathering modes) or a rank-4 TMA descriptor (``tma_box``);
    ``w_desc``: TMA descriptor of the ``[K_total, TAPS * NCB * BLOCK_K]`` weight with ``[BLOCK_N, BLOCK_K]``
    blocks; ``bias_ptr``: the bias (any pointer of the output's dtype when ``HAS_BIAS`` is false);
    ``y_ptr``: the output, ``(image, p, q)`` strides ``sy_*``, channels contiguous."""
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
            (_consumer, (a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr, M, P, Q, K_G, sy_n, sy_h, sy_w, TAPS * NCB,
                         TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG, A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, BOX_H,
                         BOX_W, GROUP_M, HAS_BIAS, ACTIVATION, STAGE_OUT, num_warps)),
            (_box_producer, (x, w_desc, a_bufs, b_bufs, ready, empty, C_G, K_G, S, TAPS, NCB, PAD_H, PAD_W, DIL_H,
                             DIL_W, TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG, BLOCK_N, BLOCK_K, BOX_H, BOX_W,
                             GROUP_M)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, bias_ptr, y_ptr, M, P, Q, K_G, sy_n, sy_h, sy_w, TAPS * NCB,
                         TILES_M, TILES_N, NUM_TILES, TILES_Q, TILES_IMG, A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, BOX_H,
                         BOX_W, GROUP_M, HAS_BIAS, ACTIVATION, STAGE_OUT, num_warps)),
            (_gather_producer, (x, w_desc, a_bufs, b_bufs, ready, empty, M, P, Q, H, W, C_G, K_G, S, TAPS, NCB,
                                STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, sx_n, sx_h, sx_w, TILES_M, TILES_N,
                                NUM_TILES, A_MODE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, VEC, EVEN_C)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    retire_ring(ready, empty)
