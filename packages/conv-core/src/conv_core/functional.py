"""``conv1d`` / ``conv2d`` / ``conv3d`` and their transposed kin: drop-ins for ``torch.nn.functional``.

Three ways through, one decision (:mod:`conv_core.frontend.routes`):

- eager: one dictionary lookup keyed on the call's signature gives its route. A direct route is
  ``F.conv*d`` with PyTorch's autograd; an engine route runs the ranked candidates, through a
  ``torch.autograd.Function`` whose backward runs the ``bwd_data`` and ``bwd_weight`` problems when
  gradients are needed;
- under ``torch.compile``: the ``conv_core::conv`` op of :mod:`conv_core.frontend.ops` (entered through
  :mod:`conv_core.frontend.dispatch`), which becomes
  Inductor's own convolution where aten ranks first and an opaque custom op where a plugin wins;
- empty tensors (batch 0, no channels) go to ``F.conv*d`` as they are: PyTorch's empty output and
  zero gradients, or its error.

``conv_transpose1d`` / ``conv_transpose2d`` / ``conv_transpose3d`` go the same three ways, as the data
gradient of a convolution (:mod:`conv_core.frontend.transposed`, :mod:`conv_core.frontend.transposed_route`).
"""

from __future__ import annotations

import dataclasses

import torch

from . import activations
from . import engine as engine_module
from .frontend import call_cache
from .frontend.call import ConvArgs, autocast_cast, autocast_operands, check_call
from .frontend.call_cache import EagerKey
from .frontend.dispatch import call_backward_ops, traced_call, traced_transposed_call
from .frontend.routes import (CONV, Route, backward_data, backward_weight, bias_grad, build_route, cacheable,
                              pre_activation_grad)
from .frontend.transposed import TransposedArgs
from .frontend.transposed_route import CONV_TRANSPOSE, TransposedFunction, TransposedRoute, build_transposed_route
from .problem import dtype_name, torch_dtype


class _ConvFunction(torch.autograd.Function):
    """Eager autograd of an engine route: the forward and both backward directions through the engine."""

    @staticmethod
    def forward(ctx, x, w, bias, route: Route):
        y = route.run(x, w, bias)
        ctx.route = route
        ctx.save_for_backward(x, w, bias, y if route.args.activation else None)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w, bias, y = ctx.saved_tensors
        route: Route = ctx.route
        args = route.args
        g = pre_activation_grad(args, y, grad)
        if torch.is_grad_enabled():  # create_graph=True: the custom ops know their own derivatives
            dx, dw = call_backward_ops(x, w, g, route.layout, args, ctx.needs_input_grad[:2])
        else:
            dx = dw = None
            if ctx.needs_input_grad[0]:
                dx = backward_data(g, w, x.shape, route.layout, args, route.backward["bwd_data"])
            if ctx.needs_input_grad[1]:
                dw = backward_weight(x, g, w.shape, args, route.backward["bwd_weight"])
        db = bias_grad(g, bias) if bias is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


