"""The built-in ``aten`` backend: PyTorch's own convolution.

It supports every problem PyTorch supports, on any device, and is the
fallback and the baseline every plugin is ranked against. Asymmetric padding
(which PyTorch's convolution lacks) is handled by padding the input
explicitly and, for the data gradient, cropping the result.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import __version__, activations
from ..candidate import BackendInfo, Candidate
from ..estimate import estimate_us
from ..hookspec import hookimpl
from ..problem import ConvProblem, to_layout, torch_dtype

NAME = "aten"

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@hookimpl
def conv_core_backend_info() -> BackendInfo:
    return BackendInfo(NAME, __version__, ("any",), "PyTorch's native convolution (cuDNN, MIOpen, oneDNN)")


@hookimpl
def conv_core_candidates(problem: ConvProblem, device: torch.device) -> list[Candidate]:
    cudnn_like = device.type == "cuda"
    tags = {"cuda_graph_safe"} if cudnn_like else {"deterministic"}
    if cudnn_like and problem.dtype == "float32" and torch.backends.cudnn.allow_tf32:
        tags.add("tf32")
    efficiency = 0.75 if problem.layout == "channels_last" else 0.45
    return [Candidate(NAME, "native", "default", run=functools.partial(_RUN[problem.direction], problem),
                      estimate_us=estimate_us(problem, efficiency, 0.35), tags=frozenset(tags))]


def _compute_dtype(problem: ConvProblem) -> torch.dtype:
    """The dtype torch computes in: the input's, or a wider one where that is needed for accuracy.

    An output wider than the input keeps its accuracy (fp16 in, fp32 out).
    On the CPU, half-precision convolutions are computed in float32: oneDNN's
    half backward passes accumulate in half precision, which is both slower and
    outside the tolerance model every backend is held to.
    """
    d_in, d_out = torch_dtype(problem.dtype), torch_dtype(problem.result_dtype)
    if problem.arch == "cpu" and d_in.itemsize < 4:
        return torch.float32
    return d_out if d_out.itemsize > d_in.itemsize else d_in


def _pad_input(problem: ConvProblem, x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Input padded explicitly when the padding is asymmetric, and the padding left for torch."""
    sym = problem.symmetric_padding
    if sym is not None:
        return x, list(sym)
    flat = [v for pair in reversed(problem.padding) for v in pair]
    return F.pad(x, flat), [0] * problem.ndim


def _finish(problem: ConvProblem, result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    result = result.to(torch_dtype(problem.result_dtype))
    if out is None:
        return to_layout(result, problem.layout)
    out.copy_(result)
    return out


def _forward(problem: ConvProblem, x, w, bias=None, *, out=None):
    dtype = _compute_dtype(problem)
    x, padding = _pad_input(problem, x.to(dtype))
    b = None if bias is None else bias.to(dtype)
    y = _CONV[problem.ndim](x, w.to(dtype), b, problem.stride, padding, problem.dilation, problem.groups)
    return _finish(problem, activations.apply(problem.activation, y), out)


def _backward_data(problem: ConvProblem, dy, w, *, out=None):
    dtype = _compute_dtype(problem)
    padded = [i + lo + hi for i, (lo, hi) in zip(problem.input_size, problem.padding)]
    shape = (problem.batch, problem.in_channels, *padded)
    fake_input = dy.new_empty(1, dtype=dtype).expand(shape)
    dx, _, _ = torch.ops.aten.convolution_backward(
        dy.to(dtype), fake_input, w.to(dtype), None, problem.stride, [0] * problem.ndim, problem.dilation,
        False, [0] * problem.ndim, problem.groups, [True, False, False])
    crop = (slice(None), slice(None), *(slice(lo, lo + i) for i, (lo, _) in zip(problem.input_size, problem.padding)))
    return _finish(problem, dx[crop], out)


def _backward_weight(problem: ConvProblem, x, dy, *, out=None):
    dtype = _compute_dtype(problem)
    x, padding = _pad_input(problem, x.to(dtype))
    fake_weight = x.new_empty(1).expand(problem.weight_shape)
    _, dw, _ = torch.ops.aten.convolution_backward(
        dy.to(dtype), x, fake_weight, None, problem.stride, padding, problem.dilation,
        False, [0] * problem.ndim, problem.groups, [False, True, False])
    return _finish(problem, dw, out)


_RUN = {"fwd": _forward, "bwd_data": _backward_data, "bwd_weight": _backward_weight}
