"""The candidates hook: the entry point, which kernels are offered, every decline and its reason, tags and
estimates. The hook reads only the device type and ``problem.arch``, so none of this needs a GPU."""

from __future__ import annotations

import conv_core
import pytest
import torch
from conv_core.candidate import Candidate, check_candidate
from conv_core.estimate import roofline_us
from conv_core.problem import ConvProblem
from conv_core.testing.plugin_checks import the_decline
from conv_core.tuning import read_entries
from conv_gluon.registry import REGISTRY
from conv_gluon import candidates, estimates, hooks, toolchain
from conv_gluon import plans as plan

CUDA = torch.device("cuda")  # only its type is read
CPU = torch.device("cpu")


def problem(**fields) -> ConvProblem:
    base = dict(batch=2, in_channels=64, out_channels=64, input_size=(16, 16), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="bfloat16", layout="channels_last", arch="sm_90")
    return ConvProblem("fwd", **{**base, **fields})


def answer(p: ConvProblem, device=CUDA) -> list:
    return candidates.candidates(p, device)


def declined(p: ConvProblem, device=CUDA) -> str:
    return the_decline(answer(p, device))


def test_backend_loads_through_its_entry_point():
    backend = conv_core.get_engine().registry.get("gluon")
    assert backend is not None and backend.ok, getattr(backend, "load_error", None)
    info = hooks.conv_core_backend_info()
    assert info.name == "gluon" and info.targets == ("sm_90",)
    (table,) = hooks.conv_core_tuning_tables()  # measured on the H100 (docs/benchmarks)
    entries = read_entries(table)
    assert table.name == "gluon_sm_90.json" and entries
    assert all(e.kernel.startswith("gluon:") and e.arch == "sm_90" and e.us > 0 for e in entries)


