"""Dense tensors in a problem's layout: strides, checks, copies.

A problem's tensors are dense in one of two layouts: ``channels_first`` (NCHW, PyTorch's contiguous) or
``channels_last`` (NHWC, ``torch.channels_last``). Backends, the reference and the core all need the same few
facts about them: the dense strides of a shape, whether a tensor already is dense in a layout, and a copy
that makes it so.
"""

from __future__ import annotations

import torch


def dense_strides(shape, layout: str) -> tuple[int, ...]:
    """Strides of a dense tensor of ``shape`` in ``layout``."""
    strides, step = [0] * len(shape), 1
    for dim in reversed(layout_order(len(shape), layout)):
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


def layout_order(ndim_total: int, layout: str) -> tuple[int, ...]:
    """Dimension order, outermost first, of a dense tensor in ``layout``."""
    if layout == "channels_last":
        return (0, *range(2, ndim_total), 1)
    return tuple(range(ndim_total))


_MEMORY_FORMAT = {4: torch.channels_last, 5: torch.channels_last_3d}


def is_dense_in(t: torch.Tensor, layout: str) -> bool:
    """Whether ``t`` is dense in ``layout`` (size-1 dimensions' strides ignored)."""
    if layout == "channels_first":
        return t.is_contiguous()
    if t.dim() in _MEMORY_FORMAT:
        return t.is_contiguous(memory_format=_MEMORY_FORMAT[t.dim()])
    expected = dense_strides(t.shape, layout)
    return all(size == 1 or s == e for size, s, e in zip(t.shape, t.stride(), expected))


def detect_layout(t: torch.Tensor) -> str:
    """``channels_last`` when the channel stride is the smallest, ``channels_first`` otherwise.

    A tensor dense in both (one channel, or a 1x1 image) counts as channels-first,
    as ``torch.Tensor.is_contiguous`` does.
    """
    if is_dense_in(t, "channels_first"):
        return "channels_first"
    if is_dense_in(t, "channels_last"):
        return "channels_last"
    strides = [s for size, s in zip(t.shape[1:], t.stride()[1:]) if size > 1]
    if t.shape[1] > 1 and strides and t.stride(1) == min(strides):
        return "channels_last"
    return "channels_first"


def to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` itself if already dense in ``layout``, else a dense copy in it."""
    if is_dense_in(t, layout):
        return t
    out = empty_strided_for(tuple(t.shape), t.dtype, layout, t.device)
    out.copy_(t)
    return out


def empty_strided_for(shape, dtype: torch.dtype, layout: str, device) -> torch.Tensor:
    """Uninitialised dense tensor of ``shape`` in ``layout``."""
    return torch.empty_strided(shape, dense_strides(shape, layout), dtype=dtype, device=device)
