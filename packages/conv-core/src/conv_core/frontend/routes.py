"""How one call signature runs: straight to PyTorch's convolution, or through the engine's candidates.

A :class:`Route` is decided once per call signature (argument checks, normalisation and ranking
happen then); afterwards a call is one dictionary lookup (the engine's caches,
:mod:`conv_core.frontend.call_cache`) and :meth:`Route.run`.

Where aten (PyTorch's convolution) ranks first in every direction the call needs, the route is
*direct*: ``F.conv*d`` itself, with PyTorch's own autograd. Such a call costs what ``F.conv*d`` costs
plus the lookup, and under ``torch.compile`` Inductor sees its own convolution (see
:mod:`conv_core.frontend.ops`). Otherwise operands reach the ranked candidates dense in the problem's layout
(channels-first or channels-last, read from the input's strides); a non-dense input is copied once
into that layout, and the output has the input's layout.

A transposed call's route (:mod:`conv_core.frontend.transposed_route`) runs these directions' problems through
:func:`backward_data`, :func:`convolve` and :func:`backward_weight`.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from .. import activations
from ..arch import device_arch
from ..backends import aten
from .call import ConvArgs, problem_of_call
from .call_cache import BackwardKey, OpKey, calls
from ..engine import ANY_BACKEND, NoCandidateError, get_engine
from ..problem import ConvProblem, dtype_name, torch_dtype
from ..layout import detect_layout, is_dense_in, to_layout
from ..ranking import (ATEN_HOST_US, BASELINE_BACKEND, GRAD_ROUTE_US, MARGIN, PLUGIN_HOST_US, TRACED_PLUGIN_HOST_US,
                       Ranking, is_measured)
from ..weight_cache import DerivedWeightCache

log = logging.getLogger("conv_core")

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}

_warned_fallbacks: set[tuple[str, str]] = set()

#: Weights copied into their route's layout once per weight and version, not on every call (channels-last inputs,
#: weights not): a plugin's own derived weights (Winograd's), keyed on the tensor they get, are then kept too.
WEIGHTS_IN_LAYOUT = DerivedWeightCache(1024, 1 << 30)


class Route:
    """What the engine decided for one call signature: the problem, its rankings, and how to feed it.

    Everything a call of the signature shares is worked out here, once: whether the input arrives dense in
    the problem's layout (the signature includes its strides), the bias's dtype, the engine that runs it.
    """

    __slots__ = ("args", "problem", "ranking", "backward", "layout", "bias_dtype", "direct", "conv", "conv_args",
                 "activation", "x_dense", "engine", "native")

    def __init__(self, args: ConvArgs, problem: ConvProblem, ranking: Ranking,
                 backward: dict[str, Ranking], x_dense: bool = False) -> None:
        self.args, self.problem, self.ranking, self.backward = args, problem, ranking, backward
        self.layout = problem.layout
        self.bias_dtype = torch_dtype(problem.out_dtype)
        padding = args.symmetric_padding
        self.direct = (padding is not None and problem.out_dtype == problem.dtype
                       and aten_route_wins((ranking, *backward.values())))
        self.conv = CONV[args.ndim]
        self.conv_args = (compact(args.stride), compact(padding), compact(args.dilation), args.groups)
        self.activation = activations.ACTIVATIONS[args.activation] if args.activation else None
        self.x_dense, self.engine = x_dense, get_engine()
        #: ``F.conv*d`` itself then the activation: the eager entry makes this call inline (one frame less)
        self.native = self.direct
        if not backward and padding is not None and ranking.best.kernel_id == aten.CUDNN_RELU_ID:
            # cuDNN's fused operator called as the direct route calls F.conv*d (no autocast: not native)
            self.direct, self.conv, self.activation = True, torch.cudnn_convolution_relu, None
            self.conv_args = (args.stride, padding, args.dilation, args.groups)

    def run(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The forward convolution with its epilogue (autograd only on the direct route)."""
        if self.direct:
            y = self.conv(x, w, bias, *self.conv_args)
            return y if self.activation is None else self.activation(y)
        if bias is not None and (bias.dtype is not self.bias_dtype or not bias.is_contiguous()):
            bias = bias.to(self.bias_dtype).contiguous()
        layout = self.layout
        if not self.x_dense:
            x = to_layout(x, layout)
        if not is_dense_in(w, layout):
            w = WEIGHTS_IN_LAYOUT.get(w, lambda: to_layout(w, layout), form=layout)
        return self.engine.execute(self.ranking, (x, w, bias))


