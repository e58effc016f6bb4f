"""conv-core hook implementations of the ``cdna`` backend (:func:`conv_core.kit.hooks.backend_hooks`): its
identity, its candidates, and the times ``conv-core tune`` measured on real GPUs (``data/tables/cdna_<arch>.json``:
none yet)."""

from __future__ import annotations

from conv_core.candidate import BackendInfo
from conv_core.kit.hooks import backend_hooks

from . import __version__
from .candidates import BACKEND, candidates
from .chips import DATA
from .configs import TARGETS

conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables = backend_hooks(
    BackendInfo(BACKEND, __version__, TARGETS, "conv-rdna's Triton convolutions with tables derived for AMD Instinct "
                "(CDNA2/3/4, wave64, MFMA); unmeasured"), candidates, DATA)
