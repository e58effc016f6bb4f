"""The configuration tables: well-formed, every bucket reachable, within shared memory, deterministic."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from conv_core.arch import spec
from conv_core.problem import ConvProblem
from conv_core.kit.tables import layer_key
from conv_rdna import candidates, configs, registry
from conv_core.kit.declines import INT32_ELEMENTS

TABLES = configs.table_names()
GPU_TABLES = [name for name in TABLES if name != configs.INTERPRETER]
FAMILY_DIRECTION = {"implicit_gemm": "fwd", "conv3x3": "fwd",
                    "gemm1x1": "fwd", "bwd_data": "bwd_data", "bwd_weight": "bwd_weight",
                    "depthwise_fwd": "fwd", "depthwise_bwd_data": "bwd_data", "depthwise_bwd_weight": "bwd_weight",
                    "few_channels_in": "fwd", "few_channels_out": "fwd", "winograd": "fwd", "implicit_gemm_cf": "fwd",
                    "bwd_weight_cf": "bwd_weight", "few_channels_in_bwd_weight": "bwd_weight",
                    "few_channels_out_bwd_weight": "bwd_weight", "few_channels_in_bwd_data": "bwd_data",
                    "few_channels_out_bwd_data": "bwd_data", "col2im_bwd_data": "bwd_data",
                    "winograd_bwd_weight": "bwd_weight", "grouped": "fwd", "grouped_bwd_weight": "bwd_weight"}


def sweep(family: str):
    """Problems of many sizes for a family: channels from 1 to 512, small and large images, all dtypes."""
    direction = FAMILY_DIRECTION[family]
    if family in configs.DEPTHWISE_FAMILIES:
        yield from depthwise_sweep(direction)
        return
    channels = (1, 3, 8, 16, 24, 32, 48, 64, 128, 512)
    for cin, cout, (batch, size), dtype in itertools.product(channels, channels, ((1, 7), (8, 56)), configs.DTYPES):
        filter_size = 1 if family == "gemm1x1" else 3
        yield ConvProblem("fwd", batch, cin, cout, (size, size), filter_size, 1, filter_size // 2, 1, dtype=dtype,
                          arch="gfx1100").with_direction(direction)


def depthwise_sweep(direction: str):
    """Depthwise problems (groups = channels): 1 to 768 channels, 1x5 to 7x7 filters, both layouts, all dtypes."""
    shapes = ((1, 7), (8, 56))
    for c, f, (batch, size), dtype, layout in itertools.product((1, 8, 72, 96, 768), (3, 5, 7, (1, 5)), shapes,
                                                               configs.DTYPES, ("channels_first", "channels_last")):
        yield ConvProblem("fwd", batch, c, c, (size, size), f, 1, "same", 1, groups=c, dtype=dtype, layout=layout,
                          arch="gfx1100").with_direction(direction)


@pytest.mark.parametrize("name", TABLES)
def test_table_is_well_formed(name):
    tab = configs.table(name)
    assert isinstance(tab.measured, bool)
    assert set(tab.families) == set(registry.FAMILIES)
    for family, buckets in tab.families.items():
        assert buckets and buckets[-1].when == {}, f"{name}.{family}: the last bucket must catch everything"
    for kernel in registry.REGISTRY.names:
        assert 0 < tab.efficiency[kernel]["compute"] <= 1 and 0 < tab.efficiency[kernel]["memory"] <= 1
    assert 0 < tab.efficiency["channels_first_factor"] <= 1
    assert tab.split.target_programs >= 1 and tab.split.max_split >= 1 and tab.split.min_blocks_per_split >= 1


@pytest.mark.parametrize("name", GPU_TABLES)
def test_shared_memory_of_every_configuration_fits(name):
    """Every configuration, with every input dtype that can reach it, fits the architecture's limit."""
    limit = configs.shared_memory_limit(name)
    assert limit and limit > 0
    tab = configs.table(name)
    for family in registry.FAMILIES:
        for config, dtypes in configs.reachable_dtypes(tab, family).items():
            for dtype in dtypes:
                assert config.shared_bytes(dtype) <= limit, (name, family, config.name, dtype)


def test_tile_configurations_are_read_back_from_their_names():
    tiles = {c for tab in map(configs.table, TABLES) for family in tab.families for c in tab.configs(family)
             if isinstance(c, configs.TileConfig)}
    assert tiles and all(configs.TileConfig.from_name(c.name) == c for c in tiles)


def test_limits_come_from_conv_core():
    assert configs.shared_memory_limit("gfx1100") == spec("gfx1100").shared_memory_bytes
    assert configs.shared_memory_limit("sm_90") == spec("sm_90").shared_memory_bytes
    assert configs.shared_memory_limit(configs.INTERPRETER) is None


