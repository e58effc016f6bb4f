"""conv-core hook implementations of the ``gluon`` backend.

Importing this module imports no Gluon and compiles nothing: a triton without Gluon makes every problem a
decline that names what is missing (:mod:`conv_gluon.toolchain`), not a load error.
"""

from __future__ import annotations

from pathlib import Path

import torch
from conv_core.candidate import BackendInfo
from conv_core.hookspec import hookimpl
from conv_core.problem import ConvProblem

from . import __version__
from .candidates import BACKEND, candidates

#: Architectures the kernels are written for: Hopper (wgmma exists on compute capability 9.x only).
TARGETS = ("sm_90",)


@hookimpl
def conv_core_backend_info() -> BackendInfo:
    return BackendInfo(BACKEND, __version__, TARGETS, "warp-specialized Gluon implicit-GEMM convolutions for "
                       "Hopper (TMA, mbarrier rings, asynchronous wgmma), channels-last 16-bit")


@hookimpl
def conv_core_candidates(problem: ConvProblem, device: torch.device):
    return candidates(problem, device)


@hookimpl
def conv_core_tuning_tables() -> list[Path]:
    """Times measured on real GPUs, shipped as ``data/tables/gluon_<arch>.json``: every kernel of every layer of
    the benchmark suites, from two independent ``conv-core bench`` runs combined against the plugin
    (``scripts/conservative_tables.py``), so that the ranking picks a Gluon kernel where it was faster in both."""
    return sorted((Path(__file__).parent / "data" / "tables").glob("gluon_*.json"))
