"""``conv_core.optimize_for_inference`` / ``convert(fuse=True)``: conv -> batch norm -> activation as one call."""

from __future__ import annotations

import copy
import linecache
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import conv_core
from conv_core.fusion import fold, fused_call
from conv_core import nn as cnn

ACTIVATIONS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "gelu": nn.GELU,
               "gelu_tanh": lambda: nn.GELU(approximate="tanh")}
NORMS = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
CONVS = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
SPATIAL = {1: (11,), 2: (7, 6), 3: (5, 4, 6)}


def randomize_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics and affine parameters for every batch norm (fresh ones are an identity)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) or type(m).__name__ == "FrozenBatchNorm2d":
                for t in (m.running_mean, m.weight, m.bias):
                    if t is not None:
                        t.copy_(torch.randn(t.shape, generator=gen, dtype=t.dtype))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen, dtype=m.running_var.dtype) + 0.3)
    return model


def pair(model: nn.Module, dtype=torch.float64, fuse=conv_core.optimize_for_inference):
    """(reference, fused): the same model unfused and fused, both in eval mode."""
    torch.manual_seed(1)
    model = randomize_norms(model.to(dtype)).eval()
    return copy.deepcopy(model), fuse(model)


def count_calls(model: nn.Module, kinds: tuple[type, ...]) -> list:
    """A list that grows by one for each call of a module of ``kinds`` (hooks registered after fusion)."""
    calls = []
    for m in model.modules():
        if isinstance(m, kinds):
            m.register_forward_hook(lambda mod, args, out: calls.append(type(mod).__name__))
    return calls


def fused_types(model: nn.Module) -> list[str]:
    return [type(m).__name__ for m in model.modules() if conv_core.fusion.fuse.is_fused(m)]


