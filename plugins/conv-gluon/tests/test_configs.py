"""The configuration tables (``data/configs.json``): well formed, every bucket reachable, within the
architecture's limits, chosen deterministically."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from conv_core.arch import spec
from conv_core.problem import ConvProblem
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, plans as plan, tiling

TAB = configs.table("sm_90")


def test_tables():
    assert configs.table_names() == ("sm_90",)
    assert configs.table_for("sm_90") is TAB and configs.table_for("sm_90a") is TAB
    assert configs.table_for("sm_80") is None
    assert not TAB.measured  # the buckets are reasoned; the families the sweep timed are measured (data/swept)
    assert set(TAB.families) == set(REGISTRY.families())
    assert set(TAB.efficiency) == set(REGISTRY.names) and set(REGISTRY.families()) == set(REGISTRY.families())


@pytest.mark.parametrize("family", REGISTRY.families())
def test_every_configuration_fits_the_hardware(family):
    limit = spec("sm_90").shared_memory_bytes
    producers = TAB.weight_grad.producers if configs.is_weight_grad(family) else TAB.producers
    for config in TAB.configs(family):
        # fwd_rows_box's input boxes have a ring of their own
        boxes = tiling.tall_stages(config.stages, plan.ROWS) if family == "fwd_rows_box" else 0
        assert tiling.shared_bytes(config.block_m, config.block_n, config.block_k, config.stages, 2,
                                   boxes=boxes) <= limit, config
        for mode in ("tma_box",) if family.endswith("_box") else ("cp_async", "registers"):
            producer = producers[mode]
            regs = tiling.maxnreg(config.num_warps, producer.warps, TAB.registers_per_sm,
                                  TAB.max_registers_per_thread)
            consumer = tiling.consumer_registers(config.num_warps, producer.warps, producer.regs, regs)
            # the accumulator plus room for addresses and the epilogue (the compile checks read the truth)
            assert tiling.accumulator_registers(config.block_m, config.block_n, config.num_warps) + 64 <= consumer


@pytest.mark.parametrize("family", REGISTRY.families())
def test_every_bucket_is_reachable(family):
    """Each bucket is the first match of some problem (no bucket is shadowed by an earlier one)."""
    hit = set()
    direction = "bwd_weight" if configs.is_weight_grad(family) else "fwd"
    for red, n, size in itertools.product((1, 3, 8, 16, 17, 32, 33, 64, 200, 512),
                                          (1, 8, 64, 65, 128, 129, 300, 2048), ((8, 8), (256, 256))):
        p = ConvProblem("fwd", 2, red, n, size, 3, 1, 1, 1, dtype="bfloat16", layout="channels_last",
                        arch="sm_90").with_direction(direction)
        chosen = configs.select(TAB, family, p)
        hit.add(next(i for i, b in enumerate(TAB.families[family]) if b.config == chosen))
    assert hit == set(range(len(TAB.families[family])))


def test_selection_is_deterministic_and_follows_the_channels():
    def choose(cin, cout):
        p = ConvProblem("fwd", 4, cin, cout, (14, 14), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last",
                        arch="sm_90")
        return configs.select(TAB, "fwd_gather", p), configs.select(TAB, "fwd_box", p)

    assert choose(3, 64) == choose(3, 64)
    assert choose(3, 64)[0].block_k == 16 and choose(32, 64)[0].block_k == 32 and choose(40, 64)[0].block_k == 64
    gather, box = choose(256, 512)
    assert gather.block_n == 128 and box.block_n == 256  # 256 wide only beside the 1-warp box producer


def test_weight_gradient_selection_follows_its_gemm():
    """Buckets on the per-tap GEMM: M = output channels, N = input channels. (The buckets alone: a layer the
    sweep timed at another batch or image size takes its swept configuration, ``test_same_layer_...``.)"""
    buckets = dataclasses.replace(TAB, layers={})

    def choose(cin, cout, family="bwd_weight_gather"):
        p = ConvProblem("fwd", 8, cin, cout, (28, 28), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last",
                        arch="sm_90").with_direction("bwd_weight")
        return configs.select(buckets, family, p)

    assert configs.gemm_view(ConvProblem("fwd", 8, 3, 64, (28, 28), 7, 2, 3, 1).with_direction("bwd_weight")) == \
        {"m": 64, "n": 3, "red": 8 * 14 * 14}
    stem = choose(3, 64)
    assert (stem.block_n, stem.block_k) == (16, 128)  # few input channels: thin tiles, long k-steps
    assert choose(256, 36).block_m == 64  # RetinaNet's box regression: 36 output channels
    assert (choose(256, 256).block_m, choose(256, 256).block_n) == (128, 128)
    assert choose(256, 819, "bwd_weight_box").block_n == 128  # no 256-wide tile (its partial store spilled)


def test_weight_gradient_limits():
    wg = TAB.weight_grad
    assert wg.max_splits >= 1 and wg.min_split_steps >= 1 and 0 < wg.max_workspace_bytes // 4 < 2**31
    assert wg.reduce_block % (32 * wg.reduce_warps) == 0
    assert set(wg.producers) == set(configs.A_MODES)
    for mode, producer in wg.producers.items():  # the partitions' registers fit the file with either consumer
        for consumer in (4, 8):
            limit = tiling.maxnreg(consumer, producer.warps, TAB.registers_per_sm, TAB.max_registers_per_thread)
            assert producer.regs <= limit and tiling.consumer_registers(consumer, producer.warps, producer.regs,
                                                                        limit) >= 128, (mode, consumer)


@pytest.mark.parametrize("change, words", [
    ({"BLOCK_K": 16}, "BLOCK_K must be 32, 64 or 128"),
    ({"BLOCK_M": 64, "num_warps": 8}, "multiple of 64 rows"),
    ({"BLOCK_M": 96}, "BLOCK_M must be 64, 128 or 256"),
    ({"BLOCK_N": 12}, "BLOCK_N"),
    ({"BLOCK_N": 256, "num_warps": 4}, "128 registers"),
])
def test_invalid_weight_gradient_configurations_are_refused(change, words):
    raw = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8, "num_warps": 8, **change}
    with pytest.raises(ValueError, match=words):
        configs.TileConfig.from_dict(raw, "bwd_weight_gather")


def test_weight_gradient_accepts_what_the_forward_refuses():
    """BLOCK_M 64 (one warpgroup of output channels) and 128-pixel k-steps are weight-gradient shapes only."""
    raw = {"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 128, "STAGES": 8, "GROUP_M": 8, "num_warps": 4}
    assert configs.TileConfig.from_dict(raw, "bwd_weight_box").name == "m64n16k128s8w4g8"
    with pytest.raises(ValueError):
        configs.TileConfig.from_dict(raw, "fwd_box")


def test_config_names_are_unique_and_stable():
    names = [c.name for family in REGISTRY.families() for c in TAB.configs(family)]
    assert "m128n256k64s4w8g8" in names
    for family in REGISTRY.families():
        assert len({c.name for c in TAB.configs(family)}) == len(TAB.configs(family))


@pytest.mark.parametrize("change, words", [
    ({"num_warps": 2}, "num_warps"),
    ({"BLOCK_M": 96}, "BLOCK_M"),
    ({"BLOCK_M": 64}, "at least 128"),
    ({"BLOCK_N": 100}, "BLOCK_N"),
    ({"BLOCK_K": 128}, "BLOCK_K"),
    ({"STAGES": 1}, "STAGES"),
    ({"BLOCK_N": 256, "num_warps": 4}, "128 registers"),
])
def test_invalid_configurations_are_refused(change, words):
    raw = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8, "num_warps": 8, **change}
    with pytest.raises(ValueError, match=words):
        configs.TileConfig.from_dict(raw)


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="exactly the keys"):
        configs.TileConfig.from_dict({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8,
                                      "num_warps": 8, "num_stages": 3})


def test_box_widths_are_whole_swizzle_rows():
    assert TAB.box_widths and all(w % 8 == 0 and 128 % w == 0 for w in TAB.box_widths)
    min_n, wide = TAB.box_widths_wide
    assert set(wide) <= set(TAB.box_widths) and TAB.box_widths_for(min_n) == wide
    assert TAB.box_widths_for(min_n - 1) == TAB.box_widths


def test_same_layer_at_another_batch_takes_the_swept_configuration():
    """The kit's selection finds a swept layer again at another batch size (within 8x the pixels): the kernel is
    already compiled, and it was timed on that layer."""
    family, entries = next((f, e) for f, e in TAB.layers.items() if e)
    key, swept = next(iter(entries.items()))
    p = ConvProblem.from_key(f"{key} sm_90")
    other = p.replace(batch=p.batch * 2)
    assert configs.select(TAB, family, p) == swept == configs.select(TAB, family, other)
