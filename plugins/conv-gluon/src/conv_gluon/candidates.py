"""Which kernels can run a problem, how long they should take, and how they are tagged.

For a supported problem each applicable kernel gives one candidate, with the configuration the table picks
(:func:`conv_gluon.configs.select`):

===================  =====================================================================================
``fwd_gather``       forward, any 1D/2D geometry: the input tile gathered by a producer partition
                     (``cp.async``, or through registers for odd channel counts)
``fwd_box``          forward at stride 1 with channels a multiple of 8: the input tile as TMA boxes of output
                     pixels (one producer warp)
``fwd_rows_box``     the same for filters of 3 rows, a k-step per filter column: its 3 taps read one tall box
                     (the tile's box and the rows below), each against its own weight tile
``bwd_data_gather``  data gradient, any 1D/2D geometry: the forward kernel once per stride phase, on ``dy``
                     and the transposed, flipped weight restricted to the phase's taps
``bwd_data_box``     the same with ``dy`` as TMA boxes (output channels a multiple of 8)
``bwd_data_rows_box``  the same through ``fwd_rows_box`` (filters of 3 rows, stride 1 along the height)
``bwd_weight_gather``  weight gradient, any 1D/2D geometry: per-tap GEMMs over the pixels (``dy`` by TMA, ``x``
                     gathered by a producer partition), the reduction split into float32 partials summed in
                     a fixed order
``bwd_weight_box``   the same at stride 1 with input channels a multiple of 8: ``dy`` and ``x`` as TMA boxes
``bwd_weight_rows_box``  the same for filters of 3 rows, a unit per filter column: its 3 taps share each
                     step's ``dy`` box and one ``x`` box 2 rows taller (a third of the per-tap units' loads)
===================  =====================================================================================

Every way of bringing the input is offered where it applies; the core ranks them (estimates, later
measured tables).
"""

from __future__ import annotations

import re

import torch
from conv_core.arch import spec
from conv_core.candidate import Candidate, Declined
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem

from . import configs, plan, tiling, toolchain

BACKEND = "gluon"

#: Input dtypes the kernels take (operands and weight of one dtype).
DTYPES = ("float16", "bfloat16")
#: Result dtypes the epilogue writes.
OUT_DTYPES = ("float16", "bfloat16", "float32")
#: Directions with kernels.
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


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
    reason = arch_issue(problem.arch)
    if reason:
        return reason
    reason = toolchain.gluon_issue()
    if reason:
        return reason
    if configs.table_for(problem.arch) is None:
        return f"no configuration table for {problem.arch} (tables: {', '.join(configs.table_names())})"
    if problem.ndim == 3:
        return "3D convolutions are not implemented (1D and 2D are)"
    if problem.direction not in DIRECTIONS:
        return f"{problem.direction} is not implemented yet (directions: {', '.join(DIRECTIONS)})"
    if problem.dtype not in DTYPES:
        return f"input dtype {problem.dtype} is not supported; supported: {', '.join(DTYPES)} (wgmma operands)"
    if problem.weight_dtype != problem.dtype:
        return (f"weight dtype {problem.weight_dtype} differs from the input dtype {problem.dtype}; mixed operands "
                "are not supported")
    if problem.direction != "fwd" and problem.out_dtype != problem.dtype:
        return (f"output gradient dtype {problem.out_dtype} differs from the input dtype {problem.dtype}; mixed "
                "operands are not supported")
    if problem.result_dtype not in OUT_DTYPES:
        return f"result dtype {problem.result_dtype} is not supported; supported: {', '.join(OUT_DTYPES)}"
    if problem.layout != "channels_last":
        return (f"layout {problem.layout} is not supported: the kernels read and write channels-last (NHWC) "
                "tensors; use memory_format=torch.channels_last")
    gather = plan.KERNELS[plan.DIRECTION_KERNELS[problem.direction][0]]
    return plan.int32_issue(problem, configs.select(configs.table_for(problem.arch), gather, problem))


def kernels_for(problem: ConvProblem, tab: configs.ArchTable) -> tuple[str, ...]:
    """The candidate kernels that apply to a supported ``problem``: the gathering one always, the box ones
    where boxes can carry the input (stride 1 for the forward; every data-gradient phase is stride 1) and,
    for the units of a filter column, the filter has 3 rows (:func:`plan.kernel_issue`)."""
    gather, *boxes = plan.DIRECTION_KERNELS[problem.direction]
    return (gather, *(kernel for kernel in boxes
                      if plan.kernel_issue(problem, kernel, configs.select(tab, plan.KERNELS[kernel], problem),
                                           tab) is None))


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    tab = configs.table_for(problem.arch)
    return [candidate(problem, kernel, configs.select(tab, plan.KERNELS[kernel], problem), tab)
            for kernel in kernels_for(problem, tab)]


