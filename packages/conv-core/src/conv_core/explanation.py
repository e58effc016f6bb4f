"""Why a convolution runs the kernel it runs: :func:`explain`.

The engine's choice depends on which backends loaded, which of them declined
the problem, which candidates a tuning run found broken, and where each
candidate's expected time came from (the user's tuning database, a table a
backend ships, a first-use benchmark, or the backend's own estimate). An
:class:`Explanation` gathers all of it for one problem on one device, as a
text table (``str()``) and as JSON (:meth:`Explanation.to_dict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .arch import device_arch, device_name
from .frontend.call import autocast_operands, problem_of_tensors
from .candidate import Declined
from .engine import NoCandidateError, get_engine
from .problem import ConvProblem
from .text_table import format_table
from .ranking import Ranking, rank
from .frontend.transposed import (TRANSPOSED_DIRECTIONS, TransposedArgs, check_transposed_call, describe,
                         problem_of_transposed_call)


@dataclass(frozen=True)
class Row:
    """One ranked candidate: its place, its expected time and where that time came from."""

    rank: int
    kernel: str
    us: float
    source: str
    estimate_us: float
    tags: tuple[str, ...]


@dataclass
class Explanation:
    """Everything that decided the kernel for ``problem`` on ``device``.

    ``call`` says how a transposed call maps onto ``problem`` (:mod:`conv_core.frontend.transposed`); where it maps
    onto none, ``problem`` is None and PyTorch's transposed convolution runs.
    """

    problem: ConvProblem | None
    device: str
    rows: list[Row]
    declines: list[Declined]
    excluded: list[tuple[str, str]]
    failed_backends: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)
    call: str = ""

    @property
    def picked(self) -> str | None:
        """Kernel id the engine runs first, or None when no candidate is left."""
        return self.rows[0].kernel if self.rows else None

    def to_dict(self) -> dict:
        """Plain JSON-ready data (non-finite times become null)."""
        return {
            "call": self.call or None,
            "problem": None if self.problem is None else self.problem.key,
            "device": self.device,
            "picked": self.picked,
            "ranked": [{"rank": r.rank, "kernel": r.kernel, "us": _finite(r.us), "source": r.source,
                        "estimate_us": _finite(r.estimate_us), "tags": list(r.tags)} for r in self.rows],
            "declined": [{"backend": d.backend, "reason": d.reason} for d in self.declines],
            "excluded": [{"kernel": k, "reason": why} for k, why in self.excluded],
            "failed_backends": [{"backend": b, "error": e} for b, e in self.failed_backends],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        p = self.problem
        lines = [self.call] if self.call else []
        if p is None:
            return "\n".join([*lines, f"device   {self.device}"])
        lines += [
            f"problem  {p.key}",
            f"shape    {describe_shape(p)}  ({p.direction}, {p.dtype}, {p.layout}; {_flops(p.flops)})",
            f"device   {self.device}",
            f"picked   {self.picked or 'nothing: no candidate is left'}",
        ]
        if self.rows:
            lines.append("")
            table = [(r.rank, r.kernel, _us(r.us), r.source, _us(r.estimate_us), ",".join(r.tags) or "-")
                     for r in self.rows]
            lines.append(format_table(("rank", "kernel", "time us", "source", "estimate us", "tags"), table,
                                      align="rlrlrl"))
        sections = (
            ("declined", [f"{d.backend}: {d.reason}" for d in self.declines]),
            ("excluded", [f"{k}: {why}" for k, why in self.excluded]),
            ("failed backends", [f"{b}: {e}" for b, e in self.failed_backends]),
            ("notes", self.notes),
        )
        for title, items in sections:
            if items:
                lines += ["", f"{title}:"] + [f"  {item}" for item in items]
        return "\n".join(lines)


def explain(problem_or_input: ConvProblem | torch.Tensor, weight: torch.Tensor | None = None,
            bias: torch.Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
            activation: str | None = None, out_dtype=None, direction: str = "fwd",
            device: torch.device | str | None = None, backend: str | None = None, transposed: bool = False,
            output_padding=0) -> Explanation:
    """Explain the engine's choice for a problem, or for the tensors of a ``conv*d`` call.

    ``transposed=True`` (with ``output_padding``) explains a ``conv_transpose*d`` call instead: the choice
    for the problem of the convolution whose ``direction`` computes it (:mod:`conv_core.frontend.transposed`), or,
    for a geometry no such problem has, why PyTorch's transposed convolution runs.

    With a :class:`ConvProblem`, ``device`` defaults to the CPU for ``cpu``
    problems and the current GPU otherwise. With tensors, the problem is the
    call's (``ConvProblem.from_tensors``, after autocast's casts) on the input's device. ``backend``
    restricts the choice to one backend, as the ``backend=`` argument of
    ``conv2d`` does.

    The ranking shown is the engine's own (so a candidate that failed when run
    in this process shows as excluded); when no candidate is left, a fresh
    ranking still lists every decline and exclusion.
    """
    call = ""
    if transposed:
        if weight is None:
            raise TypeError("explain(transposed=True) needs the input and weight tensors of a call")
        problem, call = _transposed_problem(problem_or_input, weight, bias, stride, padding, output_padding, groups,
                                            dilation, activation, out_dtype, direction)
        device = problem_or_input.device if device is None else torch.device(device)
        if problem is None:
            return Explanation(None, _describe_device(device), [], [], [], [], call=call)
    elif isinstance(problem_or_input, ConvProblem):
        problem = problem_or_input
        device = torch.device(device if device is not None else _default_device(problem))
    else:
        if weight is None:
            raise TypeError("explain() needs a ConvProblem, or the input and weight tensors of a call")
        # The problem the call runs: autocast's casts applied, as conv2d applies them.
        x, weight, bias = autocast_operands(problem_or_input, weight, bias)
        problem = problem_of_tensors(x, weight, bias, stride, padding, dilation, groups,
                                           activation=activation, out_dtype=out_dtype, direction=direction)
        device = problem_or_input.device if device is None else torch.device(device)
    engine = get_engine()
    ranking = _ranking(engine, problem, device, backend)
    return Explanation(
        problem=problem,
        device=_describe_device(device),
        rows=[Row(i + 1, r.kernel_id, r.us, r.source, r.candidate.estimate_us, tuple(sorted(r.candidate.tags)))
              for i, r in enumerate(ranking.ranked)],
        declines=list(ranking.declined),
        excluded=list(ranking.excluded),
        failed_backends=[(b.name, b.load_error) for b in engine.registry.backends() if b.load_error],
        notes=_notes(engine, problem, device, backend),
        call=call,
    )


def _transposed_problem(input, weight, bias, stride, padding, output_padding, groups, dilation, activation,
                        out_dtype, direction) -> tuple[ConvProblem | None, str]:
    """(the problem, the line saying how the transposed call maps onto it) for a ``conv_transpose*d`` call."""
    x, weight, bias = autocast_operands(input, weight, bias)
    ndim = x.dim() - 2 if isinstance(x, torch.Tensor) else 0
    if direction not in TRANSPOSED_DIRECTIONS:
        raise ValueError(f"direction={direction!r} is not one of {', '.join(TRANSPOSED_DIRECTIONS)}")
    args = TransposedArgs.of(ndim, stride, padding, output_padding, groups, dilation, activation, out_dtype, None)
    check_transposed_call(ndim, x, weight, bias, args)
    problem = problem_of_transposed_call(ndim, x, weight, bias, args, direction) if args.expressible else None
    return problem, describe(ndim, direction, problem, args)


def _ranking(engine, problem: ConvProblem, device: torch.device, backend: str | None) -> Ranking:
    """The engine's ranking, or a fresh one (declines and exclusions only) when it has no candidate."""
    try:
        return engine.ranking(problem, device, backend)
    except NoCandidateError:
        only = backend or engine.settings.force_backend
        candidates, declined = engine.registry.candidates(problem, device, only=only)
        return rank(problem, candidates, declined, engine.timings(device),
                    allow_nondeterministic=engine.settings.nondeterministic,
                    trust_estimates=engine.settings.trust_estimates,
                    deterministic_mode=torch.are_deterministic_algorithms_enabled())


