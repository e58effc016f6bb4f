"""The producer/consumer pipeline every kernel of the backend runs: a ring of shared-memory stages guarded by
mbarriers, the gathering copies that fill a stage, and the ``wgmma`` steps that drain it.

Protocol (``kernels/fwd.py`` and ``kernels/bwd_weight.py`` both follow it): two mbarriers per stage. ``ready[s]``
completes when the stage's data has landed (TMA ``expect`` bytes plus, for gathered tiles, the producer
threads' arrivals: :func:`ready_arrivals`); ``empty[s]`` completes when the consumer is done reading it. Both
partitions count k-steps over their whole sequence of tiles; step ``i`` uses stage ``i % STAGES`` with phase
``(i / STAGES) & 1``, the producer waiting on the opposite parity first so that a fresh ring is free. The
consumer keeps one ``wgmma`` in flight and releases the *previous* step's stage once it has finished.

Every function here is inlined into its caller by the compiler: sharing them costs the kernels nothing (the
forward's PTX is the same instruction for instruction as when they were written inline).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .codes import A_MODES
from .compat import cp_async_load

CP_ASYNC = gl.constexpr(A_MODES["cp_async"])


# ---- layouts -------------------------------------------------------------------------------------------------


@gluon.constexpr_function
def gather_layout(rows, cols, vec, warps):
    """Blocked layout of a gathered ``[rows, cols]`` tile: pixels x channels, channels contiguous (the twin of
    ``tiling.gather_thread_shape``).

    Vectors (``vec`` > 1): each thread takes ``spt`` contiguous channels of a row (``spt / vec`` copies),
    a warp's lanes run along the channels first (coalesced), the warps along the pixels; ``spt`` grows
    until a thread has at most 4 rows, each of which costs it registers for its pixel's coordinates.
    Single elements (``vec`` == 1, an odd channel count): a whole row per thread and the lanes along the
    pixels, ``C * 2`` bytes apart (coalesced enough for the forward's few channels per k-step), where there
    is a row for every thread; a tile of fewer rows (the weight gradient's pixels) is laid out as vectors
    are, so that no thread holds a row twice.
    """
    if vec == 1 and rows >= 32 * warps:
        return gl.BlockedLayout([1, cols], [32, 1], [warps, 1], [1, 0])
    spt = min(cols, max(vec, rows * cols // (32 * warps * 4), cols // 32))
    lanes_k = cols // spt
    return gl.BlockedLayout([1, spt], [32 // lanes_k, lanes_k], [warps, 1], [1, 0])


@gluon.constexpr_function
def accumulator_layout(block_m, block_n, warps):
    """The wgmma accumulator's layout (the twin of ``tiling.warpgroup_split``): two warpgroups share a
    tile along M (each ``m64nBLOCK_N`` per instruction) up to 128 columns; a wider tile is split along N
    instead, each warpgroup multiplying all rows by 128 columns, which keeps half the per-column epilogue
    values per thread (no spills at BLOCK_N = 256) and reads the ring as 2 A + B rather than A + 2 B."""
    warps_n = max(1, min(warps // 4, block_n // 128))
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps // warps_n, warps_n],
                                     instr_shape=[16, block_n // warps_n, 16])


@gluon.constexpr_function
def ready_arrivals(mode, producer_warps):
    """Arrivals that complete one phase of a ``ready`` barrier: the TMA ``expect`` (which counts once), plus
    every producer thread's asynchronous arrival (``cp_async``) or the producer's one (``registers``)."""
    if mode == A_MODES["tma_box"]:
        return 1
    if mode == A_MODES["cp_async"]:
        return 1 + 32 * producer_warps
    return 2


# ---- the ring ------------------------------------------------------------------------------------------------


@gluon.jit
def init_ring(STAGES: gl.constexpr, ARRIVALS: gl.constexpr):
    """``(ready, empty)``: the ring's two barriers per stage, initialised (``ARRIVALS``: one ``ready`` phase)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=ARRIVALS)
        mbarrier.init(empty.index(i), count=1)
    return ready, empty


@gluon.jit
def retire_ring(ready, empty):
    """Invalidate the ring's barriers once both partitions are done (the shared memory may be reused)."""
    STAGES: gl.constexpr = ready.shape[0]
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


@gluon.jit
def acquire_stage(empty, step):
    """Producer side: wait until the consumer has released the stage of k-step ``step``; return the stage.
    Waiting on the opposite parity first makes every stage of a fresh ring free."""
    STAGES: gl.constexpr = empty.shape[0]
    stage = step % STAGES
    mbarrier.wait(empty.index(stage), ((step // STAGES) & 1) ^ 1)
    return stage


@gluon.jit
def wait_stage(ready, step):
    """Consumer side: wait until the data of k-step ``step`` has landed; return its stage."""
    STAGES: gl.constexpr = ready.shape[0]
    stage = step % STAGES
    mbarrier.wait(ready.index(stage), (step // STAGES) & 1)
    return stage


@gluon.jit
def mma_step(a, b, acc, empty, prev, kk):
    """Issue ``acc += a @ b`` asynchronously, wait until at most this one is in flight, then release the
    previous step's stage ``prev`` (``kk``: the step's index within its tile; the first has no previous
    step): the tensor cores always have the next MMA queued while the producer refills the released stage."""
    acc = warpgroup_mma(a, b, acc, use_acc=True, is_async=True)
    acc, a, b = warpgroup_mma_wait(1, deps=(acc, a, b))
    mbarrier.arrive(empty.index(prev), pred=kk > 0)
    return acc


@gluon.jit
def drain_mma(acc, empty, prev):
    """After a tile's last step: wait for its last ``wgmma`` and release that step's stage."""
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index(prev))
    return acc


# ---- gathering a tile ----------------------------------------------------------------------------------------


@gluon.jit
def pixel_coords(m, Z, P, Q):
    """``(image, z, p, q)`` of flattened output pixels ``m`` (``m = ((image * Z + z) * P + p) * Q + q``). Below 3D
    ``Z`` is 1, a constant to the JIT: ``z`` folds to 0 and the decode is the 2D one."""
    q = m % Q
    plane_p = m // Q
    p = plane_p % P
    plane = plane_p // P
    z = plane % Z
    img = plane // Z
    return img, z, p, q


@gluon.jit
def depth_offsets(base, z, t, ok, D, STRIDE_D, PAD_D: gl.constexpr, DIL_D, sx_d):
    """Each row's offset of its input plane ``d = z * STRIDE_D - PAD_D + t * DIL_D`` (depth tap ``t``) from
    ``base``, and ``ok`` narrowed to the rows whose plane is inside the volume. Below 3D ``z`` and ``t`` are 0,
    ``D`` is 1 and ``PAD_D`` 0, all constants: the offset and the bound fold away."""
    d = z * STRIDE_D - PAD_D + t * DIL_D
    return base + d * sx_d, ok & (d >= 0) & (d < D)


@gluon.jit
def input_plane(plane, t, Z, D, STRIDE_D, DIL_D, PAD_D: gl.constexpr):
    """The input plane (of the ``N x D`` planes a box descriptor holds) that depth tap ``t`` of output plane
    ``plane`` (``image * Z + z``) reads, or -1 where it lies outside the volume: a box there is outside the tensor
    and reads as zeros. Below 3D every argument but ``plane`` is a constant 1 or 0: the plane is the image."""
    img = plane // Z
    d = (plane - img * Z) * STRIDE_D - PAD_D + t * DIL_D
    return gl.where((d >= 0) & (d < D), img * D + d, -1)


@gluon.jit
def tap_offsets(base, h, w, ok, H, W, sx_h, sx_w, VEC: gl.constexpr):
    """Each row's offset of input pixel ``(h, w)`` from ``base`` and whether it is read: ``ok`` and inside
    the image (outside: the padding, zeros). Masked rows point at the tensor's start: never read, but never
    outside it either; the offsets are whole ``VEC``-channel vectors."""
    ok = ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    off = gl.multiple_of(gl.where(ok, base + h * sx_h + w * sx_w, 0), VEC)
    return off, ok


@gluon.jit
def tile_mask(ok, c, c_vecs, VEC: gl.constexpr, EVEN_C: gl.constexpr):
    """The gathered tile's mask: each row's ``ok``, and channels ``c`` within the group's ``c_vecs`` vectors
    of ``VEC`` unless every channel block is whole (``EVEN_C``: the row mask alone, constant along a row)."""
    if EVEN_C:
        mask = ok[:, None]
    else:  # whole VEC-channel vectors are in or out (the channel count is a multiple of VEC)
        mask = ok[:, None] & ((c // VEC) < c_vecs)[None, :]
    return mask


@gluon.jit
def gather_into(dst, ptrs, mask, bar, MODE: gl.constexpr):
    """Copy the gathered tile ``ptrs`` (masked elements: zeros) into the stage ``dst`` and count towards its
    ``ready`` barrier ``bar``.

    ``cp_async``: asynchronous copies, and each thread's ``cp.async.mbarrier.arrive.noinc`` fires when its
    copies land, so the producer never waits for its own loads and keeps the whole ring in flight.
    ``registers`` (copies narrower than 4 bytes do not exist): load, store, fence, one arrival.
    """
    if MODE == CP_ASYNC:
        cp_async_load(dst, ptrs, mask)
        async_copy.mbarrier_arrive(bar, increment_count=False)
    else:
        dst.store(gl.load(ptrs, mask=mask, other=0.0))
        fence_async_shared()
        mbarrier.arrive(bar)