def _frozen(value):
    """A hashable form of an argument that may hold lists (``stride=[2, 2]``)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _empty_call(ndim: int, input, weight, bias, stride, padding, dilation, groups, activation,
                out_dtype) -> torch.Tensor:
    """A call with a zero-size tensor: exactly what ``F.conv*d`` returns (or raises)."""
    y = CONV[ndim](input, weight, bias, stride, padding, dilation, groups)
    y = activations.apply(activations.check_activation(activation), y)
    return y if out_dtype is None else y.to(torch_dtype(dtype_name(out_dtype)))


def _new_route(ndim, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend,
               needs_grad) -> tuple[Route, bool]:
    """(route, whether to keep it) for a signature not seen before: checked, normalised, ranked."""
    args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, activation, out_dtype, backend)
    check_call(ndim, input, weight, bias, args)
    may_time = not torch.cuda.is_current_stream_capturing() if input.is_cuda else True
    keep = cacheable(may_time, input.device)
    if needs_grad and activation is not None and activation not in activations.DERIVATIVE_FROM_OUTPUT:
        # The backward needs the pre-activation value: convolve unfused, activate through autograd.
        args = ConvArgs.of(ndim, weight, stride, padding, dilation, groups, None, out_dtype, backend)
        return _Activated(build_route(args, input, weight, bias, needs_grad, may_time), activation), keep
    return build_route(args, input, weight, bias, needs_grad, may_time), keep


class _Activated:
    """A route whose activation autograd applies after it (one the fused epilogue cannot differentiate);
    ``function`` is the inner route's autograd (:class:`_ConvFunction` or a transposed route's)."""

    __slots__ = ("route", "activation", "function", "direct", "native")

    def __init__(self, route: Route | TransposedRoute, activation: str,
                 function: type[torch.autograd.Function] = _ConvFunction) -> None:
        self.route, self.activation, self.function = route, activations.ACTIVATIONS[activation], function
        self.direct = True  # autograd is the inner route's and PyTorch's: never wrapped again
        self.native = False

    def run(self, input, weight, bias):
        inner = self.route
        y = inner.run(input, weight, bias) if inner.direct else self.function.apply(input, weight, bias, inner)
        return self.activation(y)


#: The hot path's checks, bound once (each is a C function; attribute lookups cost as much as the call).
_compiling = torch.compiler.is_compiling
_grad_enabled = torch._C.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
_deterministic = torch._C._get_deterministic_algorithms


def convolution(ndim: int, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype,
                 backend) -> torch.Tensor:
    """Every eager call: the cheapest checks that pin its route, one dictionary lookup, the route."""
    if _compiling():
        return traced_call(ndim, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype,
                           backend)
    if _any_autocast():
        input, weight, bias = autocast_operands(input, weight, bias)
    try:
        needs_grad = _grad_enabled() and (
            input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
        # The bias's dtype is checked when a route is made; a later change reaches F.conv*d, which refuses it,
        # or an engine route, which casts it. The fields: call_cache.EAGER_KEY_FIELDS.
        key: EagerKey = (input.shape, input.stride(), input.dtype, input.device, weight.shape, weight.dtype,
                         bias is None, needs_grad, _deterministic(), ndim, stride, padding, dilation, groups,
                         activation, out_dtype, backend)
    except AttributeError:
        raise TypeError(f"input and weight must be tensors, not {type(input).__name__} and "
                        f"{type(weight).__name__}") from None
    owner, caches = call_cache.CURRENT
    routes = (caches if owner is engine_module._engine else call_cache.calls()).eager
    try:
        route = routes.get(key)
    except TypeError:  # an argument given as a list
        key = _frozen(key)
        route = routes.get(key)
    if route is None:
        if input.numel() == 0 or weight.numel() == 0:
            return _empty_call(ndim, input, weight, bias, stride, padding, dilation, groups, activation,
                               out_dtype)
        if input.dim() == ndim + 1:
            return convolution(ndim, input.unsqueeze(0), weight, bias, stride, padding, dilation, groups,
                                activation, out_dtype, backend).squeeze(0)
        route, keep = _new_route(ndim, input, weight, bias, stride, padding, dilation, groups, activation,
                                 out_dtype, backend, needs_grad)
        if keep:
            routes[key] = route
    if route.native and INLINE:  # Route.run's direct branch, without its frame
        y = route.conv(input, weight, bias, *route.conv_args)
        return y if route.activation is None else route.activation(y)
    if needs_grad and not route.direct:
        return _ConvFunction.apply(input, weight, bias, route)
    return route.run(input, weight, bias)


def memo_route(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias, stride, padding, dilation, groups,
               activation, out_dtype, backend, needs_grad: bool, amp: torch.dtype | None = None):
    """``(route, autograd)`` for a converted module to run this eager call itself while its input keeps the
    signature (:class:`conv_core.nn.Conv2d`), or None: the route the engine keeps for the call (the key below is
    :func:`convolution`'s, with the dtypes autocast gave the operands) and the ``torch.autograd.Function`` it runs
    under, if any (as :func:`convolution` would run it). Under autocast (``amp``) only ``F.conv*d`` itself:
    ``torch.conv*d`` casts the operands as the full way did, an engine route would need them cast first.
    """
    if not INLINE or _compiling():
        return None
    key: EagerKey = (input.shape, input.stride(), autocast_cast(input.dtype, amp), input.device, weight.shape,
                     autocast_cast(weight.dtype, amp), bias is None, needs_grad, _deterministic(), ndim, stride,
                     padding, dilation, groups, activation, out_dtype, backend)
    try:
        route = call_cache.calls().eager.get(key)
    except TypeError:  # an argument given as a list
        return None
    if route is None or (amp is not None and not route.native):
        return None
    return route, _ConvFunction if needs_grad and not route.direct else None


def ranked_route(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias, stride, padding, dilation, groups,
                 activation, backend):
    """The route :func:`convolution` runs this no-gradient call by (ranked now, and kept, where it is new),
    without running it: what a fused residual call asks before it runs the convolution another way."""
    key: EagerKey = (input.shape, input.stride(), input.dtype, input.device, weight.shape, weight.dtype, bias is None,
                     False, _deterministic(), ndim, stride, padding, dilation, groups, activation, None, backend)
    routes = call_cache.calls().eager
    route = routes.get(key)
    if route is None:
        route, keep = _new_route(ndim, input, weight, bias, stride, padding, dilation, groups, activation, None,
                                 backend, False)
        if keep:
            routes[key] = route
    return route


def memo_transposed_route(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias, stride, padding,
                          output_padding, groups, dilation, activation, out_dtype, backend, needs_grad: bool,
                          amp: torch.dtype | None = None):
    """:func:`memo_route` for a transposed call (the key below is :func:`transposed_convolution`'s)."""
    if not INLINE or _compiling():
        return None
    key: EagerKey = (input.shape, input.stride(), autocast_cast(input.dtype, amp), input.device, weight.shape,
                     autocast_cast(weight.dtype, amp), bias is None, needs_grad, _deterministic(), ndim, stride,
                     padding, output_padding, groups, dilation, activation, out_dtype, backend)
    try:
        route = call_cache.calls().transposed.get(key)
    except TypeError:  # an argument given as a list
        return None
    if route is None or (amp is not None and not route.native):
        return None
    return route, TransposedFunction if needs_grad and not route.direct else None


#: Whether :func:`convolution` runs a native route itself; :func:`conv_core.capture_shapes`, which records calls
#: where ``Route.run`` passes, turns it off for the capture.
INLINE = True


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv1d`` through the best installed backend.

    Extra keyword arguments: ``activation`` (``relu``, ``relu6``, ``gelu``,
    ``gelu_tanh``, ``silu``: fused into the epilogue), ``out_dtype`` (default:
    the input's), ``backend`` (restrict the choice to one backend by name; a
    backend with no backward kernels leaves the gradients to the best other).
    ``padding`` also accepts explicit ``(left, right)`` pairs per dimension.
    """
    return convolution(1, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv2d`` through the best installed backend (see :func:`conv1d`)."""
    return convolution(2, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, activation=None, out_dtype=None,
           backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv3d`` through the best installed backend (see :func:`conv1d`)."""
    return convolution(3, input, weight, bias, stride, padding, dilation, groups, activation, out_dtype, backend)


# ---- transposed convolutions: the data gradient of a convolution (conv_core.frontend.transposed) -------


def _empty_transposed_call(ndim: int, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           activation, out_dtype) -> torch.Tensor:
    """A transposed call with a zero-size tensor: exactly what ``F.conv_transpose*d`` returns (or raises)."""
    y = CONV_TRANSPOSE[ndim](input, weight, bias, stride, padding, output_padding, groups, dilation)
    y = activations.apply(activations.check_activation(activation), y)
    return y if out_dtype is None else y.to(torch_dtype(dtype_name(out_dtype)))


def _new_transposed_route(ndim, input, weight, bias, stride, padding, output_padding, groups, dilation, activation,
                          out_dtype, backend, needs_grad) -> tuple[TransposedRoute | _Activated, bool]:
    """(route, whether to keep it) for a transposed signature not seen before: checked, normalised, ranked."""
    args = TransposedArgs.of(ndim, stride, padding, output_padding, groups, dilation, activation, out_dtype,
                             backend)
    may_time = not torch.cuda.is_current_stream_capturing() if input.is_cuda else True
    keep = cacheable(may_time, input.device)
    if needs_grad and args.activation is not None and args.activation not in activations.DERIVATIVE_FROM_OUTPUT:
        plain = dataclasses.replace(args, activation=None)
        route = build_transposed_route(plain, input, weight, bias, needs_grad, may_time)
        return _Activated(route, args.activation, TransposedFunction), keep
    return build_transposed_route(args, input, weight, bias, needs_grad, may_time), keep


def transposed_convolution(ndim: int, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           activation, out_dtype, backend) -> torch.Tensor:
    """Every eager transposed call: :func:`convolution`'s hot path with ``output_padding`` in the key.

    A copy of that path rather than a shared one: a shared one costs a Python frame per call.
    """
    if _compiling():
        return traced_transposed_call(ndim, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                      activation, out_dtype, backend)
    if _any_autocast():
        input, weight, bias = autocast_operands(input, weight, bias)
    try:
        needs_grad = _grad_enabled() and (
            input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
        # The fields: call_cache.TRANSPOSED_KEY_FIELDS.
        key: EagerKey = (input.shape, input.stride(), input.dtype, input.device, weight.shape, weight.dtype,
                         bias is None, needs_grad, _deterministic(), ndim, stride, padding, output_padding, groups,
                         dilation, activation, out_dtype, backend)
    except AttributeError:
        raise TypeError(f"input and weight must be tensors, not {type(input).__name__} and "
                        f"{type(weight).__name__}") from None
    owner, caches = call_cache.CURRENT
    routes = (caches if owner is engine_module._engine else call_cache.calls()).transposed
    try:
        route = routes.get(key)
    except TypeError:  # an argument given as a list
        key = _frozen(key)
        route = routes.get(key)
    if route is None:
        if input.numel() == 0 or weight.numel() == 0:
            return _empty_transposed_call(ndim, input, weight, bias, stride, padding, output_padding, groups,
                                          dilation, activation, out_dtype)
        if input.dim() == ndim + 1:
            return transposed_convolution(ndim, input.unsqueeze(0), weight, bias, stride, padding, output_padding,
                                          groups, dilation, activation, out_dtype, backend).squeeze(0)
        route, keep = _new_transposed_route(ndim, input, weight, bias, stride, padding, output_padding, groups,
                                            dilation, activation, out_dtype, backend, needs_grad)
        if keep:
            routes[key] = route
    if needs_grad and not route.direct:
        return TransposedFunction.apply(input, weight, bias, route)
    return route.run(input, weight, bias)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     activation=None, out_dtype=None, backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose1d`` through the best installed backend.

    It runs as the data gradient of the convolution whose input has this call's output shape (same
    weight, stride, padding, dilation, groups): the backends' ``bwd_data`` kernels, ranked as that
    problem; its gradients are that convolution's forward and weight gradient. Extra keyword arguments
    as :func:`conv1d`'s (``activation``, ``out_dtype``, ``backend``), but not fused: the output dtype, bias
    and activation are applied after the kernel, elementwise. A geometry with ``output_padding`` not
    smaller than ``stride`` (PyTorch allows it below ``dilation``) is no convolution's data gradient and
    runs as ``F.conv_transpose1d`` itself; :func:`conv_core.explain` says so.
    """
    return transposed_convolution(1, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                  activation, out_dtype, backend)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     activation=None, out_dtype=None, backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose2d`` through the best installed backend (see :func:`conv_transpose1d`)."""
    return transposed_convolution(2, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                  activation, out_dtype, backend)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     activation=None, out_dtype=None, backend=None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose3d`` through the best installed backend (see :func:`conv_transpose1d`)."""
    return transposed_convolution(3, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                  activation, out_dtype, backend)
