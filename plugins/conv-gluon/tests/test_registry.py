"""The kernel registry (:mod:`conv_gluon.registry`): the one list of kernels, and everything derived from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conv_core.kit.registry import readme_table
from conv_core.problem import ConvProblem
from conv_gluon import aot, candidates, configs, plans, sweep
from conv_gluon.registry import REGISTRY, gathering

README = Path(__file__).parents[1] / "README.md"


def problem(direction: str = "fwd", **fields) -> ConvProblem:
    base = dict(batch=2, in_channels=64, out_channels=64, input_size=(16, 16), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90")
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def test_the_readme_table_is_the_registrys():
    assert readme_table(README.read_text()) == REGISTRY.markdown_table()


def test_each_direction_offers_its_gathering_kernel_first_then_the_box_kernels():
    for direction in candidates.DIRECTIONS:
        names = [e.name for e in REGISTRY.for_direction(direction)]
        assert names == [f"{direction}_gather", f"{direction}_box", f"{direction}_rows_box"]
        assert gathering(direction).name == names[0]
    # the data gradient runs the forward kernel: its kernels take the forward's families
    assert [REGISTRY.family_of(f"bwd_data_{k}") for k in ("gather", "box", "rows_box")] == \
        ["fwd_gather", "fwd_box", "fwd_rows_box"]


def test_the_families_with_tables_are_the_registrys():
    assert set(configs.table("sm_90").families) == set(REGISTRY.families()) == set(sweep.GluonSpace().families)
    assert set(configs.table("sm_90").efficiency) == set(REGISTRY.names)
    weight_grad = {e.family for e in REGISTRY.for_direction("bwd_weight")}
    assert weight_grad == {f for f in REGISTRY.families() if configs.is_weight_grad(f)}


def test_the_plans_know_every_kernels_input():
    """The plans read how a kernel brings its input from its name, ``<direction>_<input>``."""
    assert {e.name for e in REGISTRY} == {f"{d}_{way}" for d in candidates.DIRECTIONS for way in plans.INPUTS}


def test_every_family_is_compiled_in_some_mode():
    assert {REGISTRY.family_of(kernel) for kernel, _ in aot.MODES.values()} == set(REGISTRY.families())


@pytest.mark.parametrize("p, reasons", [
    (problem(stride=2), {"fwd_box": "stride", "fwd_rows_box": "stride"}),
    (problem(in_channels=3), {"fwd_box": "3 input channels", "fwd_rows_box": "3 input channels"}),
    (problem(filter_size=(5, 3), padding=2), {"fwd_rows_box": "a filter of 5 rows"}),
    (problem("bwd_data", stride=2), {"bwd_data_rows_box": "stride 2 along the height"}),
    (problem("bwd_weight", in_channels=6, out_channels=36, groups=3),
     {"bwd_weight_box": "groups=3 with 2 input channels", "bwd_weight_rows_box": "groups=3 with 2 input channels"}),
])
def test_each_kernels_gating_is_a_reason(p, reasons):
    """``applies`` says why a box kernel or a kernel of a filter column cannot run a problem; the registry's
    other directions' kernels say their direction."""
    issues = {name: why for name, why in REGISTRY.issues(p).items() if p.direction in REGISTRY[name].directions}
    assert set(issues) == set(reasons)
    for name, fragment in reasons.items():
        assert fragment in issues[name], issues[name]
    assert [e.name for e in candidates.kernels_for(p)] == [e.name for e in REGISTRY.for_direction(p.direction)
                                                           if e.name not in reasons]
