"""Which kernels can run a problem, how long they should take, and how they are tagged.

For a supported problem every applicable kernel gives exactly one candidate, with the configuration
the table picks (:func:`conv_rdna.configs.select`):

============================  ======================================================================
``implicit_gemm``             forward, any 1D/2D geometry
``gemm1x1``                   forward and data gradient of 1x1 / stride 1 / no-padding convolutions
``bwd_data_phased``           data gradient, any 1D/2D geometry
``bwd_weight_split``          weight gradient, deterministic split reduction
``bwd_weight_atomic``         weight gradient, split reduction with float32 atomics
============================  ======================================================================
"""

from __future__ import annotations

import functools
import math

import torch
from conv_core.arch import spec
from conv_core.candidate import Candidate, Declined
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem

from . import configs, launch, plan

BACKEND = "rdna"

#: Input dtypes the kernels take (operands and weight of the same dtype).
DTYPES = ("float16", "bfloat16", "float32")

#: Interpreted candidates cost this many times their GPU estimate plus a fixed cost, so that on the
#: CPU they lose to ``aten`` unless forced (``backend="rdna"``) or measured.
INTERPRETED_SLOWDOWN = 1000.0
INTERPRETED_FIXED_US = 100_000.0


def decline_reason(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the backend has no candidate at all for ``problem`` on ``device``, or None."""
    if device.type == "cpu":
        if not plan.interpreting():
            return "Triton kernels need a GPU; set TRITON_INTERPRET=1 to interpret them on CPU"
    elif device.type != "cuda":
        return f"device type {device.type!r} is not supported (Triton runs on CUDA and ROCm devices)"
    if problem.ndim == 3:
        return "3D convolutions are not implemented yet (1D and 2D are)"
    if problem.dtype not in DTYPES:
        return f"input dtype {problem.dtype} is not supported; supported: {', '.join(DTYPES)}"
    if problem.weight_dtype != problem.dtype:
        return f"weight dtype {problem.weight_dtype} differs from the input dtype {problem.dtype}; mixed operands " \
               "are not supported"
    if problem.result_dtype not in DTYPES:
        return f"result dtype {problem.result_dtype} is not supported; supported: {', '.join(DTYPES)}"
    return plan.int32_issue(problem) or plan.grid_issue(problem)


def kernels_for(problem: ConvProblem) -> tuple[str, ...]:
    """The candidate kernels that apply to ``problem`` (supported problems only)."""
    if problem.direction == "bwd_weight":
        return ("bwd_weight_split", "bwd_weight_atomic")
    general = "implicit_gemm" if problem.direction == "fwd" else "bwd_data_phased"
    pointwise = (all(k == 1 for k in problem.filter_size) and all(s == 1 for s in problem.stride)
                 and not any(lo or hi for lo, hi in problem.padding))
    return (general, "gemm1x1") if pointwise else (general,)


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    interpreted = device.type == "cpu"
    tab = configs.table_for(problem.arch, interpreted)
    result = []
    for kernel in kernels_for(problem):
        config = configs.select(tab, plan.KERNELS[kernel], problem)
        p = plan.make_plan(problem, kernel, config, tab)
        result.append(Candidate(
            BACKEND, kernel, p.config_name, run=functools.partial(launch.run, problem, p),
            estimate_us=estimate(problem, p, tab, interpreted), tags=tags(problem, p, tab, device),
            workspace_bytes=p.workspace_bytes))
    return result


def tags(problem: ConvProblem, p: plan.Plan, tab: configs.ArchTable, device: torch.device) -> frozenset[str]:
    result = set()
    result.add("atomics" if p.kernel == "bwd_weight_atomic" else "deterministic")
    if p.workspace_elements:
        result.add("needs_workspace")
    if device.type == "cpu":
        result.add("interpreted")
    else:
        result.add("cuda_graph_safe")  # no host sync; scratch from the caching allocator, same size every run
        if not tab.measured:
            result.add("experimental")
    return frozenset(result)


def tile_utilization(problem: ConvProblem, p: plan.Plan) -> float:
    """Fraction of the matrix work in the tiles that is real (the rest multiplies padding)."""
    family = plan.KERNELS[p.kernel]
    view = configs.gemm_view(problem, family)
    c = p.config
    red_block = 1 if family == "bwd_weight" else c.block_k  # pixel blocks: only the last one is partial
    used = 1.0
    for size, block in ((view["m"], c.block_m), (view["n"], c.block_n), (view["red"], red_block)):
        used *= size / (math.ceil(size / block) * block)
    return used


def estimate(problem: ConvProblem, p: plan.Plan, tab: configs.ArchTable, interpreted: bool) -> float:
    """Roofline estimate with the table's efficiencies (initial guesses; measured tables replace them).

    Compute efficiency scales with the tile utilization and, for channels-first tensors (gathers
    along strided channels), with the table's ``channels_first_factor``. Workspace traffic (written
    once, read once) adds to the memory time.
    """
    eff = tab.efficiency[p.kernel]
    compute = eff["compute"] * tile_utilization(problem, p)
    if problem.layout == "channels_first":
        compute *= tab.efficiency["channels_first_factor"]
    us = estimate_us(problem, compute, eff["memory"], launches=len(p.launches) + (1 if p.zero else 0))
    us += 2 * p.workspace_bytes / (spec(problem.arch).copy_tbps * 1e6) / eff["memory"]
    if interpreted:
        us = us * INTERPRETED_SLOWDOWN + INTERPRETED_FIXED_US
    return us
