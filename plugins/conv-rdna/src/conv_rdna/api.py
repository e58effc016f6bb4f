"""What a package built on conv-rdna may use: the one module conv-cdna (or a user's own tables for these kernels)
imports from conv-rdna. Everything else in conv-rdna is its own and may change without notice.

The kernels and their plans:

- :data:`REGISTRY` (every kernel: name, family, directions, plan, estimate), :data:`GROUPED` (the grouped
  kernels' entries), :func:`names`, :func:`make_plan` (a kernel's :class:`Plan` for a problem, configuration and
  table), :class:`PlanRun` (a candidate's ``run`` over a plan), :data:`COMPILER_DIVISIBILITY`;
- per family, what an estimate or a table derivation needs: :func:`few_cout_plan` and :func:`few_cout_work`,
  :data:`FEW_COUT_MIN_BLOCK_N`; :data:`GROUPED_MAX_CHANNELS`; :data:`WINOGRAD_PLANS` (kernel name -> the plan
  module with ``winograd_flops`` and ``gemm_utilization``); :func:`tile_utilization`,
  :func:`grouped_utilization`, :func:`depthwise_utilization`.

The tables: :class:`TileConfig`, :class:`ArchTable`, :func:`build_table` (an architecture's table from its raw
entry), :func:`rdna_table` (conv-rdna's own, by architecture), :func:`select`, :func:`config_dict`,
:func:`gemm_view`, :data:`DEPTHWISE_FAMILIES`.

Candidates: :func:`tags`, :data:`INTERPRETED_SLOWDOWN`, :data:`INTERPRETED_FIXED_US` (what a candidate run by
Triton's interpreter is charged).

Offline, loaded on first use (they import the compilers and conv-tools): :func:`specialized_jobs`,
:func:`representative_problem`, :class:`Job`, :data:`MATRIX_LAUNCH` (:mod:`conv_rdna.aot`), :func:`role_dtypes`,
:func:`of_launch` (:mod:`conv_rdna.specialization`), :func:`space_configs` (:mod:`conv_rdna.sweep`).
"""

from __future__ import annotations

import importlib

from .candidates import INTERPRETED_FIXED_US, INTERPRETED_SLOWDOWN, tags
from .configs import (DEPTHWISE_FAMILIES, ArchTable, TileConfig, build_table, config_dict, gemm_view, select)
from .configs import table as rdna_table
from .estimates import depthwise_utilization, grouped_utilization, tile_utilization
from .launch import PlanRun
from .plans import winograd, winograd_bwd_weight
from .plans.common import COMPILER_DIVISIBILITY, Plan
from .plans.few_channels import FEW_COUT_MIN_BLOCK_N, few_cout_work
from .plans.few_channels import few_cout as few_cout_plan
from .plans.grouped import MAX_CHANNELS as GROUPED_MAX_CHANNELS
from .registry import GROUPED, REGISTRY, make_plan, names

#: Winograd kernel name -> its plan module (``winograd_flops``, ``gemm_utilization``).
WINOGRAD_PLANS = {winograd.KERNEL: winograd, winograd_bwd_weight.KERNEL: winograd_bwd_weight}

#: The offline names, each with the module it comes from: imported when first asked for.
_OFFLINE = {"specialized_jobs": "aot", "representative_problem": "aot", "Job": "aot", "MATRIX_LAUNCH": "aot",
            "role_dtypes": "specialization", "of_launch": "specialization", "space_configs": "sweep"}

__all__ = ["COMPILER_DIVISIBILITY", "DEPTHWISE_FAMILIES", "FEW_COUT_MIN_BLOCK_N", "GROUPED", "GROUPED_MAX_CHANNELS",
           "INTERPRETED_FIXED_US", "INTERPRETED_SLOWDOWN", "REGISTRY", "WINOGRAD_PLANS", "ArchTable", "Plan",
           "PlanRun", "TileConfig", "build_table", "config_dict", "depthwise_utilization", "few_cout_plan",
           "few_cout_work", "gemm_view", "grouped_utilization", "make_plan", "names", "rdna_table", "select", "tags",
           "tile_utilization", *_OFFLINE]


def __getattr__(name: str):
    if name in _OFFLINE:
        return getattr(importlib.import_module(f"conv_rdna.{_OFFLINE[name]}"), name)
    raise AttributeError(f"module 'conv_rdna.api' has no attribute {name!r}")
