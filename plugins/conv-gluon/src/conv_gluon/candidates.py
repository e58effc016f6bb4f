"""Which kernels can run a problem, how long they should take, and how they are tagged.

For a supported problem each kernel of :data:`conv_gluon.registry.REGISTRY` that applies gives one candidate,
in registry order, with the configuration the table picks (:func:`conv_gluon.configs.select`); the kernels are
described in the README's table, generated from the registry. Every way of bringing the input is offered where
it applies; the core ranks them (estimates, later measured tables).
"""

from __future__ import annotations

import re

import torch
from conv_core.candidate import Candidate, Declined
from conv_core.kit import declines
from conv_core.kit.registry import KernelEntry
from conv_core.problem import ConvProblem

from . import configs, plans, toolchain
from .registry import REGISTRY, gathering

BACKEND = "gluon"

#: Input dtypes the kernels take (operands and weight of one dtype).
DTYPES = ("float16", "bfloat16")
#: Result dtypes the epilogue writes.
OUT_DTYPES = ("float16", "bfloat16", "float32")
#: Directions with kernels.
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
#: Spatial ranks the gathering kernels take (3D: NDHWC; the box kernels decline it through the registry).
NDIMS = (1, 2, 3)


def arch_issue(arch: str) -> str | None:
    """Why the kernels cannot run on ``arch`` (``problem.arch``, e.g. ``sm_90``), or None.

    The kernels issue ``wgmma``, which exists on compute capability 9.x (Hopper) only: earlier GPUs lack
    it, and Blackwell (10.x, 12.x) replaced it with ``tcgen05``, for which no variant is written yet.
    """
    match = re.fullmatch(r"sm_(\d+)a?", arch)
    if not match:
        return f"architecture {arch!r} is not an NVIDIA GPU; the kernels need Hopper (sm_90a)"
    major, minor = divmod(int(match.group(1)), 10)
    if major < 9:
        return (f"compute capability {major}.{minor} ({arch}) is below 9.0: the kernels need Hopper's wgmma, "
                "TMA and setmaxnreg")
    if major > 9:
        return (f"compute capability {major}.{minor} ({arch}): wgmma exists on Hopper (9.x) only; the Blackwell "
                "(tcgen05) variant is not written yet")
    return None


def decline_reason(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the backend has no candidate at all for ``problem`` on ``device``, or None."""
    if device.type != "cuda":
        return f"device type {device.type!r}: the kernels run on NVIDIA Hopper GPUs (CUDA) only"
    reason = arch_issue(problem.arch) or toolchain.gluon_issue()
    if reason:
        return reason
    if configs.table_for(problem.arch) is None:
        return f"no configuration table for {problem.arch} (tables: {', '.join(configs.table_names())})"
    reason = declines.ndim_issue(problem, NDIMS)
    if reason:
        return reason
    if problem.direction not in DIRECTIONS:
        return f"{problem.direction} is not implemented yet (directions: {', '.join(DIRECTIONS)})"
    reason = declines.dtype_issue(problem, DTYPES, OUT_DTYPES)
    if reason:
        return reason
    if problem.direction != "fwd" and problem.out_dtype != problem.dtype:
        return (f"output gradient dtype {problem.out_dtype} differs from the input dtype {problem.dtype}; mixed "
                "operands are not supported")
    if problem.layout != "channels_last":
        return (f"layout {problem.layout} is not supported: the kernels read and write channels-last (NHWC) "
                "tensors; use memory_format=torch.channels_last")
    family = gathering(problem.direction).family
    return plans.int32_issue(problem, configs.select(configs.table_for(problem.arch), family, problem))


def kernels_for(problem: ConvProblem) -> tuple[KernelEntry, ...]:
    """The kernels that can run a supported ``problem``, in registry order: the gathering one always, the
    others where their ``applies`` finds nothing in the way."""
    return REGISTRY.applicable(problem)


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    tab = configs.table_for(problem.arch)
    return [candidate(problem, entry.name, configs.select(tab, entry.family, problem), tab)
            for entry in kernels_for(problem)]


def candidate(problem: ConvProblem, kernel: str, config: configs.TileConfig, tab: configs.ArchTable) -> Candidate:
    """``kernel`` with ``config`` on a supported ``problem``: what the hook offers with the table's choice,
    and what the offline sweep (:mod:`conv_gluon.sweep`) times with each configuration of its space."""
    from . import launch  # torch only; Gluon is imported on the first run

    entry = REGISTRY[kernel]
    p = entry.plan(problem, entry, config, tab)
    unmeasured = problem.ndim == 3 and kernel in UNMEASURED_3D
    return Candidate(BACKEND, kernel, p.config_name, run=launch.runner(problem, p),
                     estimate_us=entry.estimate(problem, p, tab), tags=tags(p, tab, unmeasured),
                     workspace_bytes=p.workspace_bytes, error_factor=entry.errors(problem))


AnyPlan = plans.Plan | plans.DataGradPlan | plans.WeightGradPlan


#: Kernels whose 3D runs have not run on the hardware yet: ``experimental`` on 3D problems (never ranked ahead of a
#: kernel that has) until a GPU run checks and times them.
UNMEASURED_3D = frozenset(plans.BOXES_3D)


def tags(p: AnyPlan, tab: configs.ArchTable, unmeasured: bool = False) -> frozenset[str]:
    """``deterministic`` (no atomics, a fixed reduction order per tile, and for the weight gradient per split
    and over the splits), ``cuda_graph_safe`` (every run, in every direction: no host synchronisation and no copy
    from the host; weight copies are derived on the device inside a capture; workspaces have the same size on
    every call and come from torch's allocator: ``tests/test_host_path.py``, ``tests/test_cuda_graphs.py``),
    ``needs_workspace`` with a weight copy (padded, or a
    data-gradient phase's) or the weight gradient's float32 partials or padded ``dy``, ``experimental`` while
    the kernel's family is not measured on the architecture (:meth:`configs.ArchTable.is_measured`), or the run
    is ``unmeasured`` (:data:`UNMEASURED_3D`)."""
    result = {"deterministic", "cuda_graph_safe"}
    if p.workspace_bytes:
        result.add("needs_workspace")
    if unmeasured or not tab.is_measured(REGISTRY.family_of(p.kernel)):
        result.add("experimental")
    return frozenset(result)
