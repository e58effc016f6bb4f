"""What Triton's JIT compiles a plan's launch as: the kernel a launch runs, named without the tensors.

The JIT turns every launch into a specialization: pointers to 16-byte aligned data and integers divisible
by 16 get the divisibility attribute, integers equal to 1 become constants, constexprs are compiled in,
and the parameters a kernel does not specialise on (``kernels.common.SIZES``: extents, pixel counts,
split sizes) keep their type alone. Two launches with the same :func:`key` run one compiled kernel; so
the compile checks (:mod:`conv_rdna.aot`) compile each key once, exactly as the JIT will, and the tests
check that a new batch or image size gives no new key.
"""

from __future__ import annotations

from conv_core.testing.aot import specialize
from conv_core.kit.launch import Launch
from conv_core.problem import ConvProblem

from .kernels.common import unspecialized
from .kernels.winograd import m_dtype as winograd_m_dtype
from .plans.common import Plan

#: Triton's names of the pointer element types.
TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def role_dtypes(problem: ConvProblem) -> dict[str, str]:
    """Element dtype of each pointer role."""
    a, b = problem.operand_dtypes
    return {"a": a, "b": b, "bias": problem.out_dtype, "out": problem.result_dtype, "workspace": "float32",
            # Winograd: transformed weight (or dy) and input (the GEMM's operands), the GEMM's result (of the
            # weight gradient: z, float32 partials)
            "u": a, "v": a, "m": winograd_m_dtype(a), "z": "float32"}


def of_launch(launch: Launch, dtypes: dict[str, str]) -> tuple[dict, dict, dict]:
    """``(signature, constexprs, attrs)`` for ``triton.compile(ASTSource(...))``, as Triton's JIT specializes
    this launch (:func:`conv_core.testing.aot.specialize`; every pointer 16-byte aligned, as torch allocates)."""
    pointers = {name: ("*" + TRITON_DTYPE[dtypes[role]], True) for name, role in launch.pointers}
    return specialize(launch.kernel.arg_names, pointers, dict(launch.scalars), dict(launch.constexprs),
                      unspecialized(launch.kernel))


def key(launch: Launch, dtypes: dict[str, str]) -> tuple:
    """What tells one compiled kernel from another: the kernel, its specialization and compile options."""
    signature, constexprs, attrs = of_launch(launch, dtypes)
    return (launch.name, tuple(signature.items()), tuple(constexprs.items()), tuple(sorted(attrs)),
            tuple(sorted(launch.options.items())))


def plan_keys(problem: ConvProblem, plan: Plan) -> tuple[tuple, ...]:
    """The :func:`key` of each launch of ``plan`` (made for ``problem``), in order."""
    dtypes = role_dtypes(problem)
    return tuple(key(launch, dtypes) for launch in plan.launches)
