"""``torch.library`` ops, so ``torch.compile(fullgraph=True)`` traces through convolutions and keeps
Inductor's gains.

Under ``torch.compile`` a conv-core call becomes ``conv_core::conv``, an op whose body
(``CompositeImplicitAutograd``) runs while the graph is traced and decides per layer, as the eager
path does (:mod:`conv_core.frontend.routes`): where aten ranks first in every direction the graph needs, the
body is ``F.conv*d`` itself, so Inductor sees its own convolution (its fusions, its batch-norm folding
under freezing, its autotuning); where a plugin kernel wins, the body is ``conv_core::convolution``,
an opaque custom op whose backward calls the two opaque backward ops. Symbolic (dynamic) shapes cannot
be ranked, so those layers are Inductor's too. The decision is made once per signature and never
times anything (first-use benchmarking never runs while tracing).

A transposed call becomes ``conv_core::conv_transpose``, decided the same way: ``F.conv_transpose*d``
where aten ranks first, else the opaque ``conv_core::convolution_backward_data`` it is
(:mod:`conv_core.frontend.transposed`) with its epilogue as plain operations.

The ops take the call's arguments as plain lists (:mod:`conv_core.frontend.dispatch` translates, and is how
the functional API calls them). Fake implementations give shapes, dtypes and strides without running
anything.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import activations
from .call import ConvArgs, check_call, needs_grad
from .call_cache import TracedKey, calls
from .dispatch import call_backward_ops, op_args, op_operands, transposed_op_args
from ..layout import detect_layout, empty_strided_for, is_dense_in, to_layout
from ..problem import ConvProblem, torch_dtype
from .transposed import TransposedArgs
from .transposed_route import CONV_TRANSPOSE, build_transposed_route
from .routes import (CONV, backward_data, backward_weight, bias_grad, build_route, forward, pays_when_traced,
                     pre_activation_grad)


def _shape_problem(args: ConvArgs, input_shape, weight_shape, dtype, layout: str, direction: str) -> ConvProblem:
    """A problem for shape arithmetic only (fake tensors have no real device to ask)."""
    return args.problem(direction, input_shape, weight_shape, str(dtype).removeprefix("torch."), layout, False,
                        "cpu")


def _fake_result(problem: ConvProblem, like: torch.Tensor) -> torch.Tensor:
    return empty_strided_for(problem.result_shape, torch_dtype(problem.result_dtype), problem.layout, like.device)


# ---- forward ------------------------------------------------------------------------------------


@torch.library.custom_op("conv_core::convolution", mutates_args=())
def convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                padding: list[int], dilation: list[int], groups: int, activation: str,
                out_dtype: torch.dtype | None, backend: str) -> torch.Tensor:
    return forward(input, weight, bias, op_args(stride, padding, dilation, groups, activation, out_dtype, backend))


@convolution.register_fake
def _(input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend):
    args = op_args(stride, padding, dilation, groups, activation, out_dtype, backend)
    return _fake_result(_shape_problem(args, input.shape, weight.shape, input.dtype, detect_layout(input), "fwd"),
                        input)


def _setup_context(ctx, inputs, output):
    input, weight, bias, *rest = inputs
    ctx.args = op_args(*rest)
    ctx.layout = detect_layout(input)
    ctx.save_for_backward(input, weight, bias, output if ctx.args.activation else None)


def _backward(ctx, grad):
    input, weight, bias, output = ctx.saved_tensors
    g = pre_activation_grad(ctx.args, output, grad)
    dx, dw = call_backward_ops(input, weight, g, ctx.layout, ctx.args, ctx.needs_input_grad[:2])
    db = bias_grad(g, bias) if bias is not None and ctx.needs_input_grad[2] else None
    return dx, dw, db, None, None, None, None, None, None, None


convolution.register_autograd(_backward, setup_context=_setup_context)


# ---- backward -----------------------------------------------------------------------------------


def _bwd_args(stride, padding, dilation, groups, backend) -> ConvArgs:
    return op_args(stride, padding, dilation, groups, "", None, backend)


@torch.library.custom_op("conv_core::convolution_backward_data", mutates_args=())
def convolution_backward_data(grad_output: torch.Tensor, weight: torch.Tensor, input_size: list[int], layout: str,
                              stride: list[int], padding: list[int], dilation: list[int], groups: int,
                              backend: str) -> torch.Tensor:
    args = _bwd_args(stride, padding, dilation, groups, backend)
    return backward_data(grad_output, weight, input_size, layout, args)


@convolution_backward_data.register_fake
def _(grad_output, weight, input_size, layout, stride, padding, dilation, groups, backend):
    args = _bwd_args(stride, padding, dilation, groups, backend)
    return _fake_result(_shape_problem(args, input_size, weight.shape, weight.dtype, layout, "bwd_data"), weight)


@torch.library.custom_op("conv_core::convolution_backward_weight", mutates_args=())
def convolution_backward_weight(input: torch.Tensor, grad_output: torch.Tensor, weight_size: list[int],
                                stride: list[int], padding: list[int], dilation: list[int], groups: int,
                                backend: str) -> torch.Tensor:
    args = _bwd_args(stride, padding, dilation, groups, backend)
    return backward_weight(input, grad_output, weight_size, args)


@convolution_backward_weight.register_fake
def _(input, grad_output, weight_size, stride, padding, dilation, groups, backend):
    args = _bwd_args(stride, padding, dilation, groups, backend)
    problem = _shape_problem(args, input.shape, weight_size, input.dtype, detect_layout(input), "bwd_weight")
    return _fake_result(problem, input)


# ---- double backward: both backward ops are bilinear, so their gradients are the other two ops ----


def _save_bwd_data(ctx, inputs, output):
    grad_output, weight, input_size, layout, *geometry = inputs
    ctx.geometry = geometry
    ctx.save_for_backward(grad_output, weight)


def _double_backward_data(ctx, g):
    grad_output, weight = ctx.saved_tensors
    stride, padding, dilation, groups, backend = ctx.geometry
    d_grad_output = d_weight = None
    if ctx.needs_input_grad[0]:
        d_grad_output = convolution(g, weight, None, stride, padding, dilation, groups, "", None, backend)
    if ctx.needs_input_grad[1]:
        d_weight = convolution_backward_weight(g, grad_output, list(weight.shape), *ctx.geometry)
    return d_grad_output, d_weight, None, None, None, None, None, None, None


def _save_bwd_weight(ctx, inputs, output):
    input, grad_output, weight_size, *geometry = inputs
    ctx.geometry = geometry
    ctx.layout = detect_layout(input)
    ctx.save_for_backward(input, grad_output)


def _double_backward_weight(ctx, g):
    input, grad_output = ctx.saved_tensors
    stride, padding, dilation, groups, backend = ctx.geometry
    d_input = d_grad_output = None
    if ctx.needs_input_grad[0]:
        d_input = convolution_backward_data(grad_output, g, list(input.shape), ctx.layout, *ctx.geometry)
    if ctx.needs_input_grad[1]:
        d_grad_output = convolution(input, g, None, stride, padding, dilation, groups, "", None, backend)
    return d_input, d_grad_output, None, None, None, None, None, None


convolution_backward_data.register_autograd(_double_backward_data, setup_context=_save_bwd_data)
convolution_backward_weight.register_autograd(_double_backward_weight, setup_context=_save_bwd_weight)


# ---- the traced entry: Inductor's convolution or the opaque op, decided per layer ------------------

_lib = torch.library.Library("conv_core", "FRAGMENT")
_lib.define("conv(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
            "int groups, str activation, ScalarType? out_dtype, str backend) -> Tensor")


def _route_wins(args, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, route_of) -> bool:
    """Whether the eager path would run a plugin kernel for this layer (in some direction it needs) and that kernel
    pays for its opaque op's host time (:func:`~conv_core.frontend.routes.pays_when_traced`), decided once per
    signature from ``route_of(needs_grad)`` (a route, never timed) and kept in the engine's traced cache."""
    sizes = (*input.shape, *input.stride(), *weight.shape)
    if not all(type(v) is int for v in sizes):  # symbolic: no ranking can speak for every size
        return False
    if input.numel() == 0 or weight.numel() == 0:
        return False
    grad = needs_grad(input, weight, bias)
    key = TracedKey(args, tuple(input.shape), input.stride(), input.dtype, str(input.device), tuple(weight.shape),
                    None if bias is None else bias.dtype, grad, torch.are_deterministic_algorithms_enabled())
    traced = calls().traced
    wins = traced.get(key)
    if wins is None:
        route = route_of(grad)
        wins = traced[key] = not route.direct and pays_when_traced(route)
    return wins