class Bottleneck(nn.Module):
    """torchvision's ResNet Bottleneck, as written there: attributes, and one ReLU called three times."""

    def __init__(self, channels: int, width: int, stride: int = 1, groups: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 else nn.Sequential(nn.Conv2d(channels, channels, 1, stride, bias=False),
                                                                 nn.BatchNorm2d(channels))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    """A stem by attributes, then Bottlenecks in a Sequential, then a head: ResNet's shape, small."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(Bottleneck(8, 4), Bottleneck(8, 4, stride=2, groups=2))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.layer1(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(x.mean((2, 3), keepdim=True), 1))


def images(dtype=torch.float64, batch=2, size=(9, 10)):
    return torch.randn(batch, 3, *size, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_sequential_conv_bn_act_is_one_call(activation, dtype):
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), ACTIVATIONS[activation]()),
                      dtype)
    calls = count_calls(fused, (nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU, nn.Conv2d))
    x = images(dtype)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert calls == []  # the three modules were not called: one conv-core call did their work
    assert fused_types(fused) == ["FusedSequential"]


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("bias, groups, padding_mode", [(False, 1, "zeros"), (True, 3, "reflect"),
                                                         (False, 6, "circular")])
def test_conv_without_bias_groups_and_padding_modes(ndim, bias, groups, padding_mode):
    conv = CONVS[ndim](6, 12, 3, padding=1, bias=bias, groups=groups, padding_mode=padding_mode)
    ref, fused = pair(nn.Sequential(conv, NORMS[ndim](12), nn.SiLU()))
    x = torch.randn(2, 6, *SPATIAL[ndim], dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert fused_types(fused) == ["FusedSequential"]


@pytest.mark.parametrize("fuse", [conv_core.optimize_for_inference, lambda m: conv_core.convert(m, fuse=True)],
                         ids=["torch_modules", "converted"])
def test_bottleneck_fuses_only_what_the_graph_proves(fuse):
    """Attribute-style blocks are fused by tracing them; a converted model's convolutions trace as leaves too (their
    call defers to torch's, which torch.fx patches)."""
    ref, fused = pair(TinyResNet(), fuse=fuse)
    calls = count_calls(fused, (nn.BatchNorm2d, nn.ReLU))
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    # unfused: 1 + 3 + 4 batch norms and 1 + 3 + 3 ReLU calls; fused: none (each residual add and its ReLU
    # are the end of its block's last convolution call)
    assert calls == []
    assert sorted(fused_types(fused)) == ["FusedSequential", "FusedTinyResNet"]  # the downsample and the model


def test_bottleneck_alone_ends_in_one_call_with_its_residual():
    ref, fused = pair(Bottleneck(8, 4))
    calls = count_calls(fused, (nn.BatchNorm2d, nn.ReLU))
    x = torch.randn(2, 8, 6, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
        torch.testing.assert_close(fused(x), ref(x))  # again, from the memo
    assert calls == []


class ResidualEnds(nn.Module):
    """Residual ends written other ways: ``identity + out``, ``torch.add`` then ``F.relu``; and an add that no
    ReLU follows, or that a ReLU follows while the sum has another user (neither is a residual block's end)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(4, 4, 3, padding=1) for _ in range(4))
        self.bns = nn.ModuleList(nn.BatchNorm2d(4) for _ in range(4))

    def forward(self, x):
        x = torch.relu(x + self.bns[0](self.convs[0](x)))
        x = F.relu(torch.add(self.bns[1](self.convs[1](x)), x))
        y = self.bns[2](self.convs[2](x)) + x  # no ReLU: the batch norm folds, the add stays
        s = self.bns[3](self.convs[3](y)) + y
        return torch.relu(s) * s.sum()


def test_residual_ends_written_other_ways_and_adds_that_are_not_one():
    ref, fused = pair(ResidualEnds())
    calls = count_calls(fused, (nn.BatchNorm2d,))
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert calls == []
    fused_calls = [args.split(", ") for args in re.findall(r"fused_call_conv_bn_act\(([^)]*)\)", fused_source(fused))]
    assert [(args[3], len(args) == 5) for args in fused_calls] == [
        ("'relu'", True), ("'relu'", True), ("None", False), ("None", False)]  # activation, residual


def fused_source(model: nn.Module) -> str:
    """The Python source of ``model``'s fused forward (its rewritten graph)."""
    code = model._conv_core_fusion.forward.__code__
    return "".join(linecache.getlines(code.co_filename))


class FunctionalActivation(nn.Module):
    """Attribute convolution and batch norm, then an activation written as a function or a tensor method."""

    def __init__(self, activation):
        super().__init__()
        self.conv, self.bn, self.activation = nn.Conv2d(3, 4, 3, stride=2), nn.BatchNorm2d(4), activation

    def forward(self, x):
        return self.activation(self.bn(self.conv(x)))


@pytest.mark.parametrize("activation", [
    lambda t: nn.functional.gelu(t, approximate="tanh"), nn.functional.gelu, torch.relu, lambda t: t.relu(),
    lambda t: nn.functional.relu(t, inplace=True), nn.functional.relu6, nn.functional.silu,
])
def test_graph_fuses_activation_functions(activation):
    ref, fused = pair(FunctionalActivation(activation))
    calls = count_calls(fused, (nn.BatchNorm2d,))
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert calls == []
    # the fused forward looks up the two modules and makes one call: no activation function is left
    names = set(fused._conv_core_fusion.forward.__code__.co_names)
    assert names == {"conv", "bn", "conv_core_fusion_fused_call_conv_bn_act"}


class ReusedInput(nn.Module):
    """The convolution's output goes to the batch norm and to the sum: the batch norm cannot be folded."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU()

    def forward(self, x):
        y = self.conv(x)
        return self.relu(self.bn(y)) + y


class ReusedNormOutput(nn.Module):
    """The batch norm's output goes to the ReLU and to the sum: conv + bn fold, the ReLU stays a call."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU()

    def forward(self, x):
        z = self.bn(self.conv(x))
        return nn.functional.relu(z) + self.relu(z)


class NormFirst(nn.Module):
    """A batch norm that follows no convolution, and a convolution -> activation -> batch norm."""

    def __init__(self):
        super().__init__()
        self.bn0 = nn.BatchNorm2d(3)
        self.block = nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 4, 1), nn.ReLU6(), nn.BatchNorm2d(4))

    def forward(self, x):
        return self.block(self.bn0(x))


