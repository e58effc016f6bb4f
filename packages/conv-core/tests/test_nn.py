"""``conv_core.nn``: drop-in modules that match torch's, and in-place conversion of models."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

import conv_core
import conv_core.nn as cnn

TORCH = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
CORE = {1: cnn.Conv1d, 2: cnn.Conv2d, 3: cnn.Conv3d}
SPATIAL = {1: (13,), 2: (9, 8), 3: (6, 5, 7)}


def _pair(ndim: int, seed: int = 0, **kwargs):
    """A torch module and a conv-core module with the same parameters (float64, so results compare tightly)."""
    torch.manual_seed(seed)
    ref = TORCH[ndim](**kwargs, dtype=torch.float64)
    mine = CORE[ndim](**kwargs, dtype=torch.float64)
    mine.load_state_dict(ref.state_dict())
    return ref, mine


def _check_forward_and_backward(ref: nn.Module, mine: nn.Module, x: torch.Tensor) -> None:
    x_ref = x.clone().requires_grad_(True)
    x_mine = x.clone().requires_grad_(True)
    y_ref, y_mine = ref(x_ref), mine(x_mine)
    torch.testing.assert_close(y_mine, y_ref)
    grad = torch.randn_like(y_ref)
    y_ref.backward(grad)
    y_mine.backward(grad)
    torch.testing.assert_close(x_mine.grad, x_ref.grad)
    for (name, p_ref), p_mine in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(p_mine.grad, p_ref.grad, msg=name)


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("groups, bias", [(1, True), (2, False)])
def test_matches_torch_for_each_padding_mode(ndim, padding_mode, groups, bias):
    ref, mine = _pair(ndim, in_channels=4, out_channels=6, kernel_size=3, stride=(2,) + (1,) * (ndim - 1), padding=2,
                      dilation=1 if ndim == 3 else 2, groups=groups, bias=bias, padding_mode=padding_mode)
    _check_forward_and_backward(ref, mine, torch.randn(2, 4, *SPATIAL[ndim], dtype=torch.float64))


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("padding", ["same", "valid", 0])
def test_matches_torch_for_string_padding(ndim, padding):
    ref, mine = _pair(ndim, in_channels=3, out_channels=4, kernel_size=4, padding=padding, dilation=2)
    _check_forward_and_backward(ref, mine, torch.randn(2, 3, *[v + 4 for v in SPATIAL[ndim]], dtype=torch.float64))


def test_depthwise_matches_torch():
    ref, mine = _pair(2, in_channels=8, out_channels=16, kernel_size=5, padding=2, groups=8)
    _check_forward_and_backward(ref, mine, torch.randn(3, 8, 10, 10, dtype=torch.float64))


@pytest.mark.parametrize("ndim, padding_mode", [(1, "zeros"), (1, "reflect"), (2, "circular"), (3, "replicate")])
def test_unbatched_input(ndim, padding_mode):
    ref, mine = _pair(ndim, in_channels=2, out_channels=3, kernel_size=3, padding=1, padding_mode=padding_mode)
    x = torch.randn(2, *SPATIAL[ndim], dtype=torch.float64)
    y = mine(x)
    assert y.shape == ref(x).shape == (3, *SPATIAL[ndim])
    _check_forward_and_backward(ref, mine, x)


def test_state_dict_round_trips():
    ref, mine = _pair(2, in_channels=4, out_channels=8, kernel_size=3, padding=1)
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    back = nn.Conv2d(4, 8, 3, padding=1, dtype=torch.float64)
    back.load_state_dict(mine.state_dict(), strict=True)
    for key, value in ref.state_dict().items():
        assert torch.equal(back.state_dict()[key], value)


def test_defaults_keep_torch_repr_and_options_show():
    assert repr(cnn.Conv2d(3, 8, 3, padding=1)) == repr(nn.Conv2d(3, 8, 3, padding=1))
    text = repr(cnn.Conv2d(3, 8, 3, activation="relu", out_dtype=torch.float32, backend="aten"))
    assert "activation='relu'" in text and "out_dtype=torch.float32" in text and "backend='aten'" in text
    with pytest.raises(ValueError, match="activation"):
        cnn.Conv2d(3, 8, 3, activation="tanhh")


def test_activation_and_out_dtype():
    torch.manual_seed(0)
    mine = cnn.Conv2d(4, 8, 3, padding=1, activation="relu6")
    x = torch.randn(2, 4, 7, 7)
    torch.testing.assert_close(mine(x), F.relu6(F.conv2d(x, mine.weight, mine.bias, padding=1)))
    wide = cnn.Conv2d(4, 8, 3, dtype=torch.bfloat16, out_dtype=torch.float32)
    xb = x.bfloat16()
    y = wide(xb)
    assert y.dtype == torch.float32
    expected = F.conv2d(xb.float(), wide.weight.float(), wide.bias.float())
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def test_autocast_matches_torch():
    torch.manual_seed(0)
    ref, mine = _pair(2, in_channels=4, out_channels=8, kernel_size=3, padding=1, padding_mode="reflect")
    ref, mine = ref.float(), mine.float()
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_ref, y_mine = ref(x), mine(x)
    assert y_mine.dtype == y_ref.dtype == torch.bfloat16
    torch.testing.assert_close(y_mine, y_ref)
    y_mine.float().sum().backward()
    assert mine.weight.grad.dtype == torch.float32


# ---- convert / revert ----------------------------------------------------------------------------


class Residual(nn.Module):
    """A basic residual block: two 3x3 convs, and a 1x1 downsample when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(self.body(x) + identity)


