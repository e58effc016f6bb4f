"""The arithmetic of tiles, persistent programs, register budgets and shared memory: no tensors, no Gluon.

Everything here is plain Python on a :class:`Geometry` (the problem as a per-group 2D convolution), so the
CPU tests can check it exhaustively; :mod:`conv_gluon.plans` turns it into kernel arguments. Where a kernel
repeats a computation (the tile order, ``kernels/common.py``), the function here is its twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conv_core.geometry import Geometry

#: Widest copy of the gathering producer, in elements of a 16-bit dtype (16 bytes).
MAX_VEC = 8

#: TMA box dimensions are at most this many elements.
TMA_BOX_LIMIT = 256


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def vector_width(channels: int) -> int:
    """Largest power of two, at most :data:`MAX_VEC`, dividing ``channels``: the elements one copy of the
    gathering producer moves (a group's channels are then whole vectors, and so are every pixel's)."""
    return math.gcd(channels, MAX_VEC)


def gather_thread_shape(block_m: int, block_k: int, vec: int, warps: int) -> tuple[int, int, int]:
    """``(channels per thread, lanes along the channels, rows per thread)`` of the gathering producer's
    tile layout: the twin of ``kernels/fwd.gather_layout`` (see there why)."""
    if vec == 1 and block_m >= 32 * warps:
        return block_k, 1, cdiv(block_m, 32 * warps)
    spt = min(block_k, max(vec, block_m * block_k // (32 * warps * 4), block_k // 32))
    lanes_k = block_k // spt
    return spt, lanes_k, cdiv(block_m, (32 // lanes_k) * warps)


def direct_store(cout: int, strides: tuple[int, ...], offset: int, element_size: int) -> bool:
    """Whether the epilogue can store straight from the accumulator: Triton pairs 16-bit stores only where
    its specialization shows the output's channels per group, pixel strides and start are multiples of 16
    elements (16 bytes for the start); single 16-bit stores make ptxas serialize the ``wgmma``s, so those
    outputs are staged through shared memory. float32 outputs store directly in any case."""
    if element_size >= 4:
        return True
    return cout % 16 == 0 and all(s % 16 == 0 for s in strides) and offset * element_size % 16 == 0


def channel_blocks(cin: int, block_k: int) -> int:
    """Channel blocks per tap (``NCB``); the last one is partial when ``cin % block_k``."""
    return cdiv(cin, block_k)


def box_shape(p: int, q: int, block_m: int, widths: tuple[int, ...], min_rows: int = 1,
              min_width: int = 8, halo: int = 0) -> tuple[int, int]:
    """``(BOX_H, BOX_W)`` of the ``tma_box`` tile: ``block_m`` output pixels as a rectangle of one image.

    The widths come from the table (multiples of 8, so the box's rows stay whole swizzle lines); the one
    that wastes the fewest pixel slots on a ``p x q`` image wins, then the wider (longer TMA rows). The
    weight gradient's units of a filter column want at least ``min_rows`` rows (two boxes stacked hold the
    three taps' rows) and ``min_width`` pixels per row (one ``wgmma`` K per box row). ``fwd_rows_box`` loads
    ``halo`` rows more than the box's: the slots count with them, so taller boxes win.
    """
    best, best_key = None, None
    for bw in widths:
        if bw > block_m or block_m % bw or block_m // bw > TMA_BOX_LIMIT or bw > TMA_BOX_LIMIT:
            continue
        bh = block_m // bw
        if bh < min_rows or bw < min_width:
            continue
        slots = cdiv(p, bh) * cdiv(q, bw) * block_m * (bh + halo) / bh
        key = (slots, -bw)
        if best_key is None or key < best_key:
            best, best_key = (bh, bw), key
    if best is None:
        raise ValueError(f"no box width of {widths} divides BLOCK_M={block_m} into at least {min_rows} rows of "
                         f"at least {min_width}")
    return best


@dataclass(frozen=True)
class TileGrid:
    """How the output is cut into tiles: ``tiles_m x tiles_n`` per group, ``groups`` groups.

    ``tiles_q`` and ``tiles_img`` describe the ``tma_box`` tiles (boxes per row of boxes, boxes per image);
    for gathered tiles (``block_m`` consecutive pixels of the flattened batch) they are 1.
    """

    tiles_m: int
    tiles_n: int
    groups: int
    tiles_q: int = 1
    tiles_img: int = 1

    @property
    def num_tiles(self) -> int:
        return self.tiles_m * self.tiles_n * self.groups


def gather_grid(g: Geometry, block_m: int, block_n: int) -> TileGrid:
    return TileGrid(cdiv(g.pixels, block_m), cdiv(g.cout, block_n), g.groups)


def box_grid(g: Geometry, box: tuple[int, int], block_n: int) -> TileGrid:
    """Box tiles: ``tiles_img`` per output plane (3D: per image and output plane, ``image * Z + z``)."""
    bh, bw = box
    tiles_q = cdiv(g.q, bw)
    tiles_img = cdiv(g.p, bh) * tiles_q
    return TileGrid(g.batch * g.od * tiles_img, cdiv(g.cout, block_n), g.groups, tiles_q, tiles_img)


def tile_coords(tile: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int, int]:
    """``(group, pid_m, pid_n)`` of linear tile ``tile``: the twin of ``kernels/common.tile_coords``."""
    per_group = tiles_m * tiles_n
    g, t = divmod(tile, per_group)
    band_size = group_m * tiles_n
    band, in_band = divmod(t, band_size)
    first_m = band * group_m
    rows_in_band = min(tiles_m - first_m, group_m)
    return g, first_m + in_band % rows_in_band, in_band // rows_in_band


def persistent_programs(num_tiles: int, sms: int) -> int:
    """Programs of the persistent grid: one per SM (the ring fills most of its shared memory), never more
    than there are tiles."""
    return max(1, min(num_tiles, sms))


def program_tiles(program: int, programs: int, num_tiles: int) -> range:
    """The tiles program ``program`` takes, in order (the kernels' ``range(pid, NUM_TILES, grid)``)."""
    return range(program, num_tiles, programs)


def utilization(g: Geometry, grid: TileGrid, block_m: int, block_n: int, block_k: int) -> float:
    """Fraction of the matrix work the tiles do that is real: pixel slots, output channels and reduction
    lanes that hold data (the rest multiplies padding or masked rows)."""
    real = g.pixels * g.cout * g.cin * g.groups
    done = grid.tiles_m * block_m * grid.tiles_n * block_n * channel_blocks(g.cin, block_k) * block_k * g.groups
    return real / done


# ---- registers and shared memory ----------------------------------------------------------------------


def total_warps(consumer_warps: int, producer_warps: int) -> int:
    """Warps the kernel launches: the partitions' warps rounded up to whole warpgroups (registers are
    allocated per warpgroup)."""
    return cdiv(consumer_warps + producer_warps, 4) * 4


def maxnreg(consumer_warps: int, producer_warps: int, registers_per_sm: int, max_per_thread: int) -> int:
    """The kernel's register limit per thread: the whole register file shared by every launched thread
    (one program per SM), at most the hardware's per-thread maximum, a multiple of 8 (``setmaxnreg``
    moves registers in steps of 8). The compiler gives the producer its ``PRODUCER_REGS`` and the
    consumer what is left of ``maxnreg x warps``."""
    per_thread = registers_per_sm // (32 * total_warps(consumer_warps, producer_warps))
    return min(max_per_thread, per_thread) // 8 * 8


def consumer_registers(consumer_warps: int, producer_warps: int, producer_regs: int, limit: int) -> int:
    """Registers per consumer thread once the producer took its share: the rest of ``limit x warps`` (less
    24 per idle padding warp), a multiple of 8, at most 248. This is the arithmetic triton 3.6 was seen to
    apply (``setmaxnreg`` in the PTX); the compile checks read the real values."""
    warps = total_warps(consumer_warps, producer_warps)
    idle = warps - consumer_warps - producer_warps  # padding warps of the producer's warpgroup
    budget = limit * warps - producer_regs * producer_warps - 24 * idle
    return min(248, budget // consumer_warps // 8 * 8)


def warpgroup_split(block_n: int, consumer_warps: int) -> tuple[int, int]:
    """``(warps along M, warps along N)`` of the consumer: the twin of ``kernels/fwd.accumulator_layout``."""
    warps_n = max(1, min(consumer_warps // 4, block_n // 128))
    return consumer_warps // warps_n, warps_n


def accumulator_registers(block_m: int, block_n: int, consumer_warps: int) -> int:
    """float32 accumulator registers per consumer thread."""
    return block_m * block_n // (32 * consumer_warps)


#: Bytes per mbarrier.
BARRIER_BYTES = 8
#: Shared memory the compiler adds for the warp-specialized region's own state (measured: under 256 bytes).
SHARED_SLACK = 1024


def ring_bytes(block_m: int, block_n: int, block_k: int, stages: int, element_size: int, halo: int = 0,
               boxes: int = 0) -> int:
    """Shared memory of the ring: per stage an input tile, a weight tile and two barriers (the weight
    gradient's units of a filter column: ``halo`` more pixels of ``BLOCK_N`` channels, its second x box).

    ``fwd_rows_box`` (``boxes`` > 0) has two rings: ``stages`` weight tiles, and ``boxes`` tall input boxes of
    ``block_m + halo`` pixels."""
    if boxes:
        inputs = boxes * ((block_m + halo) * block_k * element_size + 2 * BARRIER_BYTES)
        return inputs + stages * (block_n * block_k * element_size + 2 * BARRIER_BYTES)
    return stages * (((block_m + block_n) * block_k + halo * block_n) * element_size + 2 * BARRIER_BYTES)


def tall_stages(weight_stages: int, rows: int) -> int:
    """``fwd_rows_box``'s input ring: one tall box more than the weight ring's ``weight_stages`` tiles cover
    (``rows`` a box), so that the producer can load a whole step ahead of the MMAs."""
    return cdiv(weight_stages, rows) + 1


#: Below this, the epilogue's staging takes a tile in one round.
STAGING_ROUND_BYTES = 8192


def staging_bytes(block_m: int, block_n: int, out_element_size: int) -> int:
    """Upper bound of the epilogue's staging through shared memory: half the output tile (triton 3.6's layout
    conversion takes a half or a quarter, in rounds), but a small tile (the weight gradient's 64 x 16) whole,
    in one round of at most 8 KiB; the compile checks hold it to this bound."""
    tile = block_m * block_n * out_element_size
    return min(tile, max(tile // 2, STAGING_ROUND_BYTES))


def epilogue_bytes(block_m: int, block_n: int, out_element_size: int, tma_store: bool, staged: bool) -> int:
    """Shared memory of the epilogue: the whole tile (the source of a TMA store), the staging bound
    (:func:`staging_bytes`) of a staged store, or nothing (stored from registers)."""
    if tma_store:
        return block_m * block_n * out_element_size
    return staging_bytes(block_m, block_n, out_element_size) if staged else 0


def shared_bytes(block_m: int, block_n: int, block_k: int, stages: int, element_size: int, staging: int = 0,
                 halo: int = 0, boxes: int = 0) -> int:
    """Upper bound of the kernel's shared memory: the ring (:func:`ring_bytes`), the epilogue's staging (0:
    stored from registers) and the compiler's own."""
    return ring_bytes(block_m, block_n, block_k, stages, element_size, halo, boxes) + staging + SHARED_SLACK


def fitting_stages(block_m: int, block_n: int, block_k: int, stages: int, element_size: int, staging: int,
                   limit: int, halo: int = 0) -> int:
    """The configured ring depth, or less where the epilogue's staging (or a second x box) would not fit
    beside it (at least 2)."""
    while stages > 2 and shared_bytes(block_m, block_n, block_k, stages, element_size, staging, halo) > limit:
        stages -= 1
    return stages


def fitting_tall_stages(block_m: int, block_n: int, block_k: int, stages: int, element_size: int, staging: int,
                        limit: int, halo: int, rows: int) -> tuple[int, int]:
    """``fwd_rows_box``'s ``(weight stages, input boxes)``: the configured weight ring with
    :func:`tall_stages` boxes, or, where that does not fit beside the epilogue's staging, fewer boxes first
    (down to 2: one read, one loading), then fewer weight tiles (down to 2)."""
    boxes = tall_stages(stages, rows)
    while shared_bytes(block_m, block_n, block_k, stages, element_size, staging, halo, boxes) > limit:
        if boxes > 2:
            boxes -= 1
        elif stages > 2:
            stages -= 1
        else:
            break
    return stages, boxes


# ---- the weight gradient: per-tap GEMMs over the pixels, the reduction split --------------------------------


@dataclass(frozen=True)
class WeightGradGrid:
    """The work of the weight gradient, cut into *units* (``kernels/bwd_weight.py``).

    Per group and filter tap, ``dW`` is a ``K_G x C_G`` GEMM reduced over the output pixels. Its output is cut
    into ``tiles_m x tiles_n`` tiles (``BLOCK_M`` output channels x ``BLOCK_N`` input channels); its reduction
    into ``steps`` k-steps (``BLOCK_K`` consecutive pixels of the flattened batch, or one box of output pixels
    per step for ``tma_box``), dealt out as ``splits`` ranges of ``split_steps`` consecutive k-steps (the last
    range may be shorter, never empty). A unit is one (split, group, tap, tile): it reduces its range into a
    float32 partial tile. With units of a filter column (``bwd_weight_rows_box``), ``taps`` counts the columns
    and a unit's partial is its column's three tiles.
    """

    tiles_m: int
    tiles_n: int
    groups: int
    taps: int
    steps: int
    split_steps: int
    #: boxes per row of boxes and per image (``tma_box``); 1 for gathered pixel tiles
    tiles_q: int = 1
    tiles_img: int = 1

    @property
    def splits(self) -> int:
        return cdiv(self.steps, self.split_steps)

    @property
    def base_units(self) -> int:
        """Units of one split: every (group, tap, tile)."""
        return self.tiles_m * self.tiles_n * self.groups * self.taps

    @property
    def num_units(self) -> int:
        return self.base_units * self.splits


def weight_grad_steps(g: Geometry, block_k: int, box: tuple[int, int] | None) -> tuple[int, int, int]:
    """``(steps, tiles_q, tiles_img)`` of the weight gradient's reduction: ``BLOCK_K``-pixel slices of the
    flattened batch, or (``box``) boxes of ``BOX_H x BOX_W`` output pixels of one output plane (3D: per image and
    plane)."""
    if box is None:
        return cdiv(g.pixels, block_k), 1, 1
    tiles_q = cdiv(g.q, box[1])
    tiles_img = cdiv(g.p, box[0]) * tiles_q
    return g.batch * g.od * tiles_img, tiles_q, tiles_img


def unit_coords(unit: int, tiles_m: int, tiles_n: int, taps: int, groups: int,
                group_m: int) -> tuple[int, int, int, int, int]:
    """``(split, group, tap, pid_m, pid_n)`` of unit ``unit``: the twin of ``kernels/bwd_weight.unit_coords``.

    Units are numbered split after split, then group, then tap, then tile (the forward's banded order,
    :func:`tile_coords`, with (split, group, tap) in the role of its group): the units the persistent programs
    run at the same time share a range of pixels, so ``dy`` and the taps' overlapping windows of ``x`` are
    read from L2 rather than memory.
    """
    outer, pid_m, pid_n = tile_coords(unit, tiles_m, tiles_n, group_m)
    rest, tap = divmod(outer, taps)
    split, g = divmod(rest, groups)
    return split, g, tap, pid_m, pid_n


def split_range(split: int, steps: int, split_steps: int) -> range:
    """The k-steps split ``split`` reduces."""
    return range(split * split_steps, min(steps, (split + 1) * split_steps))


@dataclass(frozen=True)
class SplitCosts:
    """What the split count trades, in k-step times of one program (see :func:`choose_split_steps`)."""

    sms: int
    #: per unit: filling the ring and the epilogue's store of a partial tile
    unit_overhead: float
    #: per split beyond one: writing one float32 partial ``dW`` and reading it back in the second stage
    partial: float
    #: once, when split: the second stage's launch
    launch: float
    max_splits: int
    min_split_steps: int


def split_time(splits: int, base_units: int, steps: int, costs: SplitCosts) -> float:
    """Modelled time of the weight gradient with its reduction cut into ``splits`` ranges: the waves of units
    on ``costs.sms`` persistent programs times a unit's k-steps and overhead, plus the partials' traffic and
    the second stage when ``splits`` > 1."""
    split_steps = cdiv(steps, splits)
    splits = cdiv(steps, split_steps)
    waves = cdiv(base_units * splits, costs.sms)
    time = waves * (split_steps + costs.unit_overhead)
    if splits > 1:
        time += splits * costs.partial + costs.launch
    return time


def choose_split_steps(base_units: int, steps: int, costs: SplitCosts) -> int:
    """The k-steps per split (``SPLIT_STEPS``) that minimise :func:`split_time`, the fewest splits on a tie.

    One split leaves ``base_units`` units (group x tap x tiles): too few for 132 SMs on most layers, whose
    parallelism is in the pixels. More splits fill the SMs (and balance the last wave) but each adds a
    float32 partial ``dW`` to write and read back; ``max_splits`` bounds the workspace, ``min_split_steps``
    keeps a split long enough to amortise its unit's ring fill and epilogue.
    """
    best, best_time = steps, split_time(1, base_units, steps, costs)
    for splits in range(2, min(costs.max_splits, steps) + 1):
        split_steps = cdiv(steps, splits)
        if split_steps < costs.min_split_steps:
            break
        time = split_time(splits, base_units, steps, costs)
        if time < best_time:
            best, best_time = split_steps, time
    return best


def weight_grad_utilization(g: Geometry, grid: WeightGradGrid, block_m: int, block_n: int, block_k: int) -> float:
    """Fraction of the weight gradient's matrix work that is real: output and input channels of whole tiles,
    pixel slots of whole k-steps (boxes waste the slots past an image's edge)."""
    real = g.cout * g.cin * g.pixels
    done = grid.tiles_m * block_m * grid.tiles_n * block_n * grid.steps * block_k
    return real / done