@pytest.mark.parametrize("model, bn_calls, act_calls, fused", [
    (ReusedInput, 1, 1, []),
    (ReusedNormOutput, 0, 1, ["FusedReusedNormOutput"]),
    (NormFirst, 3, 0, ["FusedSequential"]),  # only conv -> ReLU6 fuses
])
def test_chains_that_others_see_are_not_fused(model, bn_calls, act_calls, fused):
    ref, mine = pair(model())
    calls = count_calls(mine, (nn.BatchNorm2d, nn.ReLU, nn.ReLU6))
    x = torch.randn(2, 3, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), ref(x))
    assert calls.count("BatchNorm2d") == bn_calls
    assert len(calls) - bn_calls == act_calls
    assert fused_types(mine) == fused


def test_train_after_eval_runs_the_real_batch_norm_and_updates_its_statistics():
    ref, fused = pair(TinyResNet())
    x = images()
    with torch.no_grad():
        fused(x)  # a fold is cached now
    before = fused.bn1.running_mean.clone()
    ref.train(), fused.train()
    calls = count_calls(fused, (nn.BatchNorm2d,))
    torch.testing.assert_close(fused(x), ref(x))
    assert len(calls) == 8
    for (name, a), b in zip(ref.named_buffers(), fused.buffers()):
        torch.testing.assert_close(b, a, msg=name)
    assert not torch.equal(fused.bn1.running_mean, before)  # they did move
    ref.eval(), fused.eval()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))  # the new statistics, not the cached fold


def test_a_batch_norm_left_in_training_mode_is_not_folded():
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    ref[1].train(), fused[1].train()
    x = images()
    torch.testing.assert_close(fused(x), ref(x))
    torch.testing.assert_close(fused[1].running_var, ref[1].running_var)


def counted_calls(monkeypatch, name: str, module=fold) -> list:
    """A list that grows by one for each call of ``module.<name>`` (default: ``conv_core.fusion.fold``)."""
    counted, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: counted.append(1) or real(*a))
    return counted


@pytest.fixture
def folds(monkeypatch) -> list:
    """The folds computed (:func:`conv_core.fusion.fold.fold`)."""
    return counted_calls(monkeypatch, "fold")


def test_changed_weights_and_statistics_are_seen_after_a_first_call(folds):
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GELU()))
    x = images()
    with torch.no_grad():
        for model in (ref, fused):
            model(x)
        fused(x)
        assert len(folds) == 1  # the second call was served from the cache
        for model in (ref, fused):
            model[0].weight.mul_(1.5)
            model[1].running_var.add_(0.25)
            model[1].bias.sub_(0.5)
        torch.testing.assert_close(fused(x), ref(x))
        assert len(folds) == 2
        new_weight = torch.randn_like(ref[0].weight)
        ref[0].weight = nn.Parameter(new_weight.clone())
        fused[0].weight = nn.Parameter(new_weight.clone())  # a new tensor of the same version
        torch.testing.assert_close(fused(x), ref(x))
        fused.load_state_dict(ref.state_dict())
        torch.testing.assert_close(fused(x), ref(x))
    with torch.inference_mode():
        torch.testing.assert_close(fused(x), ref(x))


def test_a_capture_reads_the_cached_fold_and_keeps_it_alive(folds, monkeypatch):
    """A CUDA graph capture (stood in for: CI has no GPU) reads the fold the warm-up call cached, and the fold stays
    alive with the convolution after a later fold replaces it in the cache (a replay reads it). With the parameters
    changed since, there is nothing to read: the capture folds by torch ops, and caches nothing."""
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    x = images()
    with torch.no_grad():
        fused(x)  # the warm-up
        for module in (fold, fused_call):
            monkeypatch.setattr(module, "is_capturing", lambda device: True)
        torch.testing.assert_close(fused(x), ref(x))
        assert len(folds) == 1
        (captured,) = fold._CAPTURED[fused[0]]
        assert captured is fold._CACHE[fused[0]]
        fused(x)  # a second capture of the same fold keeps one entry
        assert fold._CAPTURED[fused[0]] == [captured]
        for model in (ref, fused):
            model[1].running_var.add_(0.25)
        torch.testing.assert_close(fused(x), ref(x))  # no fold cached for these: folded by torch ops
        assert len(folds) == 2 and fold._CACHE[fused[0]] is captured
        monkeypatch.setattr(fold, "is_capturing", lambda device: False)
        torch.testing.assert_close(fused(x), ref(x))
        assert fold._CACHE[fused[0]] is not captured and fold._CAPTURED[fused[0]] == [captured]


