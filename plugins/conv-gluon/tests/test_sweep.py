"""The offline sweep's space for conv-gluon and how its measured winners reach the tables (no GPU needed:
trials are built, not run)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.kit.tables import layer_key
from conv_gluon.registry import REGISTRY
from conv_gluon import aot, candidates, configs, sweep

CUDA = torch.device("cuda")  # only its type is read
TAB = configs.table("sm_90")


def problem(direction: str = "fwd", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=64, out_channels=384, input_size=(16, 16), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90")
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


@pytest.mark.parametrize("family", REGISTRY.families())
def test_every_family_has_a_space_that_parses_and_is_compiled_ahead_of_time(family):
    space = sweep.space_configs("sm_90", family)
    assert space, family
    compiled = {job.config for job in aot.jobs()}
    assert {c.name for c in space} <= compiled


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_trials_are_each_applicable_kernel_with_its_table_choice_and_the_space(direction):
    p = problem(direction)
    trials = sweep.GluonSpace().trials(p, CUDA, frozenset(REGISTRY.families()))
    kernels = [e.name for e in REGISTRY.applicable(p)]
    assert {t.kernel for t in trials} == set(kernels)
    for kernel in kernels:
        family = REGISTRY.family_of(kernel)
        tried = [configs.TileConfig.from_dict(t.raw, family) for t in trials if t.kernel == kernel]
        assert len(tried) == len(set(tried))
        assert configs.select(TAB, family, p) in tried
        assert set(sweep.space_configs("sm_90", family)) <= set(tried)
    made = trials[0].make()
    assert made.backend == "gluon" and made.kernel == trials[0].kernel


def test_no_trials_where_the_backend_declines_or_the_family_is_not_selected():
    space = sweep.GluonSpace()
    assert space.trials(problem(layout="channels_first"), CUDA, frozenset(REGISTRY.families())) == []
    assert space.trials(problem(), torch.device("cpu"), frozenset(REGISTRY.families())) == []
    assert space.trials(problem(), CUDA, frozenset({"bwd_weight_box"})) == []


def test_a_swept_layer_wins_over_the_buckets_and_marks_only_its_family_measured():
    p = problem()
    bucket = configs.select(TAB, "fwd_box", p)
    other = next(c for c in sweep.space_configs("sm_90", "fwd_box") if c != bucket)
    swept = dataclasses.replace(TAB, layers={"fwd_box": {layer_key(p): other}})
    assert configs.select(swept, "fwd_box", p) == other
    assert configs.select(swept, "fwd_box", problem(out_channels=320)) == configs.select(TAB, "fwd_box",
                                                                                          problem(out_channels=320))
    assert other in swept.configs("fwd_box")
    assert swept.is_measured("fwd_box") and not swept.is_measured("fwd_gather")
    box = candidates.candidate(p, "fwd_box", other, swept)
    gather = candidates.candidate(p, "fwd_gather", configs.select(swept, "fwd_gather", p), swept)
    assert "experimental" not in box.tags and "experimental" in gather.tags


def test_configurations_are_powers_of_two():
    with pytest.raises(ValueError, match="powers of two"):
        configs.TileConfig.from_dict({"BLOCK_M": 128, "BLOCK_N": 192, "BLOCK_K": 64, "STAGES": 4, "GROUP_M": 8,
                                      "num_warps": 8})


def test_as_dict_round_trips():
    for family in REGISTRY.families():
        for config in TAB.configs(family):
            assert configs.TileConfig.from_dict(config.as_dict(), family) == config
