"""Gluon names that moved between triton releases, resolved once for the kernels.

triton 3.6 (the GPU machine's) calls the TMA and ``cp.async`` loads ``async_copy_global_to_shared`` and the TMA
store ``async_copy_shared_to_global``; 3.8 renamed them ``async_load`` and ``async_store`` (same arguments) and
3.9 makes the old names raise. The kernels call these
aliases, bound to whichever the installed triton has, so the same source compiles on both.
"""

from triton.experimental.gluon.language.nvidia.hopper import async_copy, tma

#: ``tma_load(descriptor, coordinates, barrier, destination)``: a TMA box into shared memory.
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared

#: ``tma_store(descriptor, coordinates, source)``: a shared-memory tile to its box of global memory (clipped at the
#: tensor's bounds).
tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global

#: ``cp_async_load(destination, pointers, mask)``: ``cp.async`` copies into shared memory, masked ones zero.
cp_async_load = async_copy.async_load if hasattr(async_copy, "async_load") else async_copy.async_copy_global_to_shared
