"""The weight as the kernels read it: a view when it can be, else a zero-padded copy kept in a bounded LRU.

The forward kernel reads ``[K_total, taps * c_pad]`` tiles of ``[BLOCK_N, BLOCK_K]`` by TMA. A dense
channels-last weight ``[K, C_g, R, S]`` *is* that matrix with ``c_pad = C_g`` (its memory order is
``K, R, S, C_g``), so when the group's channels are a whole number of ``BLOCK_K`` blocks the kernel reads
the weight in place. Otherwise every tap's channels are padded with zeros to ``c_pad``, so that no block
straddles two taps and the rows stay 16-byte aligned; that copy is made once per weight and cached. The data
gradient's phases read the weight transposed and flipped (:func:`pack_transposed`): always a copy, cached the
same way, in conv-core's :class:`~conv_core.weight_cache.DerivedWeightCache` (keyed by the form made and the
weight's version, so never stale; bypassed while a CUDA graph is captured), bounded by
``CONV_GLUON_WEIGHT_CACHE_ENTRIES`` (default 64) and ``CONV_GLUON_WEIGHT_CACHE_MB`` (default 512).
"""

from __future__ import annotations

import math
import os

import torch
from conv_core.weight_cache import DerivedWeightCache

from .plan import TMA_ALIGN, WeightMatrix


def pack(w: torch.Tensor, c_pad: int) -> torch.Tensor:
    """``[K, C_g, *filter]`` (any strides) -> ``[K, taps * c_pad]``: channels innermost, each tap's channels
    zero-padded to ``c_pad``."""
    k, c = w.shape[:2]
    taps = math.prod(w.shape[2:])
    out = torch.zeros((k, taps, c_pad), dtype=w.dtype, device=w.device)
    out[:, :, :c] = w.reshape(k, c, taps).transpose(1, 2)
    return out.view(k, taps * c_pad)


def pack_transposed(w: torch.Tensor, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...],
                    k_pad: int) -> torch.Tensor:
    """The weight of a data-gradient phase (``plan.Phase``): ``[K, C_g, R, S]`` (1D: ``[K, C_g, S]``) ->
    ``[C, len(taps_h) * len(taps_w) * k_pad]``, row ``g * C_g + c``, columns tap-major (in the phase's tap
    order) then the group's output channel ``k`` zero-padded to ``k_pad``: the phase convolves ``dy`` with the
    weight transposed per group and restricted to its taps."""
    k_total, c = w.shape[:2]
    w4 = w if w.dim() == 4 else w.unsqueeze(2)
    k = k_total // groups
    sub = w4.reshape(groups, k, c, *w4.shape[2:])[:, :, :, list(taps_h)][..., list(taps_w)]
    out = torch.zeros((groups, c, len(taps_h), len(taps_w), k_pad), dtype=w.dtype, device=w.device)
    out[..., :k] = sub.permute(0, 2, 3, 4, 1)
    return out.view(groups * c, len(taps_h) * len(taps_w) * k_pad)


def as_matrix(w: torch.Tensor, spec: WeightMatrix) -> torch.Tensor | None:
    """The dense channels-last weight ``w`` as the kernel's matrix, without a copy, or None when it cannot
    be (the spec pads channels, or the storage is not 16-byte aligned as TMA needs)."""
    if spec.packed or w.data_ptr() % TMA_ALIGN:
        return None
    k, c = w.shape[:2]
    taps = math.prod(w.shape[2:])
    # dense channels-last: channel stride 1, then the taps, then the output channels
    expected = (taps * c, 1, *_tap_strides(w.shape[2:], c))
    if not all(size == 1 or s == e for size, s, e in zip(w.shape, w.stride(), expected)):
        return None
    return w.as_strided((spec.rows, spec.cols), (spec.cols, 1))


def _tap_strides(filter_size, c: int) -> tuple[int, ...]:
    strides, step = [], c
    for size in reversed(filter_size):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


#: The process's cache.
PACK_CACHE = DerivedWeightCache(int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_ENTRIES", 64)),
                                int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_MB", 512)) << 20)


def weight_matrix(w: torch.Tensor, spec: WeightMatrix, cache: DerivedWeightCache = PACK_CACHE) -> torch.Tensor:
    """What the forward kernel's weight descriptor is built on: the weight itself, or its cached padded copy."""
    view = as_matrix(w, spec)
    if view is not None:
        return view
    return cache.get(w, lambda: pack(w, spec.c_pad), form=("fwd", spec.c_pad))


def phase_matrix(w: torch.Tensor, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...], k_pad: int,
                 cache: DerivedWeightCache = PACK_CACHE) -> torch.Tensor:
    """A data-gradient phase's weight matrix (:func:`pack_transposed`), cached."""
    return cache.get(w, lambda: pack_transposed(w, groups, taps_h, taps_w, k_pad),
                     form=("bwd_data", groups, taps_h, taps_w, k_pad))
