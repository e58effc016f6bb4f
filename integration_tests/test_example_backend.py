"""The example backend, written from docs/writing-a-backend.md, is ranked, explained, run and correct."""

from __future__ import annotations

import pytest
import torch
from integration_support import (ATEN_KERNEL, CPU, EXAMPLE, EXAMPLE_KERNEL, TABLE_PROBLEM_KEY, call_args,
                                 small_problem, torch_conv)

import conv_core
from conv_core import ConvProblem
from conv_core.explanation import explain
from conv_core.problem import torch_dtype
from conv_core.layout import is_dense_in
from conv_core.reference import compare, random_operands


@pytest.fixture
def kernel_calls(monkeypatch):
    """Count the example kernel's runs: proves a result came from the plugin, not from aten.

    The hook binds ``kernel.forward`` when it creates a candidate, so patching
    it before the first ranking (each test starts with a fresh engine) is enough.
    """
    from conv_example import kernel

    calls = []
    original = kernel.forward

    def counting(problem, *args, **kwargs):
        calls.append(problem)
        return original(problem, *args, **kwargs)

    monkeypatch.setattr(kernel, "forward", counting)
    return calls


# ---- ranking ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_example_is_ranked_first_on_small_cpu_problems(dtype, layout):
    problem = small_problem(dtype=dtype, layout=layout, bias=True, activation="relu")
    ranking = conv_core.get_engine().ranking(problem, CPU)
    ids = [r.kernel_id for r in ranking.ranked]
    assert ids[0] == EXAMPLE_KERNEL and ATEN_KERNEL in ids
    assert ranking.best.source == "estimate"
    assert ranking.best.us < next(r.us for r in ranking.ranked if r.kernel_id == ATEN_KERNEL)


def test_explain_shows_example_first_with_its_estimate():
    problem = small_problem()
    explanation = explain(problem, device="cpu")
    assert explanation.picked == EXAMPLE_KERNEL
    data = explanation.to_dict()
    assert data["problem"] == problem.key
    first, *rest = data["ranked"]
    assert (first["kernel"], first["source"], first["rank"]) == (EXAMPLE_KERNEL, "estimate", 1)
    assert first["tags"] == ["needs_workspace"]
    assert ATEN_KERNEL in [row["kernel"] for row in rest]
    assert any(f["backend"] == "broken_import" for f in data["failed_backends"])
    table = [line.split() for line in str(explanation).splitlines()]
    rows = [cells for cells in table if cells and cells[0].isdigit()]  # "rank kernel time source ..." rows
    assert [cells[:2] for cells in rows[:1]] == [["1", EXAMPLE_KERNEL]] and rows[0][3] == "estimate"
    assert ATEN_KERNEL in [cells[1] for cells in rows[1:]]


def test_explain_shows_the_example_declining():
    explanation = explain(small_problem(groups=2), device="cpu")
    assert explanation.picked == ATEN_KERNEL
    reasons = {d["backend"]: d["reason"] for d in explanation.to_dict()["declined"]}
    assert reasons[EXAMPLE] == "groups=2: only groups=1 is implemented"
    assert "example: groups=2: only groups=1 is implemented" in str(explanation)


def test_shipped_table_time_outranks_the_estimate():
    problem = ConvProblem.from_key(TABLE_PROBLEM_KEY)
    ranking = conv_core.get_engine().ranking(problem, CPU)
    assert (ranking.best.kernel_id, ranking.best.us, ranking.best.source) == (EXAMPLE_KERNEL, 1.5, "table:example")
    # the table is keyed by the exact problem: the same shape in channels-last gets the estimate
    other = conv_core.get_engine().ranking(problem.replace(layout="channels_last"), CPU)
    assert other.best.source == "estimate"


# ---- declines -----------------------------------------------------------------------------------------


DECLINES = {
    "groups": (small_problem(groups=2), "groups=2: only groups=1 is implemented"),
    "bwd_data": (small_problem(direction="bwd_data"), "forward only; bwd_data is left to other backends"),
    "bwd_weight": (small_problem(direction="bwd_weight"), "forward only; bwd_weight is left to other backends"),
    "1d": (small_problem(input_size=(10,), filter_size=3), "2D only; this problem is 1D"),
    "3d": (small_problem(input_size=(6, 6, 6), filter_size=3), "2D only; this problem is 3D"),
    "float64": (small_problem(dtype="float64"), "dtypes ['float64']: supported are float16, bfloat16, float32"),
    "too-large": (small_problem(batch=64, in_channels=64, input_size=(64, 64)),
                  "im2col buffer of 576 MiB exceeds the 64 MiB limit"),
}


@pytest.mark.parametrize("problem, reason", DECLINES.values(), ids=DECLINES.keys())
def test_example_declines_with_a_reason(problem, reason):
    candidates, declined = conv_core.get_engine().registry.candidates(problem, CPU, only=EXAMPLE)
    assert candidates == []
    assert len(declined) == 1 and declined[0].backend == EXAMPLE and declined[0].reason.startswith(reason)


def test_example_declines_other_devices():
    _, declined = conv_core.get_engine().registry.candidates(small_problem(arch="sm_90"), torch.device("cuda"),
                                                             only=EXAMPLE)
    assert [d.reason for d in declined] == ["CPU only (device is cuda)"]


