"""Compile a model's kernels before its first call: ``conv-core warmup``.

A backend's kernels are compiled (or read back from the compiler's disk cache) the first time they run, so a
model's first forward pays for every kernel it uses: seconds on an empty Triton cache. Warming up runs each
problem the model (or a list of problems) will run once, through the candidate the engine ranks first, on random data,
so that the compiled kernels are in the disk cache for every later process and in memory for this one. With
``directions`` the backward problems too (training runs all three).

The problems of a model are those :func:`conv_core.capture_shapes` records on a copy built on the ``meta``
device (no memory, no weights downloaded) and converted as the user's model is (:func:`conv_core.convert`):
so a fused epilogue warms up the kernel that runs it.

With ``benchmark`` (``conv-core warmup --benchmark``) each problem is ranked in first-use benchmark mode, as
``CONV_CORE_BENCHMARK=1`` ranks it: its candidates are timed now and the times land in the first-use store
(:mod:`conv_core.first_use`), so a later process in benchmark mode reads them instead of timing again.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import torch

from .problem import DIRECTIONS, ConvProblem, torch_dtype


@dataclass(frozen=True)
class WarmedUp:
    """One problem run once: the kernel that ran it and how long the run took, compiling included."""

    name: str
    problem: ConvProblem
    kernel_id: str
    seconds: float


def model_problems(name: str, *, batch: int, dtype: str, layout: str, image_size: int, arch: str,
                   fuse: bool = False) -> list[tuple[str, ConvProblem]]:
    """``(layer, problem)`` of each distinct forward convolution of torchvision model ``name`` (random weights)
    on ``batch`` RGB images of ``image_size`` squared, converted by :func:`conv_core.convert` (``fuse``)."""
    from torchvision import models  # not a dependency of conv-core: only this command needs it

    from .frontend.capture import capture_shapes
    from .conversion import convert

    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    with torch.device("meta"):
        model = models.get_model(name, weights=None)
    model = convert(model.eval().to(dtype=torch_dtype(dtype), memory_format=memory_format), fuse=fuse)
    images = torch.empty(batch, 3, image_size, image_size, device="meta", dtype=torch_dtype(dtype))
    layers = capture_shapes(model, images.contiguous(memory_format=memory_format))
    return [(layer.name, layer.problem.replace(arch=arch)) for layer in layers]


def in_directions(problems: Iterable[tuple[str, ConvProblem]], directions: Sequence[str],
                  transposed: Collection[str] = ()) -> list[tuple[str, ConvProblem]]:
    """Each problem in each of ``directions``, duplicates dropped (layers that share a shape share kernels).

    Directions are the layers': those named in ``transposed`` are transposed convolutions, whose forward is
    their convolution's ``bwd_data`` (:func:`conv_core.frontend.transposed.layer_direction`).
    """
    from .frontend.transposed import layer_direction

    seen, chosen = set(), []
    for name, problem in problems:
        for direction in directions:
            p = problem.with_direction(layer_direction(direction, name in transposed))
            if p not in seen:
                seen.add(p)
                chosen.append((name, p))
    return chosen


def warmup(problems: Iterable[tuple[str, ConvProblem]], device: torch.device, *,
           directions: Sequence[str] = ("fwd",), on_done=None, transposed: Collection[str] = (),
           benchmark: bool = False) -> list[WarmedUp]:
    """Run each of ``problems`` (in each of ``directions``; ``transposed``: as :func:`in_directions`) once
    through the engine's first-ranked candidate, on random operands; ``on_done(WarmedUp)`` after each.
    ``benchmark``: rank in first-use benchmark mode (see the module's text). Returns what ran, in order."""
    from .engine import get_engine
    from .reference import random_operands

    unknown = set(directions) - set(DIRECTIONS)
    if unknown:
        raise ValueError(f"directions {sorted(unknown)} are not among {', '.join(DIRECTIONS)}")
    engine, done = (benchmark_engine(device) if benchmark else get_engine()), []
    for name, problem in in_directions(problems, directions, transposed):
        started = time.perf_counter()
        ranking = engine.ranking(problem, device)
        engine.execute(ranking, random_operands(problem, device, seed=0, on_device=True))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        done.append(WarmedUp(name, problem, ranking.ranked[0].candidate.kernel_id, time.perf_counter() - started))
        if on_done is not None:
            on_done(done[-1])
    return done


def benchmark_engine(device: torch.device):
    """The process-wide engine if it is in benchmark mode on ``device``; else one that is, sharing its backends
    (so that the process-wide engine's choices stay as its settings make them)."""
    import dataclasses

    from .engine import Engine, get_engine

    engine = get_engine()
    if engine.benchmark_mode(device):
        return engine
    return Engine(dataclasses.replace(engine.settings, benchmark=True), engine.registry)
