"""Running a plan on tensors: every candidate's ``run`` is one of the runs here, made once per candidate.

The plan was made for dense channels-last operands (what the core hands to ``run``); an operand that is not,
or whose data is not 16-byte aligned (TMA and 16-byte copies need it), is copied into a fresh dense tensor
first, and an ``out`` with other strides gets the result through a dense temporary.

What a call costs the host: the launches go through conv-core's :class:`~conv_core.launch_site.LaunchSite`
(the compiled kernel's launcher called directly after the first launch), built once per device
(:mod:`conv_gluon.sites`); descriptors are filled per launch from what the plan fixed; the weight is read in
place or from its cached copy. Gluon is imported on the first run, not before (the hook module must load where
it is missing).

CUDA graphs: nothing here synchronises with the host or copies from it, and every allocation has the same size
on every call: the result and, per call, the weight gradient's float32 partials and padded ``dy``, from torch's
caching allocator; the weight copies come from the cache, or are made on the device inside a capture
(:mod:`conv_gluon.weights`).
"""

from __future__ import annotations

import contextlib
import functools

import torch
from conv_core.problem import ConvProblem, torch_dtype
from conv_core.layout import dense_strides, empty_strided_for, is_dense_in

from . import weights
from .plans import TMA_ALIGN, DataGradPlan, Plan, WeightGradPlan, forward, weight_grad

LAYOUT = "channels_last"


@functools.cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index``: the persistent grid's size."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def _usable(t: torch.Tensor, strides: tuple[int, ...] | None = None) -> bool:
    """Whether the kernels can read ``t`` as it is: dense channels-last (``strides``, when given, are its dense
    strides: one comparison, where the general check costs a microsecond more) and 16-byte aligned."""
    return t.data_ptr() % TMA_ALIGN == 0 and (t.stride() == strides or is_dense_in(t, LAYOUT))


