"""The fused call: ``activation(norm(conv(x)))`` (and a residual block's ``relu(norm(conv(x)) + residual)``) as one
conv-core call, with the memo that makes its next call cheap. What folds, and how, is :mod:`conv_core.fusion.fold`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .. import activations, functional
from ..frontend.call_cache import GENERATION
from ..nn import MAX_MEMOS, member
from ..timing import is_capturing
from .fold import NO_TENSOR, conv_ndim, convolve, folded_parameters, running_stats, versions


def conv_bn_act(x: torch.Tensor, conv: nn.Module, norm: nn.Module | None, activation: str | None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
    """``activation(norm(conv(x)))`` as one conv-core call when ``norm`` can be folded now; the modules otherwise.
    With a ``residual`` (a residual block's end; ``activation`` is then ReLU): ``relu(norm(conv(x)) + residual)``
    (:func:`_add_relu`).

    A call that repeats the last one's signature, with nothing it is computed from changed, runs the route kept in
    :data:`MEMO` (see :func:`_memo_call`); the others fold (or read the cached fold) and take conv-core's full way.
    """
    memos = conv.__dict__.get(MEMO)
    memo = None if memos is None else memos.get(x.shape)
    if memo is not None:
        y = _memo_call(memo, x, conv, norm, activation, residual)
        if y is not None:
            return y
    if norm is None:
        weight, bias = member(conv, "weight"), member(conv, "bias")
    else:
        stats = running_stats(norm)
        if stats is None:
            y = norm(conv(x))
            return activations.apply(activation, y if residual is None else y + residual)
        weight, bias = folded_parameters(conv, stats)
    if residual is None:
        y, adds = convolve(conv, x, weight, bias, activation), False
    else:
        y, adds = _add_relu(conv, x, weight, bias, residual)
    _remember(x, conv, norm, activation, weight, bias, residual, adds)
    return y


def _add_relu(conv: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
              residual: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``relu(conv(x) + residual)`` with the folded ``weight`` and ``bias``, and whether cuDNN's operator added it.

    Where the engine runs this convolution with a ReLU as cuDNN's fused operator (aten's ``CUDNN_RELU``, timed on
    it), that operator's sibling ``torch.cudnn_convolution_add_relu`` adds the residual too: one call and one
    kernel for convolution, bias, add and ReLU (a folded ResNet-50 run this way: 1.4 against 2.5 ms of GPU time a
    step, H200). Elsewhere the convolution, then the add and the ReLU.
    """
    if not (_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual))):
        route = _cudnn_relu_route(conv, x, weight, bias, residual)
        if route is not None:
            return _cudnn_add_relu(route, x, weight, bias, residual), True
    return torch.relu(convolve(conv, x, weight, bias, None) + residual), False


def _cudnn_relu_route(conv: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      residual) -> object | None:
    """The route of ``conv``'s no-gradient call with a ReLU where it is cuDNN's fused operator and ``residual`` can
    be its addend (a tensor of the output's shape and the input's dtype), else None."""
    if (_compiling() or _any_autocast() or bias is None or conv.padding_mode != "zeros"
            or type(residual) is not torch.Tensor or residual.dtype is not x.dtype):
        return None
    route = functional.ranked_route(conv_ndim(conv), x, weight, bias, conv.stride, conv.padding, conv.dilation,
                                    conv.groups, "relu", getattr(conv, "backend", None))
    if route.conv is not torch.cudnn_convolution_relu or residual.shape != route.problem.output_shape:
        return None
    return route


def _cudnn_add_relu(route, x, weight, bias, residual) -> torch.Tensor:
    return torch.cudnn_convolution_add_relu(x, weight, residual, 1.0, bias, *route.conv_args)


# ---- the memo of a fused call -------------------------------------------------------------------------------
#
# A host-bound model waits for every check a fused call makes: the fold's cache and conv-core's eager key cost a
# fused model more than the batch norm and activation calls it saves. The memo keeps, per convolution and input
# shape, the last no-gradient call's route and fold with what pins them, checked in one pass. By shape: a
# detection head runs each of its convolutions on every pyramid level, and a memo of the last call alone missed
# on all of them (RetinaNet's 32 head calls took the full way every step, its fused model 0.90x plain on an H200).

#: The convolution's ``__dict__`` entry holding its fused calls' :class:`Memo` by input shape (at most
#: :data:`~conv_core.nn.MAX_MEMOS` shapes, as a converted module's own memo).
MEMO = "_conv_core_fused_memo"
_MISSING = object()
#: The hot path's checks, bound once (the eager entry's own).
_compiling, _grad_enabled = functional._compiling, functional._grad_enabled
_any_autocast, _deterministic = functional._any_autocast, functional._deterministic


