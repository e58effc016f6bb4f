"""Plans checked end to end on the CPU: the kernel's arithmetic replayed (``emulator.py``) on every argument
:func:`conv_gluon.plans.make_plan` computes, against conv-core's float64 reference and tolerance model.

The shapes are the issue's odd ones, small: 3, 40 and 200 channels, stride 2, dilation 2, 1x1 and 7x7
filters, groups, asymmetric padding, 1D, channel counts that are not multiples of the tile, more output
channels than one tile, bias and every activation, a float32 output; each with every kernel offered for it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conv_core.problem import ConvProblem, torch_dtype
from conv_core.reference import compare, random_operands
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, plans as plan

import emulator

TAB = configs.table("sm_90")

SHAPES = {
    "c16-3x3-gelu": dict(batch=2, in_channels=16, out_channels=24, input_size=(10, 11), filter_size=3, padding=1,
                         bias=True, activation="gelu"),
    "c3-7x7-s2-stem": dict(batch=2, in_channels=3, out_channels=20, input_size=(15, 14), filter_size=7, stride=2,
                           padding=3, bias=True, activation="relu"),
    "c40-dil2-fp16": dict(batch=1, in_channels=40, out_channels=50, input_size=(12, 9), filter_size=3, dilation=2,
                          padding=2, dtype="float16", activation="silu"),
    "groups2": dict(batch=2, in_channels=32, out_channels=48, groups=2, input_size=(7, 9), filter_size=3, padding=1,
                    bias=True, activation="gelu_tanh"),
    "groups4-c6": dict(batch=1, in_channels=24, out_channels=8, groups=4, input_size=(9, 8), filter_size=3,
                       stride=2, padding=1, activation="relu6"),
    "1x1-s2-f32out": dict(batch=2, in_channels=64, out_channels=200, input_size=(9, 10), filter_size=1, stride=2,
                          out_dtype="float32", bias=True),
    "conv1d": dict(batch=2, in_channels=16, out_channels=16, input_size=(30,), filter_size=5, padding=2, bias=True),
    "asym-pad-2x2": dict(batch=1, in_channels=8, out_channels=8, input_size=(6, 7), filter_size=2,
                         padding=((0, 2), (1, 0))),
    "c200-packed": dict(batch=1, in_channels=200, out_channels=72, input_size=(9, 9), filter_size=3, padding=1,
                        activation="gelu"),
    "k300-wide-tile": dict(batch=1, in_channels=64, out_channels=300, input_size=(6, 20), filter_size=3, padding=1,
                           bias=True),
    "m-tiles": dict(batch=3, in_channels=16, out_channels=16, input_size=(13, 13), filter_size=3, padding=1),
    "c5-1x1": dict(batch=2, in_channels=5, out_channels=7, input_size=(8, 8), filter_size=1, bias=True,
                   activation="gelu"),
}


def make(name: str) -> ConvProblem:
    fields = {"stride": 1, "padding": 0, "dilation": 1, "dtype": "bfloat16", "layout": "channels_last",
              "arch": "sm_90", **SHAPES[name]}
    return ConvProblem("fwd", **fields)


CASES = [(name, e.name) for name in SHAPES for e in REGISTRY.applicable(make(name))]


@pytest.mark.parametrize("name, kernel", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_plan_computes_the_convolution(name, kernel):
    problem = make(name)
    p = plan.make_plan(problem, kernel, configs.select(TAB, REGISTRY.family_of(kernel), problem), TAB)
    operands = random_operands(problem, "cpu", seed=1)
    x, w, bias = operands
    out = emulator.run(p, x, w, bias, problem.output_shape, torch_dtype(problem.result_dtype))
    result = compare(problem, out, operands)
    assert result.ok, f"{kernel} ({p.a_mode}, {p.config_name}): {result.message}"


def forward_plan(name: str, kernel: str) -> plan.Plan:
    return plan.make_plan(make(name), kernel, configs.select(TAB, REGISTRY.family_of(kernel), make(name)), TAB)


def test_every_kernel_and_input_mode_is_covered():
    plans = [forward_plan(n, k) for n, k in CASES]
    assert {p.a_mode for p in plans} == {"cp_async", "registers", "tma_box"}
    assert any(plan.weight_matrix(make(n), configs.select(TAB, "fwd_gather", make(n))).packed for n in SHAPES)
    columns = [p for p in plans if p.rows == 3]  # taps of a filter column sharing a tall box, dilation 1 and 2
    assert {dict(p.constexprs)["ROW_DIL"] for p in columns} == {1, 2}
    assert {p.kernel for p in plans} == {e.name for e in REGISTRY.for_direction("fwd")}


def test_the_forward_filter_column_emulator_catches_a_wrong_row_dilation():
    """``fwd_rows_box`` reads filter row ``r``'s pixels ``r ROW_DIL`` rows down its tall box: a wrong
    ``ROW_DIL`` must fail the comparison."""
    problem = make("c40-dil2-fp16")
    good = forward_plan("c40-dil2-fp16", "fwd_rows_box")
    constexprs = dict(good.constexprs)
    constexprs["ROW_DIL"] = 1
    bad = dataclasses.replace(good, constexprs=tuple(constexprs.items()))
    operands = random_operands(problem, "cpu", seed=1)
    out = emulator.run(bad, *operands, problem.output_shape, torch_dtype(problem.result_dtype))
    assert not compare(problem, out, operands).ok


def test_the_emulator_catches_a_wrong_argument():
    """A plan with one wrong scalar (the input's image stride) must fail the comparison: the check has teeth."""
    problem = make("c16-3x3-gelu")
    good = plan.make_plan(problem, "fwd_gather", configs.select(TAB, "fwd_gather", problem), TAB)
    scalars = dict(good.scalars)
    scalars["sx_n"] += problem.in_channels
    bad = plan.Plan(**{**good.__dict__, "scalars": tuple(scalars.items())})
    operands = random_operands(problem, "cpu", seed=1)
    out = emulator.run(bad, *operands, problem.output_shape, torch_dtype(problem.result_dtype))
    assert not compare(problem, out, operands).ok


def test_gelu_through_the_kernels_erfc_is_within_float32_tolerance():
    """The kernel computes gelu with its own erfc (fewer registers than libdevice's erf): error below
    2.2e-7 |x| over [-12, 12], tighter than torch's float32 gelu."""
    x = torch.linspace(-12, 12, 200_001, dtype=torch.float32)
    exact = torch.nn.functional.gelu(x.double())
    got = emulator.activation(x, emulator.ACTIVATIONS["gelu"]).double()
    assert float(((got - exact).abs() / x.double().abs().clamp_min(1e-30)).max()) < 2.2e-7


# ---- the data gradient: one forward launch per stride phase ------------------------------------------------

GRAD_SHAPES = {
    "3x3-s1": dict(batch=2, in_channels=16, out_channels=24, input_size=(10, 11), filter_size=3, padding=1),
    "3x3-s2-c40": dict(batch=2, in_channels=40, out_channels=40, input_size=(13, 12), filter_size=3, stride=2,
                       padding=1),
    "1x1-s2-zero-phases": dict(batch=2, in_channels=24, out_channels=64, input_size=(9, 8), filter_size=1, stride=2),
    "7x7-s2-c3-stem": dict(batch=1, in_channels=3, out_channels=64, input_size=(21, 20), filter_size=7, stride=2,
                           padding=3),
    "s2-dil2-no-taps": dict(batch=1, in_channels=8, out_channels=16, input_size=(15, 14), filter_size=3, stride=2,
                            dilation=2, padding=2),
    "s3-dil2": dict(batch=1, in_channels=16, out_channels=8, input_size=(16, 17), filter_size=(5, 3), stride=3,
                    dilation=2, padding=(3, 1)),
    "groups2-k5": dict(batch=2, in_channels=16, out_channels=10, groups=2, input_size=(9, 9), filter_size=3,
                       stride=2, padding=1),
    "conv1d-s3": dict(batch=2, in_channels=16, out_channels=32, input_size=(40,), filter_size=4, stride=3, padding=2),
    "asym-pad": dict(batch=1, in_channels=8, out_channels=16, input_size=(11, 7), filter_size=(3, 2), stride=(2, 1),
                     padding=((0, 2), (1, 0))),
    "k200-pad0": dict(batch=1, in_channels=64, out_channels=200, input_size=(8, 8), filter_size=3, dtype="float16"),
}


def make_grad(name: str) -> ConvProblem:
    fields = {"stride": 1, "padding": 0, "dilation": 1, "dtype": "bfloat16", "layout": "channels_last",
              "arch": "sm_90", **GRAD_SHAPES[name]}
    return ConvProblem("fwd", **fields).with_direction("bwd_data")


GRAD_CASES = [(name, e.name) for name in GRAD_SHAPES for e in REGISTRY.applicable(make_grad(name))]


@pytest.mark.parametrize("name, kernel", GRAD_CASES, ids=[f"{n}-{k}" for n, k in GRAD_CASES])
def test_data_gradient_phases_compute_the_gradient(name, kernel):
    problem = make_grad(name)
    p = plan.make_bwd_data_plan(problem, kernel, configs.select(TAB, REGISTRY.family_of(kernel), problem), TAB)
    operands = random_operands(problem, "cpu", seed=2)
    out = emulator.run_bwd_data(p, problem, *operands)
    result = compare(problem, out, operands)
    assert result.ok, f"{kernel} ({len(p.phases)} phases, {p.config_name}): {result.message}"


def test_data_gradient_covers_zero_phases_and_every_mode():
    plans = {(n, k): plan.make_bwd_data_plan(make_grad(n), k, configs.select(TAB, REGISTRY.family_of(k), make_grad(n)),
                                             TAB) for n, k in GRAD_CASES}
    assert plans["1x1-s2-zero-phases", "bwd_data_gather"].zero_phases == ((0, 1), (1, 0), (1, 1))
    four = plans["3x3-s2-c40", "bwd_data_box"]
    assert len(four.phases) == 4 and not four.zero_phases
    modes = {ph.plan.a_mode for p in plans.values() for ph in p.phases}
    assert modes == {"cp_async", "registers", "tma_box"}
    columns = [p for (_, k), p in plans.items() if k == "bwd_data_rows_box"]  # one phase, its 3 rows, into dx
    assert columns and all(len(p.phases) == 1 and p.phases[0].plan.rows == 3 for p in columns)
    assert any(dict(p.phases[0].plan.constexprs)["TMA_STORE"] for p in columns)


# ---- the weight gradient: per-tap GEMMs over the pixels, split, summed in split order --------------------------

WGRAD_SHAPES = {
    "c3-7x7-s2-stem": dict(batch=2, in_channels=3, out_channels=20, input_size=(15, 14), filter_size=7, stride=2,
                           padding=3),
    "c40-3x3-dil2": dict(batch=1, in_channels=40, out_channels=40, input_size=(12, 9), filter_size=3, dilation=2,
                         padding=2, dtype="float16"),
    "c200-1x1": dict(batch=2, in_channels=200, out_channels=72, input_size=(9, 10), filter_size=1),
    "c200-3x3-s2-k300": dict(batch=1, in_channels=200, out_channels=300, input_size=(9, 9), filter_size=3, stride=2,
                             padding=1),
    "groups2": dict(batch=2, in_channels=48, out_channels=40, groups=2, input_size=(7, 9), filter_size=3, padding=1),
    "groups4-c6-s2": dict(batch=1, in_channels=24, out_channels=8, groups=4, input_size=(9, 8), filter_size=3,
                          stride=2, padding=1),
    "k36-retina-bbox": dict(batch=2, in_channels=64, out_channels=36, input_size=(7, 7), filter_size=3, padding=1),
    # 3 output channels per group: each group's dy channels padded to their own 16-byte run (the H100 raised an
    # illegal instruction on a TMA box starting at channel 3)
    "groups2-k3-per-group": dict(batch=2, in_channels=4, out_channels=6, groups=2, input_size=(8, 8), filter_size=3,
                                 padding=1),
    "groups2-c8-k6-per-group": dict(batch=2, in_channels=16, out_channels=12, groups=2, input_size=(8, 8),
                                    filter_size=3, padding=1),
    "conv1d-s3": dict(batch=2, in_channels=16, out_channels=24, input_size=(40,), filter_size=4, stride=3,
                      padding=2),
    "asym-pad": dict(batch=1, in_channels=8, out_channels=16, input_size=(11, 7), filter_size=(3, 2), stride=(2, 1),
                     padding=((0, 2), (1, 0))),
    "c5-odd-pixels": dict(batch=3, in_channels=5, out_channels=7, input_size=(7, 6), filter_size=3, padding=1),
}


#: Problems with several k-steps, for forced splits (the table keeps small problems in one split).
SPLIT_SHAPES = {
    "c3-7x7-s2-stem-760px": dict(batch=2, in_channels=3, out_channels=16, input_size=(40, 38), filter_size=7,
                                 stride=2, padding=3),
    "c40-dil2-800px": dict(batch=2, in_channels=40, out_channels=40, input_size=(20, 20), filter_size=3, dilation=2,
                           padding=2),
    "groups2-432px": dict(batch=3, in_channels=48, out_channels=40, groups=2, input_size=(12, 12), filter_size=3,
                          padding=1, dtype="float16"),
    "k36-392px": dict(batch=2, in_channels=64, out_channels=36, input_size=(14, 14), filter_size=3, padding=1),
    "c200-k300-s2-288px": dict(batch=2, in_channels=200, out_channels=300, input_size=(24, 24), filter_size=3,
                               stride=2, padding=1),
    "conv1d-268px": dict(batch=2, in_channels=16, out_channels=24, input_size=(400,), filter_size=4, stride=3,
                         padding=2),
}


def make_wgrad(name: str) -> ConvProblem:
    fields = {"stride": 1, "padding": 0, "dilation": 1, "dtype": "bfloat16", "layout": "channels_last",
              "arch": "sm_90", **{**WGRAD_SHAPES, **SPLIT_SHAPES}[name]}
    return ConvProblem("fwd", **fields).with_direction("bwd_weight")


def wgrad_plan(name: str, kernel: str, split_steps: int | None = None) -> plan.WeightGradPlan:
    problem = make_wgrad(name)
    return plan.make_bwd_weight_plan(problem, kernel, configs.select(TAB, REGISTRY.family_of(kernel), problem), TAB,
                                     split_steps=split_steps)


WGRAD_CASES = [(name, e.name) for name in WGRAD_SHAPES for e in REGISTRY.applicable(make_wgrad(name))]


def check_wgrad(name: str, p: plan.WeightGradPlan) -> None:
    problem = make_wgrad(name)
    operands = random_operands(problem, "cpu", seed=4)
    out = emulator.run_bwd_weight(p, problem, *operands)
    result = compare(problem, out, operands)
    assert result.ok, f"{p.kernel} ({p.x_mode}, {p.config_name}, {p.splits} splits): {result.message}"


@pytest.mark.parametrize("name, kernel", WGRAD_CASES, ids=[f"{n}-{k}" for n, k in WGRAD_CASES])
def test_weight_gradient_computes_the_gradient(name, kernel):
    check_wgrad(name, wgrad_plan(name, kernel))


SPLIT_CASES = [(name, e.name, split_steps) for name in SPLIT_SHAPES
               for e in REGISTRY.applicable(make_wgrad(name)) for split_steps in (2,)]


@pytest.mark.parametrize("name, kernel, split_steps", SPLIT_CASES, ids=[f"{n}-{k}" for n, k, _ in SPLIT_CASES])
def test_weight_gradient_split_into_partials(name, kernel, split_steps):
    """Forced splits of two k-steps: float32 partials, the last split ragged where the k-steps are odd,
    summed in split order."""
    p = wgrad_plan(name, kernel, split_steps)
    assert p.split and p.splits == -(-p.grid.steps // split_steps) >= 2
    check_wgrad(name, p)


def test_forced_splits_include_ragged_ones():
    steps = [wgrad_plan(n, k, s).grid.steps for n, k, s in SPLIT_CASES]
    assert any(st % 2 for st in steps) and any(st % 2 == 0 for st in steps)


def test_the_table_splits_large_problems():
    """A RetinaNet-head layer at batch 2 has 36 (group, tap, tile) units for 132 SMs: the table splits it."""
    problem = ConvProblem("fwd", 2, 256, 256, (100, 100), 3, 1, 1, 1, dtype="bfloat16", layout="channels_last",
                          arch="sm_90").with_direction("bwd_weight")
    p = plan.make_bwd_weight_plan(problem, "bwd_weight_gather", configs.select(TAB, "bwd_weight_gather", problem),
                                  TAB)
    assert p.grid.base_units == 36 and p.splits > 1 and p.grid.num_units >= 100


def test_weight_gradient_covers_every_mode_and_both_stores():
    plans = [wgrad_plan(n, k) for n, k in WGRAD_CASES]
    assert {p.x_mode for p in plans} == {"cp_async", "registers", "tma_box"}
    assert any(dict(p.constexprs)["STAGE_OUT"] for p in plans)  # 16-bit dW staged through shared memory
    assert any(p.dy_channels != p.out_channels for p in plans)  # dy padded to 16-byte rows (36 channels)
    assert any(dict(p.constexprs)["BOX_H"] > 1 and dict(p.constexprs)["BOX_W"] > 1 for p in plans)
    rows = [p for p in plans if p.rows == 3]  # units of a filter column, at dilation 1 and 2
    assert {dict(p.constexprs)["ROW_DIL"] for p in rows} == {1, 2}


def test_the_filter_column_emulator_catches_a_wrong_row_dilation():
    """The units of a filter column take each tap's x rows from the two stacked boxes by ``ROW_DIL``: a wrong
    one must fail the comparison."""
    good = wgrad_plan("c40-3x3-dil2", "bwd_weight_rows_box")
    constexprs = dict(good.constexprs)
    constexprs["ROW_DIL"] = 1
    scalars = dict(good.scalars)
    scalars["DIL_H"] = 1
    bad = dataclasses.replace(good, constexprs=tuple(constexprs.items()), scalars=tuple(scalars.items()))
    problem = make_wgrad("c40-3x3-dil2")
    operands = random_operands(problem, "cpu", seed=4)
    assert not compare(problem, emulator.run_bwd_weight(bad, problem, *operands), operands).ok


def test_the_weight_gradient_emulator_catches_a_wrong_argument():
    """One wrong scalar (the tap's dilation) must fail the comparison."""
    good = wgrad_plan("c40-3x3-dil2", "bwd_weight_gather")
    scalars = dict(good.scalars)
    scalars["DIL_W"] = 1
    bad = dataclasses.replace(good, scalars=tuple(scalars.items()))
    problem = make_wgrad("c40-3x3-dil2")
    operands = random_operands(problem, "cpu", seed=4)
    assert not compare(problem, emulator.run_bwd_weight(bad, problem, *operands), operands).ok


def test_a_tma_store_reaching_into_the_next_group_is_caught(monkeypatch):
    """The weight gradient's TMA store clips at the result's edges only, so the plan refuses it where a tile
    would reach into the next group's output channels; allowed there anyway, the emulated store overwrites the
    next group's rows (or its result is wrong)."""
    problem = make_wgrad("groups2")
    good = wgrad_plan("groups2", "bwd_weight_gather")
    assert dict(good.constexprs)["TMA_STORE"] is False
    monkeypatch.setattr(plan.weight_grad, "weight_tma_store_issue", lambda *args: None)
    bad = wgrad_plan("groups2", "bwd_weight_gather")
    assert dict(bad.constexprs)["TMA_STORE"] is True
    operands = random_operands(problem, "cpu", seed=4)
    with pytest.raises(AssertionError, match="written twice"):
        emulator.run_bwd_weight(bad, problem, *operands)
