"""Running a :class:`~conv_rdna.plan.Plan` on tensors: the body of every candidate's ``run``.

The plan was made for dense operands in the problem's layout (what the core hands to ``run``);
an operand that is not is copied into that layout first, and an ``out`` with other strides gets
the result through a dense temporary. Scratch memory comes from torch's caching allocator, so a
run neither synchronises with the host nor allocates differently from one run to the next.
"""

from __future__ import annotations

import torch
from conv_core.problem import ConvProblem, is_dense_in, to_layout

from .plan import Plan


def run(problem: ConvProblem, plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem`` on operands ``a``, ``b`` (and ``bias``) into ``out`` or a new tensor."""
    layout = problem.layout
    a, b = to_layout(a, layout), to_layout(b, layout)
    if out is not None and not is_dense_in(out, layout):
        out.copy_(run(problem, plan, a, b, bias))
        return out
    result = problem.empty_result(a.device) if out is None else out
    tensors = {"a": a, "b": b, "out": result}
    if bias is not None:
        tensors["bias"] = bias.contiguous()
    if plan.workspace_elements:
        tensors["workspace"] = torch.empty(plan.workspace_elements, dtype=torch.float32, device=a.device)
    if plan.zero:
        tensors[plan.zero].zero_()
    if a.device.type == "cuda" and a.device.index != torch.cuda.current_device():
        with torch.cuda.device(a.device):
            _launch_all(plan, tensors)
    else:
        _launch_all(plan, tensors)
    return result


def _launch_all(plan: Plan, tensors: dict[str, torch.Tensor]) -> None:
    for launch in plan.launches:
        pointers = {name: tensors[role] for name, role in launch.pointers}
        launch.kernel[launch.grid](**pointers, **dict(launch.scalars), **dict(launch.constexprs),
                                   num_warps=launch.num_warps, num_stages=launch.num_stages)
