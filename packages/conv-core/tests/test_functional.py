"""The public functions: torch.nn.functional semantics, autograd, custom ops and torch.compile."""

import pytest
import torch
import torch.nn.functional as F

import conv_core
from conv_core.frontend import ops
from conv_core.frontend.call import problem_of_tensors
from conv_core.layout import is_dense_in

TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV = {1: conv_core.conv1d, 2: conv_core.conv2d, 3: conv_core.conv3d}


def tensors(ndim, c=4, k=6, size=7, groups=2, dtype=torch.float64, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, c, *[size + d for d in range(ndim)], generator=g, dtype=dtype)
    w = torch.randn(k, c // groups, *[3] * ndim, generator=g, dtype=dtype)
    b = torch.randn(k, generator=g, dtype=dtype)
    return [t.requires_grad_(grad) for t in (x, w, b)]


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding="same"),
                                    dict(padding="valid", stride=(1,) * 3)])
def test_forward_matches_torch(ndim, kwargs):
    x, w, b = tensors(ndim)
    kw = {k: v[:ndim] if isinstance(v, tuple) else v for k, v in kwargs.items()}
    torch.testing.assert_close(CONV[ndim](x, w, b, groups=2, **kw), TORCH_CONV[ndim](x, w, b, groups=2, **kw))


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("activation", [None, "relu", "relu6", "gelu", "gelu_tanh", "silu"])
def test_gradients_match_torch(ndim, activation):
    x, w, b = tensors(ndim, grad=True)
    act = conv_core.activations.ACTIVATIONS.get(activation, lambda t: t)
    mine = CONV[ndim](x, w, b, stride=2, padding=1, groups=2, activation=activation)
    theirs = act(TORCH_CONV[ndim](x, w, b, stride=2, padding=1, groups=2))
    torch.testing.assert_close(mine, theirs)
    grad = torch.randn_like(theirs)
    torch.testing.assert_close(torch.autograd.grad(mine, (x, w, b), grad), torch.autograd.grad(theirs, (x, w, b), grad))


def test_asymmetric_padding_forward_and_backward():
    x, w, b = tensors(2, grad=True)
    mine = conv_core.conv2d(x, w, b, padding=((2, 0), (1, 3)), groups=2)
    theirs = F.conv2d(F.pad(x, (1, 3, 2, 0)), w, b, groups=2)
    torch.testing.assert_close(mine, theirs)
    torch.testing.assert_close(torch.autograd.grad(mine.sum(), (x, w, b)), torch.autograd.grad(theirs.sum(), (x, w, b)))


def test_even_kernel_same_padding_matches_torch():
    x = torch.randn(1, 3, 8, 9, dtype=torch.float64)
    w = torch.randn(5, 3, 4, 2, dtype=torch.float64)
    torch.testing.assert_close(conv_core.conv2d(x, w, padding="same"), F.conv2d(x, w, padding="same"))


def test_out_dtype_and_low_precision_inputs():
    x, w, b = (t.to(torch.bfloat16) for t in tensors(2))
    y = conv_core.conv2d(x, w, b, groups=2, out_dtype=torch.float32)
    assert y.dtype == torch.float32
    ref = F.conv2d(x.double(), w.double(), b.double(), groups=2)
    assert (y.double() - ref).abs().max() < 1e-4 * ref.abs().max()  # fp32 output keeps fp32 accuracy


def test_channels_last_in_channels_last_out_and_views():
    x, w, b = tensors(2)
    cl = x.to(memory_format=torch.channels_last)
    y = conv_core.conv2d(cl, w, b, groups=2)
    assert is_dense_in(y, "channels_last")
    view = cl[:, :, 1:, ::2]
    torch.testing.assert_close(conv_core.conv2d(view, w, b, groups=2), F.conv2d(view, w, b, groups=2))
    transposed = x.transpose(2, 3)
    torch.testing.assert_close(conv_core.conv2d(transposed, w, groups=2), F.conv2d(transposed, w, groups=2))


def test_unbatched_input():
    x, w, b = tensors(2)
    torch.testing.assert_close(conv_core.conv2d(x[0], w, b, groups=2), F.conv2d(x[0], w, b, groups=2))


