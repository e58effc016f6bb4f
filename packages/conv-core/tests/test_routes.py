"""How a call runs: PyTorch's convolution where aten ranks first, the engine where a plugin is proven faster;
faults that never poison a problem; PyTorch's answers for the calls it answers; clear errors for the rest."""

from __future__ import annotations

import functools
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import conv_core
from conv_core import BackendInfo, Candidate, Declined, hookimpl
from conv_core.frontend.call import problem_of_tensors
from conv_core.backends import aten
from conv_core.testing.fakes import prove_faster
from conv_core.testing.fakes import isolate, use_backends


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


class Counting:
    """A backend that runs aten's kernel under its own name, counting its runs by direction; ``fail`` raises
    instead, the given number of times (``None``: always)."""

    def __init__(self, name="counting", directions=("fwd", "bwd_data", "bwd_weight"), fail=None, failures=0,
                 tags=()):
        self.name, self.directions, self.fail, self.failures = name, directions, fail, failures
        self.tags = frozenset(tags)
        self.runs: list[str] = []
        self.problems: list = []

    @hookimpl
    def conv_core_backend_info(self):
        return BackendInfo(self.name, "1.0", ("cpu",), "test backend")

    @hookimpl
    def conv_core_candidates(self, problem, device):
        if problem.direction not in self.directions:
            return [Declined(self.name, f"no {problem.direction}")]
        (base,) = aten.conv_core_candidates(problem, device)
        return [Candidate(self.name, "k", "c", functools.partial(self._run, problem, base.run), estimate_us=1.0,
                          tags=self.tags)]

    def _run(self, problem, run, *operands, out=None):
        self.runs.append(problem.direction)
        self.problems.append(problem)
        if self.fail is not None and (self.failures is None or self.failures > 0):
            if self.failures is not None:
                self.failures -= 1
            raise self.fail
        return run(*operands, out=out)


def tensors(grad=False, dtype=torch.float32, batch=2):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 4, 7, 6, generator=g, dtype=dtype)
    w = torch.randn(6, 4, 3, 3, generator=g, dtype=dtype)
    b = torch.randn(6, generator=g, dtype=dtype)
    return [t.requires_grad_(grad) for t in (x, w, b)]


def call_problems(x, w, b, **kwargs):
    fwd = problem_of_tensors(x, w, b, **kwargs)
    return [fwd, fwd.with_direction("bwd_data"), fwd.with_direction("bwd_weight")]


# ---- the host path ----------------------------------------------------------------------------------


def test_where_aten_ranks_first_the_call_is_pytorchs_own_convolution():
    x, w, b = tensors(grad=True)
    y = conv_core.conv2d(x, w, b, padding=1)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"  # PyTorch's autograd, no wrapper
    assert torch.equal(y, F.conv2d(x, w, b, padding=1))
    with torch.no_grad():
        assert torch.equal(conv_core.conv2d(x, w, b, padding=1, activation="relu"), F.relu(F.conv2d(x, w, b, 1, 1)))


def test_estimates_never_displace_aten_but_measured_evidence_does(monkeypatch):
    backend = Counting()
    engine = use_backends(monkeypatch, counting=backend)
    x, w, b = tensors(grad=True)
    conv_core.conv2d(x, w, b, padding=1).sum().backward()
    assert backend.runs == []  # its estimate (1 us) beats aten's, but an estimate is no evidence

    prove_faster(engine, call_problems(x, w, b, padding=1), ["counting:k:c"], aten_us=1000.0)
    x.grad = w.grad = b.grad = None
    y = conv_core.conv2d(x, w, b, padding=1)
    assert type(y.grad_fn).__name__ != "ConvolutionBackward0"
    y.sum().backward()
    assert backend.runs == ["fwd", "bwd_data", "bwd_weight"]
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.conv2d(x2, w2, b2, padding=1).sum().backward()
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got, want)


def test_a_measured_win_within_the_margin_stays_with_aten(monkeypatch):
    engine = use_backends(monkeypatch, counting=Counting())
    x, w, b = tensors()
    prove_faster(engine, call_problems(x, w, b, padding=1), ["counting:k:c"], aten_us=100.0, us=97.0)
    assert engine.ranking(call_problems(x, w, b, padding=1)[0], x.device).best.kernel_id == "aten:native:default"