class _Doubled(nn.Module):
    def forward(self, w):
        return w * 2


def test_a_parametrized_weight_is_folded_as_computed(folds):
    """A fused call reads parameters and buffers from the modules' dicts; a parametrized weight is none of them
    and is computed, as torch computes it."""
    from torch.nn.utils import parametrize

    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    for model in (ref, fused):
        parametrize.register_parametrization(model[0], "weight", _Doubled())
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert folds  # folded, not run as the modules
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradients_in_eval_mode_reach_the_original_parameters(dtype):
    ref, fused = pair(TinyResNet(), dtype)
    x = images(dtype)
    grads = []
    for model in (ref, fused):
        xg = x.clone().requires_grad_(True)
        model(xg).square().sum().backward()
        grads.append([xg.grad] + [p.grad for p in model.parameters()])
    names = ["input"] + [name for name, _ in ref.named_parameters()]
    for name, mine, expected in zip(names, grads[1], grads[0]):
        assert mine is not None, name
        torch.testing.assert_close(mine, expected, msg=name)


def test_state_dict_parameters_and_optimizer_are_unchanged():
    model = randomize_norms(TinyResNet().double()).eval()
    keys, params = list(model.state_dict()), list(model.parameters())
    ref = copy.deepcopy(model)
    conv_core.optimize_for_inference(model)
    assert list(model.state_dict()) == keys
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    x = images()
    for m in (ref, model):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m(x).sum().backward()  # eval mode, gradients through the fold
        opt.step()
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x))


def test_convert_with_fuse_then_revert():
    ref, fused = pair(TinyResNet(), fuse=lambda m: conv_core.convert(m, fuse=True))
    assert all(type(m) is cnn.Conv2d for m in fused.modules() if isinstance(m, nn.Conv2d))
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
        conv_core.revert(fused)
        assert fused_types(fused) == []
        assert all(type(m) is nn.Conv2d for m in fused.modules() if isinstance(m, nn.Conv2d))
        torch.testing.assert_close(fused(x), ref(x))


def test_fusing_twice_is_fusing_once():
    ref, fused = pair(TinyResNet())
    conv_core.optimize_for_inference(fused)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert sorted(fused_types(fused)) == ["FusedSequential", "FusedTinyResNet"]


class Untraceable(nn.Module):
    """Control flow on a value: fx cannot trace it; its Sequential still fuses by module pattern."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)
        self.seq = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.inner = Bottleneck(4, 2)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return self.inner(self.seq(y)) if y.sum() > -1e9 else -y


def test_an_untraceable_model_fuses_its_sequentials_and_traceable_children():
    ref, fused = pair(Untraceable())
    calls = count_calls(fused, (nn.BatchNorm2d,))
    x = images().abs()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert len(calls) == 1  # self.bn: its data flow is not proven
    assert sorted(fused_types(fused)) == ["FusedBottleneck", "FusedSequential"]


class WithConstant(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)) * torch.tensor(2.0)  # a constant: fx would store it on the module


def test_tracing_leaves_nothing_on_the_module():
    model = WithConstant()
    before = set(model.__dict__)
    conv_core.optimize_for_inference(model)
    assert set(model.__dict__) == before
    assert fused_types(model) == []


def test_modules_with_hooks_are_not_fused():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
    seen = []
    model[1].register_forward_hook(lambda *args: seen.append(1))
    ref, fused = pair(model)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert len(seen) == 2  # the hook ran in both models
    assert fused_types(fused) == []  # nor is the conv -> ReLU: the batch norm stands between them


class FrozenBatchNorm2d(nn.Module):
    """torchvision.ops.FrozenBatchNorm2d's contract (buffers only, eval arithmetic always)."""

    __module__ = "torchvision.ops.misc"

    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.register_buffer(name, torch.ones(n) if name in ("weight", "running_var") else torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        return x * scale.reshape(1, -1, 1, 1) + (self.bias - self.running_mean * scale).reshape(1, -1, 1, 1)


def test_torchvision_frozen_batch_norm_is_folded():
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), FrozenBatchNorm2d(4), nn.ReLU()))
    calls = count_calls(fused, (FrozenBatchNorm2d,))
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), ref(x))
    assert calls == []


