"""TMA descriptors from :class:`~conv_gluon.plan.TensorMap`s: for a launch (on a tensor) and for the compile
checks (their type string). Imports Gluon, so only the launch and the compile checks import this module."""

from __future__ import annotations

import torch
from conv_core.problem import torch_dtype
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from .plan import TensorMap

#: Gluon element types of the dtypes a descriptor may hold.
GL_DTYPE = {"float16": gl.float16, "bfloat16": gl.bfloat16, "float32": gl.float32}


def layout(tmap: TensorMap, dtype: str) -> gl.NVMMASharedLayout:
    """The shared-memory layout a box lands in: the widest swizzle its rows allow (what the kernel's
    ``wgmma`` reads)."""
    return gl.NVMMASharedLayout.get_default_for(list(tmap.block), GL_DTYPE[dtype])


def build(tensor: torch.Tensor, tmap: TensorMap) -> TensorDescriptor:
    """The descriptor of ``tensor`` (whose storage holds ``tmap.shape`` with ``tmap.strides``)."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorDescriptor(tensor, list(tmap.shape), list(tmap.strides), list(tmap.block), layout(tmap, dtype))


def signature(tmap: TensorMap, dtype: str) -> str:
    """The kernel-argument type string of a descriptor of ``tmap`` (what Triton's JIT specializes on)."""
    base = torch.empty(8, dtype=torch_dtype(dtype))  # only its dtype and alignment are read
    return mangle_type(TensorDescriptor(base, list(tmap.shape), list(tmap.strides), list(tmap.block),
                                        layout(tmap, dtype)))