@pytest.mark.parametrize("p, kernels", [
    (problem(), ["fwd_gather", "fwd_box", "fwd_rows_box"]),  # a 3-row filter: its columns' taps share a tall box
    (problem(stride=2), ["fwd_gather"]),  # boxes need stride 1
    (problem(in_channels=3), ["fwd_gather"]),  # 6-byte pixels: no TMA box
    (problem(in_channels=40, dilation=2, padding=2), ["fwd_gather", "fwd_box", "fwd_rows_box"]),
    (problem(filter_size=(5, 3), padding=2), ["fwd_gather", "fwd_box"]),  # columns of 3 rows only
    (problem(in_channels=48, out_channels=48, groups=2), ["fwd_gather"]),  # 24 channels per group straddle a block
    # 16 per group: whole blocks
    (problem(in_channels=64, out_channels=64, groups=4), ["fwd_gather", "fwd_box", "fwd_rows_box"]),
    (problem(input_size=(30,), filter_size=5, padding=2), ["fwd_gather", "fwd_box"]),  # 1D
    (problem(dtype="float16", out_dtype="float32", bias=True, activation="gelu_tanh"),
     ["fwd_gather", "fwd_box", "fwd_rows_box"]),
    (problem().with_direction("bwd_data"), ["bwd_data_gather", "bwd_data_box", "bwd_data_rows_box"]),
    # phases: stride 1, but of fewer than 3 filter rows
    (problem(stride=2).with_direction("bwd_data"), ["bwd_data_gather", "bwd_data_box"]),
    (problem(stride=(1, 2)).with_direction("bwd_data"),  # every phase keeps the 3 rows
     ["bwd_data_gather", "bwd_data_box", "bwd_data_rows_box"]),
    (problem(out_channels=36).with_direction("bwd_data"), ["bwd_data_gather"]),  # dy pixels of 72 bytes
    (problem(in_channels=3, filter_size=7, stride=2, padding=3).with_direction("bwd_data"),
     ["bwd_data_gather", "bwd_data_box"]),
    (problem().with_direction("bwd_weight"), ["bwd_weight_gather", "bwd_weight_box", "bwd_weight_rows_box"]),
    (problem(stride=2).with_direction("bwd_weight"), ["bwd_weight_gather"]),  # x boxes need stride 1
    (problem(in_channels=3, filter_size=7, stride=2, padding=3).with_direction("bwd_weight"), ["bwd_weight_gather"]),
    (problem(in_channels=36).with_direction("bwd_weight"), ["bwd_weight_gather"]),  # 72-byte x pixels
    (problem(out_channels=36).with_direction("bwd_weight"),
     ["bwd_weight_gather", "bwd_weight_box", "bwd_weight_rows_box"]),  # dy padded
    # 24 channels per group: a box reads into the next group, harmless here (they are M and N, not reduced)
    (problem(in_channels=48, out_channels=48, groups=2).with_direction("bwd_weight"),
     ["bwd_weight_gather", "bwd_weight_box", "bwd_weight_rows_box"]),
    # units of a filter column need 3 filter rows and, at dilation 3, a box of 6 rows of 16 pixels
    (problem(filter_size=(5, 3), padding=2).with_direction("bwd_weight"), ["bwd_weight_gather", "bwd_weight_box"]),
    (problem(dilation=3, padding=3).with_direction("bwd_weight"), ["bwd_weight_gather", "bwd_weight_box"]),
    (problem(input_size=(30,), filter_size=5, padding=2, dtype="float16").with_direction("bwd_weight"),
     ["bwd_weight_gather", "bwd_weight_box"]),
    # 3D (NDHWC): the gathering kernels in every direction; the boxes at stride 1 in the plane, not a filter
    # column's (plans.BOXES_3D; experimental until measured: test_a_3d_box_is_experimental_until_measured)
    (problem(input_size=(5, 6, 7)), ["fwd_gather", "fwd_box"]),
    (problem(input_size=(5, 6, 7), stride=(2, 1, 1), padding=(0, 1, 1)), ["fwd_gather", "fwd_box"]),
    (problem(input_size=(5, 6, 7), stride=(1, 2, 2)), ["fwd_gather"]),
    (problem(input_size=(5, 6, 7)).with_direction("bwd_data"), ["bwd_data_gather", "bwd_data_box"]),
    (problem(input_size=(5, 6, 7)).with_direction("bwd_weight"), ["bwd_weight_gather", "bwd_weight_box"]),
    (problem(input_size=(5, 6, 7), stride=2).with_direction("bwd_data"), ["bwd_data_gather", "bwd_data_box"]),
    (problem(input_size=(1, 6, 7)).with_direction("bwd_weight"), ["bwd_weight_gather", "bwd_weight_box"]),
    (problem(input_size=(5, 6, 7), stride=(1, 2, 1)).with_direction("bwd_weight"), ["bwd_weight_gather"]),
])
def test_kernels_offered(p, kernels):
    items = answer(p)
    assert [c.kernel for c in items] == kernels
    for c in items:
        assert check_candidate(c, "gluon") is c


@pytest.mark.parametrize("p, device, words", [
    (problem(), CPU, "device type 'cpu'"),
    (problem(), torch.device("meta"), "device type 'meta'"),
    (problem(arch="sm_80"), CUDA, "compute capability 8.0 (sm_80) is below 9.0"),
    (problem(arch="sm_89"), CUDA, "compute capability 8.9"),
    (problem(arch="sm_100"), CUDA, "wgmma exists on Hopper (9.x) only"),
    (problem(arch="sm_120"), CUDA, "compute capability 12.0"),
    (problem(arch="gfx942"), CUDA, "not an NVIDIA GPU"),
    (problem().with_direction("bwd_weight").replace(out_dtype="float32"), CUDA,
     "output gradient dtype float32 differs"),
    (problem(dtype="float32").with_direction("bwd_weight"), CUDA, "input dtype float32 is not supported"),
    (problem(layout="channels_first").with_direction("bwd_weight"), CUDA, "layout channels_first"),
    (problem(arch="sm_80").with_direction("bwd_weight"), CUDA, "below 9.0"),
    (problem(dtype="float32"), CUDA, "input dtype float32 is not supported"),
    (problem(dtype="float64"), CUDA, "input dtype float64"),
    (problem(weight_dtype="float16"), CUDA, "mixed operands"),
    (problem(out_dtype="float64"), CUDA, "result dtype float64"),
    (problem(layout="channels_first"), CUDA, "layout channels_first is not supported"),
])
def test_declines_with_a_reason(p, device, words):
    assert words in declined(p, device)