def test_declined_problems_still_run_elsewhere(kernel_calls):
    x, w = torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3)
    y = conv_core.conv2d(x, w, padding=1, groups=2)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1, groups=2))
    assert kernel_calls == []


# ---- running ------------------------------------------------------------------------------------------


RUN_CASES = {
    "3x3": small_problem(),
    "stride2": small_problem(input_size=(11, 11), stride=2),
    "stride-2x3-dilation-2x1": small_problem(input_size=(13, 12), stride=(2, 3), dilation=(2, 1), padding=2),
    "asymmetric-padding": small_problem(input_size=(7, 6), padding=((1, 0), (0, 2))),
    "asymmetric-padding-stride": small_problem(input_size=(9, 8), stride=2, padding=((2, 1), (0, 3))),
    "1x1": small_problem(filter_size=1, padding=0),
    "filter-fills-input": small_problem(input_size=(5, 4), filter_size=(5, 4), padding=0),
    "5x1-channels-last": small_problem(filter_size=(5, 1), padding=(2, 0), layout="channels_last"),
    "batch1-cin1": small_problem(batch=1, in_channels=1),
    "bias": small_problem(bias=True),
    **{f"bias-{act}": small_problem(bias=True, activation=act, layout=layout)
       for act, layout in [("relu", "channels_first"), ("relu6", "channels_last"), ("gelu", "channels_first"),
                           ("gelu_tanh", "channels_last"), ("silu", "channels_first")]},
    "fp16": small_problem(dtype="float16", bias=True, activation="silu"),
    "bf16-channels-last": small_problem(dtype="bfloat16", layout="channels_last", stride=2, input_size=(12, 10)),
    "fp16-fp32-out": small_problem(dtype="float16", out_dtype="float32", bias=True),
    "bf16-fp32-out-channels-last": small_problem(dtype="bfloat16", out_dtype="float32", layout="channels_last"),
}


@pytest.mark.parametrize("problem", RUN_CASES.values(), ids=RUN_CASES.keys())
def test_conv2d_runs_example_and_matches_float64_reference(problem, kernel_calls):
    x, w, bias = random_operands(problem, CPU, seed=1)
    with torch.no_grad():
        y = conv_core.conv2d(x, w, bias, **call_args(problem))
    assert kernel_calls == [problem], "the call did not go through the example backend"
    assert y.dtype == torch_dtype(problem.result_dtype) and tuple(y.shape) == problem.result_shape
    assert is_dense_in(y, problem.layout)
    ranking = conv_core.get_engine().ranking(problem, CPU)
    result = compare(problem, y, (x, w, bias), ranking.best.candidate)
    assert result.ok, result.message
    # and independently of conv-core's reference: PyTorch's own float64 convolution
    tolerance = 1e-4 if problem.dtype == problem.out_dtype == "float32" else 2e-2
    torch.testing.assert_close(y.double(), torch_conv(x, w, bias, problem), rtol=tolerance, atol=tolerance)


def test_candidate_run_writes_into_out():
    problem = small_problem(bias=True, activation="relu", layout="channels_last")
    (candidate,), _ = conv_core.get_engine().registry.candidates(problem, CPU, only=EXAMPLE)
    operands = random_operands(problem, CPU, seed=2)
    out = problem.empty_result(CPU).fill_(float("nan"))
    assert candidate.run(*operands, out=out) is out
    assert compare(problem, out, operands, candidate).ok


def test_gradients_flow_through_other_backends(kernel_calls):
    """Forward-only is fine: the backward problems go to whoever offers them (aten here)."""
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    w = torch.randn(6, 4, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    y = conv_core.conv2d(x, w, b, stride=2, padding=((1, 0), (2, 1)), activation="relu")
    y.square().sum().backward()
    assert len(kernel_calls) == 1
    x2, w2, b2 = (t.detach().double().requires_grad_() for t in (x, w, b))  # float64 autograd as the reference
    y2 = torch.relu(torch.nn.functional.conv2d(torch.nn.functional.pad(x2, (2, 1, 1, 0)), w2, b2, stride=2))
    y2.square().sum().backward()
    torch.testing.assert_close(y.double(), y2, rtol=1e-5, atol=1e-5)
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_hot_path_reuses_the_choice(kernel_calls):
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    first = conv_core.conv2d(x, w, padding=1)
    second = conv_core.conv2d(x, w, padding=1)
    torch.testing.assert_close(first, second)
    assert len(kernel_calls) == 2 and kernel_calls[0] is kernel_calls[1]  # one problem, one bound candidate


def test_torch_compile_fullgraph_runs_the_plugin(kernel_calls):
    """The custom ops carry the call through torch.compile; the plugin needs nothing for it. (Asked for by name: on
    its own merits a plugin this small stays Inductor's convolution in a compiled graph.)"""
    x, w, b = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6)

    def f(x, w, b):
        return conv_core.conv2d(x, w, b, padding=1, activation="relu", backend="example") * 2

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    with torch.no_grad():
        got = compiled(x, w, b)
    torch.testing.assert_close(got, torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1)) * 2)
    assert kernel_calls, "the compiled call did not reach the example backend"
