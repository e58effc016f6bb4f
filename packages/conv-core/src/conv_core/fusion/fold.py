"""What folds into a convolution (batch norm, an activation), and the folded call itself.

In eval mode a batch norm is an affine map per channel, so it can be folded into
the preceding convolution's weight and bias; an activation that follows can be
computed in the kernel's epilogue. One conv-core call then does what three
modules did, with one launch instead of three.

The fold happens at call time, never in place: the model keeps its modules and
parameters, so ``train()``, optimizers and ``state_dict`` see nothing changed.
The folded weight and bias are cached per convolution while no gradient is
needed, keyed on the identity, version counter and storage of every tensor they
come from, so an optimizer step, ``load_state_dict`` or ``model.to`` recomputes
them. Writes that bypass version counters (``tensor.data = ...``) are not seen,
as for autograd. With gradients the fold is plain torch ops on every call, so
gradients reach the original parameters; so it is where ``torch.compile`` traces
it (a fused module does not call it there: :mod:`conv_core.fusion.fuse`).

A CUDA graph captured from a fused model reads the cached fold, made by the
warm-up call that capture needs: folding on every replay would add a few
launches per convolution to every replay (measured: a fused MobileNetV3-L's graph
0.62x the plain graph's speed). The graph then holds the parameters as they were
at capture, as ``optimize_for_inference`` promises (a frozen model's graph reads
its constants): after changing them, capture again. The folds a capture read
stay alive with their convolution, so a later fold never frees what a replay
reads. Where no fold is cached (the parameters changed since the warm-up), the
capture records the fold's torch ops, and a replay folds the current parameters.
"""

from __future__ import annotations

import weakref
from operator import attrgetter, methodcaller
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from .. import activations, functional
from ..nn import Conv1d, Conv2d, Conv3d, member
from ..timing import is_capturing

#: Convolution classes whose forward is exactly "pad by mode, then convolve": torch's and conv-core's.
_CONVOLUTIONS = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3, Conv1d: 1, Conv2d: 2, Conv3d: 3}
_BATCH_NORMS = {nn.BatchNorm1d: 1, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3}
_FUNCTIONAL = {1: functional.conv1d, 2: functional.conv2d, 3: functional.conv3d}
_SIMPLE_ACTIVATIONS = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu"}
#: ``nn.GELU`` / ``F.gelu``'s ``approximate`` -> conv-core activation name.
GELU_APPROXIMATIONS = {"none": "gelu", "tanh": "gelu_tanh"}


def has_hooks(module: nn.Module) -> bool:
    """Whether skipping ``module``'s call would skip hooks someone registered on it."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _is_frozen_batch_norm(module) -> bool:
    """torchvision's ``FrozenBatchNorm2d`` (detection backbones): batch norm with buffers only, always in eval form.

    Recognised by name, so conv-core does not import torchvision.
    """
    cls = type(module)
    return cls.__name__ == "FrozenBatchNorm2d" and cls.__module__.startswith("torchvision.")


def conv_ndim(module) -> int | None:
    return _CONVOLUTIONS.get(parametrize.type_before_parametrizations(module))


def _norm_ndim(module) -> int | None:
    return 2 if _is_frozen_batch_norm(module) else _BATCH_NORMS.get(type(module))


def activation_of(module) -> str | None:
    """The conv-core activation name an activation module computes, or None (not one, or hooked)."""
    if type(module) is nn.GELU:
        name = GELU_APPROXIMATIONS.get(module.approximate)
    else:
        name = _SIMPLE_ACTIVATIONS.get(type(module))
    if name is None or name not in activations.ACTIVATIONS or has_hooks(module):
        return None
    return name


def is_part(module) -> bool:
    """Whether ``module`` is a convolution, batch norm or activation: something fusion calls, never traces into."""
    return (conv_ndim(module) is not None or _norm_ndim(module) is not None
            or type(module) in _SIMPLE_ACTIVATIONS or type(module) is nn.GELU)


def fusable_conv(module) -> bool:
    """Whether ``module`` can start a fused call: a plain convolution with no epilogue or output dtype of its own.

    A convolution that already applies an activation or casts its output
    cannot take a batch norm after it into its weight; one with hooks would
    lose them.
    """
    return (conv_ndim(module) is not None and getattr(module, "activation", None) is None
            and getattr(module, "out_dtype", None) is None and not has_hooks(module)
            and not isinstance(module.weight, nn.parameter.UninitializedParameter))


def folds_into(norm, conv) -> bool:
    """Whether batch norm ``norm`` can ever be folded into ``conv`` (same rank and channels, running stats kept)."""
    ndim = _norm_ndim(norm)
    if ndim is None or ndim != conv_ndim(conv) or has_hooks(norm):
        return False
    channels = norm.weight.shape[0] if _is_frozen_batch_norm(norm) else norm.num_features
    return channels == conv.out_channels and (_is_frozen_batch_norm(norm) or norm.track_running_stats)


class Stats(NamedTuple):
    """What a batch norm in eval form computes with, and what tells that its running statistics moved."""

    mean: torch.Tensor
    var: torch.Tensor
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float
    #: ``num_batches_tracked``: batch norm updates its running statistics without bumping their version
    #: counters, but increments this counter (in place, bumping its version) on every training-mode call.
    counter: torch.Tensor | None


def running_stats(norm) -> Stats | None:
    """What ``norm`` would normalise with now, or None when it would use the batch's statistics.

    Decided on every call, as batch norm decides: a training-mode batch norm
    uses the batch's statistics (and updates its running ones), so it cannot
    be folded.
    """
    mean, var, weight, bias = (member(norm, "running_mean"), member(norm, "running_var"), member(norm, "weight"),
                               member(norm, "bias"))
    if type(norm) not in _BATCH_NORMS:  # then torchvision's frozen batch norm (fusion checked that)
        return Stats(mean, var, weight, bias, norm.eps, None)
    if norm.training or mean is None or var is None:
        return None
    return Stats(mean, var, weight, bias, norm.eps, member(norm, "num_batches_tracked"))


def fold(weight: torch.Tensor, bias: torch.Tensor | None, mean: torch.Tensor, var: torch.Tensor,
         gamma: torch.Tensor | None, beta: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight and bias of ``bn(conv(x))`` as one convolution.

    Computed in float32 or better (a bf16 model's fold rounds once, at the
    end), given in the weight's dtype.
    """
    dtype = torch.promote_types(weight.dtype, torch.float32)
    scale = torch.rsqrt(var.to(dtype) + eps)
    if gamma is not None:
        scale = scale * gamma.to(dtype)
    shift = -mean.to(dtype) * scale if bias is None else (bias.to(dtype) - mean.to(dtype)) * scale
    if beta is not None:
        shift = shift + beta.to(dtype)
    folded = weight.to(dtype) * scale.reshape(-1, *(1,) * (weight.dim() - 1))
    return folded.to(weight.dtype), shift.to(weight.dtype)


