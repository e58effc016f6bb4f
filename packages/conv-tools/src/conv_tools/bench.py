"""Measuring every candidate of every backend on a list of layers: :func:`run_bench`.

For each problem the benchmark times each candidate on the same random
operands, plus PyTorch's own ``conv*d`` as the reference a user would compare
against, and records which candidate the engine's ranking picks. The summary
answers the two questions that matter: how much faster than ``aten`` the picks
are, and how often the ranking picks the candidate that was actually fastest.

A candidate that raises is recorded with its error and the run goes on; a
candidate the ranking excludes (measured as broken by ``conv-core tune``) is
not run at all, since a kernel known to be wrong may also fault.

A suite's transposed layer (:mod:`conv_tools.suites`) is benchmarked as the
problem that computes it, its forward as its convolution's ``bwd_data``, whose
aten candidate is cuDNN's transposed convolution (what ``F.conv_transpose*d``
runs); its rows show the layer's own direction, marked ``(transposed)``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from conv_core import activations
from conv_core.engine import get_engine
from conv_core.explanation import describe_shape
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_core.text_table import format_table
from conv_core.timing import median_us
from conv_core.frontend.transposed import direction_label, layer_direction

from .progress import Progress, progress_mode
from .suites import SuiteLayer

#: Pseudo kernel id of the direct ``torch.nn.functional.conv*d`` call.
TORCH = "torch"


@dataclass(frozen=True)
class Measurement:
    """One kernel timed on one problem: a median time, or why there is none."""

    kernel: str
    us: float | None = None
    error: str | None = None
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.us is not None


@dataclass
class BenchRow:
    """One problem's measurements and the ranking's pick."""

    layer: str
    problem: ConvProblem
    measurements: list[Measurement] = field(default_factory=list)
    picked: str | None = None
    picked_source: str | None = None
    pick_error: str | None = None
    transposed: bool = False

    @property
    def direction(self) -> str:
        """The layer's direction: a transposed layer's forward is its convolution's ``bwd_data`` problem."""
        return layer_direction(self.problem.direction, self.transposed)

    @property
    def direction_label(self) -> str:
        return direction_label(self.direction, self.transposed)

    def time_of(self, kernel: str | None) -> float | None:
        return next((m.us for m in self.measurements if m.kernel == kernel and m.ok), None)

    @property
    def aten_us(self) -> float | None:
        return self.time_of(next((m.kernel for m in self.measurements if m.kernel.startswith("aten:")), None))

    @property
    def torch_us(self) -> float | None:
        return self.time_of(TORCH)

    @property
    def fastest(self) -> Measurement | None:
        """The fastest candidate that ran (the torch reference is not a candidate)."""
        timed = [m for m in self.measurements if m.ok and m.kernel != TORCH]
        return min(timed, key=lambda m: (m.us, m.kernel), default=None)

    @property
    def picked_us(self) -> float | None:
        return self.time_of(self.picked)

    @property
    def speedup(self) -> float | None:
        """aten time / fastest candidate's time."""
        return _ratio(self.aten_us, self.fastest.us if self.fastest else None)

    @property
    def pick_speedup(self) -> float | None:
        """aten time / picked candidate's time."""
        return _ratio(self.aten_us, self.picked_us)

    @property
    def picked_over_fastest(self) -> float | None:
        """How much slower the pick is than the fastest candidate (1.0: the ranking was right)."""
        return _ratio(self.picked_us, self.fastest.us if self.fastest else None)

    def tflops(self, us: float | None) -> float | None:
        return self.problem.flops / us / 1e6 if us else None

    def to_dict(self) -> dict:
        fastest = self.fastest
        return {
            "layer": self.layer,
            "problem": self.problem.key,
            "shape": describe_shape(self.problem),
            "direction": self.direction,
            "transposed": self.transposed,
            "flops": self.problem.flops,
            "picked": self.picked,
            "picked_source": self.picked_source,
            "pick_error": self.pick_error,
            "picked_us": self.picked_us,
            "fastest": fastest.kernel if fastest else None,
            "fastest_us": fastest.us if fastest else None,
            "aten_us": self.aten_us,
            "torch_us": self.torch_us,
            "speedup": self.speedup,
            "pick_speedup": self.pick_speedup,
            "picked_over_fastest": self.picked_over_fastest,
            "measurements": [{"kernel": m.kernel, "us": m.us, "tflops": self.tflops(m.us),
                              "error": m.error, "skipped": m.skipped} for m in self.measurements],
        }