def test_compiles_whole_with_fullgraph_as_the_unfused_model():
    """Under torch.compile a fused module runs its own forward: the graph holds the batch norms (Inductor makes them
    and the activation one pointwise kernel), not a fold computed on every call."""
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), Bottleneck(4, 2)),
                      torch.float32)
    x = images(torch.float32, size=(6, 5))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(fused, fullgraph=True, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), ref(x))
        fused[1].running_mean.add_(1.0), ref[1].running_mean.add_(1.0)
        torch.testing.assert_close(compiled(x), ref(x))
    norms = [n for gm in graphs for n in gm.graph.nodes if "batch_norm" in str(n.target)]
    assert len(norms) == 4  # the Sequential's and the Bottleneck's three


class ModeBranch(nn.Module):
    """Python control flow on ``self.training``: the trace must take the eval-mode branch."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        y = nn.functional.relu6(self.bn(self.conv(x)))
        return y * 2 if self.training else y


def test_fusing_a_model_in_training_mode_keeps_its_modes_and_traces_eval():
    model = randomize_norms(ModeBranch().double())
    ref = copy.deepcopy(model)
    conv_core.optimize_for_inference(model)
    assert all(m.training for m in model.modules())
    x = images()
    torch.testing.assert_close(model(x), ref(x))
    ref.eval(), model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x))
    assert fused_types(model) == ["FusedModeBranch"]


@pytest.fixture
def full_way(monkeypatch) -> list:
    """The fused calls that take conv-core's full way (:func:`conv_core.fusion.fold.convolve`), not the memo."""
    return counted_calls(monkeypatch, "convolve", fused_call)


def test_a_fused_convolution_run_on_several_shapes_keeps_a_memo_for_each(full_way):
    """A detection head runs one convolution on every pyramid level: each shape takes the full way once, then its
    memo, whatever ran in between (a memo of the last call alone missed on every level)."""
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    levels = [images()[:, :, :size, :size].contiguous() for size in (8, 6, 5)]
    with torch.no_grad():
        for _ in range(3):
            for x in levels:
                torch.testing.assert_close(fused(x), ref(x))
    assert len(full_way) == len(levels)


def test_a_repeated_fused_call_runs_from_its_memo_until_something_it_read_changes(full_way):
    """The memo serves a call of the same signature with nothing changed; each change below (in-place writes, a
    new parameter, another dtype, another shape or layout, an engine reset, gradients, training mode) sends the
    next call the full way, with the right result."""
    ref, fused = pair(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    x = images()
    calls = 1

    def check(taken: bool, x=x, grad=False) -> None:
        nonlocal calls
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(fused(x), ref(x))
            calls += taken
            assert len(full_way) == calls
            torch.testing.assert_close(fused(x), ref(x))  # then from the memo again
            calls += grad  # with gradients the fold is part of the graph: never from the memo
            assert len(full_way) == calls

    with torch.no_grad():
        fused(x)
    check(False)
    for change in (lambda m: m[0].weight.mul_(1.5), lambda m: m[1].running_var.add_(0.25),
                   lambda m: m[1].bias.sub_(0.5), lambda m: m[1].num_batches_tracked.add_(1)):
        with torch.no_grad():
            change(ref), change(fused)
        check(True)
    fused[1].weight = nn.Parameter(ref[1].weight.detach().clone())
    check(True)
    check(True, x=images()[:1])
    check(True, x=images().to(memory_format=torch.channels_last))
    conv_core.reset()
    check(True)
    check(True, grad=True)
    ref.float(), fused.float()  # the parameters' storage moves (`.data` replaced): their addresses change
    check(True, x=images().float())
    ref.train(), fused.train()
    with torch.no_grad():
        torch.testing.assert_close(fused(x.float()), ref(x.float()))  # batch statistics: the modules themselves
    assert len(full_way) == calls
