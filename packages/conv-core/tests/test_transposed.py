"""Transposed convolutions: ``F.conv_transpose*d``'s answers through the data gradient of a convolution, on both
routes (PyTorch's own where aten ranks first, the engine's where a backend is forced), and their gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import conv_core
from conv_core.layout import is_dense_in
from conv_core.testing.fakes import isolate, use_backends
from test_routes import Counting

TORCH = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
CORE = {1: conv_core.conv_transpose1d, 2: conv_core.conv_transpose2d, 3: conv_core.conv_transpose3d}

#: (ndim, input channels, output channels, input size, kernel, arguments): odd geometry in each rank.
CASES = [
    (1, 6, 3, (5,), (3,), dict(stride=3, padding=1, output_padding=2, groups=3)),
    (2, 4, 6, (4, 3), (3, 2), dict(stride=(3, 2), padding=(1, 0), output_padding=(2, 1), groups=2, dilation=(1, 2))),
    (2, 2, 3, (3, 4), (2, 3), dict(stride=2, padding=1, output_padding=1, dilation=2)),
    (3, 2, 2, (1, 3, 2), (1, 2, 3), dict(stride=(1, 2, 3), padding=(0, 1, 1), output_padding=(0, 1, 2))),
]


@pytest.fixture(autouse=True)
def counting(tmp_path, monkeypatch) -> Counting:
    """A fresh engine whose one plugin runs aten's kernels as its own (``backend="counting"``: the engine route)."""
    isolate(tmp_path, monkeypatch)
    backend = Counting()
    use_backends(monkeypatch, counting=backend)
    return backend


def tensors(ndim, c, k, size, kernel, groups=1, dtype=torch.float64, grad=False, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, c, *size, generator=g, dtype=dtype)
    w = torch.randn(c, k // groups, *kernel, generator=g, dtype=dtype)
    b = torch.randn(k, generator=g, dtype=dtype)
    return [t.requires_grad_(grad) for t in (x, w, b)]


@pytest.mark.parametrize("backend", [None, "counting"])
@pytest.mark.parametrize("ndim, c, k, size, kernel, kwargs", CASES)
def test_values_match_torch(ndim, c, k, size, kernel, kwargs, backend, counting):
    x, w, b = tensors(ndim, c, k, size, kernel, kwargs.get("groups", 1))
    torch.testing.assert_close(CORE[ndim](x, w, b, **kwargs, backend=backend), TORCH[ndim](x, w, b, **kwargs))
    assert counting.runs == (["bwd_data"] if backend else [])


def test_ints_and_tuples_are_one_call():
    x, w, b = tensors(2, 4, 4, (3, 5), (3, 3))
    expected = F.conv_transpose2d(x, w, b, 2, 1, 1, 1, 2)
    torch.testing.assert_close(conv_core.conv_transpose2d(x, w, b, 2, 1, 1, 1, 2), expected)
    torch.testing.assert_close(conv_core.conv_transpose2d(x, w, b, [2, 2], (1, 1), (1,), 1, (2, 2)), expected)


@pytest.mark.parametrize("backend", [None, "counting"])
def test_unbatched_empty_batch_views_and_channels_last(backend):
    x, w, b = tensors(2, 4, 6, (5, 4), (3, 3), groups=2)
    kwargs = dict(stride=2, padding=1, output_padding=1, groups=2, backend=backend)
    reference = dict(kwargs, backend=None)
    for given in (x[0], x[:0], x[:, :, 1:, ::2], x.transpose(2, 3)):
        torch.testing.assert_close(conv_core.conv_transpose2d(given, w, b, **kwargs),
                                   F.conv_transpose2d(given, w, b, **{k: v for k, v in reference.items() if v}))
    cl = x.contiguous(memory_format=torch.channels_last)
    y = conv_core.conv_transpose2d(cl, w, b, **kwargs)
    assert is_dense_in(y, "channels_last")
    torch.testing.assert_close(y, F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2))


