"""Running a :class:`~conv_rdna.plans.common.Plan` on tensors: the body of every candidate's ``run``.

The plan was made for dense operands in the problem's layout (what the core hands to ``run``);
an operand that is not is copied into that layout first, and an ``out`` with other strides gets
the result through a dense temporary. Scratch memory comes from torch's caching allocator, so a
run neither synchronises with the host nor allocates differently from one run to the next.

A plan may read the weight repacked (:attr:`~conv_rdna.plans.common.Plan.weight_form`): the copy is made once per
weight, version and form and kept in :data:`PACKED_WEIGHTS`, conv-core's
:class:`~conv_core.weight_cache.DerivedWeightCache` (never stale after an in-place update; recomputed
inside a CUDA graph being captured).
"""

from __future__ import annotations

import functools
import os

import torch
from conv_core.geometry import Geometry
from conv_core.kit.launch import launch_all, workspace
from conv_core.layout import is_dense_in, to_layout
from conv_core.problem import ConvProblem
from conv_core.weight_cache import DerivedWeightCache

from .plans.channels_first import WEIGHT_FORMS
from .plans.common import Plan

#: The process's repacked weights: ``CONV_RDNA_PACKED_CACHE_ENTRIES`` (default 256) of at most
#: ``CONV_RDNA_PACKED_CACHE_MB`` (default 512) MiB together.
PACKED_WEIGHTS = DerivedWeightCache(int(os.environ.get("CONV_RDNA_PACKED_CACHE_ENTRIES", 256)),
                                    int(os.environ.get("CONV_RDNA_PACKED_CACHE_MB", 512)) << 20)


def repack(problem: ConvProblem, form: str, w: torch.Tensor) -> torch.Tensor:
    """``w`` as :data:`~conv_rdna.plans.channels_first.WEIGHT_FORMS` ``form`` lays it out: ``[R, S, C_G, K]`` with
    ``[r, s, c, g*K_G + k] = w[g*K_G + k, c, r, s]`` (``"taps_outer"``), or ``[R, S, K_G, C]`` with
    ``[r, s, k, g*C_G + c] = w[g*K_G + k, c, R-1-r, S-1-s]`` (``"taps_outer_flipped"``)."""
    g = Geometry.of(problem)
    w = w.reshape(g.groups, g.cout, g.cin, g.r, g.s)  # 1D weights gain R = 1
    if form == WEIGHT_FORMS[0]:
        packed = w.permute(3, 4, 2, 0, 1)
    else:
        packed = w.flip(3, 4).permute(3, 4, 1, 0, 2)
    return packed.contiguous().view(g.r, g.s, packed.shape[2], -1)


class PlanRun:
    """``run(a, b, bias=None, *, out=None)`` of one candidate: what its problem and plan fix is computed here, once.

    A plugin call's host time is part of what a user waits for (an eager model is often bound by it), so the
    call itself only checks the operands' layout, allocates the result (its strides worked out once per
    problem) and launches. ``body`` is a kernel's own ``run(problem, plan, a, b, bias, *, out)`` where it has
    one (Winograd's forward: the transformed-weight cache); the shared one otherwise.
    """

    __slots__ = ("problem", "plan", "body", "layout", "form", "pack")

    def __init__(self, problem: ConvProblem, plan: Plan, body=None) -> None:
        self.problem, self.plan, self.body, self.layout = problem, plan, body, problem.layout
        self.form = (plan.weight_form, problem.groups) if plan.weight_form else None
        self.pack = functools.partial(repack, problem, plan.weight_form) if plan.weight_form else None

    def __call__(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        if self.body is not None:
            return self.body(self.problem, self.plan, a, b, bias, out=out)
        layout, plan = self.layout, self.plan
        if self.form is not None:
            b = PACKED_WEIGHTS.get(b, functools.partial(self.pack, b), form=self.form)
        elif not is_dense_in(b, layout):
            b = to_layout(b, layout)
        if not is_dense_in(a, layout):
            a = to_layout(a, layout)
        if out is not None and not is_dense_in(out, layout):
            out.copy_(self(a, b, bias))
            return out
        result = self.problem.empty_result(a.device) if out is None else out
        tensors = {"a": a, "b": b, "out": result}
        if bias is not None:
            tensors["bias"] = bias if bias.is_contiguous() else bias.contiguous()
        if plan.workspace_elements:
            tensors.update(workspace(plan.workspace_elements, plan.workspace_views, a.device))
        if plan.zero:
            tensors[plan.zero].zero_()
        launch_all(plan.launches, tensors, a.device)
        return result


def run(problem: ConvProblem, plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem`` on operands ``a``, ``b`` (and ``bias``) into ``out`` or a new tensor (a
    :class:`PlanRun` made for this call)."""
    return PlanRun(problem, plan)(a, b, bias, out=out)
