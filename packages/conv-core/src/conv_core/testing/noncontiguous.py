"""The public API (``conv_core.conv{1,2,3}d(..., backend=...)``) on non-contiguous operands.

A backend's candidates always get dense operands; this checks that the core's copy into the problem's
layout, and the backward functions autograd calls, reach them correctly from strided views.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from ..frontend import routes
from ..frontend.call import ConvArgs
from ..candidate import Candidate
from ..engine import get_engine
from ..functional import conv1d, conv2d, conv3d
from ..layout import empty_strided_for, layout_order
from ..problem import ConvProblem, torch_dtype
from ..reference import Comparison, compare, random_operands
from .checks import failed, result_issue


def scattered_copy(t: torch.Tensor, layout: str = "channels_first") -> torch.Tensor:
    """A view with ``t``'s values that is dense in no layout.

    It lives in a larger buffer laid out in ``layout`` (so the call still
    detects that layout): every dimension one longer, and the innermost one
    taken with step 2. Only a tensor with a single element stays dense.
    """
    if t.dim() < 3:
        layout = "channels_first"
    inner = layout_order(t.dim(), layout)[-1]
    big_shape = [s + 1 for s in t.shape]
    big_shape[inner] = 2 * t.shape[inner] + 1
    big = empty_strided_for(tuple(big_shape), t.dtype, layout, t.device).fill_(math.nan)
    index = [slice(0, s) for s in t.shape]
    index[inner] = slice(0, 2 * t.shape[inner], 2)
    view = big[tuple(index)]
    view.copy_(t)
    return view


def _public_conv(problem: ConvProblem):
    return {1: conv1d, 2: conv2d, 3: conv3d}[problem.ndim]


def _call_kwargs(problem: ConvProblem, backend: str) -> dict:
    return dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation, groups=problem.groups,
                backend=backend)


def _has_candidate(problem: ConvProblem, backend: str, device: torch.device) -> bool:
    return bool(get_engine().registry.candidates(problem, device, only=backend)[0])


def noncontiguous_operands(problem: ConvProblem, device: torch.device | str, seed: int = 0) -> tuple:
    """``random_operands`` moved into non-contiguous views (the bias stays dense: the core passes it through)."""
    operands = random_operands(problem, device, seed)
    return tuple(scattered_copy(t, problem.layout) if i < 2 else t for i, t in enumerate(operands))


def check_noncontiguous(problem: ConvProblem, backend: str, device: torch.device | str,
                        seed: int = 0) -> Comparison:
    """Call the public ``conv_core.conv{1,2,3}d(..., backend=backend)`` on non-contiguous tensors.

    ``fwd``: the input and weight are strided views; the result must match
    the reference. ``bwd_data`` / ``bwd_weight``: a forward call (through
    the same backend) and ``backward`` with a strided output gradient; the
    input's (weight's) gradient must match the reference. If the backend has
    no forward candidate for the problem's geometry, the backward function
    the autograd graph would call is called directly instead.
    """
    device = torch.device(device)
    what = f"public API, non-contiguous operands, backend={backend}"
    if problem.weight_dtype != problem.dtype:
        return failed(problem, None, f"{what}: the public API needs the weight in the input's dtype")
    run = {"fwd": _noncontiguous_forward, "bwd_data": _noncontiguous_backward,
           "bwd_weight": _noncontiguous_backward}[problem.direction]
    try:
        result, operands = run(problem, backend, device, seed)
        candidate = _ranked_candidate(problem, backend, device)
    except Exception as exc:
        return failed(problem, None, f"{what}: raised {type(exc).__name__}: {exc}")
    issue = result_issue(problem, result)
    if issue and (problem.direction == "fwd" or "dense" not in issue):  # only the forward promises a layout
        return failed(problem, None, f"{what}: {issue}")
    comparison = compare(problem, result, operands, candidate)
    return Comparison(comparison.ok, comparison.worst_ratio, comparison.relative_l2, comparison.bad_elements,
                      comparison.nan_elements, f"{what}: {comparison.message}")


def _ranked_candidate(problem: ConvProblem, backend: str, device: torch.device) -> Candidate | None:
    """The candidate the engine runs for ``problem`` (its tags and error factor set the tolerance)."""
    ranking = get_engine().ranking(problem, device, backend)
    return ranking.best.candidate if ranking.ranked else None


def _noncontiguous_forward(problem: ConvProblem, backend: str, device: torch.device, seed: int):
    x, w, bias = noncontiguous_operands(problem, device, seed)
    with torch.no_grad():
        y = _public_conv(problem)(x, w, bias, activation=problem.activation, out_dtype=problem.out_dtype,
                                  **_call_kwargs(problem, backend))
    return y, (x, w, bias)


def _noncontiguous_backward(problem: ConvProblem, backend: str, device: torch.device, seed: int):
    """The gradient of ``problem``'s direction through the public API (or the backward function it calls)."""
    a, b = noncontiguous_operands(problem, device, seed)
    if problem.direction == "bwd_data":
        dy, w = a, b
        x = scattered_copy(torch.zeros(problem.input_shape, dtype=torch_dtype(problem.dtype), device=device),
                           problem.layout)
    else:
        x, dy = a, b
        w = scattered_copy(torch.zeros(problem.weight_shape, dtype=torch_dtype(problem.dtype), device=device))
    forward = problem.replace(direction="fwd")
    if not _has_candidate(forward, backend, device):
        return _backward_function(problem, backend, device, x, w, dy), (a, b)
    wanted = x if problem.direction == "bwd_data" else w
    wanted.requires_grad_(True)
    with torch.enable_grad():
        y = _public_conv(problem)(x, w, None, **_call_kwargs(problem, backend))
        (grad,) = torch.autograd.grad(y, wanted, dy)
    return grad, (a, b)


