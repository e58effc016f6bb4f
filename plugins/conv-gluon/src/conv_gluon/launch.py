"""Running a :class:`~conv_gluon.plan.Plan` on tensors: the body of every candidate's ``run``.

The plan was made for dense channels-last operands (what the core hands to ``run``); an operand that is not,
or whose data is not 16-byte aligned (TMA and 16-byte copies need it), is copied into a fresh dense tensor
first, and an ``out`` with other strides gets the result through a dense temporary. Gluon is imported on
the first run, not before (the hook module must load where it is missing). Nothing here synchronises with
the host; the only allocations are the result (and, on a cache miss, the padded weight; for the weight
gradient, its float32 partials and, for output channels that are not whole 16-byte rows, a padded copy of
``dy``), from torch's caching allocator.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from conv_core.problem import ConvProblem, empty_strided_for, is_dense_in

from . import tiling, weights
from .plan import TMA_ALIGN, DataGradPlan, Plan, WeightGradPlan

LAYOUT = "channels_last"


@functools.cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index``: the persistent grid's size."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def _usable(t: torch.Tensor) -> bool:
    return is_dense_in(t, LAYOUT) and t.data_ptr() % TMA_ALIGN == 0


def _dense_copy(t: torch.Tensor) -> torch.Tensor:
    """A fresh (so aligned) dense channels-last copy of ``t``."""
    return empty_strided_for(tuple(t.shape), t.dtype, LAYOUT, t.device).copy_(t)


def run(problem: ConvProblem, plan: Plan, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem`` on input ``x``, weight ``w`` (and ``bias``) into ``out`` or a new tensor."""
    x = x if _usable(x) else _dense_copy(x)
    if out is not None and not _usable(out):
        out.copy_(run(problem, plan, x, w, bias))
        return out
    result = problem.empty_result(x.device) if out is None else out
    if bias is not None:
        bias = bias.contiguous()
    with _on(x.device):
        _launch(plan, x, w, bias, result)
    return result


