"""A transposed convolution as the data gradient of a convolution: the one place that maps one onto the other.

A transposed convolution ``T(x, w)`` (``torch.nn.functional.conv_transpose*d``) computes exactly what the
data gradient of a convolution ``C`` computes, given ``dy = x``: ``C`` has the same weight (``T``'s weight
``[C_in_T, C_out_T / groups, *k]`` read as a convolution weight ``[out, in / groups, *k]``), stride, padding,
dilation and groups, its input has ``T``'s output shape and its output has ``x``'s shape. So each
direction of ``T`` is a direction of ``C`` that the backends already rank
(:data:`TRANSPOSED_DIRECTIONS`, by which shape suites store transposed layers too), and a
transposed call is described, ranked, explained and captured as ``C``'s problem.

``T``'s output size per dimension is ``(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding
+ 1``; ``C``'s output size from it is ``in + output_padding // stride``, so ``C`` has ``x``'s shape only
while ``output_padding < stride`` (PyTorch also allows ``output_padding < dilation``). Such a geometry is
not *expressible* as ``C``'s problem and runs as ``F.conv_transpose*d`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import activations
from ..arch import device_arch
from .call import ConvArgs, out_dtype_name
from ..errors import ConvArgumentError
from ..layout import detect_layout
from ..problem import ConvProblem, dtype_name, per_dim

#: A transposed layer's direction -> the direction of the convolution C whose problem computes it (an involution):
#: the transposed forward is C's data gradient, its data gradient C's forward, its weight gradient C's.
TRANSPOSED_DIRECTIONS = {"fwd": "bwd_data", "bwd_data": "fwd", "bwd_weight": "bwd_weight"}


def layer_direction(problem_direction: str, transposed: bool = False) -> str:
    """The direction of a layer that a problem in ``problem_direction`` computes (the map is its own inverse)."""
    return TRANSPOSED_DIRECTIONS[problem_direction] if transposed else problem_direction


def direction_label(direction: str, transposed: bool = False) -> str:
    """How tables show a layer's ``direction`` (see :func:`layer_direction`): marked on a transposed layer,
    as in ``"fwd (transposed)"``, so it is never read as its convolution's."""
    return f"{direction} (transposed)" if transposed else direction


@dataclass(frozen=True)
class TransposedArgs:
    """A transposed call's non-tensor arguments, normalised: ``C``'s geometry, and what ``T`` adds to it.

    ``conv`` is ``C``'s arguments (no activation, no output dtype: ``T``'s epilogue runs after ``C``'s
    kernel, so ``C``'s problems are always plain).
    """

    conv: ConvArgs
    output_padding: tuple[int, ...]
    activation: str | None
    out_dtype: str | None

    @classmethod
    def of(cls, ndim: int, stride, padding, output_padding, groups, dilation, activation, out_dtype,
           backend) -> TransposedArgs:
        """Normalise and check the arguments; a ``ValueError`` or ``TypeError`` names the one at fault."""
        stride, dilation = per_dim(stride, ndim, "stride"), per_dim(dilation, ndim, "dilation")
        if isinstance(padding, str):
            raise TypeError(f"padding={padding!r}: a transposed convolution takes no string padding; give an int "
                            f"or a tuple of {ndim} ints")
        pads = per_dim(padding, ndim, "padding")
        output_padding = per_dim(output_padding, ndim, "output_padding")
        for name, values, least in (("stride", stride, 1), ("dilation", dilation, 1), ("padding", pads, 0),
                                    ("output_padding", output_padding, 0)):
            if any(v < least for v in values):
                raise ConvArgumentError(f"{name}={values} must be >= {least}")
        if any(o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
            raise ConvArgumentError(f"output_padding={output_padding} must be smaller than stride={stride} or "
                                    f"dilation={dilation} in each dimension")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ConvArgumentError(f"groups={groups!r} must be a positive int")
        if backend is not None and not isinstance(backend, str):
            raise ConvArgumentError(f"backend={backend!r} must be a backend's name or None")
        conv = ConvArgs(ndim, stride, tuple((p, p) for p in pads), dilation, groups, None, None, backend)
        return cls(conv, output_padding, activations.check_activation(activation), out_dtype_name(out_dtype))

    @property
    def ndim(self) -> int:
        return self.conv.ndim

    @property
    def padding(self) -> tuple[int, ...]:
        return tuple(lo for lo, _ in self.conv.padding)

    @property
    def expressible(self) -> bool:
        """Whether ``C``'s data gradient computes this call (``output_padding < stride`` everywhere)."""
        return all(o < s for o, s in zip(self.output_padding, self.conv.stride))

    def why_not_expressible(self) -> str:
        """The reason a call with these arguments runs as PyTorch's transposed convolution."""
        return (f"output_padding={self.output_padding} is not smaller than stride={self.conv.stride}: no "
                f"convolution's data gradient has this shape, so F.conv_transpose{self.ndim}d runs it")

    def output_shape(self, input_shape, weight_shape) -> tuple[int, ...]:
        """``T``'s output shape, which is ``C``'s input shape."""
        c = self.conv
        size = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, s, p, d, k, o in zip(
            input_shape[2:], c.stride, self.padding, c.dilation, weight_shape[2:], self.output_padding))
        return (input_shape[0], weight_shape[1] * c.groups, *size)

    def problem(self, direction: str, input_shape, weight_shape, dtype: str, layout: str, arch: str) -> ConvProblem:
        """``C``'s problem that computes ``T``'s ``direction``."""
        output_shape = self.output_shape(input_shape, weight_shape)
        return self.conv.problem(TRANSPOSED_DIRECTIONS[direction], output_shape, weight_shape, dtype, layout, False,
                                 arch)


