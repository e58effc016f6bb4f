"""DerivedWeightCache: hits, never stale after in-place updates, forms apart, bounded, inference bypassed."""

from __future__ import annotations

import torch
from conv_core.weight_cache import DerivedWeightCache


def counting(value):
    calls = []
    return calls, lambda: calls.append(1) or value.clone()


def test_hit_then_miss_after_an_in_place_update():
    cache, w = DerivedWeightCache(), torch.randn(4, 3)
    calls, make = counting(w * 2)
    first = cache.get(w, make)
    assert cache.get(w, make) is first and (cache.hits, cache.misses, len(calls)) == (1, 1, 1)
    w.add_(1.0)  # bumps the version
    cache.get(w, make)
    assert cache.misses == 2 and len(cache) == 1, "the older version's entry is dropped"


def test_forms_are_separate_entries():
    cache, w = DerivedWeightCache(), torch.randn(4, 3)
    a = cache.get(w, lambda: w + 1, form="a")
    b = cache.get(w, lambda: w + 2, form="b")
    assert not torch.equal(a, b) and len(cache) == 2
    assert cache.get(w, lambda: w + 3, form="a") is a


def test_bounded_by_entries_and_bytes():
    cache = DerivedWeightCache(max_entries=2, max_bytes=1 << 20)
    ws = [torch.randn(8) for _ in range(3)]
    for w in ws:
        cache.get(w, lambda w=w: w.clone())
    assert len(cache) == 2 and cache.nbytes == 2 * 8 * 4
    big = torch.randn(4)
    cache.get(big, lambda: torch.empty(1 << 19))  # 2 MiB: more than the cache may hold
    assert len(cache) == 2 and cache.nbytes <= 1 << 20


def test_inference_tensors_are_never_cached():
    cache = DerivedWeightCache()
    with torch.inference_mode():
        w = torch.randn(3)
    calls, make = counting(w)
    cache.get(w, make)
    cache.get(w, make)
    assert len(calls) == 2 and len(cache) == 0


def test_a_tuple_of_tensors_is_one_entry_counted_whole():
    cache, w = DerivedWeightCache(), torch.randn(4, 3)
    calls, parts = [], (torch.zeros(5), torch.zeros(2, 3))
    first = cache.get(w, lambda: calls.append(1) or parts, form="phases")
    assert cache.get(w, lambda: calls.append(1) or parts, form="phases") is first and len(calls) == 1
    assert len(cache) == 1 and cache.nbytes == 11 * 4

