"""The built-in ``aten`` backend: PyTorch's own convolution.

It supports every problem PyTorch supports, on any device, and is the
fallback and the baseline every plugin is ranked against. Asymmetric padding
(which PyTorch's convolution lacks) is handled by padding the input
explicitly and, for the data gradient, cropping the result; symmetric padding is
PyTorch's own, so each direction costs what PyTorch's autograd costs.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import __version__, activations
from ..candidate import BackendInfo, Candidate
from ..estimate import estimate_us
from ..hookspec import hookimpl
from ..problem import ConvProblem, torch_dtype
from ..layout import empty_strided_for, to_layout

NAME = "aten"

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@hookimpl
def conv_core_backend_info() -> BackendInfo:
    return BackendInfo(NAME, __version__, ("any",), "PyTorch's native convolution (cuDNN, MIOpen, oneDNN)")


@hookimpl
def conv_core_tuning_tables() -> list[Path]:
    """aten's own measured times (``data/tables/aten_<arch>.json``), so that plugins' measured
    times are ranked against aten's measured times, not against its estimate."""
    folder = resources.files("conv_core").joinpath("data/tables")
    if not folder.is_dir():
        return []
    return sorted(Path(str(item)) for item in folder.iterdir() if item.name.startswith("aten_"))


@hookimpl
def conv_core_candidates(problem: ConvProblem, device: torch.device) -> list[Candidate]:
    cudnn_like = device.type == "cuda"
    tags = {"cuda_graph_safe"} if cudnn_like else {"deterministic"}
    if cudnn_like and problem.dtype == "float32" and torch.backends.cudnn.allow_tf32:
        tags.add("tf32")
    if _compute_dtype(problem) is torch_dtype(problem.dtype) is torch_dtype(problem.result_dtype):
        tags.add("direct")
    if problem.direction == "bwd_data":
        tags.add("transposed_epilogue")
    efficiency = 0.75 if problem.layout == "channels_last" else 0.45
    native = Candidate(NAME, "native", "default", run=_RUN[problem.direction](problem),
                       estimate_us=estimate_us(problem, efficiency, 0.35), tags=frozenset(tags))
    if not _cudnn_relu_applies(problem, device):
        return [native]
    return [native, Candidate(NAME, *CUDNN_RELU.split(":"), run=_CudnnRelu(problem),
                              estimate_us=native.estimate_us * 1.1, tags=frozenset(tags - {"direct"}))]


#: cuDNN's convolution + bias + ReLU as one operator (``torch.cudnn_convolution_relu``, what PyTorch's frozen
#: TorchScript graphs run): one call and one kernel where ``F.conv2d`` then ``relu`` make three (the bias is an add
#: of its own). For a fused inference call, behind the native call until timed: ResNet-50 folded ran 1.4 against
#: 2.5 ms of GPU time per step this way, MobileNetV3-L 2.2 against 1.3 ms (H200, torch 2.11, cuDNN 9.19).
CUDNN_RELU = "cudnn:conv_bias_relu"
CUDNN_RELU_ID = f"{NAME}:{CUDNN_RELU}"


def _cudnn_relu_applies(problem: ConvProblem, device: torch.device) -> bool:
    return (device.type == "cuda" and torch.version.hip is None and problem.direction == "fwd"
            and problem.activation == "relu" and problem.bias and problem.ndim == 2
            and problem.symmetric_padding is not None and problem.dtype == problem.out_dtype
            and problem.dtype in ("float16", "bfloat16", "float32") and torch.backends.cudnn.is_available()
            and torch.backends.cudnn.enabled)


def _compute_dtype(problem: ConvProblem) -> torch.dtype:
    """The dtype torch computes in: the input's, or a wider one where that is needed for accuracy or speed.

    An output wider than the input keeps its accuracy (fp16 in, fp32 out). On the CPU:

    - float16 is computed in float32: PyTorch's CPU float16 backward rounds partial sums to float16 (up to
      ~17x the error bound of a float32-accumulating kernel, outside the tolerance model);
    - a bfloat16 forward is PyTorch's own call where this CPU's oneDNN has bfloat16 kernels
      (:func:`cpu_has_native`): the same result as ``F.conv2d`` at the same cost, a direct route for inference.
      Elsewhere (an AVX2 machine) PyTorch falls back to a loop 4-15x slower than the float32 convolution on a
      64-channel layer (measured on an AVX2 EPYC with torch 2.13), so it is computed in float32, rounded once;
    - bfloat16 gradients are computed in float32: PyTorch's CPU bfloat16 data gradient of a strided grouped
      layer measured 38.7x the tolerance model's bound, its weight gradient out of bound too (torch 2.13, AVX2).
    """
    d_in, d_out = torch_dtype(problem.dtype), torch_dtype(problem.result_dtype)
    native = d_in is torch.bfloat16 and problem.direction == "fwd" and cpu_has_native(d_in)
    if problem.arch == "cpu" and d_in.itemsize < 4 and not native:
        return torch.float32
    return d_out if d_out.itemsize > d_in.itemsize else d_in


