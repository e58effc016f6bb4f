"""How a call reaches the custom ops of :mod:`conv_core.frontend.ops`: the layer the functional API and the ops share.

The ops take a call's arguments as the plain lists their schemas allow (padding flattened as
``[left0, right0, left1, right1, ...]``, empty strings for "none"); :func:`op_args` and
:func:`op_operands` translate between that form and :class:`~conv_core.frontend.call.ConvArgs`. The functional
API enters the ops in two places: a call made while ``torch.compile`` traces (:func:`traced_call`), and
an eager backward that must itself be differentiable (:func:`call_backward_ops`). It calls them through
``torch.ops.conv_core``, PyTorch's registry of ops, where importing ``conv_core`` (its ``__init__``
imports :mod:`conv_core.frontend.ops`) has put them; so neither module imports the other.
"""

from __future__ import annotations

import torch

from .call import ConvArgs, autocast_operands
from ..problem import torch_dtype
from .transposed import TransposedArgs


def op_args(stride, padding, dilation, groups, activation, out_dtype, backend) -> ConvArgs:
    """The :class:`ConvArgs` of an op's list arguments."""
    pairs = tuple((padding[i], padding[i + 1]) for i in range(0, len(padding), 2))
    return ConvArgs(len(stride), tuple(stride), pairs, tuple(dilation), groups, activation or None,
                    None if out_dtype is None else str(out_dtype).removeprefix("torch."), backend or None)


def op_operands(args: ConvArgs) -> tuple:
    """``args`` as the ops take them: (stride, padding, dilation, groups, activation, out_dtype, backend)."""
    return (list(args.stride), [v for pair in args.padding for v in pair], list(args.dilation), args.groups,
            args.activation or "", None if args.out_dtype is None else torch_dtype(args.out_dtype), args.backend or "")


def call_backward_ops(input, weight, grad_pre, layout: str, args: ConvArgs, needed) -> tuple:
    """(dx, dw) through the backward custom ops, for the gradients ``needed`` (a pair of bools)."""
    stride, padding, dilation, groups, _, _, backend = op_operands(args)
    geometry = (stride, padding, dilation, groups, backend)
    ops = torch.ops.conv_core
    dx = ops.convolution_backward_data(grad_pre, weight, list(input.shape), layout, *geometry) if needed[0] else None
    dw = ops.convolution_backward_weight(input, grad_pre, list(weight.shape), *geometry) if needed[1] else None
    return dx, dw


def call_transposed_backward_ops(input, weight, grad_pre, args: ConvArgs, needed) -> tuple:
    """(dx, dw) of a transposed call through the custom ops, as ``C``'s forward and weight gradient
    (:mod:`conv_core.frontend.transposed`); ``args`` are ``C``'s."""
    stride, padding, dilation, groups, _, _, backend = op_operands(args)
    geometry = (stride, padding, dilation, groups, backend)
    ops = torch.ops.conv_core
    dx = dw = None
    if needed[0]:
        dx = ops.convolution(grad_pre, weight, None, stride, padding, dilation, groups, "", None, backend)
    if needed[1]:
        dw = ops.convolution_backward_weight(grad_pre, input, list(weight.shape), *geometry)
    return dx, dw


def traced_call(ndim: int, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype,
                backend) -> torch.Tensor:
    """A conv-core call while ``torch.compile`` traces: normalised and handed to ``conv_core::conv``."""
    if input.dim() == ndim + 1:
        return traced_call(ndim, input.unsqueeze(0), weight, bias, stride, padding, dilation, groups, activation,
                           out_dtype, backend).squeeze(0)
    input, weight, bias = autocast_operands(input, weight, bias)
    args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, activation, out_dtype, backend)
    return torch.ops.conv_core.conv(input, weight, bias, *op_operands(args))


def traced_transposed_call(ndim: int, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           activation, out_dtype, backend) -> torch.Tensor:
    """A transposed call while ``torch.compile`` traces: normalised and handed to ``conv_core::conv_transpose``."""
    if input.dim() == ndim + 1:
        return traced_transposed_call(ndim, input.unsqueeze(0), weight, bias, stride, padding, output_padding,
                                      groups, dilation, activation, out_dtype, backend).squeeze(0)
    input, weight, bias = autocast_operands(input, weight, bias)
    args = TransposedArgs.of(ndim, stride, padding, output_padding, groups, dilation, activation, out_dtype,
                             backend)
    return torch.ops.conv_core.conv_transpose(input, weight, bias, *transposed_op_operands(args))


def transposed_op_args(stride, padding, output_padding, groups, dilation, activation, out_dtype,
                       backend) -> TransposedArgs:
    """The :class:`TransposedArgs` of ``conv_core::conv_transpose``'s list arguments."""
    return TransposedArgs.of(len(stride), stride, padding, output_padding, groups, dilation, activation or None,
                             out_dtype, backend or None)


def transposed_op_operands(args: TransposedArgs) -> tuple:
    """``args`` as ``conv_core::conv_transpose`` takes them (its schema's order, PyTorch's)."""
    c = args.conv
    return (list(c.stride), list(args.padding), list(args.output_padding), c.groups, list(c.dilation),
            args.activation or "", None if args.out_dtype is None else torch_dtype(args.out_dtype), c.backend or "")
