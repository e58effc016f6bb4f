"""``conv1d`` / ``conv2d`` / ``conv3d``: drop-ins for ``torch.nn.functional``.

Three ways through, one implementation:

- eager, no gradient needed: straight to the engine (the hot path: one
  dictionary lookup keyed on the call's signature, then the kernel launch);
- eager, with gradients: a ``torch.autograd.Function`` whose backward runs the
  ``bwd_data`` and ``bwd_weight`` problems through the same engine;
- under ``torch.compile``: the ``conv_core::*`` custom ops of :mod:`conv_core.ops`,
  which call the same functions below and have fake implementations.

Operands reach backends dense in the problem's layout (channels-first or
channels-last, detected from the input's strides); a non-dense input is copied
once into that layout. The output has the input's layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import activations
from .engine import get_engine
from .problem import (ConvProblem, check_call_tensors, detect_layout, dtype_name, normalize_padding, to_layout,
                      torch_dtype)
from .problem import _tuple as _per_dim


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
        stride, dilation = _per_dim(stride, ndim, "stride"), _per_dim(dilation, ndim, "dilation")
        pads = normalize_padding(padding, ndim, tuple(weight.shape[2:]), dilation, stride)
        return cls(ndim, stride, pads, dilation, groups, activations.check_activation(activation),
                   None if out_dtype is None else dtype_name(out_dtype), backend)

    def problem(self, direction: str, input_shape, weight_shape, dtype: str, layout: str, bias: bool,
                device: torch.device) -> ConvProblem:
        from .arch import device_arch

        return ConvProblem(
            direction="fwd", batch=input_shape[0], in_channels=input_shape[1], out_channels=weight_shape[0],
            input_size=tuple(input_shape[2:]), filter_size=tuple(weight_shape[2:]), stride=self.stride,
            padding=self.padding, dilation=self.dilation, groups=self.groups, dtype=dtype, weight_dtype=dtype,
            out_dtype=self.out_dtype or dtype, layout=layout, bias=bias, activation=self.activation,
            arch=device_arch(device),
        ).with_direction(direction)


# ---- forward and backward through the engine ----------------------------------------------------


class Plan:
    """What the engine decided for one call signature: the problem, its ranking, and how to feed it.

    Built once per signature (validation, normalisation and ranking happen
    then); afterwards a call is a dictionary lookup and :meth:`run`.
    """

    __slots__ = ("args", "problem", "ranking", "layout", "bias_dtype")

    def __init__(self, args: ConvArgs, problem: ConvProblem, ranking) -> None:
        self.args, self.problem, self.ranking = args, problem, ranking
        self.layout = problem.layout
        self.bias_dtype = torch_dtype(problem.out_dtype)

    def run(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The forward convolution (with epilogue) through the engine; no autograd."""
        if bias is not None and (bias.dtype is not self.bias_dtype or not bias.is_contiguous()):
            bias = bias.to(self.bias_dtype).contiguous()
        operands = (to_layout(x, self.layout), to_layout(w, self.layout), bias)
        return get_engine().execute(self.ranking, operands)


def _make_plan(args: ConvArgs, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, layout: str) -> Plan:
    check_call_tensors(x, w, bias, args.groups)
    problem = args.problem("fwd", x.shape, w.shape, dtype_name(x.dtype), layout, bias is not None, x.device)
    return Plan(args, problem, get_engine().ranking(problem, x.device, args.backend))


def forward(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, args: ConvArgs) -> torch.Tensor:
    """The forward convolution for normalised arguments (the custom op's path); no autograd."""
    calls = get_engine().calls
    layout = detect_layout(x)
    key = (args, x.shape, x.dtype, x.device, w.shape, w.device,
           None if bias is None else (bias.dtype, bias.device), layout, torch.are_deterministic_algorithms_enabled())
    plan = calls.get(key)
    if plan is None:
        plan = calls[key] = _make_plan(args, x, w, bias, layout)
    return plan.run(x, w, bias)


def _backward(direction: str, a: torch.Tensor, b: torch.Tensor, input_shape, weight_shape, layout: str,
              args: ConvArgs) -> torch.Tensor:
    engine = get_engine()
    dtype = dtype_name(b.dtype if direction == "bwd_data" else a.dtype)
    key = (direction, args, tuple(input_shape), tuple(weight_shape), dtype, layout, a.device,
           torch.are_deterministic_algorithms_enabled())
    hit = engine.calls.get(key)
    if hit is None:
        problem = args.problem(direction, input_shape, weight_shape, dtype, layout, False, a.device)
        hit = engine.calls[key] = (problem, engine.ranking(problem, a.device, args.backend))
    problem, ranking = hit
    torch_dt = torch_dtype(dtype)
    return engine.execute(ranking, (to_layout(a.to(torch_dt), layout), to_layout(b.to(torch_dt), layout)))


def backward_data(grad_pre: torch.Tensor, w: torch.Tensor, input_shape, layout: str, args: ConvArgs) -> torch.Tensor:
    """Gradient w.r.t. the input, given the gradient w.r.t. the pre-activation output."""
    return _backward("bwd_data", grad_pre, w, input_shape, w.shape, layout, args)


def backward_weight(x: torch.Tensor, grad_pre: torch.Tensor, weight_shape, args: ConvArgs) -> torch.Tensor:
    """Gradient w.r.t. the weight, given the gradient w.r.t. the pre-activation output."""
    return _backward("bwd_weight", x, grad_pre, x.shape, weight_shape, detect_layout(x), args)