@dataclass(frozen=True)
class _Folded:
    """One convolution's cached fold, with what it was computed from."""

    sources: tuple
    state: tuple
    weight: torch.Tensor
    bias: torch.Tensor


#: Convolution module -> its last fold (one entry per convolution; gone with the module).
_CACHE: weakref.WeakKeyDictionary[nn.Module, _Folded] = weakref.WeakKeyDictionary()
#: Convolution module -> the folds CUDA graphs captured: a replay reads them, so they live as long as the module.
_CAPTURED: weakref.WeakKeyDictionary[nn.Module, list[_Folded]] = weakref.WeakKeyDictionary()


NO_TENSOR = torch.empty(0)  # stands in for a tensor a module has as None (a bias, an affine weight)
_version_of = attrgetter("_version")
_address_of = methodcaller("data_ptr")


def versions(tensors: tuple) -> tuple:
    """What tells that a tensor changed in place (its version counter) or moved (``model.to``, ``model.half``
    replace ``.data``: its address). Inference tensors have none: they raise ``RuntimeError``."""
    return (*map(_version_of, tensors), *map(_address_of, tensors))


def _state(sources: tuple, eps: float) -> tuple | None:
    """What must be unchanged, besides the sources' identity, for a cached fold to be served (:func:`versions`);
    None where a source is an inference tensor (never cached)."""
    try:
        return eps, torch.is_inference_mode_enabled(), *versions(tuple(NO_TENSOR if t is None else t
                                                                          for t in sources))
    except RuntimeError:
        return None


def _fold_each_call(sources: tuple) -> bool:
    """Whether the fold must be recomputed by torch ops on this call instead of served from the cache.

    With gradients it must be part of the autograd graph; under ``torch.compile`` part of the traced graph.
    """
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in sources)


def folded_parameters(conv: nn.Module, stats: Stats) -> tuple[torch.Tensor, torch.Tensor]:
    """``conv``'s weight and bias with the batch norm of ``stats`` folded in: cached when no gradient is needed
    (a CUDA graph capture reads the cached fold: see the module's docstring)."""
    sources = (member(conv, "weight"), member(conv, "bias"), stats.mean, stats.var, stats.weight, stats.bias)
    if _fold_each_call(sources):
        return fold(*sources, stats.eps)
    capturing = is_capturing(sources[0].device)
    sources += (stats.counter,)
    state = _state(sources, stats.eps)
    entry = _CACHE.get(conv)
    if (entry is not None and state is not None and entry.state == state
            and all(a is b for a, b in zip(entry.sources, sources))):
        captured = _CAPTURED.setdefault(conv, []) if capturing else ()
        if capturing and all(e is not entry for e in captured):
            captured.append(entry)
        return entry.weight, entry.bias
    if capturing:  # nothing cached to read: the graph folds on every replay
        return fold(*sources[:6], stats.eps)
    with torch.no_grad():
        weight, bias = fold(*sources[:6], stats.eps)
    if state is not None:
        _CACHE[conv] = _Folded(sources, state, weight, bias)
    return weight, bias


def convolve(conv: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             activation: str | None) -> torch.Tensor:
    """``conv``'s convolution with another weight and bias and a fused activation, through conv-core.

    Non-zero padding modes as torch's modules do them: an explicit ``F.pad``,
    then a convolution without padding.
    """
    padding = conv.padding
    if conv.padding_mode != "zeros":
        x = F.pad(x, conv._reversed_padding_repeated_twice, mode=conv.padding_mode)
        padding = 0
    return _FUNCTIONAL[conv_ndim(conv)](x, weight, bias, conv.stride, padding, conv.dilation, conv.groups,
                                        activation=activation, backend=getattr(conv, "backend", None))
