"""What the Winograd test modules share: the table the kernels run with here, a stand-in for a candidate's
declared error factor, exact matrices as float64 tensors, the conformance kit's per-candidate checks."""

from __future__ import annotations

import os

import torch
from conv_core.testing.conformance import check_candidate, check_metadata
from conv_rdna import candidates, configs

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")


def table() -> configs.ArchTable:
    """The interpreter's table on the CPU, the default GPU table on a GPU."""
    return configs.table(configs.INTERPRETER if DEVICE == "cpu" else configs.DEFAULT)


class Declared:
    """Stands in for the candidate in ``compare``: only its error factor and tags matter there."""

    def __init__(self, error_factor: float):
        self.error_factor, self.tags = error_factor, frozenset()


def matrix(rows) -> torch.Tensor:
    """An exact matrix (Fractions) as float64."""
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)


def kit_checks(problem, kernel: str) -> None:
    """The kit's per-candidate checks on the offered candidate of ``kernel``, with its declared error factor:
    poisoned out, fresh result, bits equal twice (deterministic), operands untouched, stable id."""
    (candidate,) = [c for c in candidates.candidates(problem, torch.device(DEVICE)) if c.kernel == kernel]
    result = check_candidate(problem, candidate, DEVICE)
    assert result.ok, result.message
    assert check_metadata(problem, candidate, DEVICE) == []