def check_transposed_call(ndim: int, input, weight, bias, args: TransposedArgs) -> None:
    """Reject what ``F.conv_transpose*d`` rejects, naming the argument."""
    name = f"conv_transpose{ndim}d"
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"input and weight must be tensors, not {type(input).__name__} and {type(weight).__name__}")
    if input.dim() != ndim + 2:
        raise ConvArgumentError(f"{name} expects a {ndim + 2}D (batched) or {ndim + 1}D (unbatched) input; "
                                f"got shape {tuple(input.shape)}")
    if weight.dim() != ndim + 2:
        raise ConvArgumentError(f"{name} expects a {ndim + 2}D weight [in_channels, out_channels / groups, *kernel]; "
                                f"got shape {tuple(weight.shape)}")
    for tensor_name, t in (("input", input), ("weight", weight)):
        dtype_name(t.dtype)
        if t.device != input.device:
            raise ConvArgumentError(f"{tensor_name} is on {t.device} but input is on {input.device}")
    if weight.dtype != input.dtype:
        raise ConvArgumentError(f"input dtype {input.dtype} and weight dtype {weight.dtype} differ; cast one of them")
    groups = args.conv.groups
    if input.shape[1] != weight.shape[0]:
        raise ConvArgumentError(f"input has {input.shape[1]} channels but weight {tuple(weight.shape)} expects "
                                f"{weight.shape[0]} (a transposed weight is [in_channels, out_channels / groups, "
                                "*kernel])")
    if weight.shape[0] % groups:
        raise ConvArgumentError(f"groups={groups} does not divide the weight's {weight.shape[0]} input channels")
    if bias is not None:
        _check_bias(bias, input, weight.shape[1] * groups)
    output_shape = args.output_shape(input.shape, weight.shape)
    if any(v < 1 for v in output_shape[2:]):
        raise ConvArgumentError(f"padding={args.padding} is too large: the output would have size "
                                f"{tuple(output_shape[2:])}")


def _check_bias(bias, input: torch.Tensor, channels: int) -> None:
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a tensor or None, not {type(bias).__name__}")
    if tuple(bias.shape) != (channels,):
        raise ConvArgumentError(f"bias shape {tuple(bias.shape)} must be ({channels},), the output channels")
    if bias.dtype != input.dtype or bias.device != input.device:
        raise ConvArgumentError(f"bias ({bias.dtype} on {bias.device}) must have the input's dtype and device "
                                f"({input.dtype} on {input.device})")


def problem_of_transposed_call(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                               args: TransposedArgs, direction: str = "fwd", arch: str | None = None) -> ConvProblem:
    """``C``'s problem that computes ``direction`` of a transposed call (operands cast as autocast casts them).

    A geometry that is not :attr:`~TransposedArgs.expressible` has no such problem: ``ValueError``.
    """
    check_transposed_call(ndim, input, weight, bias, args)
    if not args.expressible:
        raise ConvArgumentError(args.why_not_expressible())
    return args.problem(direction, input.shape, weight.shape, dtype_name(input.dtype), detect_layout(input),
                        arch or device_arch(input.device))


def describe(ndim: int, direction: str, problem: ConvProblem | None, args: TransposedArgs) -> str:
    """One line on how ``direction`` of a transposed call runs, for :func:`conv_core.explain`."""
    name = f"conv_transpose{ndim}d"
    if problem is None:
        return f"{name}: {args.why_not_expressible()}"
    return (f"{name}: its {_DIRECTION_NAMES[direction]} runs as the {_DIRECTION_NAMES[problem.direction]} "
            f"({problem.direction}) of the convolution below, whose input has the {name} call's output shape")


_DIRECTION_NAMES = {"fwd": "forward", "bwd_data": "data gradient", "bwd_weight": "weight gradient"}
