"""Model conversion: :func:`convert` and :func:`revert`.

:func:`convert` turns an existing model's torch convolutions into conv-core's modules (:mod:`conv_core.nn`)
in place, by reassigning each module's class. Nothing is copied or re-created,
so parameter identity (and with it optimizers, ``state_dict`` keys, tied
weights), hooks and parametrizations survive. :func:`revert` undoes it, and undoes fusion
(:mod:`conv_core.fusion.fuse`) too.
"""

from __future__ import annotations

from torch import nn
from torch.nn.utils import parametrize

from .fusion.fuse import optimize_for_inference, unfuse
from .nn import EXTRA_ATTRIBUTES, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

__all__ = ["convert", "revert"]


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
    unfuse(model)
    for _, module in found:
        _swap_class(module, _TO_TORCH[parametrize.type_before_parametrizations(module)])
        for attribute in EXTRA_ATTRIBUTES:
            module.__dict__.pop(attribute, None)
    return model