def test_a_gradients_win_that_does_not_pay_for_leaving_pytorchs_autograd_stays_direct(monkeypatch):
    """A plugin measured 10% faster on the data gradient alone ranks first there, but the layer would train through
    the engine's route for it (ranking.GRAD_ROUTE_US a step): the call stays ``F.conv2d``."""
    backend = Counting(directions=("bwd_data",))
    engine = use_backends(monkeypatch, counting=backend)
    x, w, b = tensors(grad=True)
    problems = call_problems(x, w, b, padding=1)
    prove_faster(engine, problems, ["counting:k:c"], aten_us=1000.0, us=900.0)
    assert engine.ranking(problems[1], x.device).best.kernel_id == "counting:k:c"
    y = conv_core.conv2d(x, w, b, padding=1)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    y.sum().backward()
    assert backend.runs == []

    prove_faster(engine, problems, ["counting:k:c"], aten_us=1000.0, us=200.0)  # a win that pays
    y = conv_core.conv2d(x, w, b, padding=1)
    y.sum().backward()
    assert type(y.grad_fn).__name__ != "ConvolutionBackward0" and backend.runs == ["bwd_data"]


# ---- faults -----------------------------------------------------------------------------------------


def test_out_of_memory_is_raised_and_leaves_the_ranking_intact(monkeypatch):
    backend = Counting(fail=torch.OutOfMemoryError("CUDA out of memory (simulated)"), failures=1)
    engine = use_backends(monkeypatch, counting=backend)
    x, w, b = tensors()
    problem = call_problems(x, w, b, padding=1)[0]
    prove_faster(engine, [problem], ["counting:k:c"])
    with pytest.raises(torch.OutOfMemoryError):
        conv_core.conv2d(x, w, b, padding=1)
    ranking = engine.ranking(problem, x.device)
    assert ranking.best.kernel_id == "counting:k:c" and not ranking.excluded
    torch.testing.assert_close(conv_core.conv2d(x, w, b, padding=1), F.conv2d(x, w, b, padding=1))
    assert backend.runs == ["fwd", "fwd"]


def test_a_broken_kernel_is_dropped_recorded_and_replaced(monkeypatch):
    backend = Counting(fail=RuntimeError("illegal instruction (simulated)"), failures=None)
    engine = use_backends(monkeypatch, counting=backend)
    x, w, b = tensors()
    problem = call_problems(x, w, b, padding=1)[0]
    prove_faster(engine, [problem], ["counting:k:c"])
    for _ in range(2):
        torch.testing.assert_close(conv_core.conv2d(x, w, b, padding=1), F.conv2d(x, w, b, padding=1))
    assert backend.runs == ["fwd"]  # tried once, then replaced by aten
    assert "illegal instruction" in dict(engine.ranking(problem, x.device).excluded)["counting:k:c"]
    assert any("illegal instruction" in f for f in engine.registry.get("counting").failures)


def test_the_last_candidate_is_never_dropped(monkeypatch):
    backend = Counting(fail=RuntimeError("broken (simulated)"), failures=None)
    use_backends(monkeypatch, counting=backend)
    x, w, b = tensors()
    for _ in range(3):  # the same error every time, never an IndexError from an emptied ranking
        with pytest.raises(RuntimeError, match="broken"):
            conv_core.conv2d(x, w, b, padding=1, backend="counting")
    backend.failures = 0
    torch.testing.assert_close(conv_core.conv2d(x, w, b, padding=1, backend="counting"), F.conv2d(x, w, b, padding=1))


def test_a_forced_backend_without_backward_leaves_gradients_to_the_best_other(monkeypatch, caplog):
    backend = Counting("fwdonly", directions=("fwd",))
    use_backends(monkeypatch, fwdonly=backend)
    x, w, b = tensors(grad=True)
    with caplog.at_level(logging.WARNING, logger="conv_core"):
        y = conv_core.conv2d(x, w, b, padding=1, backend="fwdonly")  # told at the forward, not at .backward()
    assert "no bwd_data candidate" in caplog.text and "no bwd_weight candidate" in caplog.text
    y.sum().backward()
    assert backend.runs == ["fwd"]
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    F.conv2d(x2, w2, b.detach(), padding=1).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


# ---- PyTorch's answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", [((0, 4, 7, 6), (6, 4, 3, 3)), ((2, 0, 7, 6), (6, 0, 3, 3))],
                         ids=["batch0", "channels0"])
def test_empty_inputs_get_pytorchs_empty_output_and_zero_gradients(shapes):
    x_shape, w_shape = shapes
    x = torch.randn(x_shape, requires_grad=True)
    w = torch.randn(w_shape, requires_grad=True)
    b = torch.randn(w_shape[0], requires_grad=True)
    y = conv_core.conv2d(x, w, b, padding=1, activation="relu")
    want = F.relu(F.conv2d(x, w, b, padding=1))
    assert y.shape == want.shape and torch.equal(y, want)
    y.sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and not w.grad.any()