# ---- measuring -----------------------------------------------------------------------------------


def time_call(kernel: str, fn: Callable[[], object], device: torch.device, *, reps: int, warmup: int) -> Measurement:
    """Median time of ``fn`` as a :class:`Measurement`; an exception becomes the measurement's error."""
    try:
        return Measurement(kernel, us=median_us(fn, device, warmup=warmup, reps=reps))
    except Exception as exc:  # one broken kernel must not end a benchmark
        return Measurement(kernel, error=f"{type(exc).__name__}: {exc}".splitlines()[0])


def run_bench(problems: list[tuple[str, ConvProblem]], device: torch.device | str, *, reps: int, warmup: int,
              progress: bool | str = True, transposed: Collection[str] = ()) -> list[BenchRow]:
    """Time every candidate (and PyTorch's forward) on each ``(layer, problem)``.

    ``progress``: ``True`` draws a bar on stderr when it is a terminal,
    ``"always"`` draws it anyway, ``False`` never. ``transposed`` names the
    layers that are transposed convolutions (:func:`conv_tools.suites.transposed_layers`).
    """
    device = torch.device(device)
    rows = []
    with Progress(len(problems), "bench", mode=progress_mode(progress)) as bar:
        for layer, problem in problems:
            bar.step(layer)
            rows.append(bench_problem(layer, problem, device, reps=reps, warmup=warmup,
                                      transposed=layer in transposed))
    return rows


def bench_problem(layer: str, problem: ConvProblem, device: torch.device, *, reps: int, warmup: int,
                  transposed: bool = False) -> BenchRow:
    """Measure one problem: the engine's pick, every candidate, and the torch reference."""
    engine = get_engine()
    row = BenchRow(layer, problem, transposed=transposed)
    excluded: dict[str, str] = {}
    try:
        ranking = engine.ranking(problem, device)
        row.picked, row.picked_source = ranking.best.kernel_id, ranking.best.source
        excluded = dict(ranking.excluded)
    except Exception as exc:
        row.pick_error = f"{type(exc).__name__}: {exc}"
    candidates, _ = engine.registry.candidates(problem, device)
    operands = random_operands(problem, device, seed=0)
    for c in candidates:
        if c.kernel_id in excluded:
            row.measurements.append(Measurement(c.kernel_id, skipped=excluded[c.kernel_id]))
        else:
            row.measurements.append(time_call(c.kernel_id, lambda c=c: c.run(*operands), device,
                                              reps=reps, warmup=warmup))
    torch_fn, why_not = torch_reference(problem, operands, transposed)
    if torch_fn is not None:
        row.measurements.append(time_call(TORCH, torch_fn, device, reps=reps, warmup=warmup))
    elif row.direction == "fwd":
        row.measurements.append(Measurement(TORCH, skipped=why_not))
    return row


def torch_reference(problem: ConvProblem, operands: tuple,
                    transposed: bool = False) -> tuple[Callable[[], object] | None, str]:
    """The plain PyTorch forward call a user would write, or None and why it does not apply.

    Only forward problems with symmetric padding and one dtype for every
    tensor map onto ``torch.nn.functional.conv*d`` directly; a transposed
    layer's forward (its convolution's ``bwd_data``) onto ``conv_transpose*d``.
    """
    if layer_direction(problem.direction, transposed) != "fwd":
        return None, "forward only"
    if transposed:
        return _transposed_reference(problem, operands)
    padding = problem.symmetric_padding
    if padding is None:
        return None, "asymmetric padding"
    if not problem.dtype == problem.weight_dtype == problem.out_dtype:
        return None, "mixed dtypes"
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    x, w, bias = operands

    def call():
        return activations.apply(problem.activation,
                                 conv(x, w, bias, problem.stride, padding, problem.dilation, problem.groups))

    return call, ""


