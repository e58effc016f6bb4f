"""Why a Triton backend offers nothing for a problem: the checks every backend makes first.

Each returns a reason a user can act on, or None. A backend composes the ones it needs in its
``decline_reason`` and adds its own (its dtypes, its architectures).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..interpreter import interpreting
from ..problem import ConvProblem

#: Largest element count (and so offset) of a tensor indexed with 32-bit arithmetic.
INT32_ELEMENTS = 2**31 - 1

#: Largest grid size along axes 1 and 2 of a launch.
GRID_YZ_LIMIT = 65535


def device_issue(device: torch.device, *, interpretable: bool = True) -> str | None:
    """Why Triton kernels cannot run on ``device``: the CPU without the interpreter (or at all, for kernels
    the interpreter cannot run), or a device type Triton does not target."""
    if device.type == "cpu":
        if not interpretable:
            return "these kernels need a GPU (Triton's interpreter cannot run them)"
        if not interpreting():
            return "Triton kernels need a GPU; set TRITON_INTERPRET=1 to interpret them on CPU"
        return None
    if device.type != "cuda":
        return f"device type {device.type!r} is not supported (Triton runs on CUDA and ROCm devices)"
    return None


def dtype_issue(problem: ConvProblem, dtypes: Sequence[str], result_dtypes: Sequence[str] | None = None) -> str | None:
    """Why the problem's dtypes are not the kernels': input and weight of one dtype among ``dtypes``, the result
    among ``result_dtypes`` (default: ``dtypes``)."""
    if problem.dtype not in dtypes:
        return f"input dtype {problem.dtype} is not supported; supported: {', '.join(dtypes)}"
    if problem.weight_dtype != problem.dtype:
        return (f"weight dtype {problem.weight_dtype} differs from the input dtype {problem.dtype}; mixed operands "
                "are not supported")
    results = dtypes if result_dtypes is None else result_dtypes
    if problem.result_dtype not in results:
        return f"result dtype {problem.result_dtype} is not supported; supported: {', '.join(results)}"
    return None


def int32_issue(problem: ConvProblem, *extra: tuple[str, int]) -> str | None:
    """Why 32-bit offsets cannot address the problem's tensors (or the ``(what, elements)`` of ``extra``:
    padded copies, workspaces), or None."""
    sizes = [(what, math.prod(shape)) for what, shape in (("input", problem.input_shape),
                                                           ("weight", problem.weight_shape),
                                                           ("output", problem.output_shape))]
    for what, elements in (*sizes, *extra):
        if elements > INT32_ELEMENTS:
            return (f"the {what} has {elements} elements; the kernels use 32-bit offsets "
                    f"(at most {INT32_ELEMENTS} elements per tensor)")
    return None


def grid_issue(problem: ConvProblem, programs: int, what: str) -> str | None:
    """Why ``programs`` along grid axis 1 or 2 (``what`` names them: "groups x stride phases") exceed the
    launch limit, or None."""
    if programs > GRID_YZ_LIMIT:
        return f"{what} = {programs} exceeds the grid limit {GRID_YZ_LIMIT}"
    return None


def ndim_issue(problem: ConvProblem, supported: Sequence[int] = (1, 2), elsewhere: str = "") -> str | None:
    """Why the problem's spatial rank is not one the kernels take: not implemented, or (for one kernel of a
    backend whose others take it) ``elsewhere``, the kernels that do."""
    if problem.ndim not in supported:
        ranks = "/".join(f"{n}D" for n in supported)
        if elsewhere:
            return f"{problem.ndim}D convolutions are not this kernel's ({ranks} are): they run on {elsewhere}"
        return f"{problem.ndim}D convolutions are not implemented yet ({ranks} are)"
    return None
