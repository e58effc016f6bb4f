"""From a ``conv*d`` call to a :class:`~conv_core.problem.ConvProblem`: the one place that does it.

The functional API, the custom ops' fake implementations, :func:`conv_core.explain` and
:func:`conv_core.capture_shapes` all describe a call through :func:`problem_of_call`, so what
``explain`` reports is the problem that runs (autocast's casts included), and a bad argument is
rejected once, with a message naming it, before anything reaches a kernel. A ``conv_transpose*d``
call is described as the convolution whose data gradient it is
(:func:`conv_core.frontend.transposed.problem_of_transposed_call`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import activations
from ..arch import device_arch
from ..errors import ConvArgumentError
from ..problem import ConvProblem, check_call_tensors, dtype_name, normalize_padding, per_dim
from ..layout import detect_layout

#: Device types whose autocast state is read (``torch.amp.is_autocast_available`` is not traceable by dynamo).
AUTOCAST_DEVICES = frozenset({"cpu", "cuda", "xpu", "mps", "hpu"})


@dataclass(frozen=True)
class ConvArgs:
    """A call's non-tensor arguments, normalised (tuples per dimension, padding as pairs)."""

    ndim: int
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    groups: int
    activation: str | None
    out_dtype: str | None
    backend: str | None

    @classmethod
    def of(cls, ndim: int, weight: torch.Tensor, stride, padding, dilation, groups, activation, out_dtype,
           backend) -> ConvArgs:
        """Normalise and check a call's arguments; a ``ValueError`` names the argument at fault."""
        stride, dilation = per_dim(stride, ndim, "stride"), per_dim(dilation, ndim, "dilation")
        pads = normalize_padding(padding, ndim, tuple(weight.shape[2:]), dilation, stride)
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ConvArgumentError(f"groups={groups!r} must be a positive int")
        if backend is not None and not isinstance(backend, str):
            raise ConvArgumentError(f"backend={backend!r} must be a backend's name or None")
        return cls(ndim, stride, pads, dilation, groups, activations.check_activation(activation),
                   out_dtype_name(out_dtype), backend)

    @property
    def symmetric_padding(self) -> tuple[int, ...] | None:
        """Padding per dimension if it is the same on both sides everywhere (what ``F.conv*d`` takes)."""
        if all(a == b for a, b in self.padding):
            return tuple(a for a, _ in self.padding)
        return None

    def problem(self, direction: str, input_shape, weight_shape, dtype: str, layout: str, bias: bool,
                arch: str) -> ConvProblem:
        """The problem of this call in ``direction`` (backward problems drop bias and activation)."""
        return ConvProblem(
            direction="fwd", batch=input_shape[0], in_channels=input_shape[1], out_channels=weight_shape[0],
            input_size=tuple(input_shape[2:]), filter_size=tuple(weight_shape[2:]), stride=self.stride,
            padding=self.padding, dilation=self.dilation, groups=self.groups, dtype=dtype, weight_dtype=dtype,
            out_dtype=self.out_dtype or dtype, layout=layout, bias=bias, activation=self.activation, arch=arch,
        ).with_direction(direction)


def out_dtype_name(out_dtype) -> str | None:
    if out_dtype is None:
        return None
    try:
        return dtype_name(out_dtype)
    except ValueError as exc:
        raise ConvArgumentError(f"out_dtype={out_dtype!r}: {exc}") from None


def needs_grad(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether a call records autograd: grad mode on and an operand that requires a gradient."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (input, weight, bias))


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast gives a convolution's floating operands on ``device``, or None where it is off there."""
    device_type = device.type
    if device_type not in AUTOCAST_DEVICES or not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def autocast_cast(dtype: torch.dtype, amp: torch.dtype | None) -> torch.dtype:
    """What autocast (to ``amp``, None: off) makes of an operand of ``dtype``: float64 and integers are left alone."""
    return amp if amp is not None and dtype.is_floating_point and dtype != torch.float64 else dtype


def autocast_operands(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """The operands as autocast gives them to ``F.conv*d``: float32/16 cast to the autocast dtype.

    Custom functions do not take part in autocast on their own, so without this
    a model under ``torch.autocast`` would compute in float32 where PyTorch's
    convolution runs in bf16/fp16. float64 is left alone, as autocast does.
    """
    amp = autocast_dtype(input.device)
    if amp is None:
        return input, weight, bias

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        return t if t is None or autocast_cast(t.dtype, amp) is t.dtype else t.to(amp)

    return cast(input), cast(weight), cast(bias)


def check_call(ndim: int, input, weight, bias, args: ConvArgs) -> None:
    """Reject what ``F.conv*d`` rejects (and what conv-core cannot run), naming the argument."""
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"input and weight must be tensors, not {type(input).__name__} and {type(weight).__name__}")
    if input.dim() != ndim + 2:
        raise ConvArgumentError(f"conv{ndim}d expects a {ndim + 2}D (batched) or {ndim + 1}D (unbatched) input; "
                                f"got shape {tuple(input.shape)}")
    if weight.dtype != input.dtype:
        raise ConvArgumentError(f"input dtype {input.dtype} and weight dtype {weight.dtype} differ; cast one of them")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a tensor or None, not {type(bias).__name__}")
        allowed = {input.dtype} | ({torch.float32, torch.float16, torch.bfloat16} if args.out_dtype else set())
        if bias.dtype not in allowed:
            raise ConvArgumentError(f"bias dtype {bias.dtype} differs from the input's {input.dtype}; cast one of them")
    check_call_tensors(input, weight, bias, args.groups)


def problem_of_call(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    args: ConvArgs, direction: str = "fwd", arch: str | None = None) -> ConvProblem:
    """The problem a call solves, for operands already cast as autocast casts them.

    ``arch`` defaults to the input's device (fake tensors pass their own, since
    they have no real device to ask).
    """
    check_call(ndim, input, weight, bias, args)
    return args.problem(direction, input.shape, weight.shape, dtype_name(input.dtype), detect_layout(input),
                        bias is not None, arch or device_arch(input.device))


def problem_of_tensors(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                       padding=0, dilation=1, groups: int = 1, *, activation: str | None = None,
                       out_dtype: torch.dtype | str | None = None, direction: str = "fwd") -> ConvProblem:
    """The problem of a ``torch.nn.functional.conv*d``-style call, its rank read from the input.

    Checks the tensors first (rank, device, dtype, channel counts), so a
    bad call fails here with a message about the call, not deep in a kernel.
    """
    ndim = input.dim() - 2 if isinstance(input, torch.Tensor) else 0
    if not 1 <= ndim <= 3:
        check_call_tensors(input, weight, bias, groups)
    args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, activation, out_dtype, None)
    return problem_of_call(ndim, input, weight, bias, args, direction)
