"""TMA descriptors from :class:`~conv_gluon.plans.TensorMap`s: for a launch (on a tensor) and for the compile
checks (their type string). Imports Gluon, so only the launch and the compile checks import this module."""

from __future__ import annotations

import torch
from conv_core.problem import torch_dtype
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from .plans import TensorMap

#: Gluon element types of the dtypes a descriptor may hold.
GL_DTYPE = {"float16": gl.float16, "bfloat16": gl.bfloat16, "float32": gl.float32}

#: Whether a descriptor's fields can be filled in directly (a plain dataclass, as in triton 3.6 to 3.9).
FILLABLE = not hasattr(TensorDescriptor, "__slots__")


def layout(tmap: TensorMap, dtype: str) -> gl.NVMMASharedLayout:
    """The shared-memory layout a box lands in: the widest swizzle its rows allow (what the kernel's
    ``wgmma`` reads)."""
    return gl.NVMMASharedLayout.get_default_for(list(tmap.block), GL_DTYPE[dtype])


class Binding:
    """``tmap``'s descriptor on any 16-byte aligned tensor of ``dtype``, made cheaply on every launch.

    ``TensorDescriptor(...)`` checks its fields and the layout is derived each time: tens of microseconds of
    host time per descriptor. Everything but the tensor is fixed by the plan, so the fields are checked once
    here (on a stand-in of the dtype) and each call fills a descriptor with them and the call's tensor (whose
    alignment the launch guarantees). Nothing is kept of the tensors: a descriptor lives for one launch.
    """

    def __init__(self, tmap: TensorMap, dtype: str) -> None:
        self.fields = dict(shape=list(tmap.shape), strides=list(tmap.strides), block_shape=list(tmap.block),
                           layout=layout(tmap, dtype), padding="zero")
        TensorDescriptor(torch.empty(0, dtype=torch_dtype(dtype), device="meta"), **self.fields)  # checks them

    def __call__(self, tensor: torch.Tensor) -> TensorDescriptor:
        if not FILLABLE:
            return TensorDescriptor(tensor, **self.fields)
        descriptor = TensorDescriptor.__new__(TensorDescriptor)
        descriptor.__dict__.update(self.fields, base=tensor)
        return descriptor


def build(tensor: torch.Tensor, tmap: TensorMap) -> TensorDescriptor:
    """The descriptor of ``tensor`` (whose storage holds ``tmap.shape`` with ``tmap.strides``), checked."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorDescriptor(tensor, list(tmap.shape), list(tmap.strides), list(tmap.block), layout(tmap, dtype))


def signature(tmap: TensorMap, dtype: str) -> str:
    """The kernel-argument type string of a descriptor of ``tmap`` (what Triton's JIT specializes on)."""
    base = torch.empty(8, dtype=torch_dtype(dtype))  # only its dtype and alignment are read
    return mangle_type(TensorDescriptor(base, list(tmap.shape), list(tmap.strides), list(tmap.block),
                                        layout(tmap, dtype)))