def _backward_function(problem: ConvProblem, backend: str, device: torch.device, x, w, dy) -> torch.Tensor:
    args = ConvArgs.of(problem.ndim, w, problem.stride, problem.padding, problem.dilation, problem.groups, None,
                       None, backend)
    if problem.direction == "bwd_data":
        return routes.backward_data(dy, w, problem.input_shape, problem.layout, args)
    return routes.backward_weight(x, dy, problem.weight_shape, args)


def pick_noncontiguous_problem(problems: Sequence[ConvProblem]) -> ConvProblem | None:
    """The problem best suited to :func:`check_noncontiguous`.

    It must have more than one channel and pixel (with one, a strided view can
    look like another layout to the call, which would then ask the backend a
    different problem); then 2D, with groups, stride, asymmetric padding and
    bias preferred, since strided operands meet more index arithmetic there.
    """
    def score(p: ConvProblem) -> tuple:
        many = p.in_channels > 1 and p.out_channels > 1 and math.prod(p.input_size) > 1 and \
            math.prod(p.output_size) > 1
        features = (p.groups > 1) + (max(p.stride) > 1) + (p.symmetric_padding is None) + p.bias
        return (not many, p.ndim != 2, p.weight_dtype != p.dtype, -features)

    return min(problems, key=score, default=None)


def noncontiguous_problems(pairs: Iterable[tuple[ConvProblem, Candidate]]) -> list[ConvProblem]:
    """One problem per (direction, dtype, layout) that has a candidate, chosen by :func:`pick_noncontiguous_problem`.
    A data gradient with an epilogue is left out: its public call is ``conv_transpose*d``, not the backward of a
    convolution, and conv-core's own tests pass that views."""
    groups: dict[tuple[str, str, str], list[ConvProblem]] = {}
    for problem, _ in pairs:
        if problem.transposed_epilogue:
            continue
        groups.setdefault((problem.direction, problem.dtype, problem.layout), []).append(problem)
    return [pick_noncontiguous_problem(found) for found in groups.values()]
