"""How one transposed call signature runs: ``F.conv_transpose*d`` itself, or ``C``'s rankings through the engine.

The transposed counterpart of :mod:`conv_core.frontend.routes` (``C`` is the convolution whose data gradient the
call is, :mod:`conv_core.frontend.transposed`). A route is *direct* where aten ranks first in every direction the
call needs (``C``'s ``bwd_data`` for the forward; ``fwd`` and ``bwd_weight`` for the gradients) and where
the geometry is not expressible as ``C``'s problem: it is then ``F.conv_transpose*d`` with PyTorch's
autograd. Otherwise :class:`TransposedFunction` runs the three rankings through the engine, operands dense
in the layout read from the input's strides; the output has that layout too.

Where the data gradient's best kernel is a plugin's that applies a transposed convolution's epilogue (tagged
``transposed_epilogue``), the bias and activation run in its store (:func:`fused_epilogue`); otherwise, and for
an output dtype of its own, they follow the kernel as elementwise operations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import activations
from .dispatch import call_transposed_backward_ops
from ..engine import get_engine
from ..problem import ConvProblem, dtype_name, torch_dtype
from ..ranking import BASELINE_BACKEND, Ranking
from .routes import backward_data, backward_weight, bias_grad, compact, convolve, rank_direction
from .transposed import TRANSPOSED_DIRECTIONS, TransposedArgs, check_transposed_call, problem_of_transposed_call

CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


class TransposedRoute:
    """What the engine decided for one transposed call signature.

    ``problem`` is ``C``'s ``bwd_data`` problem, the one the forward runs (None where the geometry is not
    expressible); ``backward`` holds ``C``'s ``fwd`` and ``bwd_weight`` rankings when gradients are needed.
    ``cast`` is the output dtype where it differs from the input's.
    """

    __slots__ = ("args", "problem", "ranking", "backward", "layout", "output_shape", "cast", "direct", "conv",
                 "conv_args", "activation", "bias_shape", "native", "fused")

    def __init__(self, args: TransposedArgs, problem: ConvProblem | None, ranking: Ranking | None,
                 backward: dict[str, Ranking], output_shape: tuple[int, ...], cast: torch.dtype | None,
                 fused: Ranking | None = None) -> None:
        self.args, self.problem, self.ranking, self.backward = args, problem, ranking, backward
        self.fused = fused
        self.layout = None if problem is None else problem.layout
        self.output_shape, self.cast = output_shape, cast
        rankings = (ranking, *backward.values()) if ranking is not None else ()
        self.direct = problem is None or (cast is None and all("direct" in r.best.candidate.tags for r in rankings))
        c = args.conv
        self.conv = CONV_TRANSPOSE[c.ndim]
        self.conv_args = (compact(c.stride), compact(args.padding), compact(args.output_padding), c.groups,
                          compact(c.dilation))
        self.activation = activations.ACTIVATIONS[args.activation] if args.activation else None
        self.bias_shape = (-1, *[1] * c.ndim)
        #: ``F.conv_transpose*d`` then the activation, nothing else: a converted module makes this call itself
        self.native = self.direct and cast is None

    def run(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The transposed convolution with its epilogue (autograd only on the direct route)."""
        if self.direct:
            y = self.conv(x, w, bias, *self.conv_args)
            y = y if self.activation is None else self.activation(y)
            return y if self.cast is None else y.to(self.cast)
        if self.fused is not None:
            return backward_data(x, w, self.output_shape, self.layout, self.args.conv, self.fused, bias)
        y = backward_data(x, w, self.output_shape, self.layout, self.args.conv, self.ranking)
        return self.epilogue(y, bias)

    def epilogue(self, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """Output dtype, bias and activation on the data-gradient kernel's fresh result."""
        if self.cast is not None:
            y = y.to(self.cast)
        if bias is not None:
            y = y.add_(bias.to(y.dtype).view(self.bias_shape))
        return y if self.activation is None else self.activation(y)

    def input_grad(self, grad_pre: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """dL/dx: ``C``'s forward on the pre-activation output gradient."""
        return convolve(grad_pre, w, self.layout, self.args.conv, self.backward["fwd"])

    def weight_grad(self, grad_pre: torch.Tensor, x: torch.Tensor, weight_shape) -> torch.Tensor:
        """dL/dw: ``C``'s weight gradient, its input being the output gradient and its output gradient ``x``."""
        return backward_weight(grad_pre, x, weight_shape, self.args.conv, self.backward["bwd_weight"], self.layout)

    def empty_result(self, device: torch.device | str) -> torch.Tensor:
        """An uninitialised output (what a capture on the ``meta`` device returns instead of running)."""
        y = self.problem.empty_result(device)
        return y if self.cast is None else y.to(self.cast)


def build_transposed_route(args: TransposedArgs, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                           needs_grad: bool, may_time: bool = True) -> TransposedRoute:
    """Check the call and rank ``C``'s data gradient (and, when gradients are needed, its forward and weight
    gradient)."""
    engine = get_engine()
    backend = args.conv.backend
    engine.check_backend(backend)
    check_transposed_call(args.ndim, x, w, bias, args)
    output_shape = args.output_shape(x.shape, w.shape)
    cast = None if args.out_dtype in (None, dtype_name(x.dtype)) else torch_dtype(args.out_dtype)
    if not args.expressible:
        return TransposedRoute(args, None, None, {}, output_shape, cast)
    problem = problem_of_transposed_call(args.ndim, x, w, bias, args)
    ranking = engine.ranking(problem, x.device, backend, may_time=may_time)
    backward = {}
    if needs_grad:
        for direction in ("bwd_data", "bwd_weight"):
            conv_problem = problem.with_direction(TRANSPOSED_DIRECTIONS[direction])
            backward[conv_problem.direction] = rank_direction(conv_problem, x.device, backend, may_time)
    fused = fused_epilogue(ranking, bias is not None, args.activation, x.device) if cast is None else None
    return TransposedRoute(args, problem, ranking, backward, output_shape, cast, fused)


def fused_epilogue(ranking: Ranking, bias: bool, activation: str | None, device: torch.device) -> Ranking | None:
    """The ranking of ``ranking``'s problem with the epilogue in it, where its best kernel is a plugin's that
    applies one (``transposed_epilogue``): the same kernel then adds the bias and activates in its store instead of
    two more passes over the output. None where there is no epilogue, aten runs, or the backend's ranking of the
    fused problem puts another kernel first (the choice stays the bare problem's; the kernel's tile may differ)."""
    best = ranking.best.candidate
    if not (bias or activation) or best.backend == BASELINE_BACKEND or "transposed_epilogue" not in best.tags:
        return None
    fused = get_engine().ranking(ranking.problem.replace(bias=bias, activation=activation), device, best.backend,
                                 may_time=False)
    return fused if fused.best.candidate.kernel == best.kernel else None


class TransposedFunction(torch.autograd.Function):
    """Eager autograd of an engine route: ``C``'s data gradient forward, its forward and weight gradient back."""

    @staticmethod
    def forward(ctx, x, w, bias, route: TransposedRoute):
        y = route.run(x, w, bias)
        ctx.route = route
        ctx.save_for_backward(x, w, bias, y if route.args.activation else None)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w, bias, y = ctx.saved_tensors
        route: TransposedRoute = ctx.route
        g = grad if route.args.activation is None else activations.grad_from_output(route.args.activation, y, grad)
        db = bias_grad(g, bias) if bias is not None and ctx.needs_input_grad[2] else None
        g = g.to(x.dtype)  # an out_dtype output's gradient, back in the kernels' dtype
        if torch.is_grad_enabled():  # create_graph=True: the custom ops know their own derivatives
            dx, dw = call_transposed_backward_ops(x, w, g, route.args.conv, ctx.needs_input_grad[:2])
        else:
            dx = route.input_grad(g, w) if ctx.needs_input_grad[0] else None
            dw = route.weight_grad(g, x, w.shape) if ctx.needs_input_grad[1] else None
        return dx, dw, db, None
