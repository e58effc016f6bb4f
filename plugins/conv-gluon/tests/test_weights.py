"""The weight matrix (:mod:`conv_gluon.weights`): the free view, the zero-padded copy and its cache, on CPU
tensors (the cache logic is device-independent)."""

from __future__ import annotations

import gc

import pytest
import torch
from conv_core.weight_cache import DerivedWeightCache
from conv_gluon import weights
from conv_gluon.plans import WeightMatrix


def weight(k=6, c=5, r=3, s=2, dtype=torch.bfloat16, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(k, c, r, s, generator=g).to(dtype)
    return w.contiguous(memory_format=torch.channels_last)


def test_pack_puts_channels_innermost_and_pads_with_zeros():
    w = weight()
    m = weights.pack(w, 8)
    assert m.shape == (6, 6 * 8) and m.is_contiguous()
    for k in range(6):
        for r in range(3):
            for s in range(2):
                tap = r * 2 + s
                assert torch.equal(m[k, tap * 8: tap * 8 + 5], w[k, :, r, s])
                assert not m[k, tap * 8 + 5: tap * 8 + 8].any()


def test_pack_takes_any_strides_and_1d():
    w = weight()
    assert torch.equal(weights.pack(w.contiguous(), 8), weights.pack(w, 8))  # NCHW-strided weight
    w1 = torch.randn(4, 3, 5).to(torch.float16)
    m = weights.pack(w1, 16)
    assert m.shape == (4, 5 * 16) and torch.equal(m[2, 16 * 4: 16 * 4 + 3], w1[2, :, 4])


def test_dense_channels_last_weight_is_read_in_place():
    w = weight(c=16)
    spec = WeightMatrix(rows=6, taps=6, cin=16, c_pad=16)
    m = weights.as_matrix(w, spec)
    assert m is not None and m.data_ptr() == w.data_ptr()
    assert torch.equal(m, weights.pack(w, 16))
    assert weights.weight_matrix(w, spec, DerivedWeightCache()).data_ptr() == w.data_ptr()


def test_the_descriptor_is_built_on_the_weight_itself_or_its_cached_copy():
    """At launch only the address counts (the descriptor's map gives the matrix shape): the weight itself where
    it would be viewed, else the padded copy; the known dense strides are a shortcut, not a different answer."""
    from conv_core.layout import dense_strides

    w, cache = weight(c=16), DerivedWeightCache()
    spec = WeightMatrix(rows=6, taps=6, cin=16, c_pad=16)
    strides = dense_strides(tuple(w.shape), "channels_last")
    assert weights.descriptor_base(w, spec, strides, cache) is w and weights.descriptor_base(w, spec, None, cache) is w
    nchw = w.contiguous()
    copy = weights.descriptor_base(nchw, spec, strides, cache)
    assert copy is not nchw and torch.equal(copy, weights.pack(w, 16)) and len(cache) == 1
    padded = weights.descriptor_base(w, WeightMatrix(6, 6, 16, 32), strides, cache)
    assert torch.equal(padded, weights.pack(w, 32))


def test_no_view_for_padded_channels_other_strides_or_misalignment():
    w = weight(c=16)
    assert weights.as_matrix(w, WeightMatrix(6, 6, 16, 32)) is None  # padded
    assert weights.as_matrix(w.contiguous(), WeightMatrix(6, 6, 16, 16)) is None  # NCHW strides
    storage = torch.empty(6 * 16 * 6 + 1, dtype=torch.bfloat16)
    shifted = storage[1:].view(6, 3, 2, 16).permute(0, 3, 1, 2)  # dense channels-last, 2 bytes off
    assert shifted.data_ptr() % 16 and weights.as_matrix(shifted, WeightMatrix(6, 6, 16, 16)) is None
    cache = DerivedWeightCache()
    m = weights.weight_matrix(shifted.copy_(w), WeightMatrix(6, 6, 16, 16), cache)  # falls back to a copy
    assert torch.equal(m, weights.pack(w, 16)) and len(cache) == 1


def test_cache_hits_until_the_weight_changes_in_place():
    cache = DerivedWeightCache()
    w = weight()
    calls = []

    def make():
        calls.append(1)
        return weights.pack(w, 8)

    first = cache.get(w, form=8, make=make)
    assert cache.get(w, form=8, make=make) is first and len(calls) == 1 and cache.hits == 1
    with torch.no_grad():
        w.add_(1)  # an optimizer step: bumps _version
    second = cache.get(w, form=8, make=make)
    assert len(calls) == 2 and second is not first
    assert torch.equal(second, weights.pack(w, 8)) and not torch.equal(second, first)
    assert len(cache) == 1  # the stale version was dropped


def test_in_place_update_through_a_view_invalidates():
    cache = DerivedWeightCache()
    w = weight()
    first = weights.weight_matrix(w, WeightMatrix(6, 6, 5, 8), cache)
    with torch.no_grad():
        w[0].zero_()  # through a view: the base's version moves too
    again = weights.weight_matrix(w, WeightMatrix(6, 6, 5, 8), cache)
    assert again is not first and not again[0].any()


def test_key_covers_shape_strides_dtype_and_padding():
    cache = DerivedWeightCache()
    w = weight()
    a = cache.get(w, form=8, make=lambda: weights.pack(w, 8))
    b = cache.get(w, form=16, make=lambda: weights.pack(w, 16))
    assert a is not b and b.shape[1] == 6 * 16
    h = w.to(torch.float16)
    assert cache.get(h, form=8, make=lambda: weights.pack(h, 8)).dtype == torch.float16


def test_an_entry_of_another_storage_is_a_miss():
    """A weight allocated where a freed one was has its data pointer, shape, strides, dtype and (0) version:
    only the storage's identity tells them apart. Planted here: an entry under the new weight's key whose
    storage is another tensor's must not be served; nor one whose storage was freed."""
    from torch.multiprocessing.reductions import StorageWeakRef

    cache = DerivedWeightCache()
    w, other = weight(seed=1), weight(seed=2)
    stale = weights.pack(other, 8)
    cache._entries[cache.key(w, 8)] = (StorageWeakRef(other.untyped_storage()), stale)
    got = cache.get(w, form=8, make=lambda: weights.pack(w, 8))
    assert got is not stale and torch.equal(got, weights.pack(w, 8))
    dead = weight(seed=3)
    cache._entries[cache.key(other, 8)] = (StorageWeakRef(dead.untyped_storage()), stale)
    del dead
    gc.collect()
    assert cache.get(other, form=8, make=lambda: weights.pack(other, 8)) is not stale


def test_bounded_by_entries_and_bytes():
    cache = DerivedWeightCache(max_entries=2, max_bytes=1 << 20)
    ws = [weight(seed=i) for i in range(4)]
    for w in ws:
        cache.get(w, form=8, make=lambda w=w: weights.pack(w, 8))
    assert len(cache) == 2  # least recently used went first
    assert cache.get(ws[0], form=8, make=lambda: weights.pack(ws[0], 8)) is not None and cache.misses == 5
    tiny = DerivedWeightCache(max_entries=8, max_bytes=100)  # each pack is 6 * 48 * 2 = 576 bytes
    tiny.get(ws[0], form=8, make=lambda: weights.pack(ws[0], 8))
    assert len(tiny) == 0 and tiny.nbytes == 0


def test_inference_tensors_are_not_cached():
    cache = DerivedWeightCache()
    with torch.inference_mode():
        w = weight()
    cache.get(w, form=8, make=lambda: weights.pack(w, 8))
    assert len(cache) == 0


@pytest.mark.parametrize("c, c_pad", [(3, 16), (40, 64), (200, 256)])
def test_weight_matrix_shapes(c, c_pad):
    w = weight(k=5, c=c, r=3, s=3)
    m = weights.weight_matrix(w, WeightMatrix(5, 9, c, c_pad), DerivedWeightCache())
    assert m.shape == (5, 9 * c_pad) and m.data_ptr() % 16 == 0 and (m.shape[1] * 2) % 16 == 0


def test_transposed_phase_weight():
    g, k, c = 2, 3, 4
    w = torch.randn(g * k, c, 3, 2).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    taps_h, taps_w = (2, 0), (1,)
    m = weights.pack_transposed(w, g, taps_h, taps_w, 8)
    assert m.shape == (g * c, 2 * 1 * 8)
    for gi in range(g):
        for ci in range(c):
            for th, r in enumerate(taps_h):
                col = th * 8
                assert torch.equal(m[gi * c + ci, col: col + k], w[gi * k: gi * k + k, ci, r, 1])
                assert not m[gi * c + ci, col + k: col + 8].any()
    w1 = torch.randn(6, 4, 5).to(torch.float16)  # 1D
    assert torch.equal(weights.pack_transposed(w1, 1, (0,), (4, 2), 8)[1, 8: 14], w1[:, 1, 2])


def test_phase_weights_are_cached_apart_from_the_forward_copy():
    cache = DerivedWeightCache()
    w = weight(k=4, c=8)
    fwd = weights.weight_matrix(w, WeightMatrix(4, 6, 8, 16), cache)
    phases = (((2, 0), (1,), 16), ((1,), (0, 1), 16))
    ph0, ph1 = weights.phase_matrices(w, 1, phases, cache)
    assert len(cache) == 2 and fwd.shape != ph0.shape and ph0.data_ptr() != ph1.data_ptr()
    assert torch.equal(ph1, weights.pack_transposed(w, 1, (1,), (0, 1), 16))
    assert weights.phase_matrices(w, 1, phases, cache)[0] is ph0
    with torch.no_grad():
        w.mul_(2)
    assert weights.phase_matrices(w, 1, phases, cache)[0] is not ph0


@pytest.mark.parametrize("taps_h, taps_w", [((4, 2, 0), (3, 1)), ((0, 2, 4), (2,)), ((3, 0), (3, 2, 1, 0))])
def test_phase_taps_are_picked_as_an_index_would(taps_h, taps_w):
    """Slices (and flips) pick the same taps in the same order as indexing with the lists, which a CUDA graph
    capture refuses (the list is copied from the host)."""
    w = torch.randn(6, 3, 5, 4).to(torch.bfloat16)
    m = weights.pack_transposed(w, 2, taps_h, taps_w, 8)
    expected = w.reshape(2, 3, 3, 5, 4)[:, :, :, list(taps_h)][..., list(taps_w)].permute(0, 2, 3, 4, 1)
    assert torch.equal(m.view(2, 3, len(taps_h), len(taps_w), 8)[..., :3], expected)
    with pytest.raises(ValueError, match="evenly spaced"):
        weights.pack_transposed(w, 2, (4, 1, 0), taps_w, 8)