@pytest.mark.parametrize("activation", [None, "relu", "relu6", "gelu", "gelu_tanh", "silu"])
def test_bias_and_activation_forward_and_gradients_on_the_engine_route(activation, counting):
    x, w, b = tensors(2, 4, 6, (4, 5), (3, 2), groups=2, grad=True)
    kwargs = dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2)
    act = conv_core.activations.ACTIVATIONS.get(activation, lambda t: t)
    mine = conv_core.conv_transpose2d(x, w, b, **kwargs, activation=activation, backend="counting")
    theirs = act(F.conv_transpose2d(x, w, b, **kwargs))
    torch.testing.assert_close(mine, theirs)
    grad = torch.randn_like(theirs)
    torch.testing.assert_close(torch.autograd.grad(mine, (x, w, b), grad), torch.autograd.grad(theirs, (x, w, b), grad))
    assert sorted(set(counting.runs)) == ["bwd_data", "bwd_weight", "fwd"]


@pytest.mark.parametrize("tagged", [False, True])
def test_a_kernel_that_applies_the_epilogue_runs_it_fused(tagged, tmp_path, monkeypatch):
    """A data-gradient kernel tagged ``transposed_epilogue`` gets the bias and activation in its problem; an
    untagged one runs the bare problem, the epilogue after it. Values and gradients are PyTorch's either way."""
    isolate(tmp_path, monkeypatch)
    backend = Counting(tags={"transposed_epilogue"} if tagged else ())
    use_backends(monkeypatch, counting=backend)
    x, w, b = tensors(2, 4, 6, (4, 5), (2, 2), grad=True)
    mine = conv_core.conv_transpose2d(x, w, b, stride=2, activation="relu", backend="counting")
    theirs = F.relu(F.conv_transpose2d(x, w, b, stride=2))
    torch.testing.assert_close(mine, theirs)
    grad = torch.randn_like(theirs)
    torch.testing.assert_close(torch.autograd.grad(mine, (x, w, b), grad), torch.autograd.grad(theirs, (x, w, b), grad))
    (forward,) = [p for p in backend.problems if p.direction == "bwd_data"]
    assert (forward.bias, forward.activation) == ((True, "relu") if tagged else (False, None))


@pytest.mark.parametrize("backend", [None, "counting"])
def test_out_dtype_keeps_a_wider_outputs_accuracy(backend):
    x, w, b = (t.to(torch.bfloat16) for t in tensors(2, 4, 6, (5, 5), (3, 3)))
    y = conv_core.conv_transpose2d(x, w, b, stride=2, out_dtype=torch.float32, backend=backend)
    assert y.dtype == torch.float32
    reference = F.conv_transpose2d(x.double(), w.double(), b.double(), stride=2)
    assert (y.double() - reference).abs().max() < 2e-2 * reference.abs().max()


@pytest.mark.parametrize("backend", [None, "counting"])
def test_autocast_computes_in_its_dtype_as_pytorch_does(backend):
    x, w, b = (t.float() for t in tensors(2, 4, 6, (5, 5), (3, 3)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = conv_core.conv_transpose2d(x, w, b, stride=2, backend=backend)
        assert y.dtype == F.conv_transpose2d(x, w, b, stride=2).dtype == torch.bfloat16
    reference = F.conv_transpose2d(x.double(), w.double(), b.double(), stride=2)
    assert (y.double() - reference).abs().max() < 2e-2 * reference.abs().max()


@pytest.mark.parametrize("ndim, c, k, size, kernel, kwargs", CASES[:2] + CASES[3:])
def test_gradcheck_through_the_engine(ndim, c, k, size, kernel, kwargs, counting):
    x, w, b = tensors(ndim, c, k, size, kernel, kwargs.get("groups", 1), grad=True, batch=1)

    def call(x, w, b):
        return CORE[ndim](x, w, b, **kwargs, activation="relu", backend="counting")

    assert torch.autograd.gradcheck(call, (x, w, b))
    assert sorted(set(counting.runs)) == ["bwd_data", "bwd_weight", "fwd"]


def test_double_backward_through_the_engine_custom_ops():
    x, w, b = tensors(2, 2, 4, (3, 3), (2, 2), grad=True, batch=1)

    def penalty(conv, **extra):
        y = conv(x, w, b, stride=2, padding=1, output_padding=1, **extra)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), (x, w))

    torch.testing.assert_close(penalty(conv_core.conv_transpose2d, backend="counting"), penalty(F.conv_transpose2d))


