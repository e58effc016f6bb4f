"""Record the convolution problems a model runs: :func:`capture_shapes`.

The model runs once, under ``torch.no_grad``, and every forward convolution is
recorded as a :class:`~conv_core.problem.ConvProblem`, whichever way it was
called:

- ``torch.nn.Conv*d`` modules and ``torch.nn.functional.conv*d`` calls reach
  ``aten.convolution``, which a ``TorchDispatchMode`` sees;
- conv-core calls (``conv_core.conv*d``, ``conv_core.nn`` modules) are recorded
  where conv-core turns them into a problem, so the record is the problem
  conv-core solves: asymmetric padding, fused activation and ``out_dtype``
  included. The aten convolution that conv-core's own aten backend makes on
  its behalf is *not* recorded again, and a call that another backend serves
  (which runs no aten convolution at all) is still recorded;
- the ``conv_core::convolution`` custom op (a graph from ``torch.compile`` or
  ``torch.export`` run eagerly) runs the same plan, and is recorded there too.

Transposed convolutions (``nn.ConvTranspose*d``, ``F.conv_transpose*d`` and
conv-core's) are recorded as the convolution whose data gradient they are
(:mod:`conv_core.frontend.transposed`), marked ``transposed``: their forward is that
convolution's ``bwd_data`` problem. One whose geometry has no such problem
(``output_padding`` not smaller than ``stride``) is not recorded.

Each record carries the name of the innermost module running when the
convolution ran (``""`` for the model itself, as in ``named_modules()``).
Identical problems are merged into one :class:`CapturedLayer` with a count.

Not thread-safe across concurrent captures; convolutions run by other threads
during a capture are not recorded.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .. import functional
from . import routes, transposed_route
from .call import problem_of_tensors
from .call_cache import invalidate_memos
from ..problem import ConvProblem
from .transposed import TRANSPOSED_DIRECTIONS, TransposedArgs, problem_of_transposed_call

__all__ = ["CapturedLayer", "capture_shapes"]

_aten = torch.ops.aten
#: aten ops that are one whole convolution, with the arguments
#: (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...).
_ATEN_CONVOLUTIONS = (_aten.convolution.default, _aten._convolution.default)


@dataclass(frozen=True)
class CapturedLayer:
    """One distinct problem a model ran, how often, and which modules ran it.

    ``name`` is the first module that ran it; ``modules`` lists every distinct
    module that did, in the order they first ran it. A ``transposed`` layer's
    ``problem`` is the convolution whose data gradient it is, in the direction
    that computes the captured direction (its forward: ``bwd_data``).
    """

    name: str
    problem: ConvProblem
    count: int
    modules: tuple[str, ...] = ()
    transposed: bool = False


@dataclass
class _Recorder:
    """The state of one capture: the records so far, the module stack, and the conv-core nesting depth."""

    thread: int = field(default_factory=threading.get_ident)
    records: list[tuple[str, ConvProblem, bool]] = field(default_factory=list)
    module_stack: list[str] = field(default_factory=list)
    #: > 0 while conv-core runs a call it has already recorded: aten convolutions then belong to that call.
    core_depth: int = 0

    def record(self, problem: ConvProblem, transposed: bool = False) -> None:
        self.records.append((self.module_stack[-1] if self.module_stack else "", problem, transposed))

    @contextlib.contextmanager
    def inside_core_call(self):
        self.core_depth += 1
        try:
            yield
        finally:
            self.core_depth -= 1


# ---- where convolutions are seen ----------------------------------------------------------------


def _problem_of_aten_call(args) -> tuple[ConvProblem, bool] | None:
    """(the problem, whether transposed) of an ``aten.convolution``-style call; None for a transposed one
    that is no convolution's data gradient."""
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if not transposed:
        return problem_of_tensors(input, weight, bias, stride, list(padding), dilation, groups), False
    ndim = input.dim() - 2
    targs = TransposedArgs.of(ndim, stride, list(padding), output_padding, groups, dilation, None, None, None)
    if not targs.expressible:
        return None
    return problem_of_transposed_call(ndim, input, weight, bias, targs), True


