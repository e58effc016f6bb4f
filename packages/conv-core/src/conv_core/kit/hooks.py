"""The three hook implementations of a kit backend, from its identity and its candidates function.

A backend's ``hooks`` module (its entry point) is then three lines::

    conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables = backend_hooks(
        BackendInfo("rdna", __version__, TARGETS, "..."), candidates, PackageData("conv_rdna", "rdna"))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..candidate import BackendInfo, Candidate, Declined
from ..hookspec import hookimpl
from ..problem import ConvProblem
from .tables import PackageData

Candidates = Callable[[ConvProblem, torch.device], Sequence["Candidate | Declined"]]


def backend_hooks(info: BackendInfo, candidates: Candidates, data: PackageData) -> tuple[Callable, Callable, Callable]:
    """``(conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables)`` for a backend module to bind
    under those names (pluggy finds hook implementations by name and marker)."""

    @hookimpl
    def conv_core_backend_info() -> BackendInfo:
        return info

    @hookimpl
    def conv_core_candidates(problem: ConvProblem, device: torch.device) -> Sequence[Candidate | Declined]:
        return candidates(problem, device)

    @hookimpl
    def conv_core_tuning_tables() -> list[Path]:
        return data.tuning_tables()

    return conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables
