"""conv-core hook implementations of the ``rdna`` backend (:func:`conv_core.kit.hooks.backend_hooks`): its
identity, its candidates, and the times ``conv-core tune`` measured on real GPUs (``data/tables/rdna_<arch>.json``)."""

from __future__ import annotations

from conv_core.candidate import BackendInfo
from conv_core.kit.hooks import backend_hooks

from . import __version__
from .candidates import BACKEND, candidates
from .configs import DATA

#: Architectures the kernels are written and configured for (any other Triton GPU gets the default table).
TARGETS = ("gfx1100", "gfx1151", "gfx1200", "gfx1201", "sm_90")

conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables = backend_hooks(
    BackendInfo(BACKEND, __version__, TARGETS, "Triton implicit-GEMM convolutions for AMD RDNA3/RDNA4 (wave32, WMMA), "
                "portable to any Triton GPU"), candidates, DATA)