def run_bwd_data(problem: ConvProblem, plan: DataGradPlan, dy: torch.Tensor, w: torch.Tensor,
                 bias: torch.Tensor | None = None, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute the data gradient of ``problem`` from ``dy`` and ``w``: one forward launch per stride phase
    (``plan.make_bwd_data_plan``), each writing its pixels of ``dx``; phases without taps are zeroed."""
    dy = dy if _usable(dy) else _dense_copy(dy)
    if out is not None and not _usable(out):
        out.copy_(run_bwd_data(problem, plan, dy, w))
        return out
    result = problem.empty_result(dy.device) if out is None else out
    stride = problem.stride
    for ph, pw in plan.zero_phases:
        index = (slice(None), slice(None), *((slice(ph, None, stride[0]),) if problem.ndim == 2 else ()),
                 slice(pw, None, stride[-1]))
        result[index].zero_()
    flat = result.as_strided((result.numel(),), (1,))  # dense channels-last: the storage in memory order
    with _on(dy.device):
        for phase in plan.phases:
            matrix = weights.phase_matrix(w, problem.groups, phase.taps_h, phase.taps_w, phase.plan.weight.c_pad)
            _launch_matrix(phase.plan, dy, matrix, None, flat[phase.y_offset:], result)
    return result


def run_bwd_weight(problem: ConvProblem, plan: WeightGradPlan, x: torch.Tensor, dy: torch.Tensor, *,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute the weight gradient of ``problem`` from ``x`` and ``dy``: the per-tap GEMM kernel over the
    plan's units and, when the reduction is split, the sum of its float32 partials (``kernels/bwd_weight.py``)."""
    x = x if _usable(x) else _dense_copy(x)
    dy = dy if _usable(dy) else _dense_copy(dy)
    if out is not None and not _usable(out):
        out.copy_(run_bwd_weight(problem, plan, x, dy))
        return out
    result = problem.empty_result(x.device) if out is None else out
    with _on(x.device):
        _launch_weight_grad(plan, x, dy, result)
    return result


def dy_matrix(plan: WeightGradPlan, dy: torch.Tensor) -> torch.Tensor:
    """``dy`` (dense channels-last) as the ``[J, dy_channels]`` matrix the kernel's TMA reads: a view, or a copy
    whose rows are padded to 16 bytes with zeros (the pad only ever feeds tile rows the epilogue drops, but
    zeros keep every value the tensor cores see finite)."""
    flat = dy.movedim(1, -1).reshape(plan.pixels, plan.out_channels)
    if plan.dy_channels == plan.out_channels:
        return flat
    groups = dict(plan.scalars)["GROUPS"]
    k_g = plan.out_channels // groups
    padded = torch.empty((plan.pixels, groups, plan.dy_channels // groups), dtype=dy.dtype, device=dy.device)
    padded[:, :, :k_g].copy_(flat.view(plan.pixels, groups, k_g))
    padded[:, :, k_g:].zero_()
    return padded.view(plan.pixels, plan.dy_channels)


def _launch_weight_grad(plan: WeightGradPlan, x: torch.Tensor, dy: torch.Tensor, result: torch.Tensor) -> None:
    from . import descriptors
    from .kernels.bwd_weight import conv_bwd_weight, sum_splits

    dy_desc = descriptors.build(dy_matrix(plan, dy), plan.dy_map)
    x_arg = descriptors.build(x, plan.x_map) if plan.x_map is not None else x
    # one split: the units write dW itself; several: each its split's float32 slice, summed in split order
    target = torch.empty(plan.splits * plan.partial_numel, dtype=torch.float32, device=x.device) if plan.split \
        else result
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    grid = (tiling.persistent_programs(plan.grid.num_units, sm_count(index)),)
    out_desc = descriptors.build(target, plan.out_map) if plan.out_map is not None else target
    conv_bwd_weight[grid](dy_desc, x_arg, target, out_desc, **dict(plan.scalars), **dict(plan.constexprs),
                          num_warps=plan.num_warps, maxnreg=plan.maxnreg)
    if plan.split:
        sum_splits[(plan.reduce.programs,)](target, result, **plan.sum_scalars, BLOCK=plan.reduce.block,
                                           num_warps=plan.reduce.num_warps)


def _on(device: torch.device):
    """The device's context when it is not the current one (launches go to the current device)."""
    if device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _launch(plan: Plan, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor) -> None:
    _launch_matrix(plan, x, weights.weight_matrix(w, plan.weight), bias, y, y)


def _launch_matrix(plan: Plan, x: torch.Tensor, matrix: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor,
                   dummy: torch.Tensor) -> None:
    """Launch ``plan`` with the weight matrix ``matrix``, writing through ``y`` (a view where the plan's output
    starts); ``dummy`` stands for the absent bias (a pointer of the output's dtype, never read)."""
    from . import descriptors
    from .kernels.fwd import conv_fwd

    w_desc = descriptors.build(matrix, plan.w_map)
    x_arg, x_hi = _input_args(plan, x)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    grid = (tiling.persistent_programs(plan.tiles.num_tiles, sm_count(index)),)
    y_desc = descriptors.build(y, plan.y_map) if plan.y_map is not None else y
    conv_fwd[grid](x_arg, x_hi, w_desc, dummy if bias is None else bias, y, y_desc, **dict(plan.scalars),
                   **dict(plan.constexprs), num_warps=plan.num_warps, maxnreg=plan.maxnreg)


def _input_args(plan: Plan, x: torch.Tensor):
    """The forward kernel's ``x`` and ``x_hi``: the input's descriptors (boxes), or the tensor twice
    (gathered); ``x_hi`` is ``x`` but for ``fwd_rows_box``, whose second box is shorter."""
    from . import descriptors

    if plan.x_map is None:
        return x, x
    x_arg = descriptors.build(x, plan.x_map)
    return x_arg, (descriptors.build(x, plan.x_hi_map) if plan.x_hi_map is not None else x_arg)


def warmup(problem: ConvProblem, plan: Plan | DataGradPlan | WeightGradPlan, device: torch.device) -> None:
    """Compile the plan's kernel for ``device`` without running it (Triton's JIT caches it for the first run).

    Only what the JIT specializes on matters (dtypes, 16-byte alignment, descriptor boxes, arguments equal to
    1), so small placeholder tensors stand in for the operands; a data-gradient phase's output starts where
    the phase does, so its placeholder keeps that alignment. Compiled kernels land in Triton's on-disk cache,
    so warming up in other processes (``scripts/gpu_gluon.py``) serves this one.
    """
    from conv_core.problem import torch_dtype

    from . import descriptors
    from .kernels.fwd import conv_fwd

    def placeholder(dtype: str) -> torch.Tensor:
        return torch.empty(64, dtype=torch_dtype(dtype), device=device)

    if isinstance(plan, WeightGradPlan):
        _warmup_weight_grad(problem, plan, placeholder)
        return
    a_dtype, w_dtype = problem.operand_dtypes
    launches = [(ph.plan, ph.y_offset) for ph in plan.phases] if isinstance(plan, DataGradPlan) else [(plan, 0)]
    for p, y_offset in launches:
        x_arg, x_hi = _input_args(p, placeholder(a_dtype))
        w_desc = descriptors.build(placeholder(w_dtype), p.w_map)
        dummy = placeholder(problem.result_dtype)  # the bias, or what stands for it: aligned
        y = dummy[y_offset % (TMA_ALIGN // dummy.element_size()):]
        y_desc = descriptors.build(y, p.y_map) if p.y_map is not None else y
        conv_fwd.warmup(x_arg, x_hi, w_desc, dummy, y, y_desc, **dict(p.scalars), **dict(p.constexprs),
                        num_warps=p.num_warps, maxnreg=p.maxnreg, grid=(1,))


def _warmup_weight_grad(problem: ConvProblem, plan: WeightGradPlan, placeholder) -> None:
    """:func:`warmup` of the weight gradient's two kernels (the second only when the reduction is split)."""
    from . import descriptors, plan as plans
    from .kernels.bwd_weight import conv_bwd_weight, sum_splits

    dtypes = plans.role_dtypes(problem, plan)
    dy_desc = descriptors.build(placeholder(dtypes["dy_desc"]), plan.dy_map)
    x = placeholder(dtypes["x"])
    x_arg = descriptors.build(x, plan.x_map) if plan.x_map is not None else x
    target = placeholder(dtypes["out_ptr"])
    out_desc = descriptors.build(target, plan.out_map) if plan.out_map is not None else target
    conv_bwd_weight.warmup(dy_desc, x_arg, target, out_desc, **dict(plan.scalars), **dict(plan.constexprs),
                           num_warps=plan.num_warps, maxnreg=plan.maxnreg, grid=(1,))
    if plan.split:
        sum_splits.warmup(target, placeholder(plan.result_dtype), **plan.sum_scalars, BLOCK=plan.reduce.block,
                          num_warps=plan.reduce.num_warps, grid=(1,))