class _ConvolutionMode(TorchDispatchMode):
    """Records aten and ``conv_core::convolution`` calls that conv-core has not already recorded."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.recorder.core_depth == 0:
            if func in _ATEN_CONVOLUTIONS:
                found = _problem_of_aten_call(args)
                if found is not None:
                    self.recorder.record(*found)
        # Ops run from here do not re-enter this mode (it is popped while its handler runs).
        return func(*args, **kwargs)


@contextlib.contextmanager
def _recording_core_calls(recorder: _Recorder):
    """Record conv-core's eager forward calls at their entry, and mark the aten work inside them.

    ``routes.Route.run`` (``transposed_route.TransposedRoute.run`` for transposed
    calls) is the one place every eager conv-core forward call passes, holding
    the exact problem it solves, so wrapping it for the duration of the capture
    sees them all without conv-core knowing about capturing.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(_not_inlined())
        stack.enter_context(_wrapping_run(routes.Route, recorder, transposed=False))
        stack.enter_context(_wrapping_run(transposed_route.TransposedRoute, recorder, transposed=True))
        yield


@contextlib.contextmanager
def _not_inlined():
    """The eager entry's native routes through ``Route.run`` for the block, where the capture sees them."""
    before = functional.INLINE
    functional.INLINE = False
    invalidate_memos()  # converted modules' own direct calls too
    try:
        yield
    finally:
        functional.INLINE = before
        invalidate_memos()


@contextlib.contextmanager
def _wrapping_run(route_class: type, recorder: _Recorder, transposed: bool):
    """``route_class.run`` recording its problem for the duration (a route with none runs unrecorded)."""
    original = route_class.run

    def run(plan, x, w, bias):
        if threading.get_ident() != recorder.thread or plan.problem is None:
            return original(plan, x, w, bias)
        recorder.record(plan.problem, transposed)
        if x.device.type == "meta":
            # Nothing needs to run on "meta"; shapes, dtype and layout are all a capture needs.
            return plan.empty_result(x.device) if transposed else plan.problem.empty_result(x.device)
        with recorder.inside_core_call():
            return original(plan, x, w, bias)

    route_class.run = run
    try:
        yield
    finally:
        route_class.run = original


@contextlib.contextmanager
def _tracking_modules(model: nn.Module, recorder: _Recorder):
    """Keep ``recorder.module_stack`` equal to the names of the modules whose forward is running."""
    handles = []
    for name, module in model.named_modules():
        def push(_module, _args, name=name):
            recorder.module_stack.append(name)

        def pop(_module, _args, _output):
            recorder.module_stack.pop()

        handles.append(module.register_forward_pre_hook(push, prepend=True))
        handles.append(module.register_forward_hook(pop, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# ---- the public function ------------------------------------------------------------------------


def _run(model: nn.Module, example_input) -> None:
    if isinstance(example_input, dict):
        model(**example_input)
    elif isinstance(example_input, tuple):
        model(*example_input)
    else:
        model(example_input)


def _merge(records: list[tuple[str, ConvProblem, bool]], direction: str) -> list[CapturedLayer]:
    """One layer per distinct problem (in ``direction``; a transposed layer's in the direction that computes
    it), in order of first appearance."""
    counts: dict[tuple[ConvProblem, bool], int] = {}
    modules: dict[tuple[ConvProblem, bool], list[str]] = {}
    for name, problem, transposed in records:
        key = (problem.with_direction(TRANSPOSED_DIRECTIONS[direction] if transposed else direction), transposed)
        counts[key] = counts.get(key, 0) + 1
        names = modules.setdefault(key, [])
        if name not in names:
            names.append(name)
    return [CapturedLayer(modules[k][0], k[0], n, tuple(modules[k]), k[1]) for k, n in counts.items()]


def capture_shapes(model: nn.Module, example_input, *, direction: str = "fwd") -> list[CapturedLayer]:
    """Run ``model`` once on ``example_input`` and return the distinct convolution problems it ran.

    ``example_input`` is the single argument of ``model``, a tuple of
    positional arguments, or a dict of keyword arguments. Problems are returned
    in ``direction`` (the backward problems of the forward convolutions, for
    ``bwd_data`` / ``bwd_weight``), each with the number of times it ran.
    Transposed convolutions are recorded as the convolution whose data gradient
    they are (``transposed=True``; see the module's text). Works
    on the ``meta`` device (arch ``"meta"``), which makes capturing big models cheap
    (conv-core calls then return an empty result of the right shape instead of running).
    """
    if direction not in ("fwd", "bwd_data", "bwd_weight"):
        raise ValueError(f"direction={direction!r} is not one of fwd, bwd_data, bwd_weight")
    recorder = _Recorder()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(_tracking_modules(model, recorder))
        stack.enter_context(_recording_core_calls(recorder))
        stack.enter_context(_ConvolutionMode(recorder))
        _run(model, example_input)
    return _merge(recorder.records, direction)