def pre_activation_grad(args: ConvArgs, y: torch.Tensor | None, grad: torch.Tensor) -> torch.Tensor:
    """Turn the output gradient into the gradient w.r.t. conv + bias (only relu/relu6 are fused here)."""
    if args.activation is None:
        return grad
    return activations.grad_from_output(args.activation, y, grad)


def bias_grad(grad_pre: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    dims = [0, *range(2, grad_pre.dim())]
    return grad_pre.sum(dims, dtype=torch.promote_types(grad_pre.dtype, torch.float32)).to(bias.dtype)


class _ConvFunction(torch.autograd.Function):
    """Eager autograd: the forward and both backward directions through the engine."""

    @staticmethod
    def forward(ctx, x, w, bias, plan: Plan):
        y = plan.run(x, w, bias)
        ctx.args = plan.args
        ctx.layout = plan.layout
        ctx.save_for_backward(x, w, bias, y if plan.args.activation else None)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w, bias, y = ctx.saved_tensors
        args = ctx.args
        g = pre_activation_grad(args, y, grad)
        if torch.is_grad_enabled():  # create_graph=True: the custom ops know their own derivatives
            from .ops import call_backward_ops

            dx, dw = call_backward_ops(x, w, g, ctx.layout, args, ctx.needs_input_grad[:2])
        else:
            dx = backward_data(g, w, x.shape, ctx.layout, args) if ctx.needs_input_grad[0] else None
            dw = backward_weight(x, g, w.shape, args) if ctx.needs_input_grad[1] else None
        db = bias_grad(g, bias) if bias is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


# ---- the public functions -----------------------------------------------------------------------


#: Device types whose autocast state is read (``torch.amp.is_autocast_available`` is not traceable by dynamo).
_AUTOCAST_DEVICES = frozenset({"cpu", "cuda", "xpu", "mps", "hpu"})


def _autocast_operands(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """The operands as autocast gives them to ``F.conv*d``: float32/16 cast to the autocast dtype.

    Custom functions do not take part in autocast on their own, so without this
    a model under ``torch.autocast`` would compute in float32 where PyTorch's
    convolution runs in bf16/fp16. float64 is left alone, as autocast does.
    """
    device_type = input.device.type
    if device_type not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(device_type):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        eligible = t is not None and t.is_floating_point() and t.dtype != torch.float64
        return t.to(dtype) if eligible else t

    return cast(input), cast(weight), cast(bias)


def _frozen(value):
    """A hashable form of an argument that may hold lists (``stride=[2, 2]``)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _validate(ndim: int, input, weight) -> None:
    if input.dim() != ndim + 2:
        raise ValueError(f"conv{ndim}d expects a {ndim + 2}D (batched) or {ndim + 1}D (unbatched) input; "
                         f"got shape {tuple(input.shape)}")
    if weight.dtype != input.dtype:
        raise ValueError(f"input dtype {input.dtype} and weight dtype {weight.dtype} differ; cast one of them")


def _convolution(ndim: int, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype,
                 backend) -> torch.Tensor:
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"input and weight must be tensors, not {type(input).__name__} and {type(weight).__name__}")
    if input.dim() == ndim + 1:
        return _convolution(ndim, input.unsqueeze(0), weight, bias, stride, padding, dilation, groups, activation,
                            out_dtype, backend).squeeze(0)
    input, weight, bias = _autocast_operands(input, weight, bias)
    needs_grad = torch.is_grad_enabled() and (
        input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    if needs_grad and activation is not None and activation not in activations.DERIVATIVE_FROM_OUTPUT:
        activations.check_activation(activation)
        pre = _convolution(ndim, input, weight, bias, stride, padding, dilation, groups, None, out_dtype, backend)
        return activations.apply(activation, pre)
    if torch.compiler.is_compiling():
        from .ops import call_op

        _validate(ndim, input, weight)
        args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, activation, out_dtype, backend)
        return call_op(input, weight, bias, args)

    layout = detect_layout(input)
    key = (ndim, stride if isinstance(stride, int) else _frozen(stride),
           padding if isinstance(padding, (int, str)) else _frozen(padding),
           dilation if isinstance(dilation, int) else _frozen(dilation), groups, activation, out_dtype, backend,
           input.shape, input.dtype, input.device, weight.shape, weight.dtype, weight.device,
           None if bias is None else (bias.dtype, bias.device), layout, torch.are_deterministic_algorithms_enabled())
    calls = get_engine().calls
    plan = calls.get(key)
    if plan is None:
        _validate(ndim, input, weight)
        args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, activation, out_dtype, backend)
        plan = calls[key] = _make_plan(args, input, weight, bias, layout)
    if needs_grad:
        return _ConvFunction.apply(input, weight, bias, plan)
    return plan.run(input, weight, bias)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv1d`` through the best installed backend.

    Extra keyword arguments: ``activation`` (``relu``, ``relu6``, ``gelu``,
    ``gelu_tanh``, ``silu``: fused into the epilogue), ``out_dtype`` (default:
    the input's), ``backend`` (restrict the choice to one backend by name).
    ``padding`` also accepts explicit ``(left, right)`` pairs per dimension.
    """
    return _convolution(1, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv2d`` through the best installed backend (see :func:`conv1d`)."""
    return _convolution(2, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv3d`` through the best installed backend (see :func:`conv1d`)."""
    return _convolution(3, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)
