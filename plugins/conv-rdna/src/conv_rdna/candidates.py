"""Which kernels can run a problem, how long they should take, and how they are tagged.

For a supported problem every applicable kernel gives exactly one candidate, with the configuration
the table picks (:func:`conv_rdna.configs.select`):

=================================  ===============================================================================
``implicit_gemm``                  forward, any 1D/2D geometry
``conv3x3``                        forward of 3x3 filters (any stride, dilation, padding, groups) and their data
                                   gradient at stride 1: the implicit GEMM with the nine taps unrolled, channels
                                   outer (:mod:`conv_rdna.kernels.conv3x3`)
``gemm1x1``                        forward and data gradient of 1x1 / stride 1 / no-padding convolutions
``bwd_data_phased``                data gradient, any 1D/2D geometry
``bwd_weight_split``               weight gradient, deterministic split reduction
``bwd_weight_atomic``              weight gradient, split reduction with float32 atomics
``few_channels_in``                forward with at most 8 input channels per group (the reduction runs over
                                   (tap, channel) pairs jointly)
``few_channels_out``               forward with at most 8 output channels per group (taps expanded into the
                                   columns, then shifted and added; filters of at most 32 taps)
``few_channels_in_bwd_weight``     weight gradient with at most 8 input channels per group: (tap, channel)
                                   pairs as the columns, deterministic split reduction
``few_channels_out_bwd_weight``    weight gradient with at most 8 output channels per group and at most 32 taps:
                                   (channel, tap) rows, reduced over input pixels, deterministic split reduction
``few_channels_in_bwd_data``       data gradient at stride 1 with at most 8 input channels per group:
                                   ``few_channels_out``'s kernel on ``dy`` with the flipped weight
``col2im_bwd_data``                data gradient with at most 8 input channels per group, any geometry: ``Z = dy @ w``
                                   over every (channel, tap) column, then a gather of ``dx`` from ``Z``
                                   (float32 workspace, chunks of images)
``few_channels_out_bwd_data``      data gradient with at most 8 output channels per group: ``few_channels_in``'s
                                   kernel on ``dy`` with the flipped weight, a launch per stride phase (not
                                   for dilated strided layers)
``depthwise_fwd``                  forward of depthwise problems (``groups == in_channels``, any multiplier)
``depthwise_bwd_data``             data gradient of depthwise problems
``depthwise_bwd_weight``           weight gradient of depthwise problems, deterministic split reduction
``winograd_f4x3``                  forward and data gradient, 3x3 / stride 1 / dilation 1 / groups 1, >= 64 input
                                   and output channels: Winograd F(4x4, 3x3) (:mod:`conv_rdna.winograd`; the data
                                   gradient as the forward convolution of ``dy`` with the flipped weight)
``winograd_f4x3_bwd_weight``       weight gradient of the same layers: 36 GEMMs over 4x4 tiles of ``dy``
                                   (:mod:`conv_rdna.winograd_bwd_weight`), deterministic split reduction
``implicit_gemm_cf``               forward of channels-first problems, pixel tiles of one image loading along W
``bwd_data_cf``                    data gradient of channels-first problems (the same kernel, on ``dy`` with the
                                   flipped weight, a launch per stride phase; ``dx`` zeroed first where a
                                   phase has no tap)
``bwd_weight_cf``                  weight gradient of channels-first problems, pixel blocks of one image,
                                   deterministic split reduction
=================================  ===============================================================================
"""

from __future__ import annotations

import functools
import math

import torch
from conv_core.arch import spec
from conv_core.candidate import Candidate, Declined
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem, element_size

from . import configs, launch, plan, winograd, winograd_bwd_weight

BACKEND = "rdna"

#: Input dtypes the kernels take (operands and weight of the same dtype).
DTYPES = ("float16", "bfloat16", "float32")

#: Interpreted candidates cost this many times their GPU estimate plus a fixed cost, so that on the
#: CPU they lose to ``aten`` unless forced (``backend="rdna"``) or measured.
INTERPRETED_SLOWDOWN = 1000.0
INTERPRETED_FIXED_US = 100_000.0

#: Kernels with a host module of their own (its ``run``, ``error_factor`` and ``estimate_us``): Winograd's.
HOST_MODULES = {winograd.KERNEL: winograd, winograd_bwd_weight.KERNEL: winograd_bwd_weight}


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


#: The depthwise kernel of each direction.
DEPTHWISE = {"fwd": "depthwise_fwd", "bwd_data": "depthwise_bwd_data", "bwd_weight": "depthwise_bwd_weight"}


