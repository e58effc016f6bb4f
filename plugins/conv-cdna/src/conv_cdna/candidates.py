"""conv-cdna's candidates: one per conv-rdna kernel that applies (:data:`conv_rdna.registry.REGISTRY`), with the
configuration the CDNA table picks, the chip's compile options, and the chip model's estimate.

On a GPU that is not a CDNA one the backend declines, naming the architectures it serves; ``CONV_CDNA_ARCH``
(tests only) runs a CDNA table there instead, with the same threads per workgroup (twice the warps where a warp is
32 lanes) and without the AMD-only options.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from conv_core.arch import spec
from conv_core.candidate import Candidate, Declined
from conv_core.kit.declines import device_issue, dtype_issue, grid_issue, int32_issue, ndim_issue
from conv_core.problem import ConvProblem
from conv_rdna.api import INTERPRETED_FIXED_US, INTERPRETED_SLOWDOWN, REGISTRY, Plan, PlanRun, make_plan, select
from conv_rdna.api import tags as rdna_tags

from . import configs, model
from .chips import Chip, chip

BACKEND = "cdna"


def decline_reason(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the backend has no candidate at all for ``problem`` on ``device``, or None."""
    phases = math.prod(problem.stride) if problem.direction == "bwd_data" else 1
    return (device_issue(device) or arch_issue(problem, device) or ndim_issue(problem)
            or dtype_issue(problem, configs.DTYPES) or int32_issue(problem)
            or grid_issue(problem, problem.groups * phases, "groups x stride phases"))


def arch_issue(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the device is not one the tables are for (a GPU other than gfx90a/gfx942/gfx950)."""
    if configs.table_arch(problem.arch, device.type == "cpu") is not None:
        return None
    other = " (conv-rdna serves RDNA GPUs)" if problem.arch.startswith("gfx1") else ""
    return (f"conv-cdna's kernels are configured for AMD Instinct GPUs ({', '.join(configs.TARGETS)}); this "
            f"device is {problem.arch}{other}")


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, with the table's configuration, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    name = configs.table_arch(problem.arch, device.type == "cpu")
    tab = configs.table(name)
    return [candidate(problem, entry.name, select(tab, entry.family, problem), tab, device)
            for entry in REGISTRY.applicable(problem)]


def candidate(problem: ConvProblem, kernel: str, config, tab, device: torch.device) -> Candidate:
    """The candidate of ``kernel`` with ``config`` on ``device`` (any configuration of its family)."""
    entry = REGISTRY[kernel]
    p = plan(problem, kernel, config, tab)
    us = model.estimate_us(problem, p, chip(tab.name))
    interpreted = device.type == "cpu"
    return Candidate(BACKEND, kernel, p.config_name, run=PlanRun(problem, p, entry.run),
                     estimate_us=us * INTERPRETED_SLOWDOWN + INTERPRETED_FIXED_US if interpreted else us,
                     tags=rdna_tags(problem, p, tab, device), workspace_bytes=p.workspace_bytes,
                     error_factor=entry.errors(problem))


def plan(problem: ConvProblem, kernel: str, config, tab) -> Plan:
    """conv-rdna's plan with the table's configuration, its launches compiled as the device needs
    (:func:`for_device`)."""
    return for_device(make_plan(problem, kernel, config, tab), chip(tab.name), problem.arch)


def for_device(p: Plan, target: Chip, device_arch: str) -> Plan:
    """``p``'s launches as a device of ``device_arch`` runs the table of ``target``: on the chip itself with its
    AMD options (``matrix_instr_nonkdim``, ``kpack``, ``waves_per_eu``; those left at 0 are the compiler's
    default), elsewhere (an emulating GPU, the interpreter) with the same threads per workgroup and no AMD option."""
    if device_arch == target.name:
        options = tuple((k, v) for k, v in sorted(target.amd_options.items()) if v)
        launches = tuple(dataclasses.replace(x, extra_options=x.extra_options + options) for x in p.launches)
    else:
        lanes = spec(device_arch).warp_size
        scale = target.warp_size // lanes if lanes > 1 else 1  # the interpreter has no warps
        launches = tuple(dataclasses.replace(x, num_warps=x.num_warps * scale) for x in p.launches)
    return dataclasses.replace(p, launches=launches)