class Memo(NamedTuple):
    """A convolution's last fused call without gradients: its signature, what its fold read, the fold, the route."""

    norm: nn.Module | None
    activation: str | None
    shape: torch.Size
    strides: tuple[int, ...]
    deterministic: bool
    generation: int
    #: the tensors the fold is computed from (:func:`_parts`), their ids, and their version counters and addresses
    parts: tuple
    ids: tuple[int, ...]
    versions: tuple
    weight: torch.Tensor
    bias: torch.Tensor | None
    route: object
    #: the call added a residual (then ReLU) after the convolution; cuDNN's operator did (:func:`_add_relu`)
    residual: bool
    adds: bool


def _parts(conv: nn.Module, norm: nn.Module | None) -> tuple | None:
    """The convolution's weight and bias and the batch norm's statistics, affine parameters and batch counter, read
    from their modules' dicts (:data:`NO_TENSOR` for one a module has as None); None where one is neither a
    parameter nor a buffer (a parametrized weight, computed on each read), which the memo leaves to the full way."""
    parts = [_stored(conv, "weight"), _stored(conv, "bias")]
    if norm is not None:
        parts += [_stored(norm, name) for name in ("running_mean", "running_var", "weight", "bias")]
        parts.append(norm._buffers.get("num_batches_tracked"))  # torchvision's frozen batch norm has none
    for part in parts:  # by identity: ``in`` would compare tensors elementwise
        if part is _MISSING:
            return None
    return tuple(NO_TENSOR if t is None else t for t in parts)


def _stored(module: nn.Module, name: str):
    """``module``'s parameter or buffer ``name`` (None if registered as None), or :data:`_MISSING`."""
    found = module._parameters.get(name, _MISSING)
    return module._buffers.get(name, _MISSING) if found is _MISSING else found


def _remember(x: torch.Tensor, conv: nn.Module, norm: nn.Module | None, activation: str | None,
              weight: torch.Tensor, bias: torch.Tensor | None, residual=None, adds: bool = False) -> None:
    """After a full-way fused call without gradients: keep its route and fold for the next call of its signature
    (of a residual call that cuDNN's operator did not add: the convolution's route without its ReLU)."""
    if (_compiling() or _grad_enabled() or _any_autocast() or type(x) is not torch.Tensor
            or conv.padding_mode != "zeros" or is_capturing(x.device)):
        return
    parts = _parts(conv, norm)
    if parts is None or any(t.is_inference() for t in parts):
        return  # inference tensors have no version counter
    routed = None if residual is not None and not adds else activation
    kept = functional.memo_route(conv_ndim(conv), x, weight, bias, conv.stride, conv.padding, conv.dilation,
                                 conv.groups, routed, None, getattr(conv, "backend", None), False)
    memos = conv.__dict__.setdefault(MEMO, {})
    if kept is not None and (x.shape in memos or len(memos) < MAX_MEMOS):
        memos[x.shape] = Memo(norm, activation, x.shape, x.stride(), _deterministic(), GENERATION[0], parts,
                              tuple(map(id, parts)), versions(parts), weight, bias, kept[0], residual is not None,
                              adds)


def _memo_call(memo: Memo, x, conv: nn.Module, norm: nn.Module | None, activation: str | None, residual=None):
    """The fused call run from ``memo``, or None where it does not hold: another signature, a gradient, autocast,
    a trace, a capture (the fold it reads must then be kept alive: :func:`folded_parameters`), an engine whose
    choices may have changed, a batch norm in training mode, a part replaced, written or moved, a residual that
    cuDNN's operator cannot add."""
    if (memo.norm is not norm or memo.activation != activation or memo.residual is (residual is None)
            or _grad_enabled() or _any_autocast() or _compiling() or memo.generation != GENERATION[0]
            or type(x) is not torch.Tensor or x.shape != memo.shape or x.stride() != memo.strides
            or memo.deterministic is not _deterministic() or (norm is not None and norm.training)
            or is_capturing(x.device)):
        return None
    parts = _parts(conv, norm)
    if parts is None or tuple(map(id, parts)) != memo.ids or versions(parts) != memo.versions:
        return None  # the memo holds its parts alive, so an equal id is the same tensor
    route = memo.route
    if memo.adds:
        if type(residual) is not torch.Tensor or residual.dtype is not x.dtype \
                or residual.shape != route.problem.output_shape:
            return None
        return _cudnn_add_relu(route, x, memo.weight, memo.bias, residual)
    if route.native:
        y = route.conv(x, memo.weight, memo.bias, *route.conv_args)
        y = y if route.activation is None else route.activation(y)
    else:
        y = route.run(x, memo.weight, memo.bias)
    return y if residual is None else torch.relu(y + residual)