def test_backend_argument_restricts_the_choice():
    x, w, b = tensors(2)
    torch.testing.assert_close(conv_core.conv2d(x, w, b, groups=2, backend="aten"), F.conv2d(x, w, b, groups=2))


def test_custom_ops_pass_opcheck():
    x, w, b = tensors(2, dtype=torch.float32, grad=True)
    flat = ([2, 1], [1, 0, 1, 2], [1, 1], 2)
    torch.library.opcheck(ops.convolution, (x, w, b, *flat, "relu", None, ""))
    y = ops.convolution(x, w, b, *flat, "", None, "")
    torch.library.opcheck(ops.convolution_backward_data, (torch.randn_like(y), w, list(x.shape), "channels_first",
                                                         *flat, ""))
    torch.library.opcheck(ops.convolution_backward_weight, (x.detach(), torch.randn_like(y), list(w.shape), *flat, ""))


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_compile_fullgraph_forward_and_backward(activation):
    x, w, b = tensors(2, dtype=torch.float32, grad=True)

    def fn(x, w, b):
        return conv_core.conv2d(x, w, b, stride=2, padding=((1, 0), (0, 1)), groups=2, activation=activation)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    y = compiled(x, w, b)
    expected = fn(x, w, b)
    torch.testing.assert_close(y, expected)
    grads = torch.autograd.grad(y.square().sum(), (x, w, b))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.square().sum(), (x, w, b)))


def test_compile_with_inductor_without_graph_breaks():
    x, w, b = tensors(2, dtype=torch.float32)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda x: torch.relu(conv_core.conv2d(x, w, b, groups=2)))(x)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(lambda x: conv_core.conv2d(x, w, b, groups=2, activation="relu6"), fullgraph=True)
    torch.testing.assert_close(compiled(x), F.relu6(F.conv2d(x, w, b, groups=2)))


def test_double_backward_gradient_penalty():
    """Eager double backward (torch.compile's aot_autograd has none for any op)."""
    x, w, b = tensors(2, grad=True)

    def penalty(conv):
        y = conv(x, w, b, stride=2, padding=1, groups=2)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), (x, w))

    torch.testing.assert_close(penalty(conv_core.conv2d), penalty(F.conv2d))


@pytest.mark.parametrize("allowed", [False, True])
def test_cached_calls_follow_the_deterministic_mode(tmp_path, monkeypatch, allowed):
    from fake_backends import AtomicBackend, deterministic_algorithms
    from conv_core.testing.fakes import isolate, use_backends

    isolate(tmp_path, monkeypatch)
    if allowed:
        monkeypatch.setenv("CONV_CORE_NONDETERMINISTIC", "1")
    from conv_core.testing.fakes import prove_faster

    backend = AtomicBackend()
    engine = use_backends(monkeypatch, atomic=backend)
    x, w, b = tensors(2, grad=True)
    problem = problem_of_tensors(x, w, b, padding=1, groups=2)
    prove_faster(engine, [problem, problem.with_direction("bwd_weight")], ["atomic:k:c"])

    def step(expected_runs):
        with torch.no_grad():
            torch.testing.assert_close(conv_core.conv2d(x, w, b, padding=1, groups=2),
                                       F.conv2d(x, w, b, padding=1, groups=2))
        (gw,) = torch.autograd.grad(conv_core.conv2d(x, w, b, padding=1, groups=2).sum(), w)
        (expected,) = torch.autograd.grad(F.conv2d(x, w, b, padding=1, groups=2).sum(), w)
        torch.testing.assert_close(gw, expected)
        assert backend.runs == expected_runs

    both = ["fwd", "fwd", "bwd_weight"]  # the no-grad forward, the forward with grad, the weight gradient
    step(both if allowed else [])  # without the setting aten's (untagged) candidate comes first
    with deterministic_algorithms():
        step(both if allowed else [])  # the calls cached above are not reused: atomics are excluded here
    step(both * 2 if allowed else [])  # and the first mode's choice is back afterwards
