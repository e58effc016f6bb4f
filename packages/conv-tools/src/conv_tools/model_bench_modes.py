"""The ways a user runs a model, each as one step the real-model benchmark can repeat and time.

:func:`prepare` turns a module and its input into a :class:`Runner` for one mode: it sets the module
up as that mode needs (eval or train, an optimizer, a captured CUDA graph, ``torch.compile``), makes
the first call (which pays for compilation, capture and first-use choices, so that cost is reported
apart) and keeps that call's output, which is checked against a float64 run.

| mode | one step |
| --- | --- |
| ``eager`` | inference under ``torch.no_grad`` |
| ``train`` | forward, backward, SGD step; weights in the benchmark's dtype |
| ``amp_train`` | the same with float32 weights under ``torch.autocast`` to the 16-bit dtype |
| ``graph`` | replay of an inference forward captured with ``torch.cuda.graph`` |
| ``graph_train`` | forward + backward captured by ``torch.cuda.make_graphed_callables``, then an eager SGD step |
| ``compile`` | inference through ``torch.compile(fullgraph=True)`` (graph breaks allowed only if that fails) |
| ``compile_max`` | the same with ``mode="max-autotune-no-cudagraphs"`` |
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn


#: Alternating rounds per mode. Five were too few on the lent machines: one process's rounds of the same model
#: spanned 0.80-1.22x, and the median of five moved by 5% between runs of the same code (2026-11-29, H200).
DEFAULT_ROUNDS = 11

MODES = ("eager", "train", "amp_train", "graph", "graph_train", "compile", "compile_max")
#: Modes that run the model in eval mode without gradients (the ``fused`` variant applies to them).
INFERENCE_MODES = frozenset({"eager", "graph", "compile", "compile_max"})
#: Modes that need a CUDA device.
CUDA_MODES = frozenset({"graph", "graph_train"})
#: Modes whose weights stay float32 (the 16-bit dtype comes from autocast).
AMP_MODES = frozenset({"amp_train"})
_COMPILE_MODES = {"compile": None, "compile_max": "max-autotune-no-cudagraphs"}
#: Learning rate of the benchmark's SGD steps: small, so a run of steps on random data stays finite.
LEARNING_RATE = 1e-4
#: Module types that make a training forward random; off for the first (checked) call where that is possible.
RANDOM_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass
class Runner:
    """One variant of a model, ready to be stepped: ``step()`` runs one iteration and returns the output."""

    step: Callable[[], object]
    first_output: object
    first_s: float
    #: Whether ``first_output`` is deterministic (no dropout was active), so comparing it to float64 means something.
    comparable: bool = True
    notes: list[str] = field(default_factory=list)
    #: The module ``step`` calls (eager and training modes), for hooks such as :mod:`conv_tools.model_attribution`'s;
    #: in graph mode the module the graph was captured from.
    module: nn.Module | None = None
    #: Tensors a captured graph reads that nothing else keeps alive (its static input).
    captured: tuple[torch.Tensor, ...] = ()


def is_random_layer(module: nn.Module) -> bool:
    """Dropout, or torchvision's stochastic depth: a layer whose training forward draws random numbers."""
    return isinstance(module, RANDOM_LAYERS) or type(module).__name__ == "StochasticDepth"


@contextlib.contextmanager
def random_layers_off(model: nn.Module) -> Iterator[bool]:
    """Put the model's random layers in eval mode for the block; yields whether it had any."""
    layers = [m for m in model.modules() if is_random_layer(m) and m.training]
    for m in layers:
        m.eval()
    try:
        yield bool(layers)
    finally:
        for m in layers:
            m.train()


def loss_of(output) -> torch.Tensor:
    """A scalar to differentiate: the mean square of every output tensor, summed (in float32)."""
    return sum(t.float().square().mean() for t in tensors_of(output))


