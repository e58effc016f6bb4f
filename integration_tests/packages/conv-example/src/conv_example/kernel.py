"""The kernel: 2D forward convolution as im2col (``torch.nn.functional.unfold``) plus one matmul.

Pure PyTorch, so it is easy to read and obviously correct; it exists to
exercise conv-core's plugin path end to end, not to be fast.

Contract (see docs/hooks.md): the operands arrive dense in ``problem.layout``;
the result leaves dense in ``problem.layout``, in ``problem.result_dtype``, with
bias and activation applied; a given ``out`` is fully overwritten and returned.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from conv_core import activations
from conv_core.problem import ConvProblem, torch_dtype
from conv_core.layout import to_layout

#: Accumulation dtype. Operands of every supported dtype (fp16, bf16, fp32) are
#: widened to it exactly, so the only rounding is the fp32 sum and the final cast.
ACCUMULATE = torch.float32


def workspace_bytes(problem: ConvProblem) -> int:
    """Bytes of the im2col matrix ``(N, C*kh*kw, OH*OW)`` in the accumulation dtype."""
    n, c = problem.batch, problem.in_channels
    kh, kw = problem.filter_size
    oh, ow = problem.output_size
    return n * c * kh * kw * oh * ow * ACCUMULATE.itemsize


def forward(problem: ConvProblem, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
            *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``act(conv2d(x, w) + bias)`` for a groups=1 2D forward ``problem`` (bound with functools.partial)."""
    n, k = problem.batch, problem.out_channels
    oh, ow = problem.output_size
    x = x.to(ACCUMULATE)
    (top, bottom), (left, right) = problem.padding
    if top or bottom or left or right:
        # Padding explicitly handles asymmetric pairs, which unfold's own padding cannot.
        x = F.pad(x, (left, right, top, bottom))
    # (N, C*kh*kw, OH*OW); the channel index is outermost, matching w.reshape(K, C*kh*kw).
    cols = F.unfold(x, kernel_size=problem.filter_size, dilation=problem.dilation, stride=problem.stride)
    wm = w.to(ACCUMULATE).reshape(k, -1)
    if problem.layout == "channels_last":
        # (N, OH*OW, K) is NHWC memory order: the permuted view is dense channels-last.
        y = torch.matmul(cols.transpose(1, 2), wm.t()).view(n, oh, ow, k).permute(0, 3, 1, 2)
    else:
        y = torch.matmul(wm, cols).view(n, k, oh, ow)
    if bias is not None:
        y = y + bias.to(ACCUMULATE).view(1, k, 1, 1)
    y = activations.apply(problem.activation, y)
    y = to_layout(y.to(torch_dtype(problem.result_dtype)), problem.layout)
    if out is None:
        return y
    out.copy_(y)
    return out
