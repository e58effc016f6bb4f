"""Roofline estimates: the shared yardstick for candidates' predicted times.

A kernel cannot beat ``max(flops / matmul rate, bytes / copy rate)``; a
backend's estimate is that floor divided by the fraction of each rate its
kernel reaches, plus a launch cost. The rates come from ``architectures.json``.
"""

from __future__ import annotations

from .arch import spec
from .problem import ConvProblem

#: Relative matmul rate by operand dtype (tensor-core bf16/fp16 = 1).
DTYPE_RATE = {"float16": 1.0, "bfloat16": 1.0, "float32": 0.5, "float64": 0.05}


def roofline_us(problem: ConvProblem) -> tuple[float, float]:
    """(compute time, memory time) in microseconds at the architecture's full rates."""
    arch = spec(problem.arch)
    compute = problem.flops / (arch.matmul_tflops * 1e12 * DTYPE_RATE[problem.dtype]) * 1e6
    memory = problem.min_bytes / (arch.copy_tbps * 1e12) * 1e6
    return compute, memory


def estimate_us(problem: ConvProblem, compute_efficiency: float, memory_efficiency: float,
                launches: int = 1) -> float:
    """Predicted time of a kernel reaching the given fractions of the two rates."""
    compute, memory = roofline_us(problem)
    return max(compute / compute_efficiency, memory / memory_efficiency) + launches * spec(problem.arch).launch_us