def test_3d_box_kernels_other_than_plans_boxes_3d_decline_naming_those():
    p = problem(input_size=(5, 6, 7))
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        q = p if direction == "fwd" else p.with_direction(direction)
        for entry in REGISTRY.for_direction(direction)[1:]:
            if entry.name in plan.BOXES_3D:
                assert entry.issue(q) is None, entry.name
            else:
                assert "take 3D so far" in entry.issue(q) and "fwd_box" in entry.issue(q), entry.name


def test_sm_90a_is_hopper_too():
    assert candidates.arch_issue("sm_90a") is None and candidates.arch_issue("sm_90") is None


@pytest.mark.parametrize("what, fields", [
    ("input", dict(batch=1024, in_channels=256, input_size=(128, 128))),  # 4.3e9 elements
    ("output", dict(batch=512, in_channels=8, out_channels=512, input_size=(96, 96))),  # 2.4e9
    ("weight", dict(in_channels=16384, out_channels=16384, input_size=(4, 4))),  # 2.4e9
])
def test_tensors_beyond_32_bit_offsets_are_declined(what, fields):
    assert f"the {what} has" in declined(problem(**fields))


def test_padded_weight_beyond_32_bit_offsets_is_declined():
    """15 channels per tap pad to 16: a weight below the limit (15e6 x 135 elements) exceeds it once padded
    (x 144); 14e6 output channels still fit."""
    fields = dict(in_channels=15, input_size=(3, 3), padding=0)
    assert "the padded weight has" in declined(problem(out_channels=15_000_000, **fields))
    assert isinstance(answer(problem(out_channels=14_000_000, **fields))[0], Candidate)


def test_missing_gluon_is_a_decline_naming_it(monkeypatch):
    monkeypatch.setitem(toolchain.REQUIRED, "triton.experimental.gluon.language", ("warp_specialize", "no_such_op"))
    toolchain.gluon_issue.cache_clear()
    try:
        reason = declined(problem())
    finally:
        toolchain.gluon_issue.cache_clear()
    assert "no_such_op" in reason and "triton" in reason


def test_the_installed_triton_has_everything():
    toolchain.gluon_issue.cache_clear()
    assert toolchain.gluon_issue() is None


def test_missing_module_is_a_decline(monkeypatch):
    monkeypatch.setitem(toolchain.REQUIRED, "triton.experimental.gluon_that_does_not_exist", ("x",))
    toolchain.gluon_issue.cache_clear()
    try:
        assert "gluon_that_does_not_exist" in declined(problem())
    finally:
        toolchain.gluon_issue.cache_clear()


def tags(c: Candidate, *extra: str) -> set[str]:
    """The tags ``c`` must have: its own ``extra`` ones, and ``experimental`` unless its family was swept."""
    from conv_gluon import configs

    unmeasured = not configs.table("sm_90").is_measured(REGISTRY.family_of(c.kernel))
    return {"deterministic", "cuda_graph_safe", *extra, *(["experimental"] if unmeasured else [])}


def test_data_gradient_tags_and_workspace():
    """The phases read transposed, flipped copies of the weight: always a workspace, the weight's taps once."""
    p = problem(stride=2).with_direction("bwd_data")
    for c in answer(p):
        assert c.tags == tags(c, "needs_workspace")
        assert c.workspace_bytes == 64 * 9 * 64 * 2  # every tap in exactly one phase; 64 output channels


