"""aten's fused cuDNN candidate (convolution + bias + ReLU in one operator): where it is offered, that it calls
cuDNN's operator with its arguments in order, how it is ranked (timed on the problem itself, never by estimate),
and the route that calls it as a direct route calls ``F.conv2d``.

cuDNN does not run here: ``torch.cudnn_convolution_relu`` is replaced by what it computes, ``relu(conv2d + bias)``,
and the candidate is let onto the CPU where a test says so."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import pytest

import conv_core
from conv_core import functional
from conv_core.backends import aten
from conv_core.frontend.call import problem_of_tensors
from conv_core.ranking import BARE, rank
from conv_core.testing.fakes import isolate, prove_faster, use_backends
from conv_core.tuning import Timing

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


@pytest.fixture
def cudnn_here(monkeypatch):
    """cuDNN's fused operator as what it computes, recording its calls, offered on this CPU."""
    calls = []

    def fused(x, w, bias, stride, padding, dilation, groups):
        calls.append((tuple(stride), tuple(padding), tuple(dilation), groups))
        return torch.relu(F.conv2d(x, w, bias, stride, padding, dilation, groups))

    def fused_add(x, w, z, alpha, bias, stride, padding, dilation, groups):
        calls.append(("add", tuple(stride), tuple(padding), tuple(dilation), groups))
        return torch.relu(F.conv2d(x, w, bias, stride, padding, dilation, groups) + alpha * z)

    monkeypatch.setattr(torch, "cudnn_convolution_relu", fused)
    monkeypatch.setattr(torch, "cudnn_convolution_add_relu", fused_add)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "enabled", True)
    monkeypatch.setattr(torch.version, "hip", None)
    applies = aten._cudnn_relu_applies
    monkeypatch.setattr(aten, "_cudnn_relu_applies", lambda problem, device: applies(problem, CUDA))
    return calls


def operands(dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(2, 8, 9, 7, generator=g), torch.randn(6, 4, 3, 3, generator=g), torch.randn(6, generator=g))
    return [t.to(dtype).requires_grad_(grad) for t in (x, w, b)]


def kernel_ids(problem, device):
    return [c.kernel_id for c in aten.conv_core_candidates(problem, device)]


