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


def run(problem: ConvProblem, plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem`` on operands ``a``, ``b`` (and ``bias``) into ``out`` or a new tensor."""
    layout = problem.layout
    if plan.weight_form:
        b = PACKED_WEIGHTS.get(b, lambda: repack(problem, plan.weight_form, b), form=(plan.weight_form, problem.groups))
    else:
        b = to_layout(b, layout)
    a = to_layout(a, layout)
    if out is not None and not is_dense_in(out, layout):
        out.copy_(run(problem, plan, a, b, bias))
        return out
    result = problem.empty_result(a.device) if out is None else out
    tensors = {"a": a, "b": b, "out": result}
    if bias is not None:
        tensors["bias"] = bias.contiguous()
    tensors.update(workspace(plan.workspace_elements, plan.workspace_views, a.device))
    if plan.zero:
        tensors[plan.zero].zero_()
    launch_all(plan.launches, tensors, a.device)
    return result