def test_output_padding_beyond_stride_runs_as_pytorchs_own(counting):
    x, w, b = tensors(2, 2, 2, (3, 3), (3, 3), grad=True)
    kwargs = dict(stride=2, output_padding=2, dilation=3)
    y = conv_core.conv_transpose2d(x, w, b, **kwargs, backend="counting")
    torch.testing.assert_close(y, F.conv_transpose2d(x, w, b, **kwargs))
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0" and counting.runs == []
    explained = conv_core.explain(x, w, b, transposed=True, **kwargs)
    assert explained.problem is None and "not smaller than stride" in str(explained)


def test_explain_describes_the_data_gradient_it_runs_as():
    x, w, b = tensors(2, 4, 6, (5, 4), (3, 3), groups=2)
    explained = conv_core.explain(x, w, b, stride=2, padding=1, groups=2, transposed=True, output_padding=1)
    p = explained.problem
    assert (p.direction, p.in_channels, p.out_channels, p.input_size, p.bias) == ("bwd_data", 6, 4, (10, 8), False)
    assert str(explained).startswith("conv_transpose2d: its forward runs as the data gradient (bwd_data)")
    weight = conv_core.explain(x, w, b, stride=2, padding=1, groups=2, transposed=True, output_padding=1,
                               direction="bwd_data")
    assert weight.problem == p.with_direction("fwd") and weight.to_dict()["call"].startswith("conv_transpose2d")


# ---- torch.compile: PyTorch's transposed convolution where aten ranks first, the opaque op where a plugin does --


def _compiled_graph_targets(fn, *inputs, dynamic=False) -> tuple[set[str], torch.Tensor]:
    """The ops of the forward graphs torch.compile (AOT autograd, whole-graph) hands to its compiler, and the
    compiled function's output."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    seen: set[str] = set()

    def record(gm, _example_inputs):
        seen.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return make_boxed_func(gm)

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=aot_autograd(fw_compiler=record), fullgraph=True, dynamic=dynamic)
    return seen, compiled(*inputs)


@pytest.mark.parametrize("backend, op", [(None, "aten.convolution.default"),
                                         ("counting", "conv_core.convolution_backward_data.default")])
def test_compile_fullgraph_forward_and_backward(backend, op, counting):
    x, w, b = tensors(2, 4, 6, (4, 5), (3, 2), groups=2, dtype=torch.float32, grad=True)
    kwargs = dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2)

    def fn(x, w, b):
        return conv_core.conv_transpose2d(x, w, b, **kwargs, activation="relu", backend=backend)

    targets, y = _compiled_graph_targets(fn, x, w, b)
    assert op in targets
    assert not any(t.startswith("conv_core") for t in targets) if backend is None else "bwd_data" in counting.runs
    expected = F.relu(F.conv_transpose2d(x, w, b, **kwargs))
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(torch.autograd.grad(y.square().sum(), (x, w, b)),
                               torch.autograd.grad(expected.square().sum(), (x, w, b)))


def test_compiled_unbatched_and_symbolic_calls():
    x, w, b = tensors(1, 4, 2, (5,), (3,), dtype=torch.float32)
    targets, y = _compiled_graph_targets(lambda x: conv_core.conv_transpose1d(x, w, b, 2, backend="counting"), x[0])
    assert "conv_core.convolution_backward_data.default" in targets
    torch.testing.assert_close(y, F.conv_transpose1d(x[0], w, b, 2))
    targets, y = _compiled_graph_targets(lambda x: conv_core.conv_transpose1d(x, w, b, 2, backend="counting"), x,
                                         dynamic=True)
    assert "aten.convolution.default" in targets, "symbolic shapes cannot be ranked: Inductor's own"
    torch.testing.assert_close(y, F.conv_transpose1d(x, w, b, 2))