def test_offered_for_a_2d_inference_problem_with_bias_and_relu_on_nvidia_gpus_only(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    x, w, b = operands(torch.bfloat16)
    fused = problem_of_tensors(x, w, b, padding=1, groups=2, activation="relu")
    assert kernel_ids(fused, CUDA) == ["aten:native:default", aten.CUDNN_RELU_ID]
    assert kernel_ids(fused, torch.device("cpu")) == ["aten:native:default"]
    for other in (problem_of_tensors(x, w, None, padding=1, groups=2, activation="relu"),  # no bias
                  problem_of_tensors(x, w, b, padding=1, groups=2, activation="gelu"),
                  problem_of_tensors(x, w, b, padding=1, groups=2),
                  problem_of_tensors(x, w, b.float(), padding=1, groups=2, activation="relu", out_dtype=torch.float32),
                  problem_of_tensors(x, w, b, padding=((0, 1), (1, 1)), groups=2, activation="relu"),
                  fused.with_direction("bwd_data")):
        assert kernel_ids(other, CUDA) == ["aten:native:default"], other.key
    monkeypatch.setattr(torch.version, "hip", "6.2")  # MIOpen: no such operator
    assert kernel_ids(fused, CUDA) == ["aten:native:default"]


def test_it_calls_cudnns_operator_with_the_problems_geometry(cudnn_here):
    x, w, b = operands()
    problem = problem_of_tensors(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2,
                                 activation="relu")
    (_, fused) = aten.conv_core_candidates(problem, CUDA)
    y = fused.run(x, w, b)
    assert cudnn_here == [((2, 1), (1, 2), (1, 2), 2)]
    torch.testing.assert_close(y, torch.relu(F.conv2d(x, w, b, (2, 1), (1, 2), (1, 2), 2)))


def test_the_operators_arguments_are_as_conv_core_passes_them():
    names = {op: [a.name for a in getattr(torch.ops.aten, op).default._schema.arguments]
             for op in ("cudnn_convolution_relu", "cudnn_convolution_add_relu")}
    assert names == {"cudnn_convolution_relu": ["self", "weight", "bias", "stride", "padding", "dilation", "groups"],
                     "cudnn_convolution_add_relu": ["self", "weight", "z", "alpha", "bias", "stride", "padding",
                                                    "dilation", "groups"]}


def test_it_runs_only_where_timed_faster_than_the_native_call(cudnn_here, monkeypatch):
    """Unmeasured, its estimate keeps it behind F.conv2d; measured faster on the problem, it ranks first."""
    engine = use_backends(monkeypatch)
    x, w, b = operands()
    problem = problem_of_tensors(x, w, b, padding=1, groups=2, activation="relu")
    assert engine.ranking(problem, x.device).best.kernel_id == "aten:native:default"
    prove_faster(engine, [problem], [aten.CUDNN_RELU_ID], aten_us=300.0, us=200.0)
    assert engine.ranking(problem, x.device).best.kernel_id == aten.CUDNN_RELU_ID


def test_a_call_without_gradients_runs_the_operator_itself_and_one_with_them_trains_through_the_engine(
        cudnn_here, monkeypatch):
    engine = use_backends(monkeypatch)
    x, w, b = operands()
    problem = problem_of_tensors(x, w, b, padding=1, groups=2, activation="relu")
    prove_faster(engine, [problem], [aten.CUDNN_RELU_ID], aten_us=300.0, us=200.0)
    expected = torch.relu(F.conv2d(x, w, b, padding=1, groups=2))
    with torch.no_grad():
        y = conv_core.conv2d(x, w, b, padding=1, groups=2, activation="relu")
    torch.testing.assert_close(y, expected)
    assert len(cudnn_here) == 1

    xg, wg, bg = operands(grad=True)
    y = conv_core.conv2d(xg, wg, bg, padding=1, groups=2, activation="relu")
    assert type(y.grad_fn).__name__ != "ReluBackward0"  # conv-core's autograd, the operator in its forward
    y.square().sum().backward()
    xr, wr, br = operands(grad=True)
    torch.relu(F.conv2d(xr, wr, br, padding=1, groups=2)).square().sum().backward()
    for got, want in ((xg, xr), (wg, wr), (bg, br)):
        torch.testing.assert_close(got.grad, want.grad)


def test_a_time_of_the_problem_itself_outranks_a_tables_time_of_it_without_its_epilogue():
    x, w, b = operands()
    problem = problem_of_tensors(x, w, b, padding=1, groups=2, activation="relu")
    (native,) = aten.conv_core_candidates(problem, torch.device("cpu"))

    class Bare:
        def get(self, key, kernel_id):
            return None if key == problem.key else Timing(50.0, "ok", "table:aten")

    ranked = rank(problem, [native], [], Bare(), {native.kernel_id: 80.0}).best
    assert (ranked.us, ranked.source) == (80.0, "benchmark")
    ranked = rank(problem, [native], [], Bare()).best
    assert (ranked.us, ranked.source) == (50.0, f"table:aten{BARE}")


def test_a_fused_residual_end_adds_in_cudnns_operator_where_its_relu_problem_runs_there(cudnn_here, monkeypatch):
    """A Bottleneck's last convolution, batch norm, residual add and ReLU: one ``cudnn_convolution_add_relu`` call
    where the engine runs that convolution with its ReLU as cuDNN's fused operator (proven faster here for it
    alone), from the memo on the next call; its other convolutions, unproven, stay on ``F.conv2d``."""
    from test_fuse import Bottleneck, pair

    engine = use_backends(monkeypatch)
    end = problem_of_tensors(torch.empty(2, 4, 6, 5), torch.empty(8, 4, 1, 1), torch.empty(8), activation="relu")
    prove_faster(engine, [end], [aten.CUDNN_RELU_ID], aten_us=300.0, us=200.0)
    ref, fused = pair(Bottleneck(8, 4), dtype=torch.float32)
    x = torch.randn(2, 8, 6, 5)
    full_way = []
    ranked_route = functional.ranked_route
    monkeypatch.setattr(functional, "ranked_route", lambda *args: full_way.append(1) or ranked_route(*args))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fused(x), ref(x))
    assert cudnn_here == [("add", (1, 1), (0, 0), (1, 1), 1)] * 2 and full_way == [1]  # then from the memo