def tensors_of(output) -> list[torch.Tensor]:
    """The tensors of a model's output (a tensor, or a tuple / list / dict of them), in a fixed order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        return [t for key in sorted(output) for t in tensors_of(output[key])]
    return [t for item in output for t in tensors_of(item)]


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` to ``dtype`` on ``device``, or nothing when ``dtype`` is None."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _first_call(step: Callable[[], object], device: torch.device) -> tuple[object, float]:
    """Run ``step`` once from an idle device; its output and its wall time in seconds."""
    _sync(device)
    start = time.perf_counter()
    out = step()
    _sync(device)
    return out, time.perf_counter() - start


# ---- the modes --------------------------------------------------------------------------------


def _eager(module: nn.Module, x: torch.Tensor) -> Runner:
    module.eval()

    def step():
        with torch.no_grad():
            return module(x)

    out, first_s = _first_call(step, x.device)
    return Runner(step, out, first_s, module=module)


def training_step(module: nn.Module, x: torch.Tensor, amp_dtype: torch.dtype | None):
    """One training step as a callable (forward under autocast when ``amp_dtype`` is given, backward, SGD with
    momentum), returning the forward's output; the DDP bench times the same step."""
    optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=0.9)

    def step():
        with autocast(x.device, amp_dtype):
            out = module(x)
        loss_of(out).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out

    return step


def _train(module: nn.Module, x: torch.Tensor, amp_dtype: torch.dtype | None) -> Runner:
    module.train()
    step = training_step(module, x, amp_dtype)
    with random_layers_off(module):
        out, first_s = _first_call(step, x.device)
    return Runner(step, out, first_s, module=module)


def _graph(module: nn.Module, x: torch.Tensor) -> Runner:
    """Inference captured once with ``torch.cuda.graph`` (after warm-up on a side stream, as capture needs)."""
    module.eval()
    static_x = x.clone()
    start = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            module(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = module(static_x)

    def step():
        graph.replay()
        return static_out

    out, _ = _first_call(step, x.device)
    # A replay reads the module's parameters and static_x where they were at capture: the runner keeps both alive
    # (freed, their memory goes to the next variant, and the replay reads it: an illegal address at best).
    return Runner(step, out, time.perf_counter() - start, module=module, captured=(static_x,))


def _graph_train(module: nn.Module, x: torch.Tensor) -> Runner:
    """Forward and backward captured by ``make_graphed_callables``; the loss and SGD step stay eager."""
    module.train()
    start = time.perf_counter()
    graphed = torch.cuda.make_graphed_callables(module, (x,))
    optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=0.9)
    comparable = not any(is_random_layer(m) for m in module.modules())

    def step():
        out = graphed(x)
        loss_of(out).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out

    out, _ = _first_call(step, x.device)
    notes = [] if comparable else ["dropout is captured in the graph: the output is random, not compared"]
    return Runner(step, out, time.perf_counter() - start, comparable, notes)


def _compiled(module: nn.Module, x: torch.Tensor, mode: str | None, backend: str) -> Runner:
    """``torch.compile`` with ``fullgraph=True``; if that fails, compiled again with graph breaks and noted."""
    module.eval()
    options = {"mode": mode} if mode is not None and backend == "inductor" else {}
    notes = [] if mode is None or backend == "inductor" else [f"backend {backend!r}: mode {mode!r} not applied"]
    compiled = torch.compile(module, fullgraph=True, backend=backend, **options)
    start = time.perf_counter()

    def call(fn):
        def step():
            with torch.no_grad():
                return fn(x)
        return step

    try:
        out, _ = _first_call(call(compiled), x.device)
    except Exception as exc:  # a graph break (or any failure of fullgraph): fall back, as a user would
        notes.append(f"fullgraph=True failed ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); "
                     "compiled with graph breaks")
        compiled = torch.compile(module, backend=backend, **options)
        out, _ = _first_call(call(compiled), x.device)
    return Runner(call(compiled), out, time.perf_counter() - start, notes=notes)


def prepare(mode: str, module: nn.Module, x: torch.Tensor, *, amp_dtype: torch.dtype,
            compile_backend: str = "inductor") -> Runner:
    """A :class:`Runner` of ``module`` on input ``x`` in ``mode`` (the module and input already cast for it)."""
    if mode == "eager":
        return _eager(module, x)
    if mode in ("train", "amp_train"):
        return _train(module, x, amp_dtype if mode in AMP_MODES else None)
    if mode == "graph":
        return _graph(module, x)
    if mode == "graph_train":
        return _graph_train(module, x)
    if mode in _COMPILE_MODES:
        return _compiled(module, x, _COMPILE_MODES[mode], compile_backend)
    raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