def aten_route_wins(rankings) -> bool:
    """Whether a call whose directions rank as ``rankings`` runs best as ``F.conv*d`` itself, with PyTorch's
    autograd: aten ranks first in every direction, or (with gradients, all times measured) the plugins' wins do
    not pay for what training through the engine's route costs.

    Each direction costs at least its backend's host time (:data:`~conv_core.ranking.PLUGIN_HOST_US`,
    :data:`~conv_core.ranking.ATEN_HOST_US`), the GPU and the host working side by side; a layer that trains
    through the engine costs :data:`~conv_core.ranking.GRAD_ROUTE_US` more per step, as measured on real models.
    The plugins must beat all-aten by :data:`MARGIN` after that.
    """
    if all("direct" in r.best.candidate.tags for r in rankings):
        return True
    if len(rankings) == 1:  # one direction: its ranking weighed the host times already
        return False
    aten = [next((r for r in ranking.ranked if "direct" in r.candidate.tags), None) for ranking in rankings]
    best = [ranking.best for ranking in rankings]
    if any(a is None for a in aten) or not all(is_measured(r.source) for r in (*aten, *best)):
        return False  # aten cannot run every direction, or a time is an estimate: the rankings' word stands
    host = sum(PLUGIN_HOST_US if "direct" not in r.candidate.tags else ATEN_HOST_US for r in best)
    route = max(sum(r.us for r in best), host) + GRAD_ROUTE_US
    direct = max(sum(a.us for a in aten), ATEN_HOST_US * len(aten))
    return route * MARGIN > direct


def pays_when_traced(route) -> bool:
    """Whether a route that runs a plugin kernel in some direction still gains in a compiled graph: in one of its
    directions the plugin, counted as at least :data:`~conv_core.ranking.TRACED_PLUGIN_HOST_US` (its opaque op's host
    time), beats aten by :data:`MARGIN` (or aten cannot run it: so a backend asked for by name runs as in eager).
    Elsewhere Inductor's own convolution is faster."""
    for ranking in (route.ranking, *route.backward.values()):
        best = ranking.best
        if best.candidate.backend == BASELINE_BACKEND:
            continue
        aten = next((r for r in ranking.ranked if r.candidate.backend == BASELINE_BACKEND), None)
        if aten is None or max(best.us, TRACED_PLUGIN_HOST_US) * MARGIN <= max(aten.us, ATEN_HOST_US):
            return True
    return False


def compact(values: tuple[int, ...] | None):
    """One int for equal values per dimension: ``F.conv*d`` parses an int several microseconds faster than
    a tuple, and this is on every call's path."""
    if values is None or len(set(values)) != 1:
        return values
    return values[0]


def rank_direction(problem: ConvProblem, device: torch.device, backend: str | None, may_time: bool) -> Ranking:
    """The engine's ranking of a gradient's problem; one the asked-for backend cannot run goes to the best other.

    (A transposed call's data gradient is a ``fwd`` problem, so the direction alone does not say.)

    Forcing a backend that has only a forward (``backend="example"``) still lets a model train: its
    gradients run on the best backend that has them, and a warning says so once per backend and direction.
    """
    engine = get_engine()
    try:
        return engine.ranking(problem, device, backend, may_time=may_time)
    except NoCandidateError:
        forced = backend or engine.settings.force_backend
        if forced is None:
            raise
    if (forced, problem.direction) not in _warned_fallbacks:
        _warned_fallbacks.add((forced, problem.direction))
        log.warning("conv_core: backend %r has no %s candidate for %s; the best other backend runs it",
                    forced, problem.direction, problem.key)
    return engine.ranking(problem, device, ANY_BACKEND, may_time=may_time)


def build_route(args: ConvArgs, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, needs_grad: bool,
                may_time: bool = True) -> Route:
    """Check the call, rank its forward (and, when gradients are needed, both backward problems)."""
    engine = get_engine()
    engine.check_backend(args.backend)
    problem = problem_of_call(args.ndim, x, w, bias, args)
    ranking = engine.ranking(problem, x.device, args.backend, may_time=may_time)
    backward = {}
    if needs_grad:
        for direction in ("bwd_data", "bwd_weight"):
            backward[direction] = rank_direction(problem.with_direction(direction), x.device, args.backend,
                                                 may_time)
    return Route(args, problem, ranking, backward, x_dense=is_dense_in(x, problem.layout))