@pytest.mark.parametrize("family", registry.FAMILIES)
@pytest.mark.parametrize("name", TABLES)
def test_every_bucket_is_chosen_by_some_problem(name, family):
    tab = dataclasses.replace(configs.table(name), layers={})  # the buckets alone: no swept layer to find
    buckets = tab.families[family]
    hit = set()
    for problem in sweep(family):
        view = configs.gemm_view(problem, family)
        hit.add(next(i for i, b in enumerate(buckets) if b.matches(view, problem.dtype)))
        assert configs.select(tab, family, problem) in {b.config for b in buckets}
    assert hit == set(range(len(buckets))), f"{name}.{family}: buckets {set(range(len(buckets))) - hit} unreachable"


def test_selection_is_deterministic():
    problem = ConvProblem("fwd", 8, 64, 64, (28, 28), 3, 1, 1, 1, dtype="float16", arch="gfx1201")
    chosen = {configs.select(configs.table(name), "implicit_gemm", problem) for _ in range(3) for name in ["gfx1201"]}
    assert len(chosen) == 1
    first = candidates.candidates(problem, torch.device("cuda"))
    second = candidates.candidates(problem, torch.device("cuda"))
    assert [c.kernel_id for c in first] == [c.kernel_id for c in second]


def test_float32_problems_get_their_own_bucket():
    tab = configs.table("gfx1100")
    half = ConvProblem("fwd", 8, 256, 256, (28, 28), 3, 1, 1, 1, dtype="float16", arch="gfx1100")
    single = half.replace(dtype="float32", weight_dtype="float32", out_dtype="float32")
    assert configs.select(tab, "implicit_gemm", half) != configs.select(tab, "implicit_gemm", single)


def test_exact_layer_entry_wins_over_buckets():
    problem = ConvProblem("fwd", 8, 64, 64, (28, 28), 3, 1, 1, 1, dtype="float16", arch="gfx1100")
    special = configs.TileConfig(32, 32, 32, 4, 4, 2)
    tab = configs.table("gfx1100")
    tab = dataclasses.replace(tab, layers={"implicit_gemm": {layer_key(problem): special}})
    assert configs.select(tab, "implicit_gemm", problem) == special
    assert configs.select(tab, "implicit_gemm", problem.replace(batch=4)) == special  # the same layer (same_layer)
    assert configs.select(tab, "implicit_gemm", problem.replace(in_channels=128)) != special
    assert special in tab.configs("implicit_gemm")


def test_same_as_entries_override_only_what_they_give():
    base, derived = configs.table("gfx1100"), configs.table("gfx1151")
    assert derived.families == base.families and derived.efficiency == base.efficiency
    assert derived.split.target_programs < base.split.target_programs  # fewer compute units


def test_tables_for_devices():
    assert configs.table_for("gfx1201", interpreted=False).name == "gfx1201"
    assert configs.table_for("sm_80", interpreted=False).name == configs.DEFAULT
    assert configs.table_for("gfx1100", interpreted=True).name == configs.INTERPRETER


def test_rdna_tables_are_marked_unmeasured_with_their_reasoning():
    for name in ("gfx1100", "gfx1151", "gfx1200", "gfx1201"):
        tab = configs.table(name)
        assert tab.measured is False
        notes = configs._raw()["archs"][name]["notes"]
        assert "LDS" in notes and "wave32" in notes and "num_stages" in notes


@pytest.mark.parametrize("raw, why", [
    (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2), "keys"),
    (dict(BLOCK_M=48, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2), "power of two"),
    (dict(BLOCK_M=8, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2), "at least 16"),
    (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=0, num_warps=4, num_stages=2), ">= 1"),
])
def test_malformed_configurations_are_rejected(raw, why):
    with pytest.raises(ValueError, match=why):
        configs.TileConfig.from_dict(raw)


@pytest.mark.parametrize("name", GPU_TABLES)
def test_split_rule_bounds(name):
    tab = configs.table(name)
    config = tab.families["bwd_weight"][-1].config
    for batch, size, channels in ((1, 7, 512), (8, 56, 64), (64, 112, 3), (256, 224, 3)):
        problem = ConvProblem("fwd", batch, channels, channels, (size, size), 3, 1, 1, 1, dtype="float16",
                              arch=name).with_direction("bwd_weight")
        splits = configs.split_count(tab, problem, config, INT32_ELEMENTS)
        blocks = -(-batch * size * size // config.block_k)
        assert 1 <= splits <= tab.split.max_split
        assert splits == 1 or blocks // splits >= tab.split.min_blocks_per_split
        assert splits * channels * channels * 9 <= INT32_ELEMENTS


def test_sweep_marks_only_its_own_families_measured():
    """The offline sweep timed the general families on the H100: they lose the experimental tag there;
    families it never timed keep it."""
    tab = configs.table("sm_90")
    swept = configs._swept("sm_90")
    assert swept["measured"] and swept["device"].startswith("NVIDIA H100")
    for family in registry.FAMILIES:
        assert tab.is_measured(family) == (family in swept["layers"])


def test_exact_layers_are_reached_by_their_own_dtype_only():
    tab = configs.table("sm_90")
    for family, layers in tab.layers.items():
        reach = configs.reachable_dtypes(tab, family)
        for key, config in layers.items():
            assert configs._layer_dtype(key) in reach[config]
