"""``Conv1d`` / ``Conv2d`` / ``Conv3d`` (and ``ConvTranspose*d``) modules that run through conv-core, and
model conversion.

The modules subclass ``torch.nn.Conv*d`` and change only where the
convolution runs, so they keep torch's constructor, parameters, state dict,
initialisation and padding modes. Non-zero padding modes are handled as torch
handles them: an explicit ``F.pad`` with the mode, then a convolution with zero
padding.

:func:`convert` turns an existing model's torch convolutions into these modules
in place, by reassigning each module's class. Nothing is copied or re-created,
so parameter identity (and with it optimizers, ``state_dict`` keys, tied
weights), hooks and parametrizations survive. :func:`revert` undoes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from . import activations, functional

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "convert",
           "revert"]

_EXTRA_ATTRIBUTES = ("activation", "out_dtype", "backend")


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

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """torch's ``forward`` and ``_conv_forward`` in one frame: a model calls it once per layer and step."""
        if self.padding_mode != "zeros":
            return self._conv_forward(input, self.weight, self.bias)
        return functional.convolution(self._ndim, input, self.weight, self.bias, self.stride, self.padding,
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
        for name in _EXTRA_ATTRIBUTES:
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
    ``zeros``, and so do these."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise ValueError(f"Only `zeros` padding mode is supported for {type(self).__name__}")
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                              self._ndim, self.dilation)
        return functional.transposed_convolution(self._ndim, input, self.weight, self.bias, self.stride,
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


#: torch class -> conv-core class. Exact types only: a subclass of ``nn.Conv2d``
#: may override ``forward`` with semantics we would silently drop.
_TO_CORE: dict[type, type] = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d,
                               nn.ConvTranspose1d: ConvTranspose1d, nn.ConvTranspose2d: ConvTranspose2d,
                               nn.ConvTranspose3d: ConvTranspose3d}
_TO_TORCH: dict[type, type] = {core: torch_cls for torch_cls, core in _TO_CORE.items()}


def _swap_class(module: nn.Module, new_base: type) -> None:
    """Give ``module`` the class ``new_base``, keeping a parametrization wrapper class if it has one.

    ``torch.nn.utils.parametrize`` replaces a parametrized module's class by a
    generated subclass holding one property per parametrized tensor; we build
    the same wrapper around ``new_base`` so the parametrizations keep working
    and ``remove_parametrizations`` later restores ``new_base``.
    """
    if not parametrize.is_parametrized(module):
        module.__class__ = new_base
        return
    wrapper = type(module)
    namespace = {k: v for k, v in vars(wrapper).items() if k not in ("__dict__", "__weakref__")}
    module.__class__ = type(f"Parametrized{new_base.__name__}", (new_base,), namespace)


def convert(model: nn.Module, backend: str | None = None, fuse: bool = False) -> nn.Module:
    """Make every exact ``torch.nn.Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d`` in ``model`` (itself included)
    run through conv-core, in place.

    Subclasses and modules already converted are left alone. ``backend``
    restricts the converted modules to one backend by name.
    ``fuse=True`` then fuses convolution -> batch norm -> activation chains for
    eval mode (:func:`conv_core.optimize_for_inference`). Returns ``model``.
    """
    for module in model.modules():
        core_cls = _TO_CORE.get(parametrize.type_before_parametrizations(module))
        if core_cls is not None:
            _swap_class(module, core_cls)
            module.backend = backend
    if fuse:
        from .fuse import optimize_for_inference  # fuse imports this module

        optimize_for_inference(model)
    return model


def revert(model: nn.Module) -> nn.Module:
    """Undo :func:`convert` in place: conv-core modules become torch's again. Returns ``model``.

    A module with a fused ``activation`` or an ``out_dtype`` has no torch
    equivalent; reverting it raises ``ValueError`` (before changing anything).
    Fusion (:func:`conv_core.optimize_for_inference`) is undone too.
    """
    found = [(name, m) for name, m in model.named_modules()
             if parametrize.type_before_parametrizations(m) in _TO_TORCH]
    for name, module in found:
        if module.activation is not None or module.out_dtype is not None:
            raise ValueError(f"cannot revert {name or type(module).__name__}: torch's module has no "
                             f"activation={module.activation!r} / out_dtype={module.out_dtype!r}")
    from .fuse import unfuse  # fuse imports this module

    unfuse(model)
    for _, module in found:
        _swap_class(module, _TO_TORCH[parametrize.type_before_parametrizations(module)])
        for attribute in _EXTRA_ATTRIBUTES:
            module.__dict__.pop(attribute, None)
    return model