def cacheable(may_time: bool, device: torch.device) -> bool:
    """Whether a route built now may be kept: not one ranked without the first-use timing it should have."""
    return may_time or not get_engine().benchmark_mode(device)


# ---- one direction on two operands, without epilogue (autograd, the custom ops, transposed calls) -------


def _run_direction(direction: str, a: torch.Tensor, b: torch.Tensor, input_shape, weight_shape, layout: str,
                   args: ConvArgs, ranking: Ranking | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``direction``'s result from its two operands, cast to the problem's dtype and dense in ``layout`` (and
    ``bias``, where the ranking's problem has an epilogue).

    Without a ``ranking`` the problem is ranked once and kept in the backward cache
    (:mod:`conv_core.frontend.call_cache`).
    """
    engine = get_engine()
    if ranking is None:
        dtype = dtype_name(b.dtype if direction == "bwd_data" else a.dtype)
        key = BackwardKey(direction, args, tuple(input_shape), tuple(weight_shape), dtype, layout, a.device,
                          torch.are_deterministic_algorithms_enabled())
        kept = calls().backward
        ranking = kept.get(key)
        if ranking is None:
            problem = args.problem(direction, input_shape, weight_shape, dtype, layout, False, device_arch(a.device))
            ranking = kept[key] = rank_direction(problem, a.device, args.backend, True)
    dtype = torch_dtype(ranking.problem.dtype)
    if a.dtype is not dtype:
        a = a.to(dtype)
    if b.dtype is not dtype:
        b = b.to(dtype)
    operands = (to_layout(a, layout), to_layout(b, layout))
    if ranking.problem.transposed_epilogue:
        operands += (None if bias is None else bias.to(torch_dtype(ranking.problem.out_dtype)),)
    return engine.execute(ranking, operands)


def backward_data(grad_pre: torch.Tensor, w: torch.Tensor, input_shape, layout: str, args: ConvArgs,
                  ranking: Ranking | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Gradient w.r.t. the input, given the gradient w.r.t. the pre-activation output (a transposed
    convolution's forward, with ``bias`` where ``ranking``'s problem fuses its epilogue)."""
    return _run_direction("bwd_data", grad_pre, w, input_shape, w.shape, layout, args, ranking, bias)


def backward_weight(x: torch.Tensor, grad_pre: torch.Tensor, weight_shape, args: ConvArgs,
                    ranking: Ranking | None = None, layout: str | None = None) -> torch.Tensor:
    """Gradient w.r.t. the weight, given the gradient w.r.t. the pre-activation output.

    ``layout`` is the ranking's (default: ``x``'s own), when ``x`` may come in another.
    """
    return _run_direction("bwd_weight", x, grad_pre, x.shape, weight_shape, layout or detect_layout(x), args,
                          ranking)


def convolve(x: torch.Tensor, w: torch.Tensor, layout: str, args: ConvArgs,
             ranking: Ranking | None = None) -> torch.Tensor:
    """The plain forward convolution (no bias, no epilogue), in ``layout``: a transposed call's data gradient."""
    return _run_direction("fwd", x, w, x.shape, w.shape, layout, args, ranking)


def pre_activation_grad(args: ConvArgs, y: torch.Tensor | None, grad: torch.Tensor) -> torch.Tensor:
    """Turn the output gradient into the gradient w.r.t. conv + bias (only relu/relu6 are fused here)."""
    if args.activation is None:
        return grad
    return activations.grad_from_output(args.activation, y, grad)


def bias_grad(grad_pre: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    dims = [0, *range(2, grad_pre.dim())]
    return grad_pre.sum(dims, dtype=torch.promote_types(grad_pre.dtype, torch.float32)).to(bias.dtype)


def forward(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, args: ConvArgs) -> torch.Tensor:
    """The forward convolution for normalised arguments (the opaque custom op's body); no autograd."""
    routes = calls().op_routes
    key = OpKey(args, x.shape, x.stride(), x.dtype, x.device, w.shape, w.dtype, None if bias is None else bias.dtype,
                torch.are_deterministic_algorithms_enabled())
    route = routes.get(key)
    if route is None:
        route = build_route(args, x, w, bias, needs_grad=False)
        route.direct = route.native = False  # the op was chosen for a plugin kernel; run the engine's choice
        routes[key] = route
    return route.run(x, w, bias)