def candidate(problem: ConvProblem, kernel: str, config: configs.TileConfig, tab: configs.ArchTable) -> Candidate:
    """``kernel`` with ``config`` on a supported ``problem``: what the hook offers with the table's choice,
    and what the offline sweep (:mod:`conv_gluon.sweep`) times with each configuration of its space."""
    from . import launch  # torch only; Gluon is imported on the first run

    make = {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
            "bwd_weight": plan.make_bwd_weight_plan}[problem.direction]
    p = make(problem, kernel, config, tab)
    return Candidate(BACKEND, kernel, p.config_name, run=launch.runner(problem, p),
                     estimate_us=estimate(problem, p, tab), tags=tags(p, tab), workspace_bytes=p.workspace_bytes)


AnyPlan = plan.Plan | plan.DataGradPlan | plan.WeightGradPlan


def tags(p: AnyPlan, tab: configs.ArchTable) -> frozenset[str]:
    """``deterministic`` (no atomics, a fixed reduction order per tile, and for the weight gradient per split
    and over the splits), ``cuda_graph_safe`` (every run, in every direction: no host synchronisation and no copy
    from the host; weight copies are derived on the device inside a capture; workspaces have the same size on
    every call and come from torch's allocator: ``tests/test_host_path.py``, ``tests/test_cuda_graphs.py``),
    ``needs_workspace`` with a weight copy (padded, or a
    data-gradient phase's) or the weight gradient's float32 partials or padded ``dy``, ``experimental`` while
    the kernel's family is not measured on the architecture (:meth:`configs.ArchTable.is_measured`)."""
    result = {"deterministic", "cuda_graph_safe"}
    if p.workspace_bytes:
        result.add("needs_workspace")
    if not tab.is_measured(plan.KERNELS[p.kernel]):
        result.add("experimental")
    return frozenset(result)


def estimate(problem: ConvProblem, p: AnyPlan, tab: configs.ArchTable) -> float:
    """Roofline estimate with the table's efficiencies (guesses until measured), the compute efficiency
    scaled by the fraction of the tiles' matrix work that is real (:func:`tiling.utilization`; for the data
    gradient, over its phases' launches, one launch each; for the weight gradient, see
    :func:`weight_grad_estimate`)."""
    eff = tab.efficiency[p.kernel]
    if isinstance(p, plan.WeightGradPlan):
        return weight_grad_estimate(problem, p, tab)
    launches = [ph.plan for ph in p.phases] if isinstance(p, plan.DataGradPlan) else [p]
    real = done = 0.0
    for lp in launches:
        s, c = dict(lp.scalars), lp.config
        g = tiling.Geometry(s["M"] // (s["P"] * s["Q"]), lp.tiles.groups, s["C_G"], s["K_G"], s["H"], s["W"], s["P"],
                            s["Q"], s["TAPS"] // s["S"], s["S"], (1, 1), (0, 0), (1, 1))
        work = g.pixels * g.cout * g.cin * g.groups * g.taps
        real += work
        done += work / tiling.utilization(g, lp.tiles, c.block_m, c.block_n, c.block_k)
    used = real / done if done else 1.0
    return estimate_us(problem, eff["compute"] * used, eff["memory"], launches=max(1, len(launches)))


def weight_grad_estimate(problem: ConvProblem, p: plan.WeightGradPlan, tab: configs.ArchTable) -> float:
    """The roofline with the kernel's efficiencies, the compute scaled by the real fraction of the tiles'
    work (:func:`tiling.weight_grad_utilization`) and by how evenly the units fill the SMs' waves; plus the
    workspaces' round trips through memory (float32 partials, padded ``dy``) and the second stage's launch."""
    eff = tab.efficiency[p.kernel]
    grid, c = p.grid, p.config
    used = tiling.weight_grad_utilization(tiling.Geometry.of(problem), grid, c.block_m, c.block_n, c.block_k)
    used *= grid.num_units / (-(-grid.num_units // tab.num_sms) * tab.num_sms)
    time = estimate_us(problem, eff["compute"] * used, eff["memory"], launches=2 if p.split else 1)
    return time + 2 * p.workspace_bytes / (spec(problem.arch).copy_tbps * 1e6 * eff["memory"])
