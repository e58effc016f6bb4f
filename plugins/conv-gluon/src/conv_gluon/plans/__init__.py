"""What a kernel is launched with: the one place that turns a problem into kernel arguments, by direction.

:mod:`.forward` maps ``(problem, candidate kernel, configuration, arch table)`` to a :class:`Plan`: the way the
input tile is brought (``a_mode``), the tile grid, the scalar and constexpr arguments of ``kernels.fwd.conv_fwd``,
the register limit, the weight matrix (a free view of the channels-last weight or a zero-padded copy) and the TMA
descriptors to build. :mod:`.data_grad` makes the data gradient a list of such plans, one per stride phase
(:mod:`conv_core.kit.phases`); :mod:`.weight_grad` has the weight gradient's own kernel and
:class:`WeightGradPlan` (units, split, workspace, the second stage). :mod:`.common` holds what they share: the
descriptor and weight-matrix shapes and the checks of which kernel can run what.

Plans need no tensors and import no Gluon: the operands ``Candidate.run`` receives are dense channels-last, so
every stride follows from the problem. Each plan keeps its :class:`~conv_core.geometry.Geometry` (the launch's:
the problem's, or a phase's), and gives its launches as :class:`conv_core.kit.launch.Launch`\\ es (the kernel
imported on first use). The same plan drives the launch (:mod:`conv_gluon.launch`), the estimates and the compile
checks (:mod:`conv_gluon.aot`), so the compile checks compile exactly what runs.
"""

from .common import (BOXES_3D, INPUTS, ROWS, ROWS_MIN_WIDTH, TMA_ALIGN, TensorMap, WeightMatrix, a_mode_of, box_issue,
                     check_kernel, dense_nhwc_strides, dense_pixel_strides, dy_channels, dy_group_channels, int32_issue,
                     kernel_issue, rows_box, rows_halo, rows_issue, rows_of, weight_matrix)
from .data_grad import DataGradPlan, Phase, make_bwd_data_plan
from .forward import Plan, geometry_plan, make_plan, tma_store_issue
from .weight_grad import (PARTIAL_CHANNEL_ALIGN, SumLaunch, WeightGradPlan, make_bwd_weight_plan, split_costs,
                          weight_tma_store_issue)

__all__ = ["BOXES_3D", "INPUTS", "ROWS", "ROWS_MIN_WIDTH", "TMA_ALIGN", "TensorMap", "WeightMatrix", "a_mode_of",
           "box_issue", "check_kernel", "dense_nhwc_strides", "dense_pixel_strides", "dy_channels", "dy_group_channels",
           "int32_issue", "kernel_issue", "rows_box", "rows_halo", "rows_issue", "rows_of", "weight_matrix",
           "DataGradPlan", "Phase", "make_bwd_data_plan", "Plan", "geometry_plan", "make_plan", "tma_store_issue",
           "PARTIAL_CHANNEL_ALIGN", "SumLaunch", "WeightGradPlan", "make_bwd_weight_plan", "split_costs",
           "weight_tma_store_issue"]