def test_unbatched_and_noncontiguous_inputs():
    x, w, b = tensors()
    torch.testing.assert_close(conv_core.conv2d(x[0], w, b, padding=1), F.conv2d(x[0], w, b, padding=1))
    view = x.transpose(2, 3)
    torch.testing.assert_close(conv_core.conv2d(view, w, b, padding=1), F.conv2d(view, w, b, padding=1))


def test_explain_under_autocast_describes_the_problem_that_runs():
    x, w, b = tensors()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = conv_core.explain(x, w, b, padding=1)
    assert explained.problem.dtype == "bfloat16"


# ---- torch.compile: Inductor's convolution where aten wins, the opaque op where a plugin does ----------


def _aten_targets(model, x) -> set[str]:
    """The ops of the forward graph torch.compile (AOT autograd) hands to its compiler, whole-graph."""
    from torch._dynamo.backends.common import aot_autograd

    seen: set[str] = set()

    def record(gm, _example_inputs):
        seen.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=record), fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
    return seen


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv1(x)))) + 1


def test_compiled_converted_model_traces_whole_and_keeps_aten_convolutions(monkeypatch):
    use_backends(monkeypatch, counting=Counting())
    model = conv_core.convert(Tiny().eval())
    with torch.no_grad():
        targets = _aten_targets(model, torch.randn(2, 4, 7, 6))
    assert "aten.convolution.default" in targets and not any("conv_core" in t for t in targets)


def _tiny_whose_first_layer_a_plugin_wins(monkeypatch, aten_us: float) -> tuple[Counting, nn.Module, torch.Tensor]:
    """(the plugin, a converted Tiny, its input): the plugin measured at 1 us on conv1 where aten took ``aten_us``."""
    backend = Counting()
    engine = use_backends(monkeypatch, counting=backend)
    model = conv_core.convert(Tiny().eval())
    x = torch.randn(2, 4, 7, 6)
    prove_faster(engine, [problem_of_tensors(x, model.conv1.weight, model.conv1.bias, padding=1)],
                 ["counting:k:c"], aten_us=aten_us, us=1.0)
    return backend, model, x


def test_compiled_model_runs_a_proven_plugin_kernel_as_an_opaque_op(monkeypatch):
    backend, model, x = _tiny_whose_first_layer_a_plugin_wins(monkeypatch, aten_us=2000.0)
    with torch.no_grad():
        targets = _aten_targets(model, x)
    assert "conv_core.convolution.default" in targets  # conv1: the plugin kernel
    assert "aten.convolution.default" in targets  # conv2: Inductor's
    assert "fwd" in backend.runs


def test_a_plugin_win_smaller_than_its_opaque_ops_host_time_stays_inductors_when_compiled(monkeypatch):
    """A plugin that wins in eager (aten at twice a plugin call's host time) loses in a compiled graph, where its
    op would cost more than aten's time."""
    from conv_core.ranking import PLUGIN_HOST_US, TRACED_PLUGIN_HOST_US

    aten_us = 2 * PLUGIN_HOST_US
    assert aten_us < TRACED_PLUGIN_HOST_US
    backend, model, x = _tiny_whose_first_layer_a_plugin_wins(monkeypatch, aten_us=aten_us)
    with torch.no_grad():
        model(x)
        assert "fwd" in backend.runs  # eager: the plugin
        targets = _aten_targets(model, x)
    assert not any("conv_core" in t for t in targets) and "aten.convolution.default" in targets

    model.conv1.backend = "counting"  # asked for by name: compiled as in eager
    with torch.no_grad():
        assert "conv_core.convolution.default" in _aten_targets(model, x)


def test_a_fused_epilogue_is_ranked_on_the_bare_problems_measured_times(monkeypatch):
    engine = use_backends(monkeypatch, counting=Counting())
    x, w, b = tensors()
    bare = problem_of_tensors(x, w, None, padding=1)
    prove_faster(engine, [bare], ["counting:k:c"])
    fused = problem_of_tensors(x, w, b, padding=1, activation="relu")
    best = engine.ranking(fused, x.device).best
    assert (best.kernel_id, best.source) == ("counting:k:c", "tuning-db (no epilogue)")


def test_cudnn_benchmark_turns_on_first_use_timing_on_gpus_only(monkeypatch):
    engine = use_backends(monkeypatch)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    assert engine.benchmark_mode(torch.device("cuda")) and not engine.benchmark_mode(torch.device("cpu"))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    assert not engine.benchmark_mode(torch.device("cuda"))


