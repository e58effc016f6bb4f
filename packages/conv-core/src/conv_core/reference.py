"""Float64 references for the three directions, and the tolerance model.

The forward reference is written out from the definition (pad, gather the
filter windows, multiply-accumulate per group) rather than calling PyTorch's
convolution, so that checking the ``aten`` backend is not circular. The two
backward references are the float64 autograd gradients of that forward, so all
three directions share one definition. For problems too large for the explicit
gather (it materialises every window), PyTorch's float64 convolution is used;
the tests cross-check the two.

Tolerance model (per element ``i``, see ``docs/tolerance.md``)::

    |out_i - ref_i| <= 2 u_out |ref_i| + (4 sqrt(L) u_acc + 2 E u_op) * absref_i

- ``u_out``: unit roundoff of the result dtype (bf16 2^-8, fp16 2^-11, fp32 2^-24): the final rounding;
- ``L``: the reduction length (``ConvProblem.reduction_length``), ``u_acc`` the accumulator's unit
  roundoff (fp32: 2^-24): a sum of ``L`` rounded terms drifts like ``sqrt(L)`` on random data;
- ``absref_i``: the same convolution of the operands' absolute values, ``sum |a||b|``: the scale that
  rounding inside the sum is relative to (it is large exactly where cancellation makes ``ref_i`` small);
- ``u_op``: rounding of the operands inside the kernel: 0 when they enter the matrix units exactly,
  tf32 (2^-11) for candidates tagged ``tf32``, the input dtype's roundoff for candidates with
  ``error_factor`` E > 1 (Winograd and other transforms that re-round derived operands).

The epilogue may round intermediate values to the result dtype, as PyTorch does:

- with a bias, the convolution ``conv_i`` may be rounded before the bias is added, so the bound
  for ``pre_i = conv_i + bias`` gains ``2 u_out |conv_i|`` (large where the bias cancels it);
- with a fused activation ``f`` the bound is ``2 u_out |f(pre_i)| + s_f * bound(pre_i)``, with
  ``s_f`` the activation's largest slope: ``f`` carries an error made before it to where
  ``|f(pre_i)|`` is much smaller than ``|pre_i|`` (gelu and silu of negative values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import activations
from .candidate import Candidate
from .problem import ConvProblem, torch_dtype
from .layout import empty_strided_for

#: Unit roundoff per dtype name (half the distance from 1 to the next value).
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53, "tf32": 2.0**-11}

#: Largest ``|f'(t)|`` over all ``t`` for each activation ``f``: how much it can grow an error in its input.
ACTIVATION_SLOPE = {"relu": 1.0, "relu6": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1}

#: Largest gathered-window tensor (elements) for the explicit forward; above it, torch's float64 conv.
EXPLICIT_LIMIT = 1 << 25


# ---- the forward definition -------------------------------------------------------------------


def _padded(x: torch.Tensor, problem: ConvProblem) -> torch.Tensor:
    return F.pad(x, [v for pair in reversed(problem.padding) for v in pair])


def _forward_explicit(x: torch.Tensor, w: torch.Tensor, problem: ConvProblem) -> torch.Tensor:
    """``y[n, k, o] = sum_{c, t} x_pad[n, c, o*s + t*d] * w[k, c, t]`` within each group."""
    windows = _padded(x, problem)
    for dim, (k, s, d) in enumerate(zip(problem.filter_size, problem.stride, problem.dilation)):
        windows = windows.unfold(2 + dim, d * (k - 1) + 1, s)[..., ::d]
    g, nd = problem.groups, problem.ndim
    n, out = problem.batch, problem.output_size
    windows = windows.reshape(n, g, problem.in_channels // g, *out, *problem.filter_size)
    wg = w.reshape(g, problem.out_channels // g, problem.in_channels // g, *problem.filter_size)
    spatial = "uvw"[:nd]
    taps = "xyz"[:nd]
    y = torch.einsum(f"ngc{spatial}{taps},gkc{taps}->ngk{spatial}", windows, wg)
    return y.reshape(n, problem.out_channels, *out)


def _forward_torch(x: torch.Tensor, w: torch.Tensor, problem: ConvProblem) -> torch.Tensor:
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    return conv(_padded(x, problem), w, None, problem.stride, 0, problem.dilation, problem.groups)


def conv_forward64(x: torch.Tensor, w: torch.Tensor, problem: ConvProblem, method: str = "auto") -> torch.Tensor:
    """The forward convolution without epilogue, in float64 (``method``: auto, explicit or torch)."""
    x, w = x.double(), w.double()
    if method == "auto":
        size = problem.batch * problem.in_channels * math.prod(problem.output_size) * math.prod(problem.filter_size)
        # On a GPU the gathered windows cost far more than PyTorch's float64 convolution, which the CPU
        # tests cross-check against the explicit definition.
        method = "explicit" if size <= EXPLICIT_LIMIT and x.device.type == "cpu" else "torch"
    return (_forward_explicit if method == "explicit" else _forward_torch)(x, w, problem)


# ---- the three directions ------------------------------------------------------------------------


def reference(problem: ConvProblem, operands: tuple, method: str = "auto") -> torch.Tensor:
    """Float64 result of ``problem`` on ``operands`` (ordered as ``Candidate.run`` takes them)."""
    a, b, bias = _operands(operands)
    return activations.apply(problem.activation, _biased(problem, _linear(problem, a, b, method), bias))


def _linear(problem: ConvProblem, a: torch.Tensor, b: torch.Tensor, method: str = "auto") -> torch.Tensor:
    """The direction's float64 result before any epilogue."""
    if problem.direction == "fwd":
        return conv_forward64(a, b, problem, method)
    if problem.direction == "bwd_data":
        dy, w = a.double(), b.double()
        x = torch.zeros(problem.input_shape, dtype=torch.float64, device=dy.device, requires_grad=True)
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(conv_forward64(x, w, problem, method), x, dy)
        return dx
    x, dy = a.double(), b.double()
    w = torch.zeros(problem.weight_shape, dtype=torch.float64, device=dy.device, requires_grad=True)
    with torch.enable_grad():
        (dw,) = torch.autograd.grad(conv_forward64(x, w, problem, method), w, dy)
    return dw