def _plugin_wins(args: ConvArgs, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """:func:`_route_wins` of a convolution, its arguments checked as the eager path checks them."""

    def route_of(needs_grad: bool):
        check_call(args.ndim, input, weight, bias, args)
        return build_route(args, input, weight, bias, needs_grad, may_time=False)
    return _route_wins(args, input, weight, bias, route_of)


def _in_weight_layout(input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``input`` in its weight's layout, where the weight is dense in one layout only and the input is not: a traced
    graph may hand a plugin its input in the other layout (SD-VAE's decoder's did), and the plugin would copy the
    weight on every call; in the graph the copy is Inductor's to fuse into the kernel that makes the input."""
    if not all(type(v) is int for v in (*input.shape, *input.stride())):
        return input
    for layout, other in (("channels_last", "channels_first"), ("channels_first", "channels_last")):
        if is_dense_in(weight, layout) and not is_dense_in(weight, other) and not is_dense_in(input, layout):
            return to_layout(input, layout)
    return input


def _conv(input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend):
    args = op_args(stride, padding, dilation, groups, activation, out_dtype, backend)
    relaid = _in_weight_layout(input, weight)
    if _plugin_wins(args, relaid, weight, bias):
        input = relaid
        # The opaque op's backward reads the activation's derivative off its output (relu, relu6 only).
        fusable = activation in activations.DERIVATIVE_FROM_OUTPUT or not needs_grad(input, weight, bias)
        fused = activation if fusable else ""
        y = convolution(input, weight, bias, stride, padding, dilation, groups, fused, out_dtype, backend)
        return y if fused == activation else activations.apply(activation or None, y)
    sym = args.symmetric_padding
    if sym is None:
        input = F.pad(input, [v for pair in reversed(args.padding) for v in pair])
        sym = (0,) * args.ndim
    y = activations.apply(args.activation, CONV[args.ndim](input, weight, bias, args.stride, sym, args.dilation,
                                                          groups))
    return y if out_dtype is None else y.to(out_dtype)


_lib.impl("conv", _conv, "CompositeImplicitAutograd")


# ---- transposed convolutions: PyTorch's own, or the opaque data-gradient op (conv_core.frontend.transposed) ----------

_lib.define("conv_transpose(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
            "int[] output_padding, int groups, int[] dilation, str activation, ScalarType? out_dtype, "
            "str backend) -> Tensor")


def _transposed_plugin_wins(args: TransposedArgs, input: torch.Tensor, weight: torch.Tensor,
                            bias: torch.Tensor | None) -> bool:
    """:func:`_route_wins` of a transposed convolution (never where no convolution's data gradient computes it)."""
    return args.expressible and _route_wins(
        args, input, weight, bias,
        lambda needs_grad: build_transposed_route(args, input, weight, bias, needs_grad, may_time=False))


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, activation, out_dtype,
                    backend):
    """Where a plugin wins, ``C``'s data gradient as the opaque ``conv_core::convolution_backward_data`` (its
    derivatives are exactly the transposed call's: ``C``'s forward and weight gradient, so no new op is
    needed), with the epilogue as plain operations Inductor fuses; elsewhere PyTorch's own."""
    args = transposed_op_args(stride, padding, output_padding, groups, dilation, activation, out_dtype, backend)
    if not _transposed_plugin_wins(args, input, weight, bias):
        y = CONV_TRANSPOSE[args.ndim](input, weight, bias, stride, padding, output_padding, groups, dilation)
        y = activations.apply(args.activation, y)
        return y if out_dtype is None else y.to(out_dtype)
    conv_padding = op_operands(args.conv)[1]  # C's: (left, right) pairs, flattened
    output_shape = list(args.output_shape(input.shape, weight.shape))
    y = convolution_backward_data(input, weight, output_shape, detect_layout(input), stride, conv_padding, dilation,
                                  groups, backend)
    if out_dtype is not None:
        y = y.to(out_dtype)
    if bias is not None:
        y = y + bias.to(y.dtype).view(-1, *[1] * args.ndim)
    return activations.apply(args.activation, y)


_lib.impl("conv_transpose", _conv_transpose, "CompositeImplicitAutograd")
