"""``conv_core.nn.ConvTranspose*d``: torch's modules through conv-core; ``convert``/``revert`` and ``capture_shapes``
on a decoder with transposed convolutions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import conv_core
import conv_core.nn as cnn
from conv_core.frontend.capture import capture_shapes
from conv_core.problem import ConvProblem
from conv_core.testing.fakes import isolate

TORCH = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
CORE = {1: cnn.ConvTranspose1d, 2: cnn.ConvTranspose2d, 3: cnn.ConvTranspose3d}


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def decoder() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                         nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2), nn.ReLU(),
                         nn.ConvTranspose2d(6, 3, 2, stride=2, bias=False))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_modules_match_torchs_parameters_state_dict_and_output(ndim):
    options = dict(stride=2, padding=1, output_padding=1, groups=2, dilation=2)
    torch.manual_seed(0)
    theirs = TORCH[ndim](4, 6, 3, **options)
    torch.manual_seed(0)
    mine = CORE[ndim](4, 6, 3, **options)
    mine_state, their_state = mine.state_dict(), theirs.state_dict()
    assert list(mine_state) == list(their_state) == ["weight", "bias"]
    assert all(torch.equal(mine_state[k], their_state[k]) for k in mine_state)
    x = torch.randn(2, 4, *[3 + d for d in range(ndim)])
    torch.testing.assert_close(mine(x), theirs(x))
    assert repr(mine).endswith(repr(theirs).split("(", 1)[1])


def test_output_size_argument_picks_torchs_output_padding():
    torch.manual_seed(0)
    theirs = nn.ConvTranspose2d(4, 2, 3, stride=3, padding=1)
    mine = cnn.ConvTranspose2d(4, 2, 3, stride=3, padding=1, activation="relu", backend="aten")
    mine.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 4, 4, 5)
    y = mine(x, output_size=[12, 15])
    assert y.shape[2:] == (12, 15)
    torch.testing.assert_close(y, torch.relu(theirs(x, output_size=[12, 15])))
    with pytest.raises(ValueError, match="output size"):  # torch's own message
        mine(x, output_size=[20, 20])


def test_padding_modes_other_than_zeros_are_refused_as_torch_refuses_them():
    with pytest.raises(ValueError, match="zeros"):
        cnn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")


def test_convert_and_revert_round_trip_a_decoder():
    model = decoder()
    x = torch.randn(2, 3, 8, 8)
    expected = model(x)
    parameters = list(model.parameters())
    conv_core.convert(model)
    assert [type(m) for m in model[::2]] == [cnn.Conv2d, cnn.ConvTranspose2d, cnn.ConvTranspose2d]
    assert list(model.parameters()) == parameters
    torch.testing.assert_close(model(x), expected)
    conv_core.revert(model)
    assert [type(m) for m in model[::2]] == [nn.Conv2d, nn.ConvTranspose2d, nn.ConvTranspose2d]
    assert not hasattr(model[2], "activation") or model[2].activation is None
    torch.testing.assert_close(model(x), expected)


def test_capture_records_transposed_layers_as_the_convolution_they_are_the_data_gradient_of():
    model = decoder()
    x = torch.randn(2, 3, 8, 8)
    before = capture_shapes(model, x)
    conv_core.convert(model)
    after = capture_shapes(model, x)
    assert [(layer.name, layer.problem, layer.transposed) for layer in after] == \
        [(layer.name, layer.problem, layer.transposed) for layer in before]
    stem, up1, up2 = before
    assert (stem.transposed, up1.transposed, up2.transposed) == (False, True, True)
    expected = ConvProblem("fwd", 2, 6, 8, (8, 8), (3, 3), 2, 1, 1, groups=2).with_direction("bwd_data")
    assert up1.problem == expected
    weight = capture_shapes(model, x, direction="bwd_weight")[1]
    assert weight.problem == expected.with_direction("bwd_weight") and weight.transposed
    data = capture_shapes(model, x, direction="bwd_data")[1]
    assert data.problem == expected.with_direction("fwd")


def test_capture_on_the_meta_device_runs_nothing():
    with torch.device("meta"):
        model = conv_core.convert(decoder())
        x = torch.empty(2, 3, 8, 8)
    layers = capture_shapes(model, x)
    assert [layer.transposed for layer in layers] == [False, True, True]
    assert layers[2].problem.input_size == (16, 16) and layers[2].problem.arch == "meta"  # its output: 8 -> 16


def test_a_module_calls_its_direct_route_itself_unless_given_an_output_size(monkeypatch):
    """After one full call, ``F.conv_transpose2d`` straight from the module (conv_core.nn's memo); a call given
    ``output_size`` takes the full way every time, and so does one after ``output_padding`` is set."""
    from conv_core import functional

    calls, original = [], functional.transposed_convolution
    monkeypatch.setattr(functional, "transposed_convolution", lambda *args: calls.append(1) or original(*args))
    torch.manual_seed(0)
    theirs = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, dtype=torch.float64)
    mine = conv_core.convert(nn.Sequential(TORCH[2](4, 6, 3, stride=2, padding=1, dtype=torch.float64)))[0]
    mine.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(mine(x), theirs(x))
        assert len(calls) == 1
        for _ in range(2):
            torch.testing.assert_close(mine(x, output_size=[10, 10]), theirs(x, output_size=[10, 10]))
        assert len(calls) == 3
        theirs.output_padding = mine.output_padding = (1, 1)
        for _ in range(2):
            torch.testing.assert_close(mine(x), theirs(x))
        assert len(calls) == 4


def test_a_module_runs_an_engine_route_from_its_memo_with_and_without_gradients(monkeypatch):
    """A route that is not ``F.conv_transpose2d`` itself (here: an output dtype, which the engine's route casts
    to) runs from the module's memo too after one full call per gradient mode, its result and gradients those
    of torch's module cast."""
    from conv_core import functional

    calls, original = [], functional.transposed_convolution
    monkeypatch.setattr(functional, "transposed_convolution", lambda *args: calls.append(1) or original(*args))
    torch.manual_seed(0)
    theirs = nn.ConvTranspose2d(4, 6, 2, stride=2, dtype=torch.float64)
    mine = cnn.ConvTranspose2d(4, 6, 2, stride=2, dtype=torch.float64, out_dtype=torch.float32)
    mine.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, 5, 5, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(mine(x), theirs(x).float())
    assert len(calls) == 1
    grad = torch.randn(2, 6, 10, 10)
    for _ in range(3):
        x_theirs, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
        theirs.zero_grad(), mine.zero_grad()
        y = mine(x_mine)
        assert y.dtype == torch.float32
        torch.testing.assert_close(y, theirs(x_theirs).float())
        y.backward(grad)
        theirs(x_theirs).backward(grad.double())
        torch.testing.assert_close(x_mine.grad, x_theirs.grad)
        torch.testing.assert_close(mine.weight.grad, theirs.weight.grad)
        # the bias gradient sums the float32 output gradient: float32's rounding over 200 terms
        torch.testing.assert_close(mine.bias.grad, theirs.bias.grad, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2
