"""What the installed triton offers: Gluon's Hopper API, checked once, without compiling anything.

The kernels are written against triton 3.6.0 (the GPU machine's) and must keep working on newer releases:
every name they use is looked up here, so a triton without one of them makes the backend decline with that
name rather than fail inside a launch. Features of newer releases (TMA im2col from 3.8) are detected here
too; nothing requires them.
"""

from __future__ import annotations

import functools
import importlib

#: ``module: names`` the kernels and the host code use.
REQUIRED = {
    "triton.experimental.gluon": ("jit", "constexpr_function"),
    "triton.experimental.gluon.language": ("warp_specialize", "allocate_shared_memory", "NVMMASharedLayout",
                                           "NVMMADistributedLayout", "BlockedLayout", "SliceLayout"),
    "triton.experimental.gluon.language.nvidia.hopper": ("warpgroup_mma", "warpgroup_mma_wait",
                                                         "fence_async_shared", "mbarrier", "tma", "async_copy"),
    "triton.experimental.gluon.language.nvidia.hopper.tma": ("async_copy_global_to_shared",),
    "triton.experimental.gluon.language.nvidia.ampere.async_copy": ("async_copy_global_to_shared",
                                                                    "mbarrier_arrive"),
    "triton.experimental.gluon.nvidia.hopper": ("TensorDescriptor",),
    "triton.experimental.gluon._runtime": ("GluonASTSource",),
}
#: ``(module, class): methods`` the kernels call on Gluon's objects. triton 3.9 renamed the shared-memory
#: descriptor's ``_reinterpret`` to ``reinterpret`` and compiles most other kernels with register spills
#: (``python -m conv_gluon.aot`` at 3.9: 59 of 167 jobs): the backend declines there until they are ported.
REQUIRED_METHODS = {
    ("triton.experimental.gluon.language", "shared_memory_descriptor"): ("_reinterpret", "index"),
}


def _version() -> str:
    try:
        import triton
    except ImportError:
        return "(none)"
    return triton.__version__


@functools.cache
def gluon_issue() -> str | None:
    """Why the installed triton cannot build the kernels (names the missing module or function), or None."""
    for module_name, names in REQUIRED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            return (f"triton {_version()} has no {module_name} ({exc}); the kernels need Gluon with Hopper "
                    "support (triton >= 3.6)")
        missing = [name for name in names if not hasattr(module, name)]
        if missing:
            return f"triton {_version()}: {module_name} lacks {', '.join(missing)} (the kernels need triton >= 3.6)"
    return _method_issue()


def _method_issue() -> str | None:
    """Why a Gluon object lacks a method the kernels call (see :data:`REQUIRED_METHODS`), or None."""
    for (module_name, class_name), names in REQUIRED_METHODS.items():
        cls = getattr(importlib.import_module(module_name), class_name, None)
        missing = [name for name in names if not hasattr(cls, name)]
        if missing:
            return (f"triton {_version()}: {class_name} lacks {', '.join(missing)} (the kernels are tested with "
                    "triton 3.6)")
    return None


@functools.cache
def has_tma_im2col() -> bool:
    """Whether Gluon offers TMA im2col loads (triton >= 3.8): the base of a future input path; unused yet."""
    try:
        tma = importlib.import_module("triton.experimental.gluon.language.nvidia.hopper.tma")
    except ImportError:
        return False
    return hasattr(tma, "async_copy_global_to_shared_im2col") or hasattr(tma, "async_load_im2col")
