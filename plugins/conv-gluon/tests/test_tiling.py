"""Tiling, persistent scheduling and budget arithmetic (:mod:`conv_gluon.tiling`)."""

from __future__ import annotations

import itertools

import pytest
from conv_core.problem import ConvProblem
from conv_gluon import tiling


@pytest.mark.parametrize("tiles_m, tiles_n, group_m", [(1, 1, 8), (7, 3, 8), (16, 5, 4), (9, 9, 1), (3, 11, 8),
                                                      (40, 2, 8)])
def test_tile_order_is_a_bijection_per_group(tiles_m, tiles_n, group_m):
    groups = 3
    seen = [tiling.tile_coords(t, tiles_m, tiles_n, group_m) for t in range(tiles_m * tiles_n * groups)]
    assert sorted(seen) == list(itertools.product(range(groups), range(tiles_m), range(tiles_n)))
    per_group = tiles_m * tiles_n
    assert all(seen[t][0] == t // per_group for t in range(len(seen)))  # a group's tiles are consecutive


def test_tile_order_walks_bands_of_group_m_rows():
    """Within a band of GROUP_M row tiles, consecutive tiles share a column tile (the weight block in L2)."""
    order = [tiling.tile_coords(t, 16, 4, 8)[1:] for t in range(16)]
    assert order[:8] == [(m, 0) for m in range(8)] and order[8:16] == [(m, 1) for m in range(8)]


@pytest.mark.parametrize("num_tiles, sms", [(1, 132), (131, 132), (132, 132), (133, 132), (1000, 132), (7, 3)])
def test_persistent_programs_cover_every_tile_once(num_tiles, sms):
    programs = tiling.persistent_programs(num_tiles, sms)
    assert programs == min(num_tiles, sms)
    taken = [t for pid in range(programs) for t in tiling.program_tiles(pid, programs, num_tiles)]
    assert sorted(taken) == list(range(num_tiles))
    loads = [len(tiling.program_tiles(pid, programs, num_tiles)) for pid in range(programs)]
    assert max(loads) - min(loads) <= 1  # balanced to one tile


@pytest.mark.parametrize("p, q, expected", [
    (56, 56, (2, 64)),  # 28 boxes whatever the width: a tie goes to the widest box
    (64, 64, (2, 64)),  # every width fits exactly: the widest
    (7, 7, (8, 16)),  # one box of 8x16 or 16x8; 4x32 and 2x64 would need 2 and 4
    (12, 6, (16, 8)),  # 16x8 covers it with one box; 8x16 needs 2
    (1, 100, (2, 64)),
    (128, 16, (8, 16)),
    (4, 32, (4, 32)),
])
def test_box_shape_minimises_wasted_slots(p, q, expected):
    widths = (8, 16, 32, 64)
    bh, bw = tiling.box_shape(p, q, 128, widths)
    assert bh * bw == 128
    slots = tiling.cdiv(p, bh) * tiling.cdiv(q, bw)
    best = min(tiling.cdiv(p, 128 // w) * tiling.cdiv(q, w) for w in widths)
    assert slots == best
    assert (bh, bw) == expected


def test_box_shape_needs_a_width_dividing_the_tile():
    with pytest.raises(ValueError):
        tiling.box_shape(8, 8, 128, (24,))


def test_geometry_of_1d_and_asymmetric_padding():
    p = ConvProblem("fwd", 2, 8, 16, (30,), 5, 2, ((3, 1),), 1)
    g = tiling.Geometry.of(p)
    assert (g.h, g.w, g.p, g.q, g.r, g.s) == (1, 30, 1, p.output_size[0], 1, 5)
    assert g.stride == (1, 2) and g.pad == (0, 3) and g.dil == (1, 1)
    g2 = tiling.Geometry.of(ConvProblem("fwd", 1, 6, 4, (9, 10), (3, 2), 1, ((0, 2), (1, 0)), 2, groups=2))
    assert g2.pad == (0, 1) and (g2.cin, g2.cout, g2.groups) == (3, 2, 2)


@pytest.mark.parametrize("channels, vec", [(3, 1), (5, 1), (6, 2), (12, 4), (40, 8), (64, 8), (200, 8), (2, 2)])
def test_vector_width(channels, vec):
    assert tiling.vector_width(channels) == vec
    assert channels % vec == 0


def test_grids():
    g = tiling.Geometry.of(ConvProblem("fwd", 3, 16, 300, (13, 13), 3, 1, 1, 1, groups=2))
    grid = tiling.gather_grid(g, 128, 64)
    assert (grid.tiles_m, grid.tiles_n, grid.groups) == (tiling.cdiv(3 * 169, 128), 3, 2)
    assert grid.num_tiles == grid.tiles_m * 3 * 2
    box = tiling.box_grid(g, (8, 16), 64)
    assert (box.tiles_q, box.tiles_img, box.tiles_m) == (1, 2, 6)


@pytest.mark.parametrize("block_m, block_k, vec, warps", [(128, 16, 8, 4), (128, 64, 8, 4), (128, 64, 2, 4),
                                                          (128, 32, 4, 4), (128, 16, 1, 4), (256, 64, 8, 4)])
def test_gather_thread_shape_covers_the_tile(block_m, block_k, vec, warps):
    spt, lanes_k, rows = tiling.gather_thread_shape(block_m, block_k, vec, warps)
    assert spt % vec == 0 and spt * lanes_k == block_k and lanes_k <= 32
    lanes_m = 32 // lanes_k
    assert rows * lanes_m * warps == block_m
    assert rows <= 4 or vec == 1 and rows <= 2  # few rows per thread: few registers for pixel coordinates


@pytest.mark.parametrize("consumer, producer, expected", [(4, 4, 248), (8, 4, 168), (4, 1, 248), (8, 1, 168),
                                                           (8, 8, 128)])
def test_maxnreg_shares_the_register_file(consumer, producer, expected):
    limit = tiling.maxnreg(consumer, producer, 65536, 255)
    assert limit == expected and limit % 8 == 0
    assert limit * 32 * tiling.total_warps(consumer, producer) <= 65536


def test_consumer_registers_match_what_triton_36_emitted():
    """setmaxnreg values read off compiled kernels (8 + 4 warps: 208; 8 + 1: 240; 4 + 4: 248)."""
    assert tiling.consumer_registers(8, 4, 88, 168) == 208
    assert tiling.consumer_registers(8, 1, 24, 168) == 240
    assert tiling.consumer_registers(4, 4, 88, 248) == 248


def test_warpgroup_split():
    assert tiling.warpgroup_split(256, 8) == (4, 2)  # two warpgroups side by side along N
    assert tiling.warpgroup_split(128, 8) == (8, 1)  # stacked along M
    assert tiling.warpgroup_split(64, 4) == (4, 1)


def test_utilization():
    g = tiling.Geometry.of(ConvProblem("fwd", 2, 3, 64, (16, 16), 3, 1, 1, 1))
    used = tiling.utilization(g, tiling.gather_grid(g, 128, 64), 128, 64, 16)
    assert used == pytest.approx(3 / 16)
    g = tiling.Geometry.of(ConvProblem("fwd", 2, 64, 128, (16, 16), 3, 1, 1, 1))
    assert tiling.utilization(g, tiling.gather_grid(g, 128, 128), 128, 128, 64) == 1.0


def test_shared_bytes_bound():
    assert tiling.ring_bytes(128, 256, 64, 4, 2) == 4 * (384 * 64 * 2 + 16)
    assert tiling.shared_bytes(128, 256, 64, 4, 2) > tiling.ring_bytes(128, 256, 64, 4, 2)


def test_epilogue_bytes():
    """A TMA store stages the whole tile; a staged store its bound; a register store nothing."""
    assert tiling.epilogue_bytes(256, 128, 2, tma_store=True, staged=False) == 256 * 128 * 2
    assert tiling.epilogue_bytes(256, 128, 2, tma_store=False, staged=True) == tiling.staging_bytes(256, 128, 2)
    assert tiling.epilogue_bytes(256, 128, 2, tma_store=False, staged=False) == 0


@pytest.mark.parametrize("cout, strides, offset, size, direct", [
    (64, (4096, 512, 64), 0, 2, True),
    (120, (4096, 960, 120), 0, 2, False),  # 120 channels: Triton cannot pair the stores
    (64, (4096, 512, 64), 64, 2, True),
    (64, (4096, 512, 64), 4, 2, False),  # a phase's output starting 8 bytes into a 16-byte line
    (3, (48, 12, 3), 0, 2, False),
    (3, (48, 12, 3), 0, 4, True),  # float32 stores straight from registers in any case
])
def test_direct_store(cout, strides, offset, size, direct):
    assert tiling.direct_store(cout, strides, offset, size) is direct


def test_staging_shortens_the_ring_only_when_it_must():
    limit = 232448
    assert tiling.staging_bytes(128, 256, 2) == 32768
    assert tiling.fitting_stages(128, 256, 64, 4, 2, 32768, limit) == 4
    assert tiling.fitting_stages(128, 256, 64, 4, 2, 65536, limit) == 3  # a float32 output tile
    assert tiling.fitting_stages(128, 64, 16, 8, 2, 8192, limit) == 8
    assert tiling.fitting_stages(128, 256, 64, 4, 2, 10**6, limit) == 2  # never below double buffering


# ---- the weight gradient ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tiles_m, tiles_n, taps, groups, splits, group_m", [(1, 1, 1, 1, 1, 8), (2, 3, 9, 1, 4, 8),
                                                                           (5, 2, 49, 2, 3, 4), (1, 16, 1, 4, 7, 8)])
def test_units_are_a_bijection_split_major(tiles_m, tiles_n, taps, groups, splits, group_m):
    count = tiles_m * tiles_n * taps * groups * splits
    seen = [tiling.unit_coords(u, tiles_m, tiles_n, taps, groups, group_m) for u in range(count)]
    assert sorted(seen) == list(itertools.product(range(splits), range(groups), range(taps), range(tiles_m),
                                                  range(tiles_n)))
    assert [u[0] for u in seen] == sorted(u[0] for u in seen)  # split-major: concurrent units share pixels
    per_tap = tiles_m * tiles_n
    assert all(seen[u][2] == (u // per_tap) % taps for u in range(count))


@pytest.mark.parametrize("steps, split_steps", [(1, 1), (7, 2), (8, 2), (313, 105), (10, 10), (10, 3)])
def test_split_ranges_cover_every_step_once(steps, split_steps):
    grid = tiling.WeightGradGrid(1, 1, 1, 1, steps, split_steps)
    ranges = [tiling.split_range(s, steps, split_steps) for s in range(grid.splits)]
    assert [k for r in ranges for k in r] == list(range(steps))
    assert all(len(r) == split_steps for r in ranges[:-1]) and 1 <= len(ranges[-1]) <= split_steps


def costs(**changes) -> tiling.SplitCosts:
    base = dict(sms=132, unit_overhead=4.0, partial=3.0, launch=4.0, max_splits=128, min_split_steps=4)
    return tiling.SplitCosts(**{**base, **changes})


def test_split_choice():
    # RetinaNet P3 at batch 2 (36 units, 313 k-steps): split until the units cover the SMs about once
    s = tiling.choose_split_steps(36, 313, costs())
    splits = -(-313 // s)
    assert 2 <= splits <= 8 and 36 * splits <= 2 * 132
    assert tiling.choose_split_steps(36, 313, costs(max_splits=2)) == 157  # the workspace bound
    assert tiling.choose_split_steps(16 * 132, 313, costs()) == 313  # whole waves of units: no split
    assert tiling.choose_split_steps(36, 6, costs()) == 6  # a split would be shorter than min_split_steps
    assert tiling.choose_split_steps(1, 10_000, costs(partial=0.0, launch=0.0)) == -(-10_000 // 128)
    # the modelled time of the choice is never above one split's
    for units, steps in itertools.product((1, 9, 36, 140, 600), (1, 5, 64, 313, 5000)):
        chosen = tiling.choose_split_steps(units, steps, costs())
        assert tiling.split_time(-(-steps // chosen), units, steps, costs()) <= tiling.split_time(1, units, steps,
                                                                                                   costs())


def test_split_time_model():
    c = costs(sms=4, unit_overhead=1.0, partial=2.0, launch=3.0)
    assert tiling.split_time(1, 4, 10, c) == 1 * (10 + 1)
    assert tiling.split_time(2, 4, 10, c) == 2 * (5 + 1) + 2 * 2.0 + 3.0  # 8 units: two waves
    assert tiling.split_time(3, 4, 10, c) == 3 * (4 + 1) + 3 * 2.0 + 3.0  # 4, 4 and 2 steps: 12 units
    assert tiling.split_time(4, 4, 10, c) == 4 * (3 + 1) + 4 * 2.0 + 3.0  # 3, 3, 3, 1 steps


def test_weight_grad_steps_and_utilization():
    g = tiling.Geometry.of(ConvProblem("fwd", 2, 40, 36, (20, 33), 3, 1, 1, 1))
    assert tiling.weight_grad_steps(g, 64, None) == (-(-2 * 20 * 33 // 64), 1, 1)
    steps, tiles_q, tiles_img = tiling.weight_grad_steps(g, 64, (4, 16))
    assert (tiles_q, tiles_img, steps) == (3, 15, 30)
    grid = tiling.WeightGradGrid(1, 1, 1, 9, steps, steps, tiles_q, tiles_img)
    used = tiling.weight_grad_utilization(g, grid, 64, 64, 64)
    assert used == pytest.approx((36 / 64) * (40 / 64) * (2 * 20 * 33) / (30 * 64))


def test_gather_layout_of_short_tiles_does_not_repeat_rows():
    """The weight gradient gathers 64-pixel tiles with 128 threads: single elements are then laid out as
    vectors (no row held twice); the forward's 128-row tiles keep a row per thread."""
    assert tiling.gather_thread_shape(128, 64, 1, 4) == (64, 1, 1)
    spt, lanes_k, rows = tiling.gather_thread_shape(64, 128, 1, 4)
    assert spt * lanes_k == 128 and rows * (32 // lanes_k) * 4 == 64 and rows <= 4


def test_staging_of_small_tiles_is_whole():
    assert tiling.staging_bytes(64, 16, 2) == 2048  # one round
    assert tiling.staging_bytes(128, 64, 2) == 8192 and tiling.staging_bytes(128, 256, 2) == 32768  # halves
