"""The shipped tables are the chip model's derivation, and every configuration in them fits its chip."""

from __future__ import annotations

import pytest
from conv_cdna import aot, configs, derive
from conv_cdna.chips import chip
from conv_rdna.api import REGISTRY, TileConfig


def test_the_shipped_tables_are_what_the_model_derives():
    assert derive.main(["--check"]) == 0, "run python -m conv_cdna.derive --write"


@pytest.mark.parametrize("arch", configs.TARGETS)
def test_every_tile_fits_its_chip(arch):
    tab, c = configs.table(arch), chip(arch)
    rejected = aot.rejected().get(arch, {})
    for family in REGISTRY.families():
        for config in tab.configs(family):
            if isinstance(config, TileConfig):
                assert c.tile_lds_bytes(config, "bfloat16") <= c.lds_bytes, (family, config.name)
                assert config.block_k >= c.min_block_k(), (family, config.name)
            assert config.name not in rejected.get(family, ()), (family, config.name)


@pytest.mark.parametrize("arch", configs.TARGETS)
def test_tables_are_unmeasured_and_split_for_the_chips_compute_units(arch):
    tab = configs.table(arch)
    assert not tab.measured and not tab.measured_families
    assert tab.split.target_programs == 2 * chip(arch).compute_units
