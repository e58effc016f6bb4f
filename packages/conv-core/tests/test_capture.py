"""``capture_shapes`` records every convolution a model runs, once, however it was called."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import conv_core
import conv_core.nn as cnn
from conv_core.frontend import routes
from conv_core.frontend.capture import CapturedLayer, capture_shapes
from conv_core.problem import ConvProblem


def _problem(n, c, k, size, f, *, stride=1, padding=0, groups=1, bias=False, dtype="float32",
             layout="channels_first", activation=None, arch="cpu") -> ConvProblem:
    return ConvProblem("fwd", n, c, k, size, f, stride, padding, 1, groups=groups, bias=bias, dtype=dtype,
                       layout=layout, activation=activation, arch=arch)


class Known(nn.Module):
    """Convolutions of every kind of call, with hand-written expected problems (see ``EXPECTED``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False)
        self.core = cnn.Conv2d(16, 32, 1, activation="relu")
        self.head_weight = nn.Parameter(torch.randn(8, 32, 3, 3) * 0.1)
        self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)  # the data gradient of a 6x6 -> 3x3 convolution

    def forward(self, x):
        x = self.grouped(self.grouped(self.stem(x)))  # the grouped conv runs twice
        x = self.core(x)
        y = F.conv2d(x, self.head_weight, stride=2)  # functional torch call, in the model's own forward
        z = conv_core.conv2d(x, self.head_weight, padding=((0, 1), (0, 1)), stride=2)  # functional conv-core call
        return self.up(y), z


def expected_known(n: int = 2, **common) -> list[tuple[str, ConvProblem, int]]:
    return [
        ("stem", _problem(n, 3, 16, (16, 16), 3, stride=2, padding=1, bias=True, **common), 1),
        ("grouped", _problem(n, 16, 16, (8, 8), 3, padding=1, groups=4, **common), 2),
        ("core", _problem(n, 16, 32, (8, 8), 1, bias=True, activation="relu", **common), 1),
        ("", _problem(n, 32, 8, (8, 8), 3, stride=2, **common), 1),
        ("", _problem(n, 32, 8, (8, 8), 3, stride=2, padding=((0, 1), (0, 1)), **common), 1),
        ("up", _problem(n, 8, 8, (6, 6), 2, stride=2, **common).with_direction("bwd_data"), 1),
    ]


def _summary(layers: list[CapturedLayer]) -> list[tuple[str, ConvProblem, int]]:
    return [(layer.name, layer.problem, layer.count) for layer in layers]


def test_known_model_is_captured_exactly():
    torch.manual_seed(0)
    layers = capture_shapes(Known(), torch.randn(2, 3, 16, 16))
    assert _summary(layers) == expected_known()
    assert layers[1].modules == ("grouped",)


def test_converted_model_captures_the_same_problems():
    torch.manual_seed(0)
    model = Known()
    x = torch.randn(2, 3, 16, 16)
    before = capture_shapes(model, x)
    conv_core.convert(model)
    assert type(model.stem) is cnn.Conv2d
    assert _summary(capture_shapes(model, x)) == _summary(before)


def test_sequential_model_before_and_after_convert():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"), nn.Conv2d(8, 8, 3, padding=1),
                          nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 16, 1, 2)).eval()
    x = torch.randn(1, 3, 32, 32)
    before = capture_shapes(model, x)
    assert [(layer.name, layer.count) for layer in before] == [("0", 1), ("3", 1), ("4", 2), ("6", 1)]
    assert before[1].problem.padding == ((0, 0), (0, 0)), "reflect padding is an explicit pad before the conv"
    assert capture_shapes(conv_core.convert(model), x) == before


def test_layout_dtype_and_unbatched_input():
    model = nn.Conv2d(4, 8, 3, padding=1, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 6, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    [layer] = capture_shapes(model, x)
    assert layer.problem == _problem(2, 4, 8, (6, 6), 3, padding=1, bias=True, dtype="bfloat16",
                                     layout="channels_last")
    [layer] = capture_shapes(nn.Conv1d(4, 8, 3), torch.randn(4, 10))
    assert layer.problem == _problem(1, 4, 8, (10,), 3, bias=True)


def test_shared_module_runs_count_and_modules_list():
    shared = nn.Conv2d(4, 4, 3, padding=1)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = shared
            self.b = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return self.a(self.b(self.a(x)))

    [layer] = capture_shapes(Twice(), torch.randn(1, 4, 5, 5))
    assert (layer.name, layer.count, layer.modules) == ("a", 3, ("a", "b"))


def test_backward_directions_merge_what_only_the_epilogue_told_apart():
    model = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, bias=True), nn.Conv2d(4, 4, 3, padding=1, bias=False))
    x = torch.randn(1, 4, 5, 5)
    assert len(capture_shapes(model, x)) == 2
    [layer] = capture_shapes(model, x, direction="bwd_weight")
    assert layer.count == 2 and layer.problem.direction == "bwd_weight" and not layer.problem.bias
    assert layer.modules == ("0", "1")
    with pytest.raises(ValueError, match="direction"):
        capture_shapes(model, x, direction="backward")


def test_conv_core_custom_op_is_recorded_once():
    class Op(nn.Module):
        def forward(self, x, w):
            return torch.ops.conv_core.convolution(x, w, None, [1, 1], [0, 1, 0, 1], [1, 1], 1, "", None, "")

    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    [layer] = capture_shapes(Op(), (x, w))
    assert layer.problem == _problem(1, 2, 3, (5, 5), 3, padding=((0, 1), (0, 1)))
    [layer] = capture_shapes(Op(), {"x": x, "w": w})
    assert layer.count == 1


def test_meta_device_capture_runs_nothing():
    with torch.device("meta"):
        model = Known()
        x = torch.empty(2, 3, 16, 16)
    assert _summary(capture_shapes(model, x)) == expected_known(arch="meta")


def test_capture_leaves_no_trace_even_when_the_model_fails():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = cnn.Conv2d(2, 2, 1)

        def forward(self, x):
            self.conv(x)
            raise RuntimeError("boom")

    model = Broken()
    original = routes.Route.run
    with pytest.raises(RuntimeError, match="boom"):
        capture_shapes(model, torch.randn(1, 2, 3, 3))
    assert routes.Route.run is original
    assert not model._forward_pre_hooks and not model.conv._forward_hooks
    assert torch.is_grad_enabled(), "grad mode restored"
    assert len(capture_shapes(nn.Conv2d(2, 2, 1), torch.randn(1, 2, 3, 3))) == 1
