"""conv-core hooks of the ``example`` backend (entry point ``example = "conv_example.hooks"``).

The backend offers one candidate, ``example:im2col_mm:f32``, for small 2D
forward convolutions on the CPU, and declines everything else with a reason
that ``conv-core explain`` shows.

Its estimate is deliberately a little optimistic (higher efficiencies than the
``aten`` baseline's) so that, on the small CPU problems it accepts, the
integration tests see a plugin actually chosen. A real backend must give its
honest prediction (docs/ranking.md). Likewise ``tables/cpu.json`` is
hand-written for the tests (one problem, a chosen time); real tables come from
``conv-core tune --export``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from conv_core import BackendInfo, Candidate, Declined, hookimpl
from conv_core.estimate import estimate_us
from conv_core.problem import ConvProblem

from . import __version__, kernel

NAME = "example"

#: Largest im2col matrix the candidate accepts; beyond it the copy dominates and memory blows up.
MAX_WORKSPACE_BYTES = 64 * 1024 * 1024

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32")


@hookimpl
def conv_core_backend_info() -> BackendInfo:
    return BackendInfo(NAME, __version__, ("cpu",), "pure-PyTorch im2col + matmul, 2D forward, fp32 accumulation")


def decline_reason(problem: ConvProblem, device: torch.device) -> str | None:
    """Why the kernel cannot run ``problem`` on ``device``, or None if it can. Pure arithmetic: cheap."""
    if device.type != "cpu":
        return f"CPU only (device is {device.type})"
    if problem.direction != "fwd":
        return f"forward only; {problem.direction} is left to other backends"
    if problem.ndim != 2:
        return f"2D only; this problem is {problem.ndim}D"
    if problem.groups != 1:
        return f"groups={problem.groups}: only groups=1 is implemented"
    dtypes = {problem.dtype, problem.weight_dtype, problem.out_dtype}
    if not dtypes <= set(SUPPORTED_DTYPES):
        return f"dtypes {sorted(dtypes)}: supported are {', '.join(SUPPORTED_DTYPES)} (fp32 accumulation)"
    workspace = kernel.workspace_bytes(problem)
    if workspace > MAX_WORKSPACE_BYTES:
        return f"im2col buffer of {workspace >> 20} MiB exceeds the {MAX_WORKSPACE_BYTES >> 20} MiB limit"
    return None


@hookimpl
def conv_core_candidates(problem: ConvProblem, device: torch.device) -> list[Candidate | Declined]:
    reason = decline_reason(problem, device)
    if reason is not None:
        return [Declined(NAME, reason)]
    return [Candidate(
        NAME, "im2col_mm", "f32",
        run=functools.partial(kernel.forward, problem),  # bound once: nothing is re-derived per call
        estimate_us=estimate_us(problem, compute_efficiency=0.9, memory_efficiency=0.5),
        tags=frozenset({"needs_workspace"}),
        workspace_bytes=kernel.workspace_bytes(problem),
    )]


@hookimpl
def conv_core_tuning_tables() -> list[Path]:
    """Measured times shipped as package data, one file per architecture."""
    return sorted((Path(__file__).parent / "tables").glob("*.json"))