def resnet_like() -> nn.Sequential:
    """A small ResNet: stem, two residual stages (one strided, with a 1x1 downsample), pooled head."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        Residual(16, 16, 1), Residual(16, 32, 2), Residual(32, 32, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def _conv_types(model: nn.Module) -> list[type]:
    return [type(m) for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)]


def test_convert_resnet_like_gives_the_same_output():
    torch.manual_seed(0)
    model = resnet_like().eval()
    x = torch.randn(2, 3, 32, 32)
    expected = model(x)
    assert conv_core.convert(model) is model
    assert _conv_types(model) == [cnn.Conv2d] * 8
    torch.testing.assert_close(model(x), expected)


def test_convert_keeps_parameter_identity_and_the_optimizer_trains_them():
    torch.manual_seed(0)
    model = resnet_like()
    reference = copy.deepcopy(model)
    ids = {name: id(p) for name, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    conv_core.convert(model)
    assert {name: id(p) for name, p in model.named_parameters()} == ids
    x, target = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    before = model[0].weight.detach().clone()
    for net, opt in ((model, optimizer), (reference, ref_optimizer)):
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(net(x), target).backward()
            opt.step()
    assert not torch.equal(model[0].weight, before)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-4, atol=1e-5, msg=name)


def test_convert_channels_last_model():
    torch.manual_seed(0)
    model = resnet_like().eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
    stem_out = model[0](x)
    expected = model(x)
    conv_core.convert(model)
    converted_stem_out = model[0](x)
    assert converted_stem_out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(converted_stem_out, stem_out)
    torch.testing.assert_close(model(x), expected)


def test_convert_only_exact_torch_convolutions():
    class MyConv(nn.Conv2d):
        pass

    model = nn.Sequential(nn.Conv1d(2, 2, 1), nn.Conv3d(2, 2, 1), MyConv(2, 2, 1), nn.ConvTranspose2d(2, 2, 2),
                          cnn.Conv2d(2, 2, 1, backend="mine"))
    conv_core.convert(model, backend="aten")
    assert [type(m) for m in model] == [cnn.Conv1d, cnn.Conv3d, MyConv, cnn.ConvTranspose2d, cnn.Conv2d]
    assert model[0].backend == model[1].backend == "aten"
    assert model[4].backend == "mine", "an already converted module is left alone"
    root = nn.Conv2d(2, 2, 1)
    assert type(conv_core.convert(root)) is cnn.Conv2d


def test_convert_keeps_hooks_and_parametrizations():
    torch.manual_seed(0)
    conv = weight_norm(nn.Conv2d(3, 4, 3, padding=1))
    seen = []
    conv.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    x = torch.randn(1, 3, 6, 6)
    expected = conv(x)
    model = nn.Sequential(conv)
    conv_core.convert(model)
    assert isinstance(conv, cnn.Conv2d) and parametrize.is_parametrized(conv, "weight")
    assert parametrize.type_before_parametrizations(conv) is cnn.Conv2d
    torch.testing.assert_close(conv(x), expected)
    assert len(seen) == 2
    parametrize.remove_parametrizations(conv, "weight")
    assert type(conv) is cnn.Conv2d
    torch.testing.assert_close(conv(x), expected)


def test_revert_restores_torch_modules():
    torch.manual_seed(0)
    model = resnet_like().eval()
    x = torch.randn(1, 3, 32, 32)
    expected = model(x)
    params = [id(p) for p in model.parameters()]
    conv_core.revert(conv_core.convert(model, backend="aten"))
    assert _conv_types(model) == [nn.Conv2d] * 8
    assert not any("backend" in vars(m) for m in model.modules())
    assert [id(p) for p in model.parameters()] == params
    torch.testing.assert_close(model(x), expected)


def test_revert_refuses_what_torch_cannot_express():
    model = nn.Sequential(cnn.Conv2d(2, 2, 1), cnn.Conv2d(2, 2, 1, activation="relu"))
    with pytest.raises(ValueError, match="activation='relu'"):
        conv_core.revert(model)
    assert [type(m) for m in model] == [cnn.Conv2d, cnn.Conv2d], "nothing changed"


def test_converted_model_deepcopies_and_pickles(tmp_path):
    model = conv_core.convert(resnet_like().eval(), backend="aten")
    x = torch.randn(1, 3, 32, 32)
    twin = copy.deepcopy(model)
    assert twin[0].backend == "aten" and type(twin[0]) is cnn.Conv2d
    torch.testing.assert_close(twin(x), model(x))
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    torch.testing.assert_close(loaded(x), model(x))


# ---- the lean call path: nn.Module.__call__'s behaviour wherever it would do more than call forward -------------


def test_a_module_call_runs_every_kind_of_hook():
    """Module hooks, global hooks and full backward hooks run, as nn.Module.__call__ runs them."""
    ref, mine = _pair(2, in_channels=2, out_channels=3, kernel_size=3, padding=1)
    seen = []
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    handles = [mine.register_forward_pre_hook(lambda m, args: seen.append("pre")),
               mine.register_forward_hook(lambda m, args, out: out * 2),
               mine.register_full_backward_hook(lambda m, gin, gout: seen.append("backward"))]
    y = mine(x.requires_grad_(True))
    torch.testing.assert_close(y, ref(x) * 2)
    y.sum().backward()
    assert seen == ["pre", "backward"]
    for handle in handles:
        handle.remove()
    expected = ref(x)
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: out + 1)
    try:
        torch.testing.assert_close(mine(x), expected + 1)
    finally:
        handle.remove()
    torch.testing.assert_close(mine(x), ref(x))


def test_a_module_call_reads_swapped_and_parametrized_weights():
    """The weight comes from the module's parameters as torch.func.functional_call or a parametrization leave
    them: a swapped parameter is used, a parametrized one is computed."""
    ref, mine = _pair(2, in_channels=2, out_channels=3, kernel_size=3, padding=1)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    other = {"weight": torch.randn_like(mine.weight), "bias": torch.randn_like(mine.bias)}
    torch.testing.assert_close(torch.func.functional_call(mine, other, (x,)),
                               torch.func.functional_call(ref, other, (x,)))
    no_bias = {"weight": other["weight"], "bias": None}
    torch.testing.assert_close(torch.func.functional_call(mine, no_bias, (x,)), F.conv2d(x, other["weight"], None,
                                                                                           padding=1))
    parametrize.register_parametrization(mine, "weight", _Doubled())
    torch.testing.assert_close(mine(x), F.conv2d(x, ref.weight * 2, ref.bias, padding=1))


class _Doubled(nn.Module):
    def forward(self, w):
        return w * 2


def test_a_module_call_is_traced_by_torch_jit():
    ref, mine = _pair(2, in_channels=2, out_channels=3, kernel_size=3, padding=1)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    traced = torch.jit.trace(mine, (x,), check_trace=False)
    torch.testing.assert_close(traced(x), ref(x))


# ---- a module's memo of its direct routes --------------------------------------------------------------------


@pytest.fixture
def full_way(monkeypatch):
    """The calls of converted modules that take the full way (``conv_core.functional.convolution``)."""
    from conv_core import functional

    calls, original = [], functional.convolution
    monkeypatch.setattr(functional, "convolution", lambda *args: calls.append(args[1].shape) or original(*args))
    return calls


def test_a_module_calls_its_direct_route_itself_until_its_signature_changes(full_way):
    ref, mine = _pair(2, in_channels=3, out_channels=4, kernel_size=3, padding=1)
    x, y = torch.randn(2, 3, 7, 6, dtype=torch.float64), torch.randn(1, 3, 5, 5, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(mine(x), ref(x))
        assert len(full_way) == 1
        for _ in range(2):
            torch.testing.assert_close(mine(y), ref(y))
            torch.testing.assert_close(mine(x), ref(x))
        assert full_way == [x.shape, y.shape]
        x_cl = x.to(memory_format=torch.channels_last)  # new strides: the full way once, then memoized instead
        for _ in range(2):
            torch.testing.assert_close(mine(x_cl), ref(x_cl))
        assert len(full_way) == 3
        for _ in range(2):  # one strides per shape: the first layout again takes the full way once
            torch.testing.assert_close(mine(x), ref(x))
        assert len(full_way) == 4
    _check_forward_and_backward(ref, mine, x)  # with gradients: a memo of its own
    _check_forward_and_backward(ref, mine, x)
    assert len(full_way) == 5


def test_a_modules_memo_is_forgotten_when_the_choice_may_change(full_way):
    ref, mine = _pair(2, in_channels=3, out_channels=4, kernel_size=3, padding=1)
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    mine(x)
    conv_core.reset()  # the engine's choices are dropped
    torch.testing.assert_close(mine(x), ref(x))
    assert len(full_way) == 2
    ref.padding = mine.padding = (2, 2)  # an attribute the route depends on
    torch.testing.assert_close(mine(x), ref(x))
    mine.backend = "aten"
    torch.testing.assert_close(mine(x), ref(x))
    assert len(full_way) == 4
    ref.float(), mine.float()  # parameters changed in place
    torch.testing.assert_close(mine(x.float()), ref(x.float()))
    assert len(full_way) == 5
    mine.weight = nn.Parameter(ref.weight.detach() * 2)  # a new parameter
    torch.testing.assert_close(mine(x.float()), ref._conv_forward(x.float(), ref.weight * 2, ref.bias))
    assert len(full_way) == 6
    mine(x.float())
    assert len(full_way) == 6


def test_a_modules_memo_is_not_state(full_way):
    _, mine = _pair(2, in_channels=3, out_channels=4, kernel_size=3, padding=1)
    mine(torch.randn(1, 3, 5, 5, dtype=torch.float64))
    assert mine._memos is not None
    assert copy.deepcopy(mine)._memos is None
    assert "_memos" not in mine.__getstate__()


def test_a_module_whose_layer_a_plugin_wins_runs_the_plugin_from_its_memo(tmp_path, monkeypatch, full_way):
    from fake_backends import AtomicBackend
    from conv_core.frontend.call import problem_of_tensors
    from conv_core.testing.fakes import isolate, prove_faster, use_backends

    isolate(tmp_path, monkeypatch)
    monkeypatch.setenv("CONV_CORE_NONDETERMINISTIC", "1")
    backend = AtomicBackend()
    engine = use_backends(monkeypatch, atomic=backend)
    ref, mine = _pair(2, in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=2)
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    prove_faster(engine, [problem_of_tensors(x, mine.weight, mine.bias, padding=1, groups=2)], ["atomic:k:c"])
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(mine(x), ref(x))
    assert backend.runs == ["fwd"] * 3 and len(full_way) == 1  # then straight from the module's memo
    backend.runs.clear()
    for _ in range(3):  # with gradients: through the route's autograd, from a memo of its own
        _check_forward_and_backward(ref, mine, x)
    assert backend.runs.count("fwd") == 3 and len(full_way) == 2
    mine.weight = nn.Parameter(ref.weight.detach() * 2)  # a new parameter: the full way again
    with torch.no_grad():
        torch.testing.assert_close(mine(x), ref._conv_forward(x, ref.weight * 2, ref.bias))
    assert len(full_way) == 3


def test_a_modules_memo_under_autocast_is_keyed_by_the_autocast_dtype(full_way):
    """Under autocast the memo holds routes per autocast dtype: float64 operands (which autocast leaves alone)
    take the full way once inside autocast and once outside, then the memo; float32 ones give torch's bf16."""
    ref, mine = _pair(2, in_channels=4, out_channels=8, kernel_size=3, padding=1)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.testing.assert_close(mine(x), ref(x))
            torch.testing.assert_close(mine(x), ref(x))
    assert len(full_way) == 2
    ref, mine = ref.float(), mine.float()
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y_ref, y_mine = ref(x.float()), mine(x.float())
        assert y_mine.dtype == y_ref.dtype == torch.bfloat16
        torch.testing.assert_close(y_mine, y_ref)