def _transposed_reference(problem: ConvProblem, operands: tuple) -> tuple[Callable[[], object] | None, str]:
    """``F.conv_transpose*d`` of a transposed layer's forward (``problem`` is its convolution's ``bwd_data``)."""
    padding = problem.symmetric_padding
    if padding is None:
        return None, "asymmetric padding"
    conv_transpose = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[problem.ndim]
    output_padding = SuiteLayer.from_problem("", problem).output_padding
    dy, w = operands

    def call():
        return conv_transpose(dy, w, None, problem.stride, padding, output_padding, problem.groups, problem.dilation)

    return call, ""


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# ---- reporting -----------------------------------------------------------------------------------


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: list[BenchRow]) -> dict:
    """The ranking's quality over all rows: speedup of the picks over aten, and how often it was right."""
    judged = [r for r in rows if r.picked_over_fastest is not None]
    return {
        "problems": len(rows),
        "geomean_pick_speedup": geomean([r.pick_speedup for r in rows if r.pick_speedup]),
        "geomean_best_speedup": geomean([r.speedup for r in rows if r.speedup]),
        "picked_fastest": sum(1 for r in judged if r.picked == r.fastest.kernel),
        "judged": len(judged),
        "geomean_picked_over_fastest": geomean([r.picked_over_fastest for r in judged]),
        "errors": sum(1 for r in rows for m in r.measurements if m.error),
    }


def format_report(rows: list[BenchRow], device: str = "") -> str:
    """The per-problem table, the summary, and every error, as text."""
    show_shape = any(r.layer != describe_shape(r.problem) for r in rows)  # a --shape run is named by its shape
    table = []
    for r in rows:
        fastest = r.fastest
        shape = (describe_shape(r.problem),) if show_shape else ()
        table.append((r.layer, r.direction_label, *shape, fastest.kernel if fastest else None, r.picked,
                      _fmt(r.aten_us), _fmt(r.torch_us), _fmt(fastest.us if fastest else None),
                      _fmt(r.tflops(fastest.us if fastest else None)), _x(r.speedup), _x(r.picked_over_fastest)))
    headers = ("layer", "dir", *(("shape",) if show_shape else ()), "fastest", "picked", "aten us", "torch us",
               "best us", "TFLOP/s", "speedup", "picked/fastest")
    align = "ll" + ("l" if show_shape else "") + "llrrrrrr"
    lines = [format_table(headers, table, align=align), "", summary_line(summarize(rows), device)]
    problems = [f"  {r.layer}: ranking failed: {r.pick_error}" for r in rows if r.pick_error]
    problems += [f"  {r.layer} {m.kernel}: {m.error}" for r in rows for m in r.measurements if m.error]
    if problems:
        lines += ["", "errors:"] + problems
    return "\n".join(lines)


def summary_line(s: dict, device: str = "") -> str:
    on = f" on {device}" if device else ""
    return (f"{s['problems']} problems{on}: picks vs aten geomean {_x(s['geomean_pick_speedup'])}, "
            f"best vs aten {_x(s['geomean_best_speedup'])}; pick was the fastest in {s['picked_fastest']}/"
            f"{s['judged']}; geomean picked/fastest {_x(s['geomean_picked_over_fastest'])}; "
            f"{s['errors']} candidate errors")


def _fmt(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _x(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}x"


CSV_FIELDS = ("layer", "direction", "problem", "kernel", "us", "tflops", "speedup_vs_aten", "picked", "fastest",
              "error", "skipped")


def write_csv(rows: list[BenchRow], path: str | Path) -> None:
    """One line per (problem, kernel), for spreadsheets and plotting scripts."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in rows:
            fastest = r.fastest
            for m in r.measurements:
                writer.writerow({
                    "layer": r.layer, "direction": r.direction_label, "problem": r.problem.key,
                    "kernel": m.kernel, "us": m.us, "tflops": r.tflops(m.us),
                    "speedup_vs_aten": _ratio(r.aten_us, m.us), "picked": int(m.kernel == r.picked),
                    "fastest": int(fastest is not None and m.kernel == fastest.kernel),
                    "error": m.error or "", "skipped": m.skipped or "",
                })


def to_json(rows: list[BenchRow], device: torch.device | str, *, reps: int, warmup: int) -> dict:
    """The whole run as JSON-ready data: where and how it was measured, every row, the summary."""
    from conv_core.arch import device_arch, device_name

    return {
        "device": str(device), "device_name": device_name(device), "arch": device_arch(device),
        "reps": reps, "warmup": warmup, "versions": get_engine().versions(),
        "rows": [r.to_dict() for r in rows], "summary": summarize(rows),
    }


def write_json(rows: list[BenchRow], path: str | Path, device: torch.device | str, *, reps: int, warmup: int) -> None:
    Path(path).write_text(json.dumps(to_json(rows, device, reps=reps, warmup=warmup), indent=1) + "\n")
