"""``Conv1d`` / ``Conv2d`` / ``Conv3d`` (and ``ConvTranspose*d``) modules that run through conv-core.

The modules subclass ``torch.nn.Conv*d`` and change only where the
convolution runs, so they keep torch's constructor, parameters, state dict,
initialisation and padding modes. Non-zero padding modes are handled as torch
handles them: an explicit ``F.pad`` with the mode, then a convolution with zero
padding. :func:`conv_core.convert` turns a model's torch convolutions into these
(:mod:`conv_core.conversion`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from . import activations, functional
from .frontend.call import autocast_dtype, needs_grad
from .frontend.call_cache import GENERATION

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

EXTRA_ATTRIBUTES = ("activation", "out_dtype", "backend")
#: The attributes a route depends on: setting one forgets the module's memo of direct routes.
ROUTE_ATTRIBUTES = frozenset(("stride", "padding", "output_padding", "dilation", "groups", "padding_mode",
                              *EXTRA_ATTRIBUTES))
#: Input shapes a module remembers a route for, per gradient mode (a shared head sees one per level).
MAX_MEMOS = 8


#: What the lean call path (``_ConvCoreMixin.__call__``) checks and falls back to, bound once.
_module_call = nn.Module.__call__
_tracing_state = torch._C._get_tracing_state
_Tensor = torch.Tensor
_compiling, _any_autocast = functional._compiling, functional._any_autocast
_grad_enabled, _deterministic = functional._grad_enabled, functional._deterministic
_MISSING = object()
#: torch's global hooks, which registering adds to and never replaces.
_GLOBAL_FORWARD_PRE_HOOKS, _GLOBAL_FORWARD_HOOKS = _module._global_forward_pre_hooks, _module._global_forward_hooks
_GLOBAL_BACKWARD_PRE_HOOKS, _GLOBAL_BACKWARD_HOOKS = (_module._global_backward_pre_hooks,
                                                      _module._global_backward_hooks)


def member(module: nn.Module, name: str):
    """``module.<name>`` without ``nn.Module.__getattr__`` (microseconds per attribute on every call, in a model):
    a parameter or buffer read from its dict. Anything else (a parametrized weight, which is not a registered
    parameter, or old-style ``weight_norm``'s) is read as an attribute, as torch reads it."""
    found = module._parameters.get(name, _MISSING)
    if found is _MISSING:
        found = module._buffers.get(name, _MISSING)
        if found is _MISSING:
            return getattr(module, name)
    return found


def _weight_and_bias(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The module's ``weight`` and ``bias``, each read by :func:`member`."""
    return member(module, "weight"), member(module, "bias")


class _ConvCoreMixin:
    """What the three conv-core modules add to torch's: the three extra options and the forward.

    The options are also class attributes (all None), so a module whose class
    was swapped by :func:`convert`, or one unpickled from an older version,
    behaves like torch's until they are set.
    """

    activation: str | None = None
    out_dtype: torch.dtype | str | None = None
    backend: str | None = None
    _ndim = 0  # spatial dimensions, set per subclass

    def __init__(self, *args, activation: str | None = None, out_dtype: torch.dtype | str | None = None,
                 backend: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.activation = activations.check_activation(activation)
        self.out_dtype = out_dtype
        self.backend = backend

    def __call__(self, *args, **kwargs):
        """``nn.Module.__call__`` without its two frames where it would only call ``forward``: no hook (the
        module's or a global one), no ``torch.jit`` trace, no ``module.compile()``. And the route the engine keeps
        for this call's signature, run straight from here without building the signature's key: ``F.conv*d``
        itself where aten won, else the route (a plugin's kernel) as :func:`conv_core.functional.convolution` runs
        it. An eager model calls this once per layer and step, and a host-bound model waits for every microsecond
        of it: every check the full path makes costs several times more in a model, its code and data cold in the
        CPU's caches, than in a loop over one layer (a converted MobileNetV3-L's call cost 8 us a layer more than
        torch's module on an H200's host; on a development CPU a tuple key of shape and strides was half of it).

        The memo of routes (``_memos``, per gradient mode: input shape, or shape and autocast dtype, to the
        strides and route of the last call of that shape, and what else pins it) is made after a call that went
        the full way (:meth:`_remember`) and forgotten when the engine's choices may change
        (:data:`conv_core.frontend.call_cache.GENERATION`), the module is moved or cast, or an attribute of
        :data:`ROUTE_ATTRIBUTES` is set. A call of another stride, weight, bias or deterministic mode takes the
        full way, and the memo then keeps its route instead. Dynamo takes the full way, which checks for it; under
        autocast the memo holds only ``F.conv*d`` routes: ``torch.conv*d`` casts as the full way did."""
        if (self._forward_pre_hooks or self._forward_hooks or self._backward_pre_hooks or self._backward_hooks
                or _GLOBAL_FORWARD_PRE_HOOKS or _GLOBAL_FORWARD_HOOKS or _GLOBAL_BACKWARD_PRE_HOOKS
                or _GLOBAL_BACKWARD_HOOKS or self._compiled_call_impl is not None or _tracing_state()):
            return _module_call(self, *args, **kwargs)
        memos = self._memos
        if memos is not None and memos[2] == GENERATION[0] and len(args) == 1 and not kwargs and not _compiling():
            x, parameters = args[0], self._parameters
            weight, bias = parameters.get("weight"), parameters.get("bias")
            if type(x) is _Tensor and weight is not None:
                grad = _grad_enabled() and (  # needs_grad() inline: this is every call's path
                    x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
                memo = memos[grad].get(x.shape if not _any_autocast() else (x.shape, autocast_dtype(x.device)))
                if (memo is not None and memo[0] == x.stride() and memo[2] is weight and memo[3] is bias
                        and memo[4] is _deterministic()):
                    route = memo[1]
                    if route is None:  # this signature takes the full way, with nothing to remember
                        return self.forward(x)
                    if route.native:  # F.conv*d itself: torch checks the operands' dtypes and devices
                        y = route.conv(x, weight, bias, *route.conv_args)
                        return y if route.activation is None else route.activation(y)
                    if memo[5] is x.dtype and memo[6] == x.device:
                        autograd = memo[7]
                        return (route.run(x, weight, bias) if autograd is None
                                else autograd.apply(x, weight, bias, route))
        if not args or type(args[0]) is not _Tensor:
            # torch's own call, looked up now: torch.fx patches nn.Module.__call__ to trace modules as leaves
            # (fusion traces a converted model), and a tensor subclass is no signature for the memo
            return nn.Module.__call__(self, *args, **kwargs)
        y = self.forward(*args, **kwargs)
        if len(args) == 1 and not kwargs:
            self._remember(args[0])
        return y

    #: per gradient mode (False, True): input shape (under autocast: shape and autocast dtype) -> (strides, route
    #: or None where the module cannot run it itself, weight, bias, deterministic mode, input dtype, device,
    #: autograd function or None) of the last full-way call of that shape; then the generation they were made under.
    _memos: tuple[dict, dict, int] | None = None

    def _remember(self, x) -> None:
        """After a call that went the full way: keep the route the engine keeps for it (see ``__call__``)."""
        parameters = self._parameters
        weight, bias = parameters.get("weight"), parameters.get("bias")
        if (type(x) is not _Tensor or weight is None or "bias" not in parameters or self.padding_mode != "zeros"
                or _compiling()):
            return
        grad = needs_grad(x, weight, bias)
        memos = self._memos
        if memos is None or memos[2] != GENERATION[0]:
            memos = self.__dict__["_memos"] = ({}, {}, GENERATION[0])
        memo = memos[grad]
        amp = autocast_dtype(x.device)
        shape = x.shape if amp is None else (x.shape, amp)
        if shape not in memo and len(memo) >= MAX_MEMOS:
            return  # no room; an entry that no longer matches is replaced
        kept = self._memo_route(x, weight, bias, grad, amp)
        route, autograd = (None, None) if kept is None else kept
        memo[shape] = (x.stride(), route, weight, bias, _deterministic(), x.dtype, x.device, autograd)

    def _memo_route(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, needs_grad: bool,
                    amp: torch.dtype | None):
        """``(route, autograd function or None)`` of a one-argument call on ``x`` (under autocast to ``amp``) as
        the engine keeps it (:func:`conv_core.functional.memo_route`), or None."""
        return functional.memo_route(self._ndim, x, weight, bias, self.stride, self.padding, self.dilation,
                                     self.groups, self.activation, self.out_dtype, self.backend, needs_grad, amp)

    def _forget_routes(self) -> None:
        self.__dict__.pop("_memos", None)

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name in ROUTE_ATTRIBUTES:
            self._forget_routes()

    def _apply(self, *args, **kwargs):
        """torch's (``to``, ``half``, ``cuda``...), forgetting the direct routes: the parameters change in place."""
        self._forget_routes()
        return super()._apply(*args, **kwargs)

    def __getstate__(self):
        """torch's state without the memo of direct routes (it holds the engine's routes: not state)."""
        state = super().__getstate__()
        state.pop("_memos", None)
        return state

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """torch's ``forward`` and ``_conv_forward`` in one frame: a model calls it once per layer and step."""
        if self.padding_mode != "zeros":
            return self._conv_forward(input, self.weight, self.bias)
        weight, bias = _weight_and_bias(self)
        return functional.convolution(self._ndim, input, weight, bias, self.stride, self.padding,
                                      self.dilation, self.groups, self.activation, self.out_dtype, self.backend)

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        padding = self.padding
        if self.padding_mode != "zeros":
            # torch's own rule: pad with the mode explicitly, then convolve without padding.
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        # functional's entry itself, not conv2d's wrapper: one Python frame less on every call
        return functional.convolution(self._ndim, input, weight, bias, self.stride, padding, self.dilation,
                                      self.groups, self.activation, self.out_dtype, self.backend)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        for name in EXTRA_ATTRIBUTES:
            value = getattr(self, name)
            if value is not None:
                text += f", {name}={value!r}" if isinstance(value, str) else f", {name}={value}"
        return text


class Conv1d(_ConvCoreMixin, nn.Conv1d):
    """``torch.nn.Conv1d`` through conv-core; extra keyword-only ``activation``, ``out_dtype``, ``backend``."""

    _ndim = 1


class Conv2d(_ConvCoreMixin, nn.Conv2d):
    """``torch.nn.Conv2d`` through conv-core; extra keyword-only ``activation``, ``out_dtype``, ``backend``."""

    _ndim = 2


class Conv3d(_ConvCoreMixin, nn.Conv3d):
    """``torch.nn.Conv3d`` through conv-core; extra keyword-only ``activation``, ``out_dtype``, ``backend``."""

    _ndim = 3


class _TransposedMixin(_ConvCoreMixin):
    """The transposed modules' forward: torch's (its ``output_size`` argument and ``_output_padding``), through
    :func:`conv_core.conv_transpose2d` and its kin. Torch's constructor refuses padding modes other than
    ``zeros``, and so do these. A call given ``output_size`` takes the full way (the memo's routes are for the
    module's own ``output_padding``)."""

    def _memo_route(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, needs_grad: bool,
                    amp: torch.dtype | None):
        output_padding = self._output_padding(x, None, self.stride, self.padding, self.kernel_size, self._ndim,
                                              self.dilation)
        return functional.memo_transposed_route(self._ndim, x, weight, bias, self.stride, self.padding,
                                                output_padding, self.groups, self.dilation, self.activation,
                                                self.out_dtype, self.backend, needs_grad, amp)

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError(f"Only `zeros` padding mode is supported for {type(self).__name__}")
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                              self._ndim, self.dilation)
        weight, bias = _weight_and_bias(self)
        return functional.transposed_convolution(self._ndim, input, weight, bias, self.stride,
                                                 self.padding, output_padding, self.groups, self.dilation,
                                                 self.activation, self.out_dtype, self.backend)


class ConvTranspose1d(_TransposedMixin, nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` through conv-core; extra keyword-only ``activation``, ``out_dtype``,
    ``backend`` (applied after the kernel: see :func:`conv_core.conv_transpose1d`)."""

    _ndim = 1


class ConvTranspose2d(_TransposedMixin, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` through conv-core (see :class:`ConvTranspose1d`)."""

    _ndim = 2


class ConvTranspose3d(_TransposedMixin, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` through conv-core (see :class:`ConvTranspose1d`)."""

    _ndim = 3
