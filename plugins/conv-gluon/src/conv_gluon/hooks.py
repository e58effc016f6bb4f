"""conv-core hook implementations of the ``gluon`` backend (:func:`conv_core.kit.hooks.backend_hooks`).

Importing this module imports no Gluon and compiles nothing: a triton without Gluon makes every problem a
decline that names what is missing (:mod:`conv_gluon.toolchain`), not a load error. The tuning tables are the
times measured on real GPUs, shipped as ``data/tables/gluon_<arch>.json``: every kernel of every layer of the
benchmark suites, from two independent ``conv-core bench`` runs combined against the plugin
(``conv-core tables combine``), so that the ranking picks a Gluon kernel where it was faster in both.
"""

from __future__ import annotations

from conv_core.candidate import BackendInfo
from conv_core.kit.hooks import backend_hooks

from . import __version__
from .candidates import BACKEND, candidates
from .configs import DATA

#: Architectures the kernels are written for: Hopper (wgmma exists on compute capability 9.x only).
TARGETS = ("sm_90",)

INFO = BackendInfo(BACKEND, __version__, TARGETS, "warp-specialized Gluon implicit-GEMM convolutions for Hopper "
                   "(TMA, mbarrier rings, asynchronous wgmma), channels-last 16-bit")

conv_core_backend_info, conv_core_candidates, conv_core_tuning_tables = backend_hooks(INFO, candidates, DATA)