def test_a_win_the_plugins_host_time_eats_stays_with_aten(monkeypatch):
    from conv_core.ranking import PLUGIN_HOST_US

    engine = use_backends(monkeypatch, counting=Counting())
    x, w, b = tensors()
    problem = call_problems(x, w, b, padding=1)[0]
    prove_faster(engine, [problem], ["counting:k:c"], aten_us=PLUGIN_HOST_US, us=PLUGIN_HOST_US / 2)
    assert engine.ranking(problem, x.device).best.kernel_id == "aten:native:default"  # 2x the GPU time, no win


def test_first_use_timing_skips_plugins_where_aten_is_under_the_host_allowance(monkeypatch):
    monkeypatch.setenv("CONV_CORE_BENCHMARK", "1")
    backend = Counting()
    use_backends(monkeypatch, counting=backend)
    tiny = [torch.randn(1, 2, 3, 3), torch.randn(2, 2, 1, 1)]
    conv_core.conv2d(*tiny)  # aten takes a few us here: nothing could earn the plugin its place
    assert backend.runs == []
    big = [torch.randn(4, 64, 48, 48), torch.randn(64, 64, 3, 3)]
    conv_core.conv2d(*big, padding=1)  # milliseconds on the CPU: the plugin is timed too
    assert backend.runs and set(backend.runs) == {"fwd"}


class Recording(Counting):
    """:class:`Counting`, keeping each forward's input and weight as the kernel got them."""

    def __init__(self):
        super().__init__()
        self.operands: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _run(self, problem, run, *operands, out=None):
        if problem.direction == "fwd":
            self.operands.append(operands[:2])
        return super()._run(problem, run, *operands, out=out)


def test_a_weight_in_the_other_layout_is_copied_once_per_version(monkeypatch):
    """A channels-last input with a channels-first weight: the kernel gets the weight in channels-last, the same
    copy call after call (a plugin's own derived weights keyed on it stay valid), a new one after the weight
    changes in place."""
    backend = Recording()
    engine = use_backends(monkeypatch, counting=backend)
    x, w, b = tensors()
    x = x.to(memory_format=torch.channels_last)
    prove_faster(engine, [problem_of_tensors(x, w, b, padding=1)], ["counting:k:c"])
    with torch.no_grad():
        first, again = (conv_core.conv2d(x, w, b, padding=1) for _ in range(2))
        w.mul_(-1)
        changed = conv_core.conv2d(x, w, b, padding=1)
    (_, w1), (_, w2), (_, w3) = backend.operands
    assert w2 is w1 and w1.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous(
        memory_format=torch.channels_last)
    assert torch.equal(w3, w) and w3 is not w1
    torch.testing.assert_close(first, F.conv2d(x, -w, b, padding=1))
    torch.testing.assert_close(changed, F.conv2d(x, w, b, padding=1))
    assert torch.equal(again, first)


def test_a_traced_plugin_call_takes_its_weights_layout(monkeypatch):
    """Traced with a channels-first input and channels-last weights, a layer a plugin wins in channels-last gets
    its input in channels-last (a copy in the graph, for Inductor to fuse) and the weight as it is."""
    backend = Recording()
    engine = use_backends(monkeypatch, counting=backend)
    model = conv_core.convert(Tiny().eval()).to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 7, 6)
    x_last = x.to(memory_format=torch.channels_last)
    prove_faster(engine, [problem_of_tensors(x_last, model.conv1.weight, model.conv1.bias, padding=1)],
                 ["counting:k:c"], aten_us=2000.0)
    with torch.no_grad():
        targets = _aten_targets(model, x)
    assert "conv_core.convolution.default" in targets
    (x_seen, w_seen), *_ = backend.operands
    assert x_seen.is_contiguous(memory_format=torch.channels_last) and w_seen is model.conv1.weight


def test_a_traced_input_keeps_its_layout_where_the_weight_says_none():
    """A 1x1 weight is dense in both layouts: the input stays as it comes."""
    from conv_core.frontend.ops import _in_weight_layout

    x, w = torch.randn(2, 4, 5, 5), torch.randn(6, 4, 1, 1)
    assert _in_weight_layout(x, w) is x
    w3 = torch.randn(6, 4, 3, 3).to(memory_format=torch.channels_last)
    relaid = _in_weight_layout(x, w3)
    assert relaid.is_contiguous(memory_format=torch.channels_last) and torch.equal(relaid, x)
    assert _in_weight_layout(relaid, w3) is relaid