def test_weight_gradient_tags_and_workspace():
    """Split problems need float32 partials (one per split, each tap's channels padded to 16); dy of 36
    channels a padded copy; a small problem with whole 16-byte dy rows needs nothing."""
    from conv_gluon import configs, plans as plan

    tab = configs.table("sm_90")
    small = answer(problem(batch=1, input_size=(8, 8)).with_direction("bwd_weight"))
    for c in small:
        p = c.run.plan
        assert not p.split and c.workspace_bytes == 0
        assert c.tags == tags(c)
    big = problem(batch=32, in_channels=40, out_channels=36, input_size=(56, 56)).with_direction("bwd_weight")
    for c in answer(big):
        p = c.run.plan
        assert p.split and p.c_pad == 48 and p.dy_channels == 40
        assert c.workspace_bytes == p.splits * 36 * 9 * 48 * 4 + 32 * 56 * 56 * 40 * 2
        assert c.workspace_bytes <= tab.weight_grad.max_workspace_bytes + p.dy_copy_bytes
        assert "needs_workspace" in c.tags and "deterministic" in c.tags and "atomics" not in c.tags
        assert isinstance(p, plan.WeightGradPlan)


def test_tags():
    for c in answer(problem(in_channels=64)):  # 64 channels: no padded copy
        assert c.tags == tags(c) and c.workspace_bytes == 0
    padded = answer(problem(in_channels=40))  # 40 channels pad to 64 per tap: a cached weight copy
    for c in padded:
        assert "needs_workspace" in c.tags and c.workspace_bytes == 64 * 9 * 64 * 2


def test_a_3d_box_is_experimental_until_measured():
    """3D boxes have not run on the hardware: never ranked ahead of a kernel that has."""
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        flat = answer(problem().with_direction(direction))
        deep = answer(problem(input_size=(5, 6, 7)).with_direction(direction))
        assert [c.kernel for c in deep] == [f"{direction}_gather", f"{direction}_box"]
        assert [("experimental" in c.tags) for c in deep] == [False, True]
        assert not any("experimental" in c.tags for c in flat)


def test_ids_are_stable_and_name_the_configuration():
    first = [c.kernel_id for c in answer(problem())]
    assert first == [c.kernel_id for c in answer(problem())]
    assert first == ["gluon:fwd_gather:m128n64k64s6w4g8", "gluon:fwd_box:m128n64k64s6w4g8",
                     "gluon:fwd_rows_box:m128n64k64s8w4g8"]


def test_estimates_are_finite_and_above_the_roofline():
    for p in (problem(), problem(in_channels=3, filter_size=7, stride=2, padding=3), problem(batch=32)):
        for q in (p, p.with_direction("bwd_weight")):
            for c in answer(q):
                assert max(roofline_us(q)) < c.estimate_us < float("inf")


def test_weight_gradient_estimate_charges_its_partials():
    """A split per k-step (hundreds of float32 partials) is charged their round trip through memory: slower
    than the table's choice of splits, which is itself above the roofline."""
    from conv_gluon import configs, plans as plan

    tab = configs.table("sm_90")
    p = problem(batch=2, in_channels=256, out_channels=256, input_size=(100, 100)).with_direction("bwd_weight")
    config = configs.select(tab, "bwd_weight_gather", p)
    split = plan.make_bwd_weight_plan(p, "bwd_weight_gather", config, tab)
    assert split.split
    more = plan.make_bwd_weight_plan(p, "bwd_weight_gather", config, tab, split_steps=1)
    charged = estimates.weight_grad_estimate
    assert charged(p, more, tab) > charged(p, split, tab) > max(roofline_us(p))


def test_estimates_charge_padding_lanes():
    """3 channels in 16-wide reduction blocks: slower per flop than 64 channels."""
    wide, thin = problem(batch=32), problem(batch=32, in_channels=3)
    per_flop = {p: answer(p)[0].estimate_us / p.flops for p in (wide, thin)}
    assert per_flop[thin] > 4 * per_flop[wide]


def test_experimental_only_while_the_table_is_unmeasured():
    import dataclasses

    from conv_gluon import configs, plans as plan

    unmeasured = dataclasses.replace(configs.table("sm_90"), measured=False, layers={})
    p = plan.make_plan(problem(), "fwd_box", configs.select(unmeasured, "fwd_box", problem()), unmeasured)
    assert "experimental" in candidates.tags(p, unmeasured)
    assert "experimental" not in candidates.tags(p, dataclasses.replace(unmeasured, measured=True))
