"""The weight as the kernels read it: a view when it can be, else a zero-padded copy kept in a bounded LRU.

The forward kernel reads ``[K_total, taps * c_pad]`` tiles of ``[BLOCK_N, BLOCK_K]`` by TMA. A dense
channels-last weight ``[K, C_g, R, S]`` *is* that matrix with ``c_pad = C_g`` (its memory order is
``K, R, S, C_g``), so when the group's channels are a whole number of ``BLOCK_K`` blocks the kernel reads
the weight in place. Otherwise every tap's channels are padded with zeros to ``c_pad``, so that no block
straddles two taps and the rows stay 16-byte aligned; that copy is made once per weight and cached. The data
gradient's phases read the weight transposed and flipped (:func:`pack_transposed`): always a copy, all phases'
in one entry, cached the same way, in conv-core's :class:`~conv_core.weight_cache.DerivedWeightCache` (keyed by
the form made and the weight's version, so never stale), bounded by ``CONV_GLUON_WEIGHT_CACHE_ENTRIES``
(default 64) and ``CONV_GLUON_WEIGHT_CACHE_MB`` (default 512).

While a CUDA graph is captured the cache is bypassed and the copies are recorded in the graph (a replay
derives them from the weight as it is then), so making them must be capture-safe: device operations on the
weight only, no tensor built from host data (a Python list of taps as an index would be copied from the host,
which a capture refuses); the taps are picked by slices instead.
"""

from __future__ import annotations

import math
import os

import torch
from conv_core.layout import is_dense_in
from conv_core.weight_cache import DerivedWeightCache

from .plans import TMA_ALIGN, WeightMatrix


def pack(w: torch.Tensor, c_pad: int) -> torch.Tensor:
    """``[K, C_g, *filter]`` (any strides) -> ``[K, taps * c_pad]``: channels innermost, each tap's channels
    zero-padded to ``c_pad``."""
    k, c = w.shape[:2]
    taps = math.prod(w.shape[2:])
    out = torch.zeros((k, taps, c_pad), dtype=w.dtype, device=w.device)
    out[:, :, :c] = w.reshape(k, c, taps).transpose(1, 2)
    return out.view(k, taps * c_pad)


def pack_transposed(w: torch.Tensor, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...],
                    k_pad: int, taps_d: tuple[int, ...] = (0,)) -> torch.Tensor:
    """The weight of a data-gradient phase (``plan.Phase``): ``[K, C_g, T, R, S]`` (2D: ``[K, C_g, R, S]``, 1D:
    ``[K, C_g, S]``) -> ``[C, len(taps_d) * len(taps_h) * len(taps_w) * k_pad]``, row ``g * C_g + c``, columns
    tap-major (in the phase's tap order, depth outermost) then the group's output channel ``k`` zero-padded to
    ``k_pad``: the phase convolves ``dy`` with the weight transposed per group and restricted to its taps."""
    k_total, c = w.shape[:2]
    w5 = w.reshape(k_total, c, *(1,) * (5 - w.dim()), *w.shape[2:])
    k = k_total // groups
    sub = w5.reshape(groups, k, c, *w5.shape[2:])
    for dim, taps in ((3, taps_d), (4, taps_h), (5, taps_w)):
        sub = _pick_taps(sub, dim, taps)
    out = torch.zeros((groups, c, len(taps_d), len(taps_h), len(taps_w), k_pad), dtype=w.dtype, device=w.device)
    out[..., :k] = sub.permute(0, 2, 3, 4, 5, 1)
    return out.view(groups * c, len(taps_d) * len(taps_h) * len(taps_w) * k_pad)


def _pick_taps(t: torch.Tensor, dim: int, taps: tuple[int, ...]) -> torch.Tensor:
    """``t``'s filter positions ``taps`` along ``dim``, in that order, by a slice (and a flip where they
    descend): a phase's taps are evenly spaced (:func:`conv_core.kit.phases.phase_axis`)."""
    ascending = tuple(sorted(taps))
    step = ascending[1] - ascending[0] if len(taps) > 1 else 1
    if step < 1 or ascending != tuple(range(ascending[0], ascending[-1] + 1, step)) or \
            taps not in (ascending, ascending[::-1]):
        raise ValueError(f"filter taps {taps} are not evenly spaced in one direction")
    index = (slice(None),) * dim + (slice(ascending[0], ascending[-1] + 1, step),)
    picked = t[index]
    return picked if taps == ascending else picked.flip(dim)


def in_place(w: torch.Tensor, spec: WeightMatrix, strides: tuple[int, ...] | None = None) -> bool:
    """Whether the kernel reads ``w`` itself as its matrix: no padded channels, dense channels-last (its memory
    order is then ``K, taps, C_G``; ``strides``, when given, are those dense strides: a quicker check) and
    16-byte aligned, as TMA needs."""
    return not spec.packed and w.data_ptr() % TMA_ALIGN == 0 and (w.stride() == strides
                                                                  or is_dense_in(w, "channels_last"))


def as_matrix(w: torch.Tensor, spec: WeightMatrix) -> torch.Tensor | None:
    """The weight ``w`` as the kernel's matrix, without a copy, or None when it cannot be (:func:`in_place`)."""
    return w.as_strided((spec.rows, spec.cols), (spec.cols, 1)) if in_place(w, spec) else None


#: The process's cache.
PACK_CACHE = DerivedWeightCache(int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_ENTRIES", 64)),
                                int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_MB", 512)) << 20)


def weight_matrix(w: torch.Tensor, spec: WeightMatrix, cache: DerivedWeightCache = PACK_CACHE) -> torch.Tensor:
    """What the forward kernel's weight descriptor is built on: the weight itself, or its cached padded copy."""
    view = as_matrix(w, spec)
    if view is not None:
        return view
    return cache.get(w, lambda: pack(w, spec.c_pad), form=("fwd", spec.c_pad))


def descriptor_base(w: torch.Tensor, spec: WeightMatrix, strides: tuple[int, ...] | None = None,
                    cache: DerivedWeightCache = PACK_CACHE) -> torch.Tensor:
    """What the forward kernel's weight descriptor is built on (the descriptor's map gives the matrix's shape, so
    only the tensor's address and dtype count): the weight itself where :func:`as_matrix` would view it, else its
    cached padded copy. Cheaper than :func:`weight_matrix` by the view: it is on every call's path."""
    if in_place(w, spec, strides):
        return w
    return cache.get(w, lambda: pack(w, spec.c_pad), form=("fwd", spec.c_pad))


def phase_matrices(w: torch.Tensor, groups: int, phases: tuple[tuple, ...],
                   cache: DerivedWeightCache = PACK_CACHE) -> tuple[torch.Tensor, ...]:
    """The data gradient's weight matrices, one per phase ``(taps_h, taps_w, k_pad, taps_d)`` (:func:`pack_transposed`),
    cached as one entry (one look-up per call)."""
    return cache.get(w, lambda: tuple(pack_transposed(w, groups, *phase) for phase in phases),
                     form=("bwd_data", groups, phases))
