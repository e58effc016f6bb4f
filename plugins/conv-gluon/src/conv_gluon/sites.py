"""The device-specific part of a plan's launches: the persistent grid per device, the descriptors' builders.

A plan's launches are :class:`conv_core.kit.launch.Launch`\\ es (one program per tile or unit, pointers by role,
the TMA descriptors' maps as descriptor roles). Here each goes on a device's persistent grid (one program per
SM, at most one per tile or unit: :meth:`Launch.on_grid`) and becomes a conv-core
:class:`~conv_core.launch_site.LaunchSite` (:meth:`Launch.make_site`), its descriptor parameters bound to a
:class:`~conv_gluon.descriptors.Binding` of their map: the descriptor is made per launch on that launch's tensor,
in a microsecond, and kept by nothing; under Triton 3.6 its launcher arguments are made once per address
(:mod:`conv_gluon.descriptor_launch`). Imports Gluon (the kernels), so only the launch imports this module.
"""

from __future__ import annotations

from collections.abc import Callable

from conv_core.kit.launch import Launch
from conv_core.launch_site import LaunchSite

from . import descriptor_launch, descriptors, tiling
from .plans import Plan, TensorMap, WeightGradPlan


def binder(dtypes: dict[str, str]) -> Callable[[str, TensorMap], descriptors.Binding]:
    """``bind`` for :meth:`Launch.make_site`: a descriptor parameter's builder, for its tensor's dtype."""
    return lambda name, tmap: descriptors.Binding(tmap, dtypes[name])


def persistent_site(launch: Launch, dtypes: dict[str, str], sms: int) -> LaunchSite:
    """``launch`` on a GPU of ``sms`` SMs: one program per SM, at most one per tile or unit (its grid)."""
    return launch.on_grid((tiling.persistent_programs(launch.grid[0], sms),)).make_site(
        binder(dtypes), descriptor_launch.direct)


def forward_site(plan: Plan, dtypes: dict[str, str], sms: int) -> LaunchSite:
    """The forward kernel's launch of ``plan`` (a forward, or a data-gradient phase) on a GPU of ``sms`` SMs;
    ``dtypes``: its tensor parameters' (``launch.role_dtypes``). Without a descriptor map, ``x``,
    ``x_hi`` and ``y_desc`` take plain tensors (the kernel reads them as pointers, or not at all)."""
    return persistent_site(plan.launch, dtypes, sms)


def weight_grad_sites(plan: WeightGradPlan, dtypes: dict[str, str], sms: int) -> tuple[LaunchSite, LaunchSite | None]:
    """The weight gradient's launches on a GPU of ``sms`` SMs: the units' kernel and, when the reduction is split,
    the sum of the partials (``ws_ptr``: the partials, ``out_ptr``: dW)."""
    total = plan.sum_launch
    return persistent_site(plan.launch, dtypes, sms), None if total is None else total.site
