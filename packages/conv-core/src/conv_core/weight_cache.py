"""A cache of tensors derived from a weight (repacked, padded, transformed), for any backend.

Kernels often want the weight in another form than the user's tensor: a padded copy, a transposed
and flipped one, a Winograd transform. Computing it on every call costs a launch and the weight's
traffic; keeping it risks serving a stale copy after the weight changes. :class:`DerivedWeightCache`
keeps one per weight and form, and never serves a stale one:

- the key is the device, data pointer, shape, strides, dtype, the form (any hashable value the backend
  chooses, e.g. a padding) and the tensor's ``_version``, which every in-place update bumps (optimizer
  steps and writes through views included);
- a hit also needs the same, still living storage (a weak reference), so a new weight allocated where a
  freed one was, with the same version, is a miss;
- inference tensors (no version counter) are never cached, and neither is anything made while a CUDA
  graph is captured: the derivation is then recorded in the graph, so a replay recomputes it from the
  current weight;
- it is bounded in entries and bytes: least recently used first out; entries of freed weights and older
  versions of the same weight and form are dropped on insertion (a version never comes back).

A derivation may give several tensors at once (a tuple: one per launch of a candidate), cached as one entry.
A hit costs a few microseconds of host time: it is on every call's path.

Writes that bypass the version counter (``tensor.data``, other libraries) are not seen, as for autograd.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .timing import is_capturing

#: What a derivation gives: a tensor, or a tuple of tensors.
Derived = TypeVar("Derived", torch.Tensor, tuple[torch.Tensor, ...])


class DerivedWeightCache:
    """A bounded LRU of tensors derived from weights, keyed on the weight's identity, form and version."""

    def __init__(self, max_entries: int = 64, max_bytes: int = 1 << 30) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[tuple, tuple[StorageWeakRef, torch.Tensor | tuple[torch.Tensor, ...]]] = \
            OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(w: torch.Tensor, form: Hashable = None) -> tuple:
        """The entry's key; the version comes last (entries equal but for it are older versions)."""
        return w.device, w.data_ptr(), w.shape, w.stride(), w.dtype, form, w._version

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def get(self, w: torch.Tensor, make: Callable[[], Derived], form: Hashable = None) -> Derived:
        """What ``make()`` derives from ``w`` in ``form`` (a tensor or a tuple of tensors): the cached value, or a
        new one (then cached)."""
        if w.is_inference() or is_capturing(w.device):
            return make()
        key, storage = self.key(w, form), w.untyped_storage()
        with self._lock:
            entry = self._entries.get(key)
            # a living weak reference pins its storage's address: equal addresses are the same storage
            if entry is not None and not entry[0].expired() and entry[0].cdata == storage._cdata:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
        value = make()
        ref, size = StorageWeakRef(storage), _nbytes(value)
        with self._lock:
            self.misses += 1
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
        return _nbytes(value)


def _nbytes(value: torch.Tensor | tuple[torch.Tensor, ...]) -> int:
    tensors = value if isinstance(value, tuple) else (value,)
    return sum(t.numel() * t.element_size() for t in tensors)
