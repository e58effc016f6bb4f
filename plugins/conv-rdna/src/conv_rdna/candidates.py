"""Which kernels can run a problem, how long they should take, and how they are tagged.

For a supported problem every kernel of the registry (:data:`conv_rdna.registry.REGISTRY`, whose table the
README shows) that applies gives exactly one candidate, with the configuration the table picks
(:func:`conv_rdna.configs.select`).
"""

from __future__ import annotations

import math

import torch
from conv_core.candidate import Candidate, Declined
from conv_core.kit.declines import device_issue, dtype_issue, grid_issue, int32_issue, ndim_issue
from conv_core.problem import ConvProblem

from . import configs, launch
from .plans.common import Plan
from .registry import RANKS, REGISTRY, make_plan

BACKEND = "rdna"

#: Input dtypes the kernels take (operands and weight of the same dtype).
DTYPES = ("float16", "bfloat16", "float32")

#: Interpreted candidates cost this many times their GPU estimate plus a fixed cost, so that on the
#: CPU they lose to ``aten`` unless forced (``backend="rdna"``) or measured.
INTERPRETED_SLOWDOWN = 1000.0
INTERPRETED_FIXED_US = 100_000.0


def decline_reason(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the backend has no candidate at all for ``problem`` on ``device``, or None."""
    phases = math.prod(problem.stride) if problem.direction == "bwd_data" else 1
    return (device_issue(device) or ndim_issue(problem, RANKS) or dtype_issue(problem, DTYPES) or int32_issue(problem)
            or grid_issue(problem, problem.groups * phases, "groups x stride phases"))


def kernels_for(problem: ConvProblem) -> tuple[str, ...]:
    """The candidate kernels that apply to ``problem`` (supported problems only), in registry order."""
    return tuple(entry.name for entry in REGISTRY.applicable(problem))


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, with the table's configuration, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    tab = configs.table_for(problem.arch, interpreted=device.type == "cpu")
    return [candidate(problem, entry.name, configs.select(tab, entry.family, problem), tab, device)
            for entry in REGISTRY.applicable(problem)]


def candidate(problem: ConvProblem, kernel: str, config, tab: configs.ArchTable, device: torch.device) -> Candidate:
    """The candidate of ``kernel`` with ``config`` (any configuration of its family): the one way to build
    one, shared by the hook and the offline sweep (:mod:`conv_rdna.sweep`), so that what is swept is what
    is offered. A kernel with a ``run`` of its own (Winograd's forward: the transformed-weight cache) runs
    through it, and each declares its error factor."""
    entry = REGISTRY[kernel]
    p = make_plan(problem, kernel, config, tab)
    return Candidate(BACKEND, kernel, p.config_name,
                     run=launch.PlanRun(problem, p, entry.run),
                     estimate_us=estimate(problem, p, tab, device.type == "cpu"), tags=tags(problem, p, tab, device),
                     workspace_bytes=p.workspace_bytes, error_factor=entry.errors(problem))


def tags(problem: ConvProblem, p: Plan, tab: configs.ArchTable, device: torch.device) -> frozenset[str]:
    result = set()
    result.add("atomics" if p.kernel == "bwd_weight_atomic" else "deterministic")
    if p.workspace_elements:
        result.add("needs_workspace")
    if REGISTRY[p.kernel].transposed_epilogue:
        result.add("transposed_epilogue")
    if device.type == "cpu":
        result.add("interpreted")
    else:
        result.add("cuda_graph_safe")  # no host sync; scratch from the caching allocator, same size every run
        if not tab.is_measured(REGISTRY.family_of(p.kernel)):
            result.add("experimental")
    return frozenset(result)


def estimate(problem: ConvProblem, p: Plan, tab: configs.ArchTable, interpreted: bool) -> float:
    """The kernel's estimate (:mod:`conv_rdna.estimates`, Winograd's own), interpreted candidates slowed down."""
    us = REGISTRY[p.kernel].estimate(problem, p, tab)
    return us * INTERPRETED_SLOWDOWN + INTERPRETED_FIXED_US if interpreted else us