def _notes(engine, problem: ConvProblem, device: torch.device, backend: str | None) -> list[str]:
    """Facts that change the choice but are easy to forget: forced backends, arch mismatches."""
    notes = []
    forced = backend or engine.settings.force_backend
    if forced:
        notes.append(f"restricted to backend {forced!r}" + ("" if backend else " by CONV_CORE_BACKEND"))
        if engine.registry.get(forced) is None:
            notes.append(f"no backend named {forced!r} is installed")
    if engine.settings.benchmark:
        notes.append("CONV_CORE_BENCHMARK is on: untuned candidates are timed on first use")
    elif engine.benchmark_mode(device):
        notes.append("torch.backends.cudnn.benchmark is on: untuned candidates are timed on first use")
    if engine.settings.nondeterministic:
        notes.append("CONV_CORE_NONDETERMINISTIC is on: candidates tagged atomics are ranked by time")
    arch = device_arch(device)
    if arch != problem.arch:
        notes.append(f"the problem is for {problem.arch} but {device} is {arch}: measured tables of {arch} apply")
    return notes


def _default_device(problem: ConvProblem) -> torch.device:
    return torch.device("cpu" if problem.arch == "cpu" else "cuda")


def _describe_device(device: torch.device) -> str:
    name = device_name(device)
    return f"{device} ({name}, {device_arch(device)})" if name != device.type else str(device)


def describe_shape(problem: ConvProblem) -> str:
    """Compact geometry in the shape-spec style: ``n32 c64 k64 i56x56 f3x3 s1 p1`` (+ ``g``, ``d`` if not 1)."""
    def dims(values) -> str:
        values = tuple(values)
        return str(values[0]) if len(set(values)) == 1 else "x".join(str(v) for v in values)

    sym = problem.symmetric_padding
    pad = dims(sym) if sym is not None else "x".join(f"{a}.{b}" for a, b in problem.padding)
    text = (f"n{problem.batch} c{problem.in_channels} k{problem.out_channels} "
            f"i{'x'.join(str(v) for v in problem.input_size)} f{'x'.join(str(v) for v in problem.filter_size)} "
            f"s{dims(problem.stride)} p{pad}")
    if problem.groups != 1:
        text += f" g{problem.groups}"
    if any(d != 1 for d in problem.dilation):
        text += f" d{dims(problem.dilation)}"
    return text


def _flops(count: int) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} FLOP"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _us(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"