def _dense_copy(t: torch.Tensor) -> torch.Tensor:
    """A fresh (so aligned) dense channels-last copy of ``t``."""
    return empty_strided_for(tuple(t.shape), t.dtype, LAYOUT, t.device).copy_(t)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` dense and 16-byte aligned (as every launch is specialized: one compiled kernel), copied if not."""
    return t if t.is_contiguous() and t.data_ptr() % TMA_ALIGN == 0 else t.clone(memory_format=torch.contiguous_format)


def _on(device: torch.device):
    """The device's context when it is not the current one (launches go to the current device)."""
    if device.type == "cuda" and device.index is not None and device.index != torch._C._cuda_getDevice():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch._C._cuda_getDevice()


def role_dtypes(problem: ConvProblem, plan: Plan | WeightGradPlan | None = None) -> dict[str, str]:
    """Element dtype of each tensor argument of the forward kernel (for the data gradient: ``x`` and ``x_hi``
    are ``dy``, ``y_ptr`` is ``dx``), or of the weight-gradient kernel (``out_ptr``: the float32 partials when
    split)."""
    a, b = problem.operand_dtypes
    if problem.direction == "bwd_weight":
        split = plan is not None and plan.split
        out = "float32" if split else problem.result_dtype
        return {"dy_desc": b, "x": a, "out_ptr": out, "out_desc": out}
    return {"x": a, "x_hi": a, "w_desc": b, "bias_ptr": problem.result_dtype, "y_ptr": problem.result_dtype,
            "y_desc": problem.result_dtype}


class _Run:
    """What every run shares: the problem, its plan, the result's layout, the sites per device."""

    def __init__(self, problem: ConvProblem, plan) -> None:
        self.problem, self.plan = problem, plan
        self.dtypes = role_dtypes(problem, plan)
        #: the dense channels-last strides of the operands and of the result
        self.strides = tuple(dense_strides(shape, LAYOUT) for shape in (*problem.operand_shapes, problem.result_shape))
        self._sites: dict[int, object] = {}

    def sites(self, device: torch.device):
        """The plan's launch sites on ``device`` (made on first use; off CUDA, for tests, a grid of one program)."""
        index = _index(device) if device.type == "cuda" else -1
        found = self._sites.get(index)
        if found is None:
            found = self._sites[index] = self.make_sites(sm_count(index) if index >= 0 else 1)
        return found

    def make_sites(self, sms: int):
        raise NotImplementedError


class ForwardRun(_Run):
    """``run(x, w, bias=None, *, out=None)`` of a forward candidate: one launch of ``kernels.fwd.conv_fwd``."""

    plan: Plan

    def make_sites(self, sms: int):
        from .sites import forward_site

        return forward_site(self.plan, self.dtypes, sms)

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        x = x if _usable(x, self.strides[0]) else _dense_copy(x)
        if out is not None and not _usable(out, self.strides[-1]):
            out.copy_(self(x, w, bias))
            return out
        result = self.problem.empty_result(x.device) if out is None else out
        matrix = weights.descriptor_base(w, self.plan.weight, self.strides[1])
        bias = result if bias is None else _aligned(bias)  # (read only with HAS_BIAS)
        with _on(x.device):
            self.sites(x.device)(dict(a=x, weight=matrix, bias=bias, out=result))
        return result


class DataGradRun(_Run):
    """``run(dy, w, *, out=None)`` of a data-gradient candidate: the forward kernel once per stride phase
    (``plan.make_bwd_data_plan``), each writing its pixels of ``dx``; phases without taps are zeroed."""

    plan: DataGradPlan

    def __init__(self, problem: ConvProblem, plan: DataGradPlan) -> None:
        super().__init__(problem, plan)
        self.forms = tuple(ph.form for ph in plan.phases)
        self.zeros = tuple(zero_phase_index(problem, first) for first in plan.zero_phases)

    def make_sites(self, sms: int):
        from .sites import forward_site

        return tuple(forward_site(phase.plan, self.dtypes, sms) for phase in self.plan.phases)

    def __call__(self, dy: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        dy = dy if _usable(dy, self.strides[0]) else _dense_copy(dy)
        if out is not None and not _usable(out, self.strides[-1]):
            out.copy_(self(dy, w))
            return out
        result = self.problem.empty_result(dy.device) if out is None else out
        for index in self.zeros:
            result[index].zero_()
        matrices = weights.phase_matrices(w, self.problem.groups, self.forms)
        with _on(dy.device):
            for site, matrix in zip(self.sites(dy.device), matrices):
                site(dict(a=dy, weight=matrix, bias=result, out=result))
        return result


def zero_phase_index(problem: ConvProblem, first: tuple[int, ...]) -> tuple[slice, ...]:
    """The pixels of ``dx`` (``[N, C, *spatial]``) of the tap-less phase that starts at ``first`` (a 1D
    problem's has a leading 0 for its height): every stride-th from there along each axis."""
    axes = zip(first[len(first) - problem.ndim:], problem.stride)
    return (slice(None), slice(None), *(slice(start, None, stride) for start, stride in axes))


def dy_matrix(plan: WeightGradPlan, dy: torch.Tensor) -> torch.Tensor:
    """``dy`` (dense channels-last) as the ``[J, dy_channels]`` matrix the kernel's TMA reads: a view, or a copy
    whose rows are padded to 16 bytes with zeros (the pad only ever feeds tile rows the epilogue drops, but
    zeros keep every value the tensor cores see finite)."""
    flat = dy.as_strided((plan.pixels, plan.out_channels), (plan.out_channels, 1))
    if plan.dy_channels == plan.out_channels:
        return flat
    groups = dict(plan.scalars)["GROUPS"]
    k_g = plan.out_channels // groups
    padded = torch.empty((plan.pixels, groups, plan.dy_channels // groups), dtype=dy.dtype, device=dy.device)
    padded[:, :, :k_g].copy_(flat.view(plan.pixels, groups, k_g))
    padded[:, :, k_g:].zero_()
    return padded.view(plan.pixels, plan.dy_channels)


class WeightGradRun(_Run):
    """``run(x, dy, *, out=None)`` of a weight-gradient candidate: the per-tap GEMM kernel over the plan's units
    and, when the reduction is split, the sum of its float32 partials (``kernels/bwd_weight.py``)."""

    plan: WeightGradPlan

    def make_sites(self, sms: int):
        from .sites import weight_grad_sites

        return weight_grad_sites(self.plan, self.dtypes, sms)

    def __call__(self, x: torch.Tensor, dy: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        x = x if _usable(x, self.strides[0]) else _dense_copy(x)
        dy = dy if _usable(dy, self.strides[1]) else _dense_copy(dy)
        if out is not None and not _usable(out, self.strides[-1]):
            out.copy_(self(x, dy))
            return out
        result = self.problem.empty_result(x.device) if out is None else out
        plan = self.plan
        # the descriptor reads dy in place (its map gives the shape) unless its rows need padding
        dy_base = dy if plan.dy_channels == plan.out_channels else dy_matrix(plan, dy)
        # one split: the units write dW itself; several: each its split's float32 slice, summed in split order
        target = torch.empty(plan.splits * plan.partial_numel, dtype=torch.float32, device=x.device) \
            if plan.split else result
        units, total = self.sites(x.device)
        with _on(x.device):
            roles = dict(dy=dy_base, a=x, target=target, out=result)
            units(roles)
            if total is not None:
                total(roles)
        return result


def runner(problem: ConvProblem, plan: Plan | DataGradPlan | WeightGradPlan) -> _Run:
    """The ``run`` of a candidate with ``plan`` on ``problem``."""
    kind = {"fwd": ForwardRun, "bwd_data": DataGradRun, "bwd_weight": WeightGradRun}[problem.direction]
    return kind(problem, plan)


def warmup(problem: ConvProblem, plan: Plan | DataGradPlan | WeightGradPlan, device: torch.device) -> None:
    """Compile the plan's kernels for ``device`` without running them (Triton's JIT caches them for the first run,
    and its on-disk cache for other processes: ``tests/gpu_harness_warm.py``).

    Only what the JIT specializes on matters (dtypes, 16-byte alignment, descriptor boxes; nothing that changes
    with the batch or the image size), so small aligned placeholders stand in for the operands."""
    run = runner(problem, plan)

    def placeholders(pointers: dict[str, str], dtypes: dict[str, str]) -> dict[str, torch.Tensor]:
        """By role, as the sites take them (parameters sharing a role share its dtype)."""
        return {role: torch.empty(64, dtype=torch_dtype(dtypes[name]), device=device)
                for name, role in pointers.items()}

    sites = run.sites(device)
    if isinstance(plan, WeightGradPlan):
        units, total = sites
        units.warmup(placeholders(weight_grad.POINTERS, run.dtypes))
        if total is not None:
            total.warmup(placeholders(weight_grad.SUM_POINTERS, {"ws_ptr": "float32", "out_ptr": plan.result_dtype}))
        return
    for site in sites if isinstance(plan, DataGradPlan) else (sites,):
        site.warmup(placeholders(forward.POINTERS, run.dtypes))