@functools.cache
def cpu_has_native(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN convolves ``dtype`` (bfloat16 or float16) in kernels of its own (AVX512-BF16,
    AMX, AVX512-FP16). A fact of the machine, read once: the same problem on the same machine takes one path.
    """
    probes = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}
    try:
        return bool(getattr(torch.ops.mkldnn, probes[dtype])())
    except (AttributeError, KeyError, RuntimeError):  # no oneDNN, or a torch without the probe
        return False


class _Runner:
    """Everything about a problem that does not change between calls, worked out once.

    The call itself then does only the casts, padding and re-layout this
    problem needs: this is the baseline whose host overhead every call pays.
    """

    def __init__(self, problem: ConvProblem) -> None:
        self.problem = problem
        self.compute = _compute_dtype(problem)
        self.result = torch_dtype(problem.result_dtype)
        self.ndim = problem.ndim
        sym = problem.symmetric_padding
        self.pad = None if sym is not None else [v for pair in reversed(problem.padding) for v in pair]
        self.padding = list(sym) if sym is not None else [0] * problem.ndim

    def shape_only(self, shape, device) -> torch.Tensor:
        """The operand ``convolution_backward`` reads only the shape of, dense in the problem's layout.

        Its layout picks cuDNN's: an expanded one-element tensor reads as channels-first, so a
        channels-last problem ran channels-first kernels and a copy back (its data gradients measured
        2-6x slower than PyTorch's autograd, which passes the real tensor). Uninitialised memory from
        the caching allocator costs no GPU time.
        """
        return empty_strided_for(tuple(shape), self.compute, self.problem.layout, device)

    def cast(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.dtype is self.compute else t.to(self.compute)

    def padded(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cast(x)
        return x if self.pad is None else F.pad(x, self.pad)

    def finish(self, result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        if result.dtype is not self.result:
            result = result.to(self.result)
        if out is not None:
            out.copy_(result)
            return out
        return to_layout(result, self.problem.layout)

    def activated(self, y: torch.Tensor) -> torch.Tensor:
        activation = self.problem.activation
        return y if activation is None else activations.ACTIVATIONS[activation](y)


class _Forward(_Runner):
    def __call__(self, x, w, bias=None, *, out=None):
        p = self.problem
        b = None if bias is None else self.cast(bias)
        y = _CONV[self.ndim](self.padded(x), self.cast(w), b, p.stride, self.padding, p.dilation, p.groups)
        return self.finish(self.activated(y), out)


class _CudnnRelu(_Runner):
    def __call__(self, x, w, bias, *, out=None):
        p = self.problem
        return self.finish(torch.cudnn_convolution_relu(x, w, bias, p.stride, self.padding, p.dilation, p.groups),
                           out)


class _BackwardData(_Runner):
    """``dx`` as PyTorch's autograd computes it; with asymmetric padding, over the padded input, then cropped.
    A transposed convolution's epilogue (bias per channel of ``dx``, activation) follows, as
    ``F.conv_transpose*d`` and the activation would apply it."""

    def __call__(self, dy, w, bias=None, *, out=None):
        p = self.problem
        padded = [i + lo + hi for i, (lo, hi) in zip(p.input_size, p.padding)] if self.pad else list(p.input_size)
        fake_input = self.shape_only((p.batch, p.in_channels, *padded), dy.device)
        dx, _, _ = torch.ops.aten.convolution_backward(
            self.cast(dy), fake_input, self.cast(w), None, p.stride, self.padding, p.dilation,
            False, [0] * self.ndim, p.groups, [True, False, False])
        if self.pad:
            dx = dx[(slice(None), slice(None), *(slice(lo, lo + i) for i, (lo, _) in zip(p.input_size, p.padding)))]
        if bias is not None:
            dx = dx + self.cast(bias).view(-1, *[1] * self.ndim)
        return self.finish(self.activated(dx), out)


class _BackwardWeight(_Runner):
    def __call__(self, x, dy, *, out=None):
        p = self.problem
        fake_weight = self.shape_only(p.weight_shape, x.device)
        _, dw, _ = torch.ops.aten.convolution_backward(
            self.cast(dy), self.padded(x), fake_weight, None, p.stride, self.padding, p.dilation,
            False, [0] * self.ndim, p.groups, [False, True, False])
        return self.finish(dw, out)


_RUN = {"fwd": _Forward, "bwd_data": _BackwardData, "bwd_weight": _BackwardWeight}