def depthwise_issue(problem: ConvProblem) -> str | None:
    """Why the depthwise kernels do not apply to ``problem``, or None (they take any multiplier
    ``out_channels / groups``, filter, stride, dilation and padding, in 1D and 2D)."""
    if problem.ndim == 3:
        return "the depthwise kernels are 1D/2D only (3D convolutions are not implemented yet)"
    if problem.groups != problem.in_channels:
        return (f"not depthwise: groups={problem.groups} != in_channels={problem.in_channels} (the depthwise "
                "kernels need exactly one input channel per group)")
    return None


def kernels_for(problem: ConvProblem) -> tuple[str, ...]:
    """The candidate kernels that apply to ``problem`` (supported problems only)."""
    if problem.groups > 1 and depthwise_issue(problem) is None:
        # Only the depthwise kernel: the general families would run one channel per group through
        # 16-wide matrix tiles (1/16 of the reduction and ~1/64 of the columns real) and gather one
        # element per pixel row, tens of times slower for the same traffic.
        return (DEPTHWISE[problem.direction],)
    if depthwise_issue(problem) is None:  # a single input channel (groups == 1): the core ranks both
        return _general_kernels_for(problem) + (DEPTHWISE[problem.direction],)
    return _general_kernels_for(problem)


def _general_kernels_for(problem: ConvProblem) -> tuple[str, ...]:
    if problem.direction == "bwd_weight":
        return (("bwd_weight_split", "bwd_weight_atomic") + _channels_first_kernels_for(problem)
                + plan.few_channels_kernels(problem)
                + ((winograd_bwd_weight.KERNEL,) if winograd_bwd_weight.applies(problem) else ()))
    general = "implicit_gemm" if problem.direction == "fwd" else "bwd_data_phased"
    pointwise = (all(k == 1 for k in problem.filter_size) and all(s == 1 for s in problem.stride)
                 and not any(lo or hi for lo, hi in problem.padding))
    kernels = (general, "gemm1x1") if pointwise else (general,)
    kernels += ("conv3x3",) if plan.three_by_three(problem) else ()
    kernels += _channels_first_kernels_for(problem)
    kernels += plan.few_channels_kernels(problem)  # <= 8 input or output channels per group
    return kernels + ((winograd.KERNEL,) if winograd.applies(problem) else ())


def _channels_first_kernels_for(problem: ConvProblem) -> tuple[str, ...]:
    """The channels-first kernel of the problem's direction, for channels-first problems (the data
    gradient: where its stride phases are forward convolutions of ``dy``, :func:`plan.bwd_data_phases`,
    those without taps left to a fill of zeros)."""
    if problem.layout != "channels_first":
        return ()
    if problem.direction == "bwd_data" and not plan.bwd_data_phases(plan.Geometry.of(problem), leave_zeros=True):
        return ()
    return (plan.CHANNELS_FIRST_KERNELS[problem.direction],)


def candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    """The hook's answer: one candidate per applicable kernel, with the table's configuration, or one Declined."""
    reason = decline_reason(problem, device)
    if reason:
        return [Declined(BACKEND, reason)]
    tab = configs.table_for(problem.arch, interpreted=device.type == "cpu")
    return [candidate(problem, kernel, configs.select(tab, plan.KERNELS[kernel], problem), tab, device)
            for kernel in kernels_for(problem)]


def candidate(problem: ConvProblem, kernel: str, config, tab: configs.ArchTable, device: torch.device) -> Candidate:
    """The candidate of ``kernel`` with ``config`` (any configuration of its family): the one way to build
    one, shared by the hook and the offline sweep (:mod:`conv_rdna.sweep`), so that what is swept is what
    is offered. Winograd runs through its own ``run`` (:data:`HOST_MODULES`: the forward's transformed-weight
    cache, the weight gradient's workspace) and declares its error factor."""
    interpreted = device.type == "cpu"
    p = plan.make_plan(problem, kernel, config, tab)
    host = HOST_MODULES.get(kernel)
    return Candidate(BACKEND, kernel, p.config_name,
                     run=functools.partial(host.run if host else launch.run, problem, p),
                     estimate_us=estimate(problem, p, tab, interpreted), tags=tags(problem, p, tab, device),
                     workspace_bytes=p.workspace_bytes, error_factor=host.error_factor(problem) if host else 1.0)


def tags(problem: ConvProblem, p: plan.Plan, tab: configs.ArchTable, device: torch.device) -> frozenset[str]:
    result = set()
    result.add("atomics" if p.kernel == "bwd_weight_atomic" else "deterministic")
    if p.workspace_elements:
        result.add("needs_workspace")
    if device.type == "cpu":
        result.add("interpreted")
    else:
        result.add("cuda_graph_safe")  # no host sync; scratch from the caching allocator, same size every run
        if not tab.is_measured(plan.KERNELS[p.kernel]):
            result.add("experimental")
    return frozenset(result)


