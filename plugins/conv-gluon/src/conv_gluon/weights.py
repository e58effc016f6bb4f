"""The weight as the kernels read it: a view when it can be, else a zero-padded copy kept in a bounded LRU.

The forward kernel reads ``[K_total, taps * c_pad]`` tiles of ``[BLOCK_N, BLOCK_K]`` by TMA. A dense
channels-last weight ``[K, C_g, R, S]`` *is* that matrix with ``c_pad = C_g`` (its memory order is
``K, R, S, C_g``), so when the group's channels are a whole number of ``BLOCK_K`` blocks the kernel reads
the weight in place. Otherwise every tap's channels are padded with zeros to ``c_pad``, so that no block
straddles two taps and the rows stay 16-byte aligned; that copy is made once per weight and cached. The data
gradient's phases read the weight transposed and flipped (:func:`pack_transposed`): always a copy, cached the
same way. The cache:

- is keyed by device, data pointer, shape, strides, dtype, the form made (padding, a phase's taps) and the
  tensor's ``_version`` (bumped by every in-place update, optimizer steps included), and checked against a
  weak reference to the weight's storage, so a new weight allocated where a freed one was, with the same
  version, is a miss;
- is bounded (``CONV_GLUON_WEIGHT_CACHE_ENTRIES``, default 64; ``CONV_GLUON_WEIGHT_CACHE_MB``, default 512):
  least recently used first out; entries of freed weights and older versions are dropped on insertion;
- is bypassed for inference tensors (no version counter) and while a CUDA graph is being captured (the copy
  is then part of the graph, so a replay never reads a stale one).

Writes that bypass the version counter (``tensor.data``, other libraries) are not seen, as for autograd.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

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


class PackCache:
    """A bounded LRU of padded weight copies, keyed on the weight tensor's identity and version."""

    def __init__(self, max_entries: int = 64, max_bytes: int = 512 << 20) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[tuple, tuple[StorageWeakRef, torch.Tensor]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(w: torch.Tensor, form) -> tuple:
        """``form``: what was made of the weight (hashable: the padding, or a phase's taps and padding)."""
        return (w.device.type, w.device.index, w.data_ptr(), tuple(w.shape), tuple(w.stride()), w.dtype, form,
                w._version)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def get(self, w: torch.Tensor, form, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The copy ``form`` of ``w``: the cached one, or ``make()``'s (then cached)."""
        if w.is_inference() or (w.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return make()
        key, ref = self.key(w, form), StorageWeakRef(w.untyped_storage())
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not entry[0].expired() and entry[0] == ref:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
        value = make()
        size = value.numel() * value.element_size()
        with self._lock:
            self.misses += 1
            # Entries of freed weights, and older versions of this form (a version never comes back).
            for stale in [k for k, (r, _) in self._entries.items() if r.expired() or k[:-1] == key[:-1]]:
                self._bytes -= self._drop(stale)
            if size <= self.max_bytes:
                self._entries[key] = (ref, value)
                self._bytes += size
            while self._entries and (len(self._entries) > self.max_entries or self._bytes > self.max_bytes):
                self._bytes -= self._drop(next(iter(self._entries)))
        return value

    def _drop(self, key: tuple) -> int:
        _, value = self._entries.pop(key)
        return value.numel() * value.element_size()


#: The process's cache.
PACK_CACHE = PackCache(int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_ENTRIES", 64)),
                       int(os.environ.get("CONV_GLUON_WEIGHT_CACHE_MB", 512)) << 20)


def weight_matrix(w: torch.Tensor, spec: WeightMatrix, cache: PackCache = PACK_CACHE) -> torch.Tensor:
    """What the forward kernel's weight descriptor is built on: the weight itself, or its cached padded copy."""
    view = as_matrix(w, spec)
    if view is not None:
        return view
    return cache.get(w, ("fwd", spec.c_pad), lambda: pack(w, spec.c_pad))


def phase_matrix(w: torch.Tensor, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...], k_pad: int,
                 cache: PackCache = PACK_CACHE) -> torch.Tensor:
    """A data-gradient phase's weight matrix (:func:`pack_transposed`), cached."""
    return cache.get(w, ("bwd_data", groups, taps_h, taps_w, k_pad),
                     lambda: pack_transposed(w, groups, taps_h, taps_w, k_pad))
