"""Every kind of run (:mod:`conv_gluon.launch`: what a candidate's ``run`` is) end to end on the CPU: its launch
sites replaced by the emulator, which replays each kernel launch on exactly the tensors the run hands it (the
operands; the result, a data-gradient phase writing from its ``Y_START``; the weight read in place, or its padded
or per-phase copies; ``dy`` padded; the float32 partials and their sum), checked against conv-core's float64
reference. The emulator itself is checked plan by plan in ``test_emulation.py``; this checks the plumbing."""

from __future__ import annotations

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, launch, plans as plan

import emulator

TAB = configs.table("sm_90")


def _storage(t: torch.Tensor) -> torch.Tensor:
    """A dense tensor's elements in memory order (a view: writes land in ``t``)."""
    return t.as_strided((t.numel(),), (1,))


def _written(flat: torch.Tensor, into: torch.Tensor) -> None:
    """Copy what the emulator wrote (not NaN) into the tensor the kernel would have written."""
    done = ~torch.isnan(flat)
    _storage(into)[done] = flat[done].to(into.dtype)


def _matrix(base: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A descriptor's ``[rows, cols]`` matrix as the TMA reads it from its base's address."""
    return base.as_strided((rows, cols), (cols, 1)).double()


def emulated_forward_site(p: plan.Plan, dtypes, sms):
    def launch_(tensors):  # by role, as the sites take them (plans.forward.POINTERS)
        y = tensors["out"]
        flat = torch.full((y.numel(),), float("nan"), dtype=torch.float64)
        bias = tensors["bias"] if dict(p.constexprs)["HAS_BIAS"] else None
        emulator.launch(p, _storage(tensors["a"]).double(), _matrix(tensors["weight"], *p.w_map.shape), bias, flat)
        _written(flat, y)
    return launch_


def emulated_weight_grad_sites(p: plan.WeightGradPlan, dtypes, sms):
    def units(tensors):  # by role (plans.weight_grad.POINTERS)
        target = tensors["target"]
        dym = _matrix(tensors["dy"], p.pixels, p.dy_channels)
        _written(emulator.run_units(p, _storage(tensors["a"]).double(), dym), target)

    def total(tensors):  # plans.weight_grad.SUM_POINTERS
        _written(emulator.sum_splits(p, tensors["target"].double()), tensors["out"])
    return units, total if p.split else None


CASES = {
    "fwd gather, padded weight": (ConvProblem("fwd", 2, 40, 36, (9, 11), 3, 1, 1, 1, bias=True, activation="gelu"),
                                  "fwd_gather"),
    "fwd box, weight in place": (ConvProblem("fwd", 2, 64, 24, (10, 12), 3, 1, 1, 1), "fwd_box"),
    "fwd rows, TMA store": (ConvProblem("fwd", 1, 64, 128, (12, 10), 3, 1, 1, 1, bias=True), "fwd_rows_box"),
    "bwd_data stride 2, phases": (ConvProblem("bwd_data", 2, 40, 24, (9, 8), 3, 2, 1, 1), "bwd_data_gather"),
    "bwd_data 1x1 stride 2, zeroed phases": (ConvProblem("bwd_data", 2, 16, 24, (7, 8), 1, 2, 0, 1), "bwd_data_box"),
    "bwd_data rows": (ConvProblem("bwd_data", 1, 24, 64, (10, 9), 3, 1, 1, 1), "bwd_data_rows_box"),
    "bwd_weight split, padded dy": (ConvProblem("bwd_weight", 4, 24, 36, (16, 16), 3, 1, 1, 1), "bwd_weight_gather"),
    "bwd_weight box, whole": (ConvProblem("bwd_weight", 1, 16, 24, (8, 8), 3, 1, 1, 1), "bwd_weight_box"),
    "fwd 3D gather": (ConvProblem("fwd", 2, 8, 12, (4, 5, 6), 3, (2, 1, 1), 1, 1, bias=True), "fwd_gather"),
    "bwd_data 3D stride 2, zeroed depth phases": (ConvProblem("bwd_data", 1, 16, 8, (5, 6, 5), (1, 3, 3), 2,
                                                              (0, 1, 1), 1), "bwd_data_gather"),
    "bwd_weight 3D split, padded dy": (ConvProblem("bwd_weight", 2, 16, 36, (4, 6, 6), 3, 1, 1, 1),
                                       "bwd_weight_gather"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_run_hands_its_launches_the_right_tensors(name, monkeypatch):
    monkeypatch.setattr("conv_gluon.sites.forward_site", emulated_forward_site)
    monkeypatch.setattr("conv_gluon.sites.weight_grad_sites", emulated_weight_grad_sites)
    problem, kernel = CASES[name]
    problem = problem.replace(dtype="float16", weight_dtype="float16", out_dtype="float16", arch="sm_90",
                              layout="channels_last")
    make = {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
            "bwd_weight": plan.make_bwd_weight_plan}[problem.direction]
    config = configs.select(TAB, REGISTRY.family_of(kernel), problem)
    if "split" in name:  # a split small enough to replay: one k-step per split
        p = plan.make_bwd_weight_plan(problem, kernel, config, TAB, split_steps=1)
        assert p.split and p.dy_channels != p.out_channels
    else:
        p = make(problem, kernel, config, TAB)
    run = launch.runner(problem, p)
    operands = random_operands(problem, torch.device("cpu"), 1)
    out = run(*operands)
    result = compare(problem, out, operands)
    assert result.ok, result.message
    poisoned = torch.full_like(out, float("nan"))
    assert run(*operands, out=poisoned) is poisoned and torch.equal(poisoned, out)  # every element written
