"""A plan's kernel launches as conv-core :class:`~conv_core.launch_site.LaunchSite`\\ s: everything but the
tensors bound once per device, so a call costs a dictionary of tensors and the compiled kernel's launcher.

The grid is persistent (one program per SM, at most one per tile or unit), so a site belongs to one device
(its SM count). The descriptor parameters get a :class:`~conv_gluon.descriptors.Binding` of their tensor map:
the descriptor is made per launch on that launch's tensor, in a microsecond, and kept by nothing. Imports
Gluon (the kernels), so only the launch imports this module.
"""

from __future__ import annotations

from conv_core.launch_site import LaunchSite

from . import descriptors, tiling
from .kernels.bwd_weight import conv_bwd_weight, sum_splits
from .kernels.fwd import conv_fwd
from .plan import Plan, TensorMap, WeightGradPlan


def _site(kernel, programs: int, dtypes: dict[str, str], values: dict, options: dict,
          tensor_maps: dict[str, TensorMap]) -> LaunchSite:
    """``kernel`` on a grid of ``programs``, its tensor parameters named by ``dtypes`` (their dtypes), those of
    ``tensor_maps`` taking descriptors."""
    bindings = {name: descriptors.Binding(tmap, dtypes[name]) for name, tmap in tensor_maps.items()}
    return LaunchSite(kernel, (programs,), tuple(dtypes), values, options, bindings)


def forward_site(plan: Plan, dtypes: dict[str, str], sms: int) -> LaunchSite:
    """The forward kernel's launch of ``plan`` (a forward, or a data-gradient phase) on a GPU of ``sms`` SMs;
    ``dtypes``: its tensor parameters' (``specialization.role_dtypes``). Without a descriptor map, ``x``,
    ``x_hi`` and ``y_desc`` take plain tensors (the kernel reads them as pointers, or not at all)."""
    return _site(conv_fwd, tiling.persistent_programs(plan.tiles.num_tiles, sms), dtypes,
                 {**dict(plan.scalars), **dict(plan.constexprs)}, dict(num_warps=plan.num_warps, maxnreg=plan.maxnreg),
                 plan.tensor_maps)


def weight_grad_sites(plan: WeightGradPlan, dtypes: dict[str, str], sms: int) -> tuple[LaunchSite, LaunchSite | None]:
    """The weight gradient's launches on a GPU of ``sms`` SMs: the units' kernel and, when the reduction is split,
    the sum of the partials (``ws_ptr``: the partials, ``out_ptr``: dW)."""
    units = _site(conv_bwd_weight, tiling.persistent_programs(plan.grid.num_units, sms), dtypes,
                  {**dict(plan.scalars), **dict(plan.constexprs)}, dict(num_warps=plan.num_warps, maxnreg=plan.maxnreg),
                  plan.tensor_maps)
    if not plan.split:
        return units, None
    total = _site(sum_splits, plan.reduce.programs, {"ws_ptr": "float32", "out_ptr": plan.result_dtype},
                  {**plan.sum_scalars, "BLOCK": plan.reduce.block}, dict(num_warps=plan.reduce.num_warps), {})
    return units, total