def tile_utilization(problem: ConvProblem, p: plan.Plan) -> float:
    """Fraction of the matrix work in the tiles that is real (the rest multiplies padding)."""
    if runs_few_cout(p.kernel):  # halo pixels, output slots outside the tile, padded columns
        return plan.few_cout_work(problem, p.config)[0]
    family = plan.KERNELS[p.kernel]
    view = configs.gemm_view(problem, family)
    c = p.config
    pixel_blocks = family == "bwd_weight" or family in configs.FEW_CHANNELS_BWD_WEIGHT_FAMILIES
    red_block = 1 if pixel_blocks else c.block_k  # batch-wide pixel blocks: only the last is partial
    used = 1.0
    for size, block in ((view["m"], c.block_m), (view["n"], c.block_n), (view["red"], red_block)):
        used *= size / (math.ceil(size / block) * block)
    return used


def runs_few_cout(kernel: str) -> bool:
    """Whether ``kernel`` runs ``few_channels_out``'s forward kernel (itself, or the data gradient of few
    input channels on ``dy``), whose work and reads :func:`conv_rdna.plan.few_cout_work` gives."""
    return plan.FEW_CHANNELS_FORWARD.get(kernel) == "few_channels_out"


def depthwise_utilization(problem: ConvProblem, p: plan.Plan) -> float:
    """Fraction of a depthwise plan's tile lanes that hold real work (pixels x channels, and taps for the
    weight gradient): the blocks after fitting (``plan.fit_pixel_block``), read off the first launch."""
    scalars, const = dict(p.launches[0].scalars), dict(p.launches[0].constexprs)

    def used(size: int, block: int) -> float:
        return size / (math.ceil(size / block) * block)

    if p.kernel == "depthwise_bwd_weight":
        pixels = scalars["BATCH"] * scalars["P"] * scalars["Q"]
        return (used(scalars["R"] * scalars["S"], const["BLOCK_T"]) * used(scalars["C"], const["BLOCK_C"])
                * used(pixels, const["BLOCK_W"]))
    rows, cols = (scalars["P"], scalars["Q"]) if p.kernel == "depthwise_fwd" else (scalars["H_PH"], scalars["W_PH"])
    return used(rows, const["BLOCK_H"]) * used(cols, const["BLOCK_W"]) * used(scalars["C"], const["BLOCK_C"])


def estimate(problem: ConvProblem, p: plan.Plan, tab: configs.ArchTable, interpreted: bool) -> float:
    """Roofline estimate with the table's efficiencies (initial guesses; measured tables replace them).

    Compute efficiency scales with the tile utilization and, for channels-first tensors (gathers
    along strided channels), with the table's ``channels_first_factor``. Workspace traffic (written
    once, read once) and a result zeroed before the launches add to the memory time.
    """
    if p.kernel in HOST_MODULES:  # kernels in sequence: the Winograd flops and transform traffic
        us = HOST_MODULES[p.kernel].estimate_us(problem, p, tab)
        return us * INTERPRETED_SLOWDOWN + INTERPRETED_FIXED_US if interpreted else us
    eff = tab.efficiency[p.kernel]
    memory = eff["memory"]
    if runs_few_cout(p.kernel):  # the input (most of the bytes) is read once per output-channel chunk
        memory /= plan.few_cout_work(problem, p.config)[1]
    if p.kernel in plan.DEPTHWISE_KERNELS:
        # FMA stencils: "compute" is their fraction of the matrix-unit rate; a channels-first tile loads
        # along W without vectors, which costs both rates the kernel's own "channels_first" factor.
        compute = eff["compute"] * depthwise_utilization(problem, p)
        if problem.layout == "channels_first":
            compute, memory = compute * eff["channels_first"], memory * eff["channels_first"]
    else:
        compute = eff["compute"] * tile_utilization(problem, p)
        if problem.layout == "channels_first" and p.kernel not in plan.CHANNELS_FIRST_KERNELS.values():
            compute *= tab.efficiency["channels_first_factor"]  # kernels tiled for channels-last tensors
    us = estimate_us(problem, compute, memory, launches=len(p.launches) + (1 if p.zero else 0))
    copy_us_per_byte = 1 / (spec(problem.arch).copy_tbps * 1e6) / memory
    us += 2 * p.workspace_fills * p.workspace_bytes * copy_us_per_byte
    if p.zero == "out":  # the result is written twice: zeros, then what the launches add or place
        us += math.prod(problem.result_shape) * element_size(problem.result_dtype) * copy_us_per_byte
    if interpreted:
        us = us * INTERPRETED_SLOWDOWN + INTERPRETED_FIXED_US
    return us
