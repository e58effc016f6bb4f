"""conv-core hook implementations of the ``rdna`` backend."""

from __future__ import annotations

from pathlib import Path

import torch
from conv_core.candidate import BackendInfo
from conv_core.hookspec import hookimpl
from conv_core.problem import ConvProblem

from . import __version__
from .candidates import BACKEND, candidates

#: Architectures the kernels are written and configured for (any other Triton GPU gets the default table).
TARGETS = ("gfx1100", "gfx1151", "gfx1200", "gfx1201", "sm_90")


@hookimpl
def conv_core_backend_info() -> BackendInfo:
    return BackendInfo(BACKEND, __version__, TARGETS, "Triton implicit-GEMM convolutions for AMD RDNA3/RDNA4 "
                       "(wave32, WMMA), portable to any Triton GPU")


@hookimpl
def conv_core_candidates(problem: ConvProblem, device: torch.device):
    return candidates(problem, device)


@hookimpl
def conv_core_tuning_tables() -> list[Path]:
    """Times measured by ``conv-core tune`` on real GPUs, shipped in ``data/tables/rdna_<arch>.json``."""
    return sorted((Path(__file__).parent / "data" / "tables").glob("rdna_*.json"))
