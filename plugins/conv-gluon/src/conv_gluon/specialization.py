"""What Triton's JIT compiles a plan's launch as: the compile checks (:mod:`conv_gluon.aot`) compile exactly that.

The JIT turns every launch into a specialization: pointers of 16-byte aligned data and integers divisible by
16 get the divisibility attribute, integers equal to 1 become constants, descriptors are typed by their
dtype, box and shared-memory layout, and the parameters a kernel lists in ``do_not_specialize`` keep their
type alone. The kernels list there every argument that changes with the batch or the image size
(``kernels.fwd.SHAPE_ARGUMENTS``), so two problems that differ only in those compile to one kernel.

The kernels are passed in (anything with Triton's ``arg_names`` and ``do_not_specialize``): this module
imports no Gluon.
"""

from __future__ import annotations

from conv_core.testing.aot import specialize

from .plans import Plan, TensorMap, WeightGradPlan

#: Triton's names of the pointer element types.
TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def unspecialized(kernel) -> frozenset[str]:
    """The parameters ``kernel``'s JIT does not specialize on (its ``do_not_specialize``, names or indices)."""
    names = kernel.arg_names
    return frozenset(names[item] if isinstance(item, int) else item for item in kernel.do_not_specialize)


def plan_specialization(plan: Plan | WeightGradPlan, kernel, dtypes: dict[str, str],
                        descriptor_signature) -> tuple[dict, dict, dict]:
    """``(signature, constexprs, attrs)`` of ``plan``'s launch of ``kernel`` (``kernels.fwd.conv_fwd`` or
    ``kernels.bwd_weight.conv_bwd_weight``) for ``triton.compile(GluonASTSource(...))``, as the JIT
    specializes it (see the module's docstring); every tensor is 16-byte aligned, as the launch makes it.
    ``descriptor_signature(tensor_map, dtype)`` gives a descriptor argument's type string."""
    constexprs = dict(plan.constexprs)
    constexprs["num_warps"] = plan.num_warps
    return specialization(kernel, dtypes, dict(plan.scalars), constexprs, plan.tensor_maps, descriptor_signature)


def specialization(kernel, dtypes: dict[str, str], scalars: dict[str, int], constexprs: dict[str, object],
                   tensor_maps: dict[str, TensorMap], descriptor_signature) -> tuple[dict, dict, dict]:
    """:func:`plan_specialization` of any kernel: descriptors (``tensor_maps``), pointers (the other names of
    ``dtypes``), integer ``scalars`` and ``constexprs``."""
    pointers = {name: ("*" + TRITON_DTYPE[dtype], True) for name, dtype in dtypes.items()}
    pointers.update({name: (descriptor_signature(tensor_map, dtypes[name]), False)
                     for name, tensor_map in tensor_maps.items()})
    return specialize(kernel.arg_names, pointers, scalars, constexprs, unspecialized(kernel))


def sum_specialization(plan: WeightGradPlan, kernel) -> tuple[dict, dict, dict]:
    """:func:`plan_specialization` of the weight gradient's second stage (``kernels.bwd_weight.sum_splits``)."""
    return specialization(kernel, {"ws_ptr": "float32", "out_ptr": plan.result_dtype}, plan.sum_scalars,
                          {"BLOCK": plan.reduce.block, "num_warps": plan.reduce.num_warps}, {}, None)