def _biased(problem: ConvProblem, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``y`` plus ``bias`` per channel of the result (none: ``y``)."""
    return y if bias is None else y + bias.double().reshape(1, -1, *[1] * problem.ndim)


def _operands(operands: tuple):
    """``(a, b, bias or None)`` of ``Candidate.run``'s operands."""
    a, b = operands[:2]
    return a, b, operands[2] if len(operands) > 2 else None


def absolute_reference(problem: ConvProblem, operands: tuple) -> torch.Tensor:
    """``sum |a| |b|`` (+ ``|bias|``) for every result element: the scale rounding errors are relative to."""
    linear = problem.replace(activation=None) if problem.direction != "bwd_weight" else problem
    return reference(linear, tuple(None if t is None else t.abs() for t in operands))


# ---- tolerance -----------------------------------------------------------------------------------


def operand_roundoff(problem: ConvProblem, candidate: Candidate | None) -> float:
    """``u_op`` of the model: how much the candidate rounds operands before multiplying them."""
    if candidate is None:
        return 0.0
    u = 0.0
    if "tf32" in candidate.tags and problem.dtype == "float32":
        u = UNIT_ROUNDOFF["tf32"]
    if candidate.error_factor > 1:
        u = max(u, UNIT_ROUNDOFF[problem.dtype])
    return u


def tolerance(problem: ConvProblem, ref: torch.Tensor, absref: torch.Tensor,
              candidate: Candidate | None = None, pre: torch.Tensor | None = None,
              conv: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element bound on ``|out - ref|`` (see the module docstring).

    ``pre``: the reference before the fused activation; ``conv``: the reference
    before the bias. Given, they widen the bound by the epilogue's roundings.
    """
    u_out = UNIT_ROUNDOFF[problem.result_dtype]
    u_acc = UNIT_ROUNDOFF["float64" if problem.dtype == "float64" else "float32"]
    factor = candidate.error_factor if candidate is not None else 1.0
    inner = 4 * math.sqrt(problem.reduction_length) * u_acc + 2 * factor * operand_roundoff(problem, candidate)
    floor = torch.finfo(torch_dtype(problem.result_dtype)).tiny
    has_activation = problem.activation is not None and pre is not None
    before = 2 * u_out * (pre if has_activation else ref).abs() + inner * absref
    if problem.bias and conv is not None:
        before = before + 2 * u_out * conv.abs()
    if not has_activation:
        return before + floor
    return 2 * u_out * ref.abs() + ACTIVATION_SLOPE[problem.activation] * before + floor


@dataclass(frozen=True)
class Comparison:
    """How a result compares with the reference."""

    ok: bool
    worst_ratio: float
    relative_l2: float
    bad_elements: int
    nan_elements: int
    message: str


@dataclass(frozen=True)
class Expected:
    """The float64 facts a result is judged against: computed once per operands, reused for every
    candidate compared on them (the offline sweep judges a dozen configurations per layer)."""

    ref: torch.Tensor
    absref: torch.Tensor
    #: a problem with an epilogue: the sums before the activation (with bias), and before the bias
    pre: torch.Tensor | None
    conv: torch.Tensor | None


def expected(problem: ConvProblem, operands: tuple) -> Expected:
    """The reference result of ``problem`` on ``operands`` and what its tolerance needs."""
    pre = conv = None
    if problem.activation is not None or problem.bias:
        a, b, bias = _operands(operands)
        conv = _linear(problem, a, b)
        pre = _biased(problem, conv, bias)
        ref = activations.apply(problem.activation, pre)
    else:
        ref = reference(problem, operands)
    return Expected(ref, absolute_reference(problem, operands), pre, conv)


def compare(problem: ConvProblem, out: torch.Tensor, operands: tuple, candidate: Candidate | None = None,
            slack: float = 1.0, known: Expected | None = None) -> Comparison:
    """Check ``out`` against the float64 reference under the tolerance model (times ``slack``); ``known``
    is :func:`expected` of the same operands, computed once for many comparisons."""
    if tuple(out.shape) != problem.result_shape:  # before any arithmetic: it would broadcast or raise
        return Comparison(False, math.inf, math.inf, -1, 0,
                          f"{problem.key}: result shape {tuple(out.shape)} != {problem.result_shape}")
    known = known if known is not None else expected(problem, operands)
    ref = known.ref
    bound = tolerance(problem, ref, known.absref, candidate, known.pre, known.conv) * slack
    got = out.double()
    err = (got - ref).abs()
    nan = int(torch.isnan(got).sum())
    bad = int((~(err <= bound)).sum())
    ratio = float((err / bound).nan_to_num(float("inf")).max()) if err.numel() else 0.0
    rel = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))
    ok = bad == 0
    message = (f"{problem.key}: {'ok' if ok else 'MISMATCH'}; {bad} of {err.numel()} elements out of tolerance "
               f"({nan} NaN), worst error/bound {ratio:.3g}, relative L2 {rel:.3g}")
    return Comparison(ok, ratio, rel, bad, nan, message)


def needed_error_factor(problem: ConvProblem, run, device: torch.device | str, seeds) -> tuple[float, float]:
    """``(E, raw)``: the smallest ``error_factor`` with which every element of ``run(*operands)`` passes the
    tolerance on every seed's :func:`random_operands`, and the largest ``|out - ref| / (u_in absref)``.

    How a kernel that rounds derived operands (Winograd's transforms) measures the factor it declares: about
    twice the worst ``E`` over many seeds (``docs/tolerance.md``). ``E`` is the part of each element's error
    that the output rounding and the accumulation terms do not cover, in units of ``2 u_in absref``; problems
    without a bias or an activation.
    """
    u_out, u_in = UNIT_ROUNDOFF[problem.result_dtype], UNIT_ROUNDOFF[problem.dtype]
    u_acc = UNIT_ROUNDOFF["float64" if problem.dtype == "float64" else "float32"]
    worst = raw = 0.0
    for seed in seeds:
        operands = random_operands(problem, device, seed)
        ref, absref = reference(problem, operands).cpu(), absolute_reference(problem, operands).cpu()
        err = (run(*operands).cpu().double() - ref).abs()
        rest = err - 2 * u_out * ref.abs() - 4 * math.sqrt(problem.reduction_length) * u_acc * absref
        worst = max(worst, float((rest / (2 * u_in * absref)).max()))
        raw = max(raw, float((err / (u_in * absref)).max()))
    return worst, raw


# ---- inputs --------------------------------------------------------------------------------------


def random_operands(problem: ConvProblem, device: torch.device | str, seed: int = 0, *,
                    on_device: bool = False) -> tuple:
    """Random operands for ``problem`` (ordered as ``Candidate.run`` takes them), dense in its layout.

    Normal values, scaled so that the result is of order 1 in every direction (no overflow in fp16, no underflow);
    never zeros, which hide unwritten outputs. Drawn on the CPU, the same on every device; ``on_device``: by the
    device's own generator (first-use timing: a CPU draw took 2 of a detection model's 12.6 s first forward).
    """
    source = torch.device(device) if on_device else torch.device("cpu")
    gen = torch.Generator(source).manual_seed(seed)
    scale = 1.0 / math.sqrt(problem.reduction_length)

    def make(shape, dtype_name: str, factor: float = 1.0) -> torch.Tensor:
        values = torch.randn(shape, generator=gen, dtype=torch.float32, device=source) * factor
        layout = problem.layout if len(shape) == problem.ndim + 2 else "channels_first"
        t = empty_strided_for(tuple(shape), torch_dtype(dtype_name), layout, device)
        t.copy_(values)
        return t

    (sa, sb), (da, db) = problem.operand_shapes, problem.operand_dtypes
    a = make(sa, da)
    b = make(sb, db, scale)
    if problem.direction != "fwd" and not problem.transposed_epilogue:
        return a, b
    bias = make((problem.result_shape[1],), problem.out_dtype, 0.5) if problem.bias else None
    return a, b, bias
