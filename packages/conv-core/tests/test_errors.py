"""Bad calls are refused as PyTorch refuses them, with a message naming the argument.

Every bad input the functional, transposed and module tests try, against PyTorch's own call with the same
arguments: where PyTorch raises ``RuntimeError``, conv-core raises :class:`conv_core.ConvArgumentError`, which is a
``RuntimeError`` and a ``ValueError``; where PyTorch raises ``TypeError``, a ``TypeError``. So code that catches
PyTorch's error around a model catches conv-core's after :func:`conv_core.convert`. The arguments PyTorch lacks
(``activation``, ``out_dtype``, ``backend``) are refused with :class:`ConvArgumentError` too.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import conv_core
from conv_core import ConvArgumentError


def tensors(ndim=2, c=4, k=6, size=7, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, c, *[size + d for d in range(ndim)], generator=g, dtype=dtype)
    w = torch.randn(k, c, *[3] * ndim, generator=g, dtype=dtype)
    return x, w


def transposed_tensors(ndim=2):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 4, *[4] * ndim, generator=g), torch.randn(4, 4, *[3] * ndim, generator=g)


#: (case, tensors, call: (conv, x, w) -> output, what the message names) for torch.nn.functional's conv*d.
CONV_CASES = [
    ("channels", tensors, lambda conv, x, w: conv(x, w[:, :1]), "channels"),
    ("weight dtype", tensors, lambda conv, x, w: conv(x, w.double()), "dtype"),
    ("input rank", tensors, lambda conv, x, w: conv(x[0, 0], w), "expects a 4D"),
    ("negative padding", tensors, lambda conv, x, w: conv(x, w, padding=-1), "padding"),
    ("same padding, stride 2", tensors, lambda conv, x, w: conv(x, w, stride=2, padding="same"), "stride"),
    ("padding string", tensors, lambda conv, x, w: conv(x, w, padding="full"), "padding='full'"),
    ("float padding", tensors, lambda conv, x, w: conv(x, w, padding=1.5), r"padding=1\.5 must be an int"),
    ("float stride", tensors, lambda conv, x, w: conv(x, w, stride=1.5), r"stride=1\.5 must be an int"),
    ("zero stride", tensors, lambda conv, x, w: conv(x, w, stride=0), "stride"),
    ("dilation entries", tensors, lambda conv, x, w: conv(x, w, dilation=(1, 2, 3)),
     r"dilation=\(1, 2, 3\) must have 2 entries"),
    ("zero groups", tensors, lambda conv, x, w: conv(x, w, groups=0), "groups=0 must be a positive int"),
    ("groups", tensors, lambda conv, x, w: conv(x, w, groups=3), "groups=3"),
    ("filter beyond the input", tensors, lambda conv, x, w: conv(x[..., :2, :2], w), "output_size"),
    ("bias shape", tensors, lambda conv, x, w: conv(x, w, torch.zeros(3)), "bias"),
    ("bias dtype", tensors, lambda conv, x, w: conv(x, w, torch.zeros(6, dtype=torch.float64)),
     "bias dtype torch.float64 differs from the input's torch.float32"),
    ("input type", tensors, lambda conv, x, w: conv(1, w), "must be tensors"),
]

#: The same for torch.nn.functional's conv_transpose*d (arguments: stride, padding, output_padding, groups, dilation).
TRANSPOSED_CASES = [
    ("output_padding", transposed_tensors, lambda conv, x, w: conv(x, w, stride=2, output_padding=2), "output_padding"),
    ("string padding", transposed_tensors, lambda conv, x, w: conv(x, w, padding="same"), "padding='same'"),
    ("negative padding", transposed_tensors, lambda conv, x, w: conv(x, w, padding=-1), "padding"),
    ("zero stride", transposed_tensors, lambda conv, x, w: conv(x, w, stride=0), "stride"),
    ("padding beyond the output", transposed_tensors, lambda conv, x, w: conv(x, w, padding=4), "padding"),
    ("groups", transposed_tensors, lambda conv, x, w: conv(x, w, groups=3), "groups=3"),
    ("stride entries", transposed_tensors, lambda conv, x, w: conv(x, w, stride=(1, 2, 3)), "stride"),
    ("channels", transposed_tensors, lambda conv, x, w: conv(x, w[:3]), "channels"),
    ("weight dtype", transposed_tensors, lambda conv, x, w: conv(x, w.double()), "dtype"),
    ("bias shape", transposed_tensors, lambda conv, x, w: conv(x, w, torch.zeros(3)), "bias shape"),
    ("input rank", transposed_tensors, lambda conv, x, w: conv(x[0, 0], w), "expects a 4D"),
]


def refusal(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def assert_refused_alike(theirs: BaseException, ours: BaseException, message: str) -> None:
    assert isinstance(theirs, (RuntimeError, TypeError)), theirs
    assert isinstance(ours, type(theirs)), f"PyTorch raised {type(theirs).__name__}, conv-core {ours!r}"
    if isinstance(theirs, RuntimeError):
        assert isinstance(ours, ConvArgumentError) and isinstance(ours, ValueError)
    assert re.search(message, str(ours)), f"{message!r} not in {str(ours)!r}"


@pytest.mark.parametrize("case, make, call, message", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv2d_refuses_as_pytorch_does(case, make, call, message):
    x, w = make()
    assert_refused_alike(refusal(lambda: call(F.conv2d, x, w)), refusal(lambda: call(conv_core.conv2d, x, w)), message)


@pytest.mark.parametrize("ndim", [1, 3])
@pytest.mark.parametrize("case", ["channels", "negative padding", "zero groups", "bias shape"])
def test_conv1d_and_conv3d_refuse_as_pytorch_does(ndim, case):
    _, make, call, message = next(c for c in CONV_CASES if c[0] == case)
    x, w = tensors(ndim)
    theirs = refusal(lambda: call({1: F.conv1d, 3: F.conv3d}[ndim], x, w))
    ours = refusal(lambda: call({1: conv_core.conv1d, 3: conv_core.conv3d}[ndim], x, w))
    assert_refused_alike(theirs, ours, message.replace("4D", f"{ndim + 2}D"))


@pytest.mark.parametrize("case, make, call, message", TRANSPOSED_CASES, ids=[c[0] for c in TRANSPOSED_CASES])
def test_conv_transpose2d_refuses_as_pytorch_does(case, make, call, message):
    x, w = make()
    theirs = refusal(lambda: call(F.conv_transpose2d, x, w))
    assert_refused_alike(theirs, refusal(lambda: call(conv_core.conv_transpose2d, x, w)), message)


@pytest.mark.parametrize("module, bad_input", [
    (lambda: torch.nn.Conv2d(4, 6, 3), torch.randn(2, 5, 8, 8)),
    (lambda: torch.nn.Conv2d(4, 6, 3), torch.randn(2, 4, 2, 2)),
    (lambda: torch.nn.Conv1d(4, 6, 3, padding=1), torch.randn(2, 4, 8, 8)),
    (lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2), torch.randn(2, 3, 8, 8)),
])
def test_a_converted_module_refuses_a_bad_input_as_pytorchs_module_does(module, bad_input):
    plain = module()
    converted = conv_core.convert(torch.nn.Sequential(module()))[0]
    assert type(converted).__module__ == "conv_core.nn"
    theirs, ours = refusal(lambda: plain(bad_input)), refusal(lambda: converted(bad_input))
    assert isinstance(theirs, RuntimeError) and isinstance(ours, ConvArgumentError)
    with pytest.raises(RuntimeError):  # what a model's user catches
        converted(bad_input)


@pytest.mark.parametrize("call, message", [
    (lambda: conv_core.conv2d(*tensors(), activation="tanh"), "activation"),
    (lambda: conv_core.conv2d(*tensors(), out_dtype=torch.int8), "out_dtype=torch.int8: dtype"),
    (lambda: conv_core.conv2d(*tensors(), backend="nonexistent"),
     "backend='nonexistent' cannot be used: no backend has that name; loaded backends: aten"),
    (lambda: conv_core.conv_transpose2d(*transposed_tensors(), activation="tanh"), "activation"),
])
def test_conv_cores_own_arguments_are_named(call, message):
    with pytest.raises(ConvArgumentError, match=message):
        call()


def test_the_error_class_is_both_value_and_runtime_error():
    assert issubclass(ConvArgumentError, ValueError) and issubclass(ConvArgumentError, RuntimeError)
    assert conv_core.ConvArgumentError is conv_core.errors.ConvArgumentError
